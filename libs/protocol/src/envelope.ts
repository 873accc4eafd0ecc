/**
 * The strict unified v2 envelope (docs/protocol.md "Envelope and errors").
 *
 * {@link parseFrame} turns one WebSocket frame into a {@link Frame} or throws an
 * {@link EnvelopeError} that says on which channel the rejection goes and with which code.
 */
import { Channel, CHANNELS, MAX_TAG } from './constants';
import { ErrorCode, ProtocolError } from './errors';
import { FORBIDDEN_KEYS, forbiddenKeyPath } from './forbidden-keys';

/** A request id on the control channel: string or number, echoed on the reply (docs/protocol.md "Envelope and errors"). */
export type RequestId = string | number | null;

/** One parsed request frame. */
export interface Frame {
  channel: Channel;
  /** Full type name, e.g. `control.ping` or `acheron.t_walk`. */
  type: string;
  /** Control request id (`null` when absent). */
  id: RequestId;
  /** Acheron request tag (`null` on control frames). */
  tag: number | null;
  /** The payload object (`{}` when absent). */
  payload: Record<string, unknown>;
  /** The whole decoded object, for the acheron root fields (`fid`, `path`, `node`, `h`, ...). */
  root: Record<string, unknown>;
  /** Raw bytes carried by a binary data frame (FS binary data path, docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). */
  data?: Buffer;
}

/** A frame rejected before any handler runs; `channel` is where the error reply goes. */
export class EnvelopeError extends ProtocolError {
  constructor(
    code: ErrorCode,
    message: string,
    readonly channel: Channel,
    readonly id: RequestId = null,
    readonly tag: number | null = null,
  ) {
    super(code, message);
    this.name = 'EnvelopeError';
  }
}

/** Legacy pre-v2 type prefixes and their unified v2 replacements. */
const LEGACY_PREFIXES: Array<[string, string]> = [
  ['acheron.fs_t_', 'acheron.t_fs_'],
  ['acheron.fs_r_', 'acheron.r_fs_'],
  ['acheron.fs_evt_', 'acheron.e_fs_'],
];
const LEGACY_EXACT: Record<string, string> = { 'acheron.fs_error': 'acheron.err_fs' };

const TYPE_SHAPE = /^[A-Za-z0-9_.-]{1,128}$/;

/** Deepest nesting of objects and arrays accepted in a message (docs/protocol.md "Envelope and errors"; deeper is an envelope error). */
export const MAX_NESTING = 64;

/** True when `value` nests objects/arrays deeper than `limit` levels (iterative: no recursion). */
export function nestsDeeperThan(value: unknown, limit: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (typeof v !== 'object' || v === null) continue;
    if (depth > limit) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (typeof child === 'object' && child !== null) stack.push([child, depth + 1]);
    }
  }
  return false;
}

/**
 * Names the unified v2 replacement of a legacy or channel-less type, or returns null when
 * `type` is not a legacy name.
 * @param type the `type` field as received
 * @param channel the (valid) channel of the frame, used for channel-less names like `"ping"`
 */
