/**
 * FsClient: one FS session on a node's `/v2/fs` endpoint (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). Sends
 * `acheron.t_fs_hello` (with the auth token and, by default, a request for the binary data
 * path and every FS extension), correlates replies by `tag` with many requests in flight, and
 * emits the node's invalidation pushes. The extensions granted (docs/protocol.md "FS
 * extensions") are used through {@link FsClient.openRead} and {@link FsClient.prefetch}.
 *
 * Hung nodes: a node that stops answering without closing its connection
 * (`SIGSTOP`, a network partition) is found by keepalive pings. While at least one request
 * waits for its reply, a WebSocket ping (RFC 6455 control frame; the node's `ws` server
 * answers it itself) is sent after every `keepaliveMs` in which nothing arrived; when nothing
 * at all (no byte: reply, push, pong, or part of a large frame) has arrived for
 * `keepaliveTimeoutMs` since the session started waiting, the session is hung: it is dropped at once and every pending request fails with
 * ConnectionError `hung` ("no answer from URL within N ms", `sent` true). An idle session
 * sends no pings, and a busy node keeps answering pongs from its event loop, so only an event
 * loop stalled for the whole limit looks hung. Each request also has its own limit
 * (`requestTimeoutMs`) for a node that answers pings but never this request.
 */
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import {
  Attr,
  base64Length,
  BINARY_HEADER_ROOM,
  completeBinaryFrame,
  decodeBase64Bytes,
  encodeBinaryFrame,
  Errno,
  FS_PROTO,
  FS_PROTOCOL,
  FsError,
  FsExportsReply,
  FsFeature,
  FsHelloReply,
  FsHelloRequest,
  FsPayload,
  FsReply,
  FsRequestOp,
  FsTargetOf,
  fsRequestType,
  LockPayload,
  MAX_TAG,
  OpenReadReply,
  parseFsFeatures,
  PrefetchSkip,
  writeBase64,
  WriteReply,
  WriteThen,
} from '@svc/protocol/wire';
import { ConnectionError } from './connection-error';

/** The time limit of a waiting lock request, ms (the largest a timer takes, about 24.8 days): it ends by a grant, a cancel or the session. */
const LOCK_WAIT_TIMEOUT_MS = 2 ** 31 - 1;
import { openWebSocket } from './open-websocket';
import type { ClientTls } from './tls-options';

export interface FsClientOptions {
  /** Node URL, e.g. `ws://127.0.0.1:18891/v2/fs` or `wss://node-a.example:18891/v2/fs`. */
  url: string;
  /** CAs a `wss://` node is verified against (default: the system CAs). */
  tls?: ClientTls;
  /** FS session token, when the node has FS session auth on. */
  authToken?: string;
  /** Ask for the binary data path (default true). */
  binary?: boolean;
  /**
   * FS extensions to ask for (docs/protocol.md "FS extensions"); default
   * {@link defaultClientFeatures} (every extension unless `SVC_FS_CLIENT_FEATURES` says
   * otherwise). Empty: the hello carries no `features` and the session is the base protocol.
   */
  features?: readonly string[];
  /** Time allowed for connecting and the hello together, ms (default 5000). */
  connectTimeoutMs?: number;
  /** Default time allowed per request, ms (default 30000). */
  requestTimeoutMs?: number;
  /**
   * Keepalive ping interval while requests wait for replies, ms (default
   * {@link DEFAULT_KEEPALIVE_MS}); 0 turns keepalive off.
   */
  keepaliveMs?: number;
  /**
   * A session waiting for a reply that received nothing (no frame, no pong) for this long is
   * hung and dropped, ms (default {@link DEFAULT_KEEPALIVE_TIMEOUT_MS}).
   */
  keepaliveTimeoutMs?: number;
  /**
   * Send `acheron.t_fs_exports` right behind the hello, without waiting for its reply (the node
   * handles a session's negotiation frames in order, docs/protocol.md): one round trip less
   * for a caller that needs the exports first ({@link FsClient.exports} returns its reply).
   */
  listExports?: boolean;
  /**
   * What an acknowledgement of invalidation pushes (the `inval_ack` extension) waits for, at
   * most {@link ACK_BARRIER_MAX_MS}: the settling of what the listeners started while they
   * applied the pushes (a FUSE layer's kernel notifications, which run on another thread). The
   * node holds the other client's mutation until the ack, so its caller then finds nothing of
   * the old state anywhere. Default: nothing to wait for.
   */
  ackBarrier?: () => Promise<unknown>;
}

