/**
 * Record bodies at rest (docs/operations.md "State"): the JSON of a record,
 * or, with a state key, that JSON sealed with AES-256-GCM under a fresh 96-bit nonce per
 * write, authenticated together with its table and id (a body moved to another row does not
 * open). Ids, times and revisions stay in the clear in their own columns, for indexing.
 *
 * Encrypted body: `e1.` + base64(nonce 12 bytes | tag 16 bytes | ciphertext).
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { keyOf, RecordOf, TableName, TABLES } from './state.model';
import { StateLoadError } from './state-store.port';

const PREFIX = 'e1.';
const KEY_CHECK_PLAINTEXT = 'svc-state-key-check/1';

/** One stored row: id, clear index columns, body. */
export interface StoredRow {
  id: string;
  clear: Record<string, string | number>;
  body: string;
}

/** Encodes and decodes record bodies, with or without the state key. */
export class RowCodec {
  /** @param key 32-byte AES-256 key, or null for plaintext bodies */
  constructor(private readonly key: Buffer | null) {}

  get encrypted(): boolean {
    return this.key !== null;
  }

  /** The row of a record. */
  encode<T extends TableName>(table: T, record: RecordOf[T]): StoredRow {
    const id = keyOf(table, record);
    const json = JSON.stringify(record);
    const clear = (TABLES[table].clear as (r: RecordOf[T]) => Record<string, string | number>)(record);
    return { id, clear, body: this.key ? this.seal(json, aad(table, id)) : json };
  }

  /**
   * The record of a stored body; a plaintext body is accepted in either mode (a store being
   * encrypted, or imported), an encrypted one needs the key.
   * @throws StateLoadError when it cannot be decrypted or parsed
   */
  decode<T extends TableName>(table: T, id: string, body: string): RecordOf[T] {
    let json = body;
    if (body.startsWith(PREFIX)) {
      if (!this.key) throw new StateLoadError('the state is encrypted; set SVC_CONTROL_STATE_KEY_HEX to the key it was written with');
      json = this.open(body, aad(table, id), `${table} ${id}`);
    }
    try {
      return JSON.parse(json) as RecordOf[T];
    } catch {
      throw new StateLoadError(`the stored ${table} record ${id} is not readable JSON; the store was left untouched`);
    }
  }

  /**
   * A body that is not a record of a table (an audit entry): its JSON, sealed with the key
   * when set, authenticated together with `context` (the clear columns it belongs to).
   */
  encodeBody(context: string, json: string): string {
    return this.key ? this.seal(json, Buffer.from(`svc-body/1\0${context}`)) : json;
  }

  /**
   * The JSON of a body made by {@link encodeBody} with the same `context` (a plaintext body is
   * accepted in either mode).
   * @throws StateLoadError when it cannot be decrypted
   */
  decodeBody(context: string, body: string, what: string): string {
    if (!body.startsWith(PREFIX)) return body;
    if (!this.key) throw new StateLoadError('the state is encrypted; set SVC_CONTROL_STATE_KEY_HEX to the key it was written with');
    return this.open(body, Buffer.from(`svc-body/1\0${context}`), what);
  }

  /** True when a body is encrypted. */
  static isEncrypted(body: string): boolean {
    return body.startsWith(PREFIX);
  }

  /** A key check value: proves a later key is the same without decrypting any record. */
  keyCheck(): string {
    if (!this.key) throw new Error('no key');
    return this.seal(KEY_CHECK_PLAINTEXT, Buffer.from('key-check'));
  }

  /** Whether `kcv` (from {@link keyCheck}) was made with this codec's key. */
  matchesKeyCheck(kcv: string): boolean {
    if (!this.key) return false;
    try {
      return this.open(kcv, Buffer.from('key-check'), 'key check') === KEY_CHECK_PLAINTEXT;
    } catch {
      return false;
    }
  }

  private seal(text: string, ad: Buffer): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key!, iv);
    cipher.setAAD(ad);
    const ct = Buffer.concat([cipher.update(text, 'utf8'), cipher.final()]);
    return PREFIX + Buffer.concat([iv, cipher.getAuthTag(), ct]).toString('base64');
  }

  private open(body: string, ad: Buffer, what: string): string {
    try {
      const raw = Buffer.from(body.slice(PREFIX.length), 'base64');
      const decipher = createDecipheriv('aes-256-gcm', this.key!, raw.subarray(0, 12));
      decipher.setAAD(ad);
      decipher.setAuthTag(raw.subarray(12, 28));
      return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
    } catch {
      throw new StateLoadError(
        `cannot decrypt ${what}: SVC_CONTROL_STATE_KEY_HEX is not the key the state was written with, or the store is damaged; it was left untouched`,
      );
    }
  }
}

function aad(table: string, id: string): Buffer {
  return Buffer.from(`svc-row/1\0${table}\0${id}`);
}