export function legacyReplacement(type: string, channel: Channel): string | null {
  if (LEGACY_EXACT[type]) return LEGACY_EXACT[type];
  for (const [old, now] of LEGACY_PREFIXES) {
    if (type.startsWith(old)) return now + type.slice(old.length);
  }
  if (!type.includes('.')) return `${channel}.${type}`;
  return null;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function extractId(obj: Record<string, unknown>): RequestId {
  const id = obj.id;
  if (typeof id === 'string' && id.length <= 256) return id;
  if (typeof id === 'number' && Number.isFinite(id)) return id;
  return null;
}

function extractTag(obj: Record<string, unknown>): number | null {
  const tag = obj.tag;
  return typeof tag === 'number' && Number.isInteger(tag) && tag >= 0 && tag <= MAX_TAG ? tag : null;
}

/**
 * Validates an already-decoded value as an envelope (docs/protocol.md "Envelope and errors"), including the rule for
 * prototype keys (`__proto__`, `constructor`, `prototype` at any depth of the request).
 * @throws EnvelopeError `invalid_envelope`, `legacy_type_rejected`, `invalid_payload` (a
 *   prototype key; the message names its path)
 */
export function validateEnvelope(value: unknown): Frame {
  if (!isPlainObject(value)) {
    throw new EnvelopeError('invalid_envelope', 'a message must be a JSON object', 'control');
  }
  const channel = value.channel;
  if (channel === undefined) {
    throw new EnvelopeError(
      'invalid_envelope',
      'channel is required on every message ("control" or "acheron"); the implicit channel was removed in unified v2',
      'control',
      extractId(value),
    );
  }
  if (typeof channel !== 'string' || !(CHANNELS as readonly string[]).includes(channel)) {
    throw new EnvelopeError('invalid_envelope', 'channel must be "control" or "acheron"', 'control', extractId(value));
  }
  const ch = channel as Channel;
  const id = ch === 'control' ? extractId(value) : null;
  const tag = ch === 'acheron' ? extractTag(value) : null;
  const reject = (code: ErrorCode, message: string): never => {
    throw new EnvelopeError(code, message, ch, id, tag);
  };

  const type = value.type;
  if (typeof type !== 'string' || type.length === 0) reject('invalid_envelope', 'type must be a non-empty string');
  const t = type as string;
  if (!TYPE_SHAPE.test(t)) reject('invalid_envelope', 'type must be 1 to 128 characters of A-Z a-z 0-9 . _ -');

  const replacement = legacyReplacement(t, ch);
  if (replacement !== null) {
    reject('legacy_type_rejected', `legacy type "${t}" is not accepted in unified v2; use "${replacement}"`);
  }
  if (!t.startsWith(`${ch}.`)) {
    reject('invalid_envelope', `type "${t}" does not belong to channel "${ch}" (expected "${ch}.*")`);
  }
  if (ch === 'control' && value.id !== undefined && value.id !== null && id === null) {
    reject('invalid_envelope', 'id must be a string (at most 256 characters) or a number');
  }
  if (ch === 'acheron' && tag === null) {
    reject('invalid_envelope', `tag is required on acheron requests and must be an integer from 0 to ${MAX_TAG}`);
  }
  let payload: Record<string, unknown> = {};
  if (value.payload !== undefined) {
    if (!isPlainObject(value.payload)) reject('invalid_envelope', 'payload must be a JSON object');
    payload = value.payload as Record<string, unknown>;
  }
  const forbidden = forbiddenKeyIn(value, payload);
  if (forbidden !== null) reject('invalid_payload', forbidden);
  return { channel: ch, type: t, id, tag, payload, root: value };
}

/**
 * The one rule for prototype keys (docs/protocol.md "Envelope and errors"): a `__proto__`, `constructor` or `prototype`
 * key anywhere in a request, in its payload or among the root fields beside it (acheron
 * `fid`, `path`, `node`, `h`, ...), makes the whole request `invalid_payload`, whatever its
 * type, before any gate or handler sees it.
 * @returns the rejection message naming the key's path (e.g. `platform.constructor: ...`), or
 *   null when the request has no such key
 */
function forbiddenKeyIn(root: Record<string, unknown>, payload: Record<string, unknown>): string | null {
  const inPayload = forbiddenKeyPath(payload);
  if (inPayload !== null) return `${inPayload}: this key is not accepted in a payload`;
  for (const key of Object.keys(root)) {
    if (key === 'payload') continue;
    const path = FORBIDDEN_KEYS.has(key) ? key : forbiddenKeyPath(root[key], key);
    if (path !== null) return `${path}: this key is not accepted in a message (beside the payload)`;
  }
  return null;
}

/**
 * Parses one text frame (UTF-8 JSON) into a {@link Frame}.
 * @param text the frame's text
 * @throws EnvelopeError for anything that is not a valid envelope, and `invalid_payload` for a
 *   request with a prototype key ({@link validateEnvelope})
 */
export function parseFrame(text: string): Frame {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    const why = e instanceof RangeError ? 'nesting too deep' : 'not valid JSON';
    throw new EnvelopeError('invalid_envelope', `message is ${why}`, 'control');
  }
  // Nesting deeper than MAX_NESTING needs at least two characters per level.
  if (text.length > 2 * MAX_NESTING && nestsDeeperThan(value, MAX_NESTING)) {
    const obj = value as Record<string, unknown>;
    const acheron = obj.channel === 'acheron';
    throw new EnvelopeError(
      'invalid_envelope',
      `message nests objects or arrays deeper than ${MAX_NESTING} levels`,
      acheron ? 'acheron' : 'control',
      acheron ? null : extractId(obj),
      acheron ? extractTag(obj) : null,
    );
  }
  return validateEnvelope(value);
}

