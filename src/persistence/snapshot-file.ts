/**
 * Snapshot files (docs/operations.md "State"): the `state.json` of earlier versions (imported on first
 * start) and the files of `svc state export` / `svc state import`. One JSON document
 * `{format:"svc-control-state", saved_at_ms, state}`, or with a state key
 * `{format, saved_at_ms, encryption:{alg:"AES-256-GCM", iv, tag}, ciphertext}` (fresh
 * 96-bit nonce per file).
 *
 * `state` version 1 (earlier versions): `{version:1, projects:[{..., mounts:[...]}], bindings,
 * nodes, invites, join_requests, catalog}`. Version 2 (this one): `{version:2,
 * tables:{<table>:[records]}}`, every table of the store.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { newId } from '@svc/protocol';
import { writeFileAtomic } from '@svc/ops';
import { ChangeSet, keyOf, MountRecord, ProjectRecord, RecordOf, StateView, TABLE_NAMES, TableName, VIEW_PROPERTY } from './state.model';
import { StateLoadError } from './state-store.port';

const FORMAT = 'svc-control-state';
const AAD = Buffer.from(`${FORMAT}/1`);
const ALG = 'AES-256-GCM';

interface SnapshotFile {
  format: string;
  saved_at_ms: number;
  state?: unknown;
  encryption?: { alg: string; iv: string; tag: string };
  ciphertext?: string;
}

/**
 * Reads a snapshot file.
 * @returns the `state` object it holds (version 1 or 2), or null when the file does not exist
 * @throws StateLoadError naming the file: unreadable, not a snapshot, encrypted without a key,
 *   or a wrong key (the file is never changed)
 */
export async function readSnapshotFile(file: string, key: Buffer | null): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new StateLoadError(`cannot read ${file}: ${(e as Error).message}`);
  }
  let doc: SnapshotFile;
  try {
    doc = JSON.parse(text) as SnapshotFile;
  } catch (e) {
    throw new StateLoadError(`${file} is not a readable snapshot (${(e as Error).message}); it was left untouched`);
  }
  if (typeof doc !== 'object' || doc === null || doc.format !== FORMAT) {
    throw new StateLoadError(`${file} is not a ${FORMAT} snapshot; it was left untouched`);
  }
  if (doc.encryption) {
    if (!key) throw new StateLoadError(`${file} is encrypted; set SVC_CONTROL_STATE_KEY_HEX to the key it was written with`);
    const enc = doc.encryption;
    try {
      if (enc.alg !== ALG || typeof doc.ciphertext !== 'string') throw new Error('unsupported encryption header');
      const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(enc.iv, 'base64'));
      decipher.setAAD(AAD);
      decipher.setAuthTag(Buffer.from(enc.tag, 'base64'));
      const plain = Buffer.concat([decipher.update(Buffer.from(doc.ciphertext, 'base64')), decipher.final()]);
      return JSON.parse(plain.toString('utf8'));
    } catch {
      throw new StateLoadError(
        `cannot decrypt ${file}: SVC_CONTROL_STATE_KEY_HEX is not the key it was written with, or the file is damaged; it was left untouched`,
      );
    }
  }
  if (!('state' in doc)) throw new StateLoadError(`${file} has no state; it was left untouched`);
  return doc.state;
}

/**
 * Durably writes a snapshot file (mode 0600), encrypted when `key` is given.
 * @throws the system error when it cannot be written
 */
export async function writeSnapshotFile(file: string, state: unknown, key: Buffer | null): Promise<void> {
  await writeFileAtomic(file, snapshotText(state, key));
}

/** The text of a snapshot file (JSON and a newline), encrypted when `key` is given. */
export function snapshotText(state: unknown, key: Buffer | null): string {
  const doc: SnapshotFile = { format: FORMAT, saved_at_ms: Date.now() };
  const json = JSON.stringify(state);
  if (key) {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', key, iv);
    cipher.setAAD(AAD);
    const ct = Buffer.concat([cipher.update(json, 'utf8'), cipher.final()]);
    doc.encryption = { alg: ALG, iv: iv.toString('base64'), tag: cipher.getAuthTag().toString('base64') };
    doc.ciphertext = ct.toString('base64');
  } else doc.state = JSON.parse(json);
  return JSON.stringify(doc) + '\n';
}