/**
 * The longest an acknowledgement waits for {@link FsClientOptions.ackBarrier}, ms: a kernel
 * notification can wait for a directory lock the kernel holds while it waits for this client's
 * own request, which may wait at the node for another client's ack.
 */
export const ACK_BARRIER_MAX_MS = 50;

/**
 * The options of {@link FsClientOptions} that tune a session rather than name its endpoint:
 * what a holder of many sessions (the router's endpoint pool) passes on to each one it opens.
 */
export type FsSessionTuning = Pick<
  FsClientOptions,
  'binary' | 'features' | 'connectTimeoutMs' | 'requestTimeoutMs' | 'keepaliveMs' | 'keepaliveTimeoutMs' | 'ackBarrier'
>;

/** Default keepalive ping interval while requests are pending, ms. */
export const DEFAULT_KEEPALIVE_MS = 1000;
/** Default time without any answer after which a waiting session is hung, ms. */
export const DEFAULT_KEEPALIVE_TIMEOUT_MS = 2500;

export type { FsExportsReply } from '@svc/protocol/wire';

/** The `acheron.r_fs_hello` payload (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). */
export type FsHello = FsHelloReply;

/**
 * The FS extensions a client asks for by default: `SVC_FS_CLIENT_FEATURES` (comma-separated
 * names, `all` or `none`), every extension when unset or blank.
 * @throws Error naming SVC_FS_CLIENT_FEATURES for an unknown name
 */
export function defaultClientFeatures(env: NodeJS.ProcessEnv = process.env): FsFeature[] {
  return parseFsFeatures(env.SVC_FS_CLIENT_FEATURES, 'SVC_FS_CLIENT_FEATURES');
}

/** One file of a {@link FsClient.prefetch} reply: `data` when it was read, else `skip` or `errno`. */
export interface PrefetchedFile {
  name: string;
  attr?: Attr;
  data?: Buffer;
  skip?: PrefetchSkip;
  errno?: number;
}

/**
 * What {@link FsClient.request} takes after the operation, from {@link FsRequests}: the root
 * fields, the payload, and a time limit in ms (default `requestTimeoutMs`). The root fields may
 * be left out when the operation has none and the payload also; the payload may be left out
 * when none of its members is required.
 */
export type FsRequestArgs<K extends FsRequestOp> =
  Record<never, never> extends FsPayload<K>
    ? Record<never, never> extends FsTargetOf<K>
      ? [target?: FsTargetOf<K>, payload?: FsPayload<K>, timeoutMs?: number]
      : [target: FsTargetOf<K>, payload?: FsPayload<K>, timeoutMs?: number]
    : [target: FsTargetOf<K>, payload: FsPayload<K>, timeoutMs?: number];

/** A reply as received: its payload and, from a binary frame, the bytes after the header. */
interface WireReply<P = Record<string, unknown>> {
  payload: P;
  data?: Buffer;
}

/**
 * Bytes to write that already have room for the frame header in front of them: the data is
 * `buf[BINARY_HEADER_ROOM, BINARY_HEADER_ROOM + len)`, and the bytes before it may be
 * overwritten. On the binary data path the frame is completed around the data in place
 * ({@link completeBinaryFrame}), so the data is not copied before the WebSocket masks it.
 */
export interface FramedData {
  buf: Buffer;
  /** Data length, bytes. */
  len: number;
}

/** True for {@link FramedData}. */
export function isFramedData(data: Uint8Array | FramedData): data is FramedData {
  return !(data instanceof Uint8Array);
}