/**
 * Decodes a binary data frame of the FS binary data path (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): a 4-byte big-endian
 * header length, the JSON envelope, then the raw bytes.
 * @throws EnvelopeError when the framing or the envelope is invalid
 */
export function parseBinaryFrame(buf: Buffer): Frame {
  if (buf.length < 4) throw new EnvelopeError('invalid_envelope', 'binary frame shorter than its 4-byte header length', 'acheron');
  const headerLen = buf.readUInt32BE(0);
  if (headerLen === 0 || 4 + headerLen > buf.length) {
    throw new EnvelopeError('invalid_envelope', 'binary frame header length exceeds the frame', 'acheron');
  }
  const frame = parseFrame(buf.toString('utf8', 4, 4 + headerLen));
  frame.data = buf.subarray(4 + headerLen);
  return frame;
}

/**
 * Encodes a binary data frame: 4-byte big-endian header length, JSON header, raw bytes.
 * @param header the envelope without `data_b64`
 * @param data the raw bytes
 */
export function encodeBinaryFrame(header: object, data: Uint8Array): Buffer {
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  const out = Buffer.allocUnsafe(4 + json.length + data.length);
  out.writeUInt32BE(json.length, 0);
  json.copy(out, 4);
  out.set(data, 4 + json.length);
  return out;
}

/**
 * Bytes left free in front of the data of a binary frame that is completed in place
 * ({@link completeBinaryFrame}): room for the 4-byte header length and the JSON header of an
 * `r_fs_read` or `t_fs_write` envelope.
 */
export const BINARY_HEADER_ROOM = 512;

/**
 * Completes a binary data frame (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)") around bytes that are already in place: `buf`
 * holds the data at `[room, room + n)`; the 4-byte big-endian header length and the JSON
 * header are written just before it, so the data is never copied.
 * @param buf the buffer holding the data after `room` free bytes
 * @param room offset of the data in `buf` (e.g. {@link BINARY_HEADER_ROOM})
 * @param n data length, bytes
 * @param headerJson the envelope without `data_b64`, already serialized as JSON
 * @returns the frame: a view of `buf` (a new buffer, with the data copied, only when the
 *   header does not fit in `room`)
 */
export function completeBinaryFrame(buf: Buffer, room: number, n: number, headerJson: string): Buffer {
  const len = Buffer.byteLength(headerJson, 'utf8');
  if (4 + len > room) {
    const out = Buffer.allocUnsafe(4 + len + n);
    out.writeUInt32BE(len, 0);
    out.write(headerJson, 4, 'utf8');
    buf.copy(out, 4 + len, room, room + n);
    return out;
  }
  const start = room - len - 4;
  buf.writeUInt32BE(len, start);
  buf.write(headerJson, start + 4, 'utf8');
  return buf.subarray(start, room + n);
}

/** A successful reply envelope (docs/protocol.md "Envelope and errors"). */
export interface ReplyEnvelope {
  channel: Channel;
  type: string;
  id?: RequestId;
  tag?: number | null;
  ok: true;
  payload: unknown;
}

/** An error reply envelope (docs/protocol.md "Envelope and errors"). */
export interface ErrorEnvelope {
  channel: Channel;
  type: 'control.error' | 'acheron.error' | 'acheron.err_fs';
  id?: RequestId;
  tag?: number | null;
  ok: false;
  error: { code?: string; errno?: number; message: string };
}

/** A server push (event): no id or tag (docs/protocol.md "Envelope and errors"). */
export interface EventEnvelope {
  channel: Channel;
  type: string;
  payload: unknown;
}

/**
 * The reply type of a request type (docs/protocol.md "Envelope and errors"): `control.X` -> `control.X` except
 * version/connect/ping; `acheron.t_X` -> `acheron.r_X`.
 */
export function replyTypeOf(type: string): string {
  switch (type) {
    case 'control.version':
      return 'control.version_ack';
    case 'control.connect':
      return 'control.connect_ack';
    case 'control.ping':
      return 'control.pong';
  }
  if (type.startsWith('acheron.t_')) return `acheron.r_${type.slice('acheron.t_'.length)}`;
  return type;
}