/**
 * Writes the export of a whole store (`svc state export`): to `file` (0600, atomically), or
 * through `write` (stdout) when `file` is null; encrypted when `key` is given.
 * @returns numbers of records per table
 */
export async function exportState(state: StateView, file: string | null, key: Buffer | null, write: (text: string) => void): Promise<Record<string, number>> {
  const snapshot = snapshotOf(state);
  if (file) await writeSnapshotFile(file, snapshot, key);
  else write(snapshotText(snapshot, key));
  return Object.fromEntries(TABLE_NAMES.map((t) => [t, snapshot.tables[t].length]));
}

/** The version-2 `state` of a whole store. */
export function snapshotOf(view: StateView): { version: 2; tables: { [T in TableName]: RecordOf[T][] } } {
  const tables = {} as { [T in TableName]: RecordOf[T][] };
  for (const t of TABLE_NAMES) (tables as Record<string, unknown[]>)[t] = [...(view[VIEW_PROPERTY[t]] as { values(): Iterable<unknown> }).values()];
  return { version: 2, tables };
}

/**
 * The records of a snapshot `state` (version 1 or 2), as one change set for an empty store.
 * Version 1 projects' embedded mounts become mount records in their order; revisions start at 0.
 * @throws StateLoadError naming what is malformed
 */
export function recordsOfSnapshot(raw: unknown): ChangeSet {
  const s = raw as Record<string, unknown> | null;
  if (typeof s !== 'object' || s === null) throw new StateLoadError('snapshot state is not an object');
  const out: ChangeSet = {};
  const put = <T extends TableName>(table: T, record: RecordOf[T]) => {
    let m = out[table] as Map<string, RecordOf[T] | null> | undefined;
    if (!m) (out as Record<string, unknown>)[table] = m = new Map();
    m.set(keyOf(table, record), record);
  };
  const arr = (v: unknown, name: string): Record<string, unknown>[] => {
    if (v === undefined) return [];
    if (!Array.isArray(v) || v.some((x) => typeof x !== 'object' || x === null)) throw new StateLoadError(`snapshot field ${name} is not an array of records`);
    return v as Record<string, unknown>[];
  };
  if (s.version === 2) {
    const tables = (s.tables ?? {}) as Record<string, unknown>;
    for (const t of TABLE_NAMES) {
      for (const r of arr(tables[t], t)) {
        if (typeof keyOf(t, r as never) !== 'string' || keyOf(t, r as never).includes('undefined'))
          throw new StateLoadError(`snapshot has a malformed ${t} record`);
        put(t, r as never);
      }
    }
    return out;
  }
  if (s.version !== 1) throw new StateLoadError(`snapshot state version ${String(s.version)} is not supported (expected 1 or 2)`);
  let seq = 0;
  for (const p of arr(s.projects, 'projects')) {
    if (typeof p.project_id !== 'string' || !Array.isArray(p.mounts)) throw new StateLoadError('snapshot has a malformed project');
    const { mounts, ...rest } = p as { mounts: Array<Omit<MountRecord, 'mount_id' | 'project_id' | 'seq'>> } & Record<string, unknown>;
    put('projects', { ...(rest as unknown as ProjectRecord), revision: 0 });
    for (const m of mounts) {
      put('mounts', {
        mount_id: newId('mnt'),
        project_id: p.project_id,
        mount_path: m.mount_path,
        node_id: m.node_id,
        export_name: m.export_name,
        seq: ++seq,
        added_at_ms: m.added_at_ms,
      });
    }
  }
  for (const b of arr(s.bindings, 'bindings')) put('bindings', b as never);
  for (const n of arr(s.nodes, 'nodes')) {
    if (typeof n.node_id !== 'string' || typeof n.secret_sha256 !== 'string') throw new StateLoadError('snapshot has a malformed node');
    put('nodes', n as never);
  }
  for (const i of arr(s.invites, 'invites')) put('invites', i as never);
  for (const r of arr(s.join_requests, 'join_requests')) put('join_requests', r as never);
  for (const c of arr(s.catalog, 'catalog')) put('catalog', c as never);
  return out;
}