/** The payload members of `then` as JSON text, each after a comma (`,"set":{...},"sync":true`). */
function thenMembers(then: WriteThen): string {
  let out = '';
  if (then.set !== undefined) out += `,"set":${JSON.stringify(then.set)}`;
  if (then.sync !== undefined) out += `,"sync":${then.sync}`;
  return out;
}

/** The data bytes of {@link FramedData} (a view). */
export function framedBytes(data: FramedData): Buffer {
  return data.buf.subarray(BINARY_HEADER_ROOM, BINARY_HEADER_ROOM + data.len);
}

/** Text frames at least this large are tried as `r_fs_read` replies first ({@link parseReadReply}). */
const FAST_PATH_MIN_BYTES = 64 * 1024;
const DATA_B64_KEY = Buffer.from('"data_b64":"');

/**
 * Decodes a large JSON `acheron.r_fs_read` reply without decoding its `data_b64` string as
 * UTF-8 and parsing it as JSON: the base64 text is cut out of the frame (it needs no JSON
 * escaping) and decoded directly; the rest is parsed as usual. Returns null when the frame is
 * not such a reply (or the string holds escapes), so the caller parses it normally.
 */
function parseReadReply(raw: Buffer): { msg: Record<string, unknown>; data: Buffer } | null {
  const key = raw.indexOf(DATA_B64_KEY);
  if (key < 0) return null;
  const start = key + DATA_B64_KEY.length;
  const end = raw.indexOf(0x22, start);
  if (end < 0 || raw.lastIndexOf(0x5c, end) >= start) return null;
  let msg: Record<string, unknown>;
  try {
    msg = JSON.parse(raw.toString('utf8', 0, start) + raw.toString('utf8', end)) as Record<string, unknown>;
  } catch {
    return null;
  }
  const payload = msg.payload as Record<string, unknown> | undefined;
  if (msg.type !== 'acheron.r_fs_read' || payload?.data_b64 !== '') return null;
  delete payload.data_b64;
  return { msg, data: decodeBase64Bytes(raw, start, end) };
}

interface Pending {
  resolve: (v: WireReply) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * Events: `inval` ({node, what, gen}), `inval_dir` ({dir, dir_gen}), `event` (type, payload)
 * for every push, `hung` (ConnectionError: the keepalive found the node not answering; `close`
 * follows), `close` (code: number, reason: string).
 */
export class FsClient extends EventEmitter {
  private nextTag = 1;
  private readonly pending = new Map<number, Pending>();
  private closed = false;
  /** The node's hello reply. */
  hello: FsHello;
  /** The reply to the exports request sent behind the hello ({@link FsClientOptions.listExports}), until taken. */
  private pipelinedExports: Promise<FsExportsReply> | null = null;
  /** Why the session was dropped by this side (the keepalive's `hung` error), else null. */
  failure: ConnectionError | null = null;
  private readonly requestTimeoutMs: number;
  private readonly keepaliveMs: number;
  private readonly keepaliveTimeoutMs: number;
  /** performance.now() of the last frame or pong received. */
  private lastHeard = 0;
  /** Highest invalidation push `seq` taken in and not yet acknowledged (the `inval_ack` extension); 0: none. */
  private ackDue = 0;
  /** {@link FsClientOptions.ackBarrier}. */
  private readonly ackBarrier: (() => Promise<unknown>) | null;
  /** performance.now() when the pending set last became non-empty. */
  private busySince = 0;
  /** performance.now() of the last ping sent. */
  private lastPing = 0;
  private keepaliveTimer: NodeJS.Timeout | null = null;
  private keepaliveCheck: NodeJS.Immediate | null = null;

  private constructor(
    private readonly ws: WebSocket,
    readonly url: string,
    options: FsClientOptions,
    raw: Socket | null,
  ) {
    super();
    this.requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
    this.keepaliveMs = options.keepaliveMs ?? DEFAULT_KEEPALIVE_MS;
    this.keepaliveTimeoutMs = options.keepaliveTimeoutMs ?? DEFAULT_KEEPALIVE_TIMEOUT_MS;
    this.ackBarrier = options.ackBarrier ?? null;
    this.lastHeard = performance.now();
    ws.on('message', (data: Buffer, isBinary: boolean) => this.onMessage(data, isBinary));
    // Bytes of a frame still arriving count as an answer too: a large reply on a slow link
    // completes no frame (and lets no pong through) for a while, but the node is talking.
    raw?.on('data', () => (this.lastHeard = performance.now()));
    ws.on('pong', () => (this.lastHeard = performance.now()));
    ws.on('ping', () => (this.lastHeard = performance.now()));
    ws.on('close', (code, reason) => {
      this.closed = true;
      this.stopKeepalive();
      const err = this.failure ?? new ConnectionError(`FS session to ${url} closed (${code}${reason.length ? `: ${reason.toString()}` : ''})`, 'closed');
      this.failPending(err);
      this.emit('close', code, reason.toString());
    });
    ws.on('error', () => undefined);
  }

  /**
   * Connects and says hello, both within `connectTimeoutMs` together (the hello gets what the
   * connect left).
   * @throws ConnectionError `unreachable` / `timeout` / `closed` / `hung` when the node cannot be
   *   reached, `tls` when its certificate is refused
   * @throws FsError when the node rejects the hello (errno 13 `AuthMissing`/`AuthFailed`, 71 EPROTO)
   */
  static async connect(options: FsClientOptions): Promise<FsClient> {
    const t0 = performance.now();
    const timeoutMs = options.connectTimeoutMs ?? 5000;
    const features = options.features ?? defaultClientFeatures();
    let raw: Socket | null = null;
    const ws = await openWebSocket(options.url, { timeoutMs, what: 'node', tls: options.tls, onSocket: (s) => (raw = s) });
    const client = new FsClient(ws, options.url, options, raw);
    const payload: FsHelloRequest = { protocol: FS_PROTOCOL, proto: FS_PROTO, binary: options.binary ?? true };
    if (options.authToken !== undefined) payload.auth_token = options.authToken;
    if (features.length > 0) payload.features = [...features];
    const left = Math.max(1, Math.round(timeoutMs - (performance.now() - t0)));
    const hello = client.call('hello', {}, payload, left);
    if (options.listExports === true) {
      const exports = client.call('exports', {}, {}, left).then((r) => r.payload);
      // A rejected hello closes the session: this request then fails too, and nobody asks for it.
      exports.catch(() => undefined);
      client.pipelinedExports = exports;
    }
    try {
      client.hello = (await hello).payload;
    } catch (e) {
      client.terminate();
      if (e instanceof ConnectionError && e.reason === 'timeout')
        throw new ConnectionError(`no answer from ${options.url} within ${timeoutMs} ms (connect and hello)`, 'timeout');
      throw e;
    }
    return client;
  }

  /** True while the session is open. */
  get isOpen(): boolean {
    return !this.closed;
  }

  /** Whether reads and writes use binary frames on this session. */
  get binary(): boolean {
    return this.hello?.caps?.binary_data === true;
  }

  /** True when the node granted extension `feature` to this session (`caps.features`). */
  has(feature: FsFeature): boolean {
    const granted = this.hello?.caps?.features;
    return Array.isArray(granted) && granted.includes(feature);
  }

  /** Largest read and write, bytes. */
  get maxRead(): number {
    return this.hello.caps.max_read;
  }
  get maxWrite(): number {
    return this.hello.caps.max_write;
  }

  /**
   * The node's exports (`acheron.t_fs_exports`, docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): the reply to the request sent
   * behind the hello ({@link FsClientOptions.listExports}) the first time, a new request after.
   * @throws FsError / ConnectionError from the request
   */
  exports(): Promise<FsExportsReply> {
    const pipelined = this.pipelinedExports;
    this.pipelinedExports = null;
    return pipelined ?? this.request('exports');
  }

  /**
   * Sends one FS request (`acheron.t_fs_<op>`) and waits for its reply; the root fields, payload
   * and reply are those of `op` in {@link FsRequests} (e.g. `request('lookup', { node }, { name })`
   * gives `{ attr }`).
   * @param op operation name, e.g. `lookup`
   * @param args root fields `node` / `h`, the payload, and a time limit in ms ({@link FsRequestArgs})
   * @returns the reply payload
   * @throws FsError for `acheron.err_fs`; ConnectionError when the session ends or times out
   */
  async request<K extends FsRequestOp>(op: K, ...args: FsRequestArgs<K>): Promise<FsReply<K>> {
    // the tuple's elements by position, whichever of them FsRequestArgs<K> lets the caller leave out
    const [target, payload, timeoutMs] = args as [FsTargetOf<K>?, FsPayload<K>?, number?];
    return (await this.call(op, target ?? ({} as FsTargetOf<K>), payload ?? ({} as FsPayload<K>), timeoutMs)).payload;
  }

  /**
   * Reads up to `len` bytes at `off` from handle `h` (binary frames when negotiated).
   * @returns the bytes and whether the end of file was reached
   */
  async read(h: number, off: number, len: number): Promise<{ data: Buffer; eof: boolean }> {
    const r = await this.call('read', { h }, { off, len });
    const data = r.data ?? Buffer.from(r.payload.data_b64 ?? '', 'base64');
    return { data, eof: r.payload.eof === true };
  }

  /**
   * `open` with the `open_read` extension (docs/protocol.md "FS extensions"): opens node `node`
   * and reads up to `len` bytes at offset 0 in the same round trip.
   * @param flags Linux O_* bits (readable: O_RDONLY or O_RDWR)
   * @param closeAtEof let the node close the handle when the whole file came back (`h` 0, `closed`)
   * @returns the reply payload (without `data_b64`) and the bytes
   * @throws FsError EPROTO when the extension was not granted; as `open` otherwise
   */
  async openRead(node: number, flags: number, len: number, closeAtEof: boolean): Promise<{ reply: OpenReadReply; data: Buffer }> {
    if (!this.has('open_read')) throw new FsError(Errno.EPROTO, 'the node did not grant the open_read extension');
    const r = await this.call('open', { node }, { flags, read: len, close_at_eof: closeAtEof });
    // an open with `read` on a session granted open_read: the reply carries the attr and the bytes read
    const reply = r.payload as OpenReadReply;
    const data = r.data ?? Buffer.from(reply.data_b64 ?? '', 'base64');
    delete reply.data_b64;
    return { reply, data };
  }

  /**
   * `prefetch` (docs/protocol.md "FS extensions"): reads the small regular files `names` of
   * directory `dir` in one round trip.
   * @param maxFile bytes per file; @param maxTotal bytes of data in the reply (the node clamps both)
   * @returns one entry per name, in order
   * @throws FsError EPROTO when the extension was not granted, or the reply's data does not add up;
   *   the node's errors for the directory (ENOENT, ENOTDIR, ENOTSUP, ...)
   */
  async prefetch(dir: number, names: readonly string[], maxFile: number, maxTotal: number): Promise<PrefetchedFile[]> {
    if (!this.has('prefetch')) throw new FsError(Errno.EPROTO, 'the node did not grant the prefetch extension');
    const r = await this.call('prefetch', { node: dir }, { names, max_file: maxFile, max_total: maxTotal });
    const files = r.payload.files ?? [];
    let at = 0;
    const out = files.map((f): PrefetchedFile => {
      const e: PrefetchedFile = { name: f.name, attr: f.attr, skip: f.skip, errno: f.errno };
      if (typeof f.n === 'number') {
        if (r.data) {
          e.data = r.data.subarray(at, at + f.n);
          at += f.n;
          if (e.data.length !== f.n) throw new FsError(Errno.EPROTO, `prefetch reply from ${this.url} carries fewer bytes than its entries count`);
        } else e.data = Buffer.from(f.data_b64 ?? '', 'base64');
      }
      return e;
    });
    return out;
  }

  /**
   * Takes, changes or releases a lock on the file of handle `h` (`t_fs_lock`, the `posix`
   * extension). A request with `wait` has no time limit of its own: it ends when the node grants
   * it, answers EDEADLK, or answers EINTR once cancelled with {@link lockCancel} and the tag given
   * to `onTag` (a hung or lost session still fails it, as any request).
   * @param onTag called with the request's tag before it is sent
   * @throws FsError EAGAIN, EDEADLK, EINTR, EBADF, EPROTO (the extension was not granted); ConnectionError
   */
  async lock(h: number, payload: LockPayload, onTag?: (tag: number) => void): Promise<void> {
    if (!this.has('posix')) throw new FsError(Errno.EPROTO, 'the node did not grant the posix extension');
    const tag = this.allocTag();
    onTag?.(tag);
    const timeoutMs = payload.wait === true ? LOCK_WAIT_TIMEOUT_MS : this.requestTimeoutMs;
    await this.track<'lock'>(tag, timeoutMs, () => this.ws.send(JSON.stringify({ channel: 'acheron', type: fsRequestType('lock'), tag, h, payload })));
  }

  /** Cancels the waiting {@link lock} sent with `tag` (it answers EINTR); nothing when it is not waiting. */
  async lockCancel(tag: number): Promise<void> {
    await this.request('lock_cancel', {}, { tag });
  }

  /**
   * Writes `data` (at most `maxWrite` bytes) at `off` to handle `h`.
   * @param data the bytes, or {@link FramedData} (bytes with room for the frame header in front)
   * @returns the number of bytes written
   */
  async write(h: number, off: number, data: Uint8Array | FramedData): Promise<number> {
    return (await this.writeThen(h, off, data)).n;
  }

  /**
   * Writes `data` (at most `maxWrite` bytes) at `off` to handle `h` and, with the `write_then`
   * extension, has the node do `then` once all the bytes are written, in the same round trip.
   * @param then what to do after the bytes ({@link WriteThen}); sent only when given
   * @returns the reply: `n` bytes written; `attr` after `then.set`; `then_errno`/`then_message`
   *   when a step of `then` failed after the bytes were written
   * @throws FsError EPROTO when `then` is given and the node did not grant `write_then`; the
   *   write's own errors (EBADF, ENOSPC, EIO, ...); ConnectionError
   */
  async writeThen(h: number, off: number, data: Uint8Array | FramedData, then?: WriteThen): Promise<WriteReply> {
    if (then && !this.has('write_then')) throw new FsError(Errno.EPROTO, 'the node did not grant the write_then extension');
    const more = then ? thenMembers(then) : '';
    if (this.binary) {
      if (isFramedData(data)) {
        const tag = this.allocTag();
        const header = `{"channel":"acheron","type":"acheron.t_fs_write","tag":${tag},"h":${JSON.stringify(h)},"payload":{"off":${JSON.stringify(off)},"n":${data.len}${more}}}`;
        const r = await this.track<'write'>(tag, this.requestTimeoutMs, () =>
          this.ws.send(completeBinaryFrame(data.buf, BINARY_HEADER_ROOM, data.len, header)),
        );
        return r.payload;
      }
      const r = await this.callBinary('write', { h }, { off, n: data.length, ...then }, data);
      return r.payload;
    }
    // Built by hand as UTF-8 bytes: base64 needs no JSON escaping, and JSON.stringify would
    // scan the whole 1.4 MB string; the base64 is written straight into the frame.
    const bytes = isFramedData(data) ? framedBytes(data) : data;
    const tag = this.allocTag();
    const head = `{"channel":"acheron","type":"acheron.t_fs_write","tag":${tag},"h":${JSON.stringify(h)},"payload":{"off":${JSON.stringify(off)}${more},"data_b64":"`;
    const b64 = base64Length(bytes.length);
    const text = Buffer.allocUnsafe(head.length + b64 + 3);
    text.write(head, 0, 'latin1');
    writeBase64(bytes, text, head.length);
    text.write('"}}', head.length + b64, 'latin1');
    const r = await this.track<'write'>(tag, this.requestTimeoutMs, () => this.ws.send(text, { binary: false }));
    return r.payload;
  }

  /** performance.now() time, ms, of the last frame or pong received from the node (the hello reply at least). */
  get lastHeardAt(): number {
    return this.lastHeard;
  }

  /** Requests waiting for their reply. */
  get pendingCount(): number {
    return this.pending.size;
  }

  /** Closes the session (1000). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.stopKeepalive();
    this.ws.close(1000);
  }

  /**
   * Drops the connection at once, without the closing handshake (for a peer that stopped
   * answering); pending requests fail with ConnectionError `closed`.
   */
  terminate(): void {
    this.closed = true;
    this.stopKeepalive();
    this.ws.terminate();
  }

  // ---- keepalive (see module documentation) ---------------------------------------------

  /** Schedules the next keepalive step: a ping, or the hang verdict, whichever is due first. */
  private armKeepalive(): void {
    if (this.keepaliveMs <= 0 || this.closed || this.pending.size === 0 || this.keepaliveTimer || this.keepaliveCheck) return;
    const quiet = Math.max(this.lastHeard, this.busySince);
    const pingAt = Math.max(quiet, this.lastPing) + this.keepaliveMs;
    const hungAt = quiet + this.keepaliveTimeoutMs;
    const delay = Math.max(0, Math.ceil(Math.min(pingAt, hungAt) - performance.now()));
    this.keepaliveTimer = setTimeout(() => {
      this.keepaliveTimer = null;
      // Decide after this loop turn's I/O: when our own event loop was blocked, a pong may be
      // waiting in the socket, and it must count before the session is declared hung.
      this.keepaliveCheck = setImmediate(() => {
        this.keepaliveCheck = null;
        this.keepaliveStep();
      });
    }, delay);
  }

  private keepaliveStep(): void {
    if (this.closed || this.pending.size === 0) return;
    const now = performance.now();
    const quiet = Math.max(this.lastHeard, this.busySince);
    if (now - quiet >= this.keepaliveTimeoutMs) return this.hang();
    if (now >= Math.max(quiet, this.lastPing) + this.keepaliveMs) {
      this.lastPing = now;
      try {
        this.ws.ping();
      } catch {
        // the socket is closing: its close event fails the pending requests
      }
    }
    this.armKeepalive();
  }

  private stopKeepalive(): void {
    if (this.keepaliveTimer) clearTimeout(this.keepaliveTimer);
    if (this.keepaliveCheck) clearImmediate(this.keepaliveCheck);
    this.keepaliveTimer = null;
    this.keepaliveCheck = null;
  }

  /** The node stopped answering: drop the session, fail every pending request with `hung`. */
  private hang(): void {
    const err = new ConnectionError(`no answer from ${this.url} within ${this.keepaliveTimeoutMs} ms`, 'hung');
    this.failure = err;
    this.closed = true;
    this.stopKeepalive();
    this.failPending(err);
    this.emit('hung', err);
    this.ws.terminate();
  }

  private failPending(err: Error): void {
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    this.pending.clear();
  }

  /** Adds a pending request; the first one starts a waiting period (and the keepalive). */
  private addPending(tag: number, p: Pending): void {
    this.pending.set(tag, p);
    if (this.pending.size === 1) {
      this.busySince = performance.now();
      this.armKeepalive();
    }
  }

  /** Removes a pending request; with none left the keepalive stops. */
  private removePending(tag: number): void {
    this.pending.delete(tag);
    if (this.pending.size === 0) this.stopKeepalive();
  }

  private allocTag(): number {
    let tag = this.nextTag;
    while (this.pending.has(tag)) tag = tag >= MAX_TAG ? 1 : tag + 1;
    this.nextTag = tag >= MAX_TAG ? 1 : tag + 1;
    return tag;
  }

  private call<K extends FsRequestOp>(op: K, target: FsTargetOf<K>, payload: FsPayload<K>, timeoutMs = this.requestTimeoutMs) {
    const tag = this.allocTag();
    return this.track<K>(tag, timeoutMs, () => this.ws.send(JSON.stringify({ channel: 'acheron', type: fsRequestType(op), tag, ...target, payload })));
  }

  private callBinary<K extends FsRequestOp>(op: K, target: FsTargetOf<K>, payload: FsPayload<K>, data: Uint8Array, timeoutMs = this.requestTimeoutMs) {
    const tag = this.allocTag();
    return this.track<K>(tag, timeoutMs, () => this.ws.send(encodeBinaryFrame({ channel: 'acheron', type: fsRequestType(op), tag, ...target, payload }, data)));
  }

  /**
   * Sends a request (`send`) under `tag` and waits for its reply. The reply's payload is taken to
   * be that of request `K` ({@link FsRequests}): the node answers a tag with the reply to the
   * request sent under it.
   */
  private track<K extends FsRequestOp>(tag: number, timeoutMs: number, send: () => void): Promise<WireReply<FsReply<K>>> {
    if (this.closed || this.ws.readyState !== WebSocket.OPEN) {
      const why = this.failure ? `: ${this.failure.message}` : '';
      return Promise.reject(new ConnectionError(`FS session to ${this.url} is closed${why}`, 'closed', false));
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.removePending(tag);
        reject(new ConnectionError(`no reply from ${this.url} within ${timeoutMs} ms`, 'timeout'));
      }, timeoutMs);
      this.addPending(tag, { resolve, reject, timer });
      try {
        send();
      } catch (e) {
        // nothing was sent (the frame could not be encoded): no reply will come
        clearTimeout(timer);
        this.removePending(tag);
        reject(e);
      }
    });
  }

  /**
   * Acknowledges invalidation pushes up to `seq` (the `inval_ack` extension) once the pushes
   * read off the socket with it have been emitted, and so applied by the listeners, which act
   * on them synchronously, and what they started has settled ({@link FsClientOptions.ackBarrier},
   * at most {@link ACK_BARRIER_MAX_MS}): one `ack` for all the pushes of one socket read.
   */
  private ackLater(seq: number): void {
    if (seq <= this.ackDue) return;
    const scheduled = this.ackDue !== 0;
    this.ackDue = seq;
    if (scheduled) return;
    queueMicrotask(() => {
      const upTo = this.ackDue;
      this.ackDue = 0;
      const send = () => {
        if (!this.closed) this.request('ack', {}, { seq: upTo }).catch(() => undefined);
      };
      if (!this.ackBarrier) return send();
      let timer: NodeJS.Timeout | undefined;
      const waited = new Promise<void>((resolve) => (timer = setTimeout(resolve, ACK_BARRIER_MAX_MS)));
      void Promise.race([this.ackBarrier().catch(() => undefined), waited]).then(() => {
        clearTimeout(timer);
        send();
      });
    });
  }

  private onMessage(raw: Buffer, isBinary: boolean): void {
    this.lastHeard = performance.now();
    let msg: Record<string, unknown>;
    let data: Buffer | undefined;
    try {
      if (isBinary) {
        const len = raw.readUInt32BE(0);
        msg = JSON.parse(raw.toString('utf8', 4, 4 + len)) as Record<string, unknown>;
        data = raw.subarray(4 + len);
      } else {
        const fast = raw.length >= FAST_PATH_MIN_BYTES ? parseReadReply(raw) : null;
        if (fast) {
          msg = fast.msg;
          data = fast.data;
        } else msg = JSON.parse(raw.toString('utf8')) as Record<string, unknown>;
      }
    } catch {
      return;
    }
    if (typeof msg.tag !== 'number') {
      const type = String(msg.type);
      this.emit('event', type, msg.payload);
      if (type === 'acheron.e_fs_inval') this.emit('inval', msg.payload);
      else if (type === 'acheron.e_fs_inval_dir') this.emit('inval_dir', msg.payload);
      else return;
      const seq = (msg.payload as { seq?: unknown } | undefined)?.seq;
      if (typeof seq === 'number') this.ackLater(seq);
      return;
    }
    const p = this.pending.get(msg.tag);
    if (!p) return;
    this.removePending(msg.tag);
    clearTimeout(p.timer);
    if (msg.ok === true) p.resolve({ payload: (msg.payload ?? {}) as Record<string, unknown>, data });
    else {
      const error = (msg.error ?? {}) as { errno?: number; message?: string };
      p.reject(new FsError(error.errno ?? 5, error.message));
    }
  }
}
