/**
 * A small raw FS peer for e2e tests of `svc-fs-node` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): hello, tag
 * correlation with many requests in flight, binary frames both ways, and the pushed events.
 * It adds no protocol help beyond that, so tests see exactly what the node sends.
 */
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import WebSocket from 'ws';
import { encodeBinaryFrame } from '../../libs/protocol/src';
import { BIN, startProcess, Running } from '../support/processes';

/**
 * A payload as the node sent it, read untyped: the tests check its fields with expect(), and the
 * peer adds no protocol types, so that they see exactly what was sent.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- see above
export type Payload = Record<string, any>;

/** One reply: the envelope and, for a binary reply, its bytes. */
export interface FsReply {
  type: string;
  tag: number;
  ok: boolean;
  payload: Payload;
  error?: { errno: number; message: string; code?: string };
  data?: Buffer;
}

/** A pushed event (no tag). */
export interface FsPush {
  type: string;
  payload: Payload;
  atMs: number;
}

/** A failed request: the `acheron.err_fs` body. */
export class FsReplyError extends Error {
  constructor(
    readonly errno: number,
    message: string,
    readonly code?: string,
  ) {
    super(`errno ${errno}: ${message}`);
  }
}

export class FsPeer {
  private nextTag = 1;
  private readonly pending = new Map<number, (r: FsReply) => void>();
  /** Every push received, in order. */
  readonly pushes: FsPush[] = [];
  /** Replies that matched no request (should stay empty). */
  readonly strays: unknown[] = [];
  closeCode: number | null = null;
  readonly closed: Promise<number>;
  private pushWaiters: Array<() => void> = [];
  /** The hello reply's payload (after {@link FsPeer.connect}). */
  hello: Payload = {};

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (raw: Buffer, isBinary: boolean) => this.onMessage(raw, isBinary));
    this.closed = new Promise((r) =>
      ws.on('close', (code) => {
        this.closeCode = code;
        for (const [tag, resolve] of this.pending) resolve({ type: 'closed', tag, ok: false, payload: {}, error: { errno: -1, message: `closed (${code})` } });
        this.pending.clear();
        for (const w of this.pushWaiters.splice(0)) w();
        r(code);
      }),
    );
    ws.on('error', () => undefined);
  }

  /** Opens a WebSocket to `url` (e.g. `ws://127.0.0.1:PORT/v2/fs`) without saying hello. */
  static open(url: string): Promise<FsPeer> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 64 * 1024 * 1024 });
      ws.once('open', () => resolve(new FsPeer(ws)));
      ws.once('error', reject);
    });
  }

  /**
   * Opens a session and says hello.
   * @throws FsReplyError when the hello is refused
   */
  static async connect(url: string, options: { binary?: boolean; authToken?: string; features?: string[] } = {}): Promise<FsPeer> {
    const peer = await FsPeer.open(url);
    const payload: Record<string, unknown> = { protocol: 'unified-v2-fs', proto: 2 };
    if (options.binary) payload.binary = true;
    if (options.features) payload.features = options.features;
    if (options.authToken !== undefined) payload.auth_token = options.authToken;
    const r = await peer.send('hello', {}, payload);
    if (!r.ok) throw new FsReplyError(r.error!.errno, r.error!.message, r.error!.code);
    peer.hello = r.payload;
    return peer;
  }

  private onMessage(raw: Buffer, isBinary: boolean): void {
    let msg: FsReply;
    if (isBinary) {
      const len = raw.readUInt32BE(0);
      msg = JSON.parse(raw.toString('utf8', 4, 4 + len)) as FsReply;
      msg.data = raw.subarray(4 + len);
    } else {
      msg = JSON.parse(raw.toString('utf8')) as FsReply;
    }
    // Pushes carry no `ok` (and no tag); replies always carry `ok`.
    if ((msg as Partial<FsReply>).ok === undefined) {
      this.pushes.push({ type: msg.type, payload: msg.payload, atMs: Date.now() });
      for (const w of this.pushWaiters.splice(0)) w();
      return;
    }
    const resolve = typeof msg.tag === 'number' ? this.pending.get(msg.tag) : undefined;
    if (!resolve) {
      this.strays.push(msg);
      return;
    }
    this.pending.delete(msg.tag);
    resolve(msg);
  }

  /** Sends a raw frame (object, string or Buffer) without waiting. */
  raw(frame: unknown): void {
    this.ws.send(typeof frame === 'string' || Buffer.isBuffer(frame) ? frame : JSON.stringify(frame));
  }

  /** Sends `acheron.t_fs_<op>` with root fields `target` and `payload`; resolves with the reply (ok or not). */
  send(op: string, target: Record<string, unknown> = {}, payload: Record<string, unknown> = {}, data?: Buffer, timeoutMs = 30_000): Promise<FsReply> {
    const tag = this.nextTag++;
    const envelope = { channel: 'acheron', type: `acheron.t_fs_${op}`, tag, ...target, payload };
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(tag);
        reject(new Error(`no reply to ${op} (tag ${tag}) within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(tag, (r) => {
        clearTimeout(timer);
        resolve(r);
      });
      this.ws.send(data ? encodeBinaryFrame(envelope, data) : JSON.stringify(envelope));
    });
  }

  /** Like {@link send} but returns the payload, and throws {@link FsReplyError} on `acheron.err_fs`. */
  async call(op: string, target: Record<string, unknown> = {}, payload: Record<string, unknown> = {}, data?: Buffer): Promise<Payload> {
    const r = await this.send(op, target, payload, data);
    if (!r.ok) throw new FsReplyError(r.error!.errno, r.error!.message, r.error!.code);
    return r.data ? { ...r.payload, data: r.data } : r.payload;
  }

  /** Runs a request expected to fail; returns its errno (throws if it succeeded). */
  async errno(op: string, target: Record<string, unknown> = {}, payload: Record<string, unknown> = {}, data?: Buffer): Promise<number> {
    const r = await this.send(op, target, payload, data);
    if (r.ok) throw new Error(`${op} ${JSON.stringify(target)} ${JSON.stringify(payload)} succeeded: ${JSON.stringify(r.payload).slice(0, 300)}`);
    return r.error!.errno;
  }

  /** The root node id of export `name`. */
  async root(name: string): Promise<number> {
    const { exports } = await this.call('exports');
    const e = (exports as Array<{ name: string; root: number }>).find((x) => x.name === name);
    if (!e) throw new Error(`no export ${name}`);
    return e.root;
  }

  /** Looks up a `/`-separated path below directory node `dir`; returns the attr of the last name. */
  async walk(dir: number, path: string): Promise<Payload> {
    let attr: Payload = { id: dir };
    for (const name of path.split('/').filter(Boolean)) attr = (await this.call('lookup', { node: attr.id }, { name })).attr as Payload;
    return attr;
  }

  /** Reads a whole file through handle `h` with up to `inflight` reads of `chunk` bytes in flight. */
  async readAll(h: number, size: number, chunk = 1024 * 1024, inflight = 4): Promise<Buffer> {
    const parts: Buffer[] = [];
    for (let off = 0; off < size; off += chunk * inflight) {
      const batch: Array<Promise<Payload>> = [];
      for (let i = 0; i < inflight && off + i * chunk < size; i++) batch.push(this.call('read', { h }, { off: off + i * chunk, len: chunk }));
      for (const r of await Promise.all(batch)) parts.push((r.data as Buffer | undefined) ?? Buffer.from(r.data_b64 as string, 'base64'));
    }
    return Buffer.concat(parts);
  }

  /** Writes `data` through handle `h` in `chunk`-byte writes (binary frames when `binary`), up to `inflight` at once. */
  async writeAll(h: number, data: Buffer, binary: boolean, chunk = 1024 * 1024, inflight = 4): Promise<void> {
    for (let off = 0; off < data.length; off += chunk * inflight) {
      const batch: Array<Promise<Payload>> = [];
      for (let i = 0; i < inflight && off + i * chunk < data.length; i++) {
        const at = off + i * chunk;
        const part = data.subarray(at, Math.min(at + chunk, data.length));
        batch.push(
          binary ? this.call('write', { h }, { off: at, n: part.length }, part) : this.call('write', { h }, { off: at, data_b64: part.toString('base64') }),
        );
      }
      for (const r of await Promise.all(batch)) if (typeof r.n !== 'number') throw new Error('write reply without n');
    }
  }

  /** Waits for a push of `type` matching `match`, among pushes from index `from` on. */
  async waitPush(type: string, match: (p: Payload) => boolean = () => true, timeoutMs = 2000, from = 0): Promise<FsPush> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.pushes.slice(from).find((p) => p.type === type && match(p.payload));
      if (found) return found;
      if (this.closeCode !== null) throw new Error(`closed (${this.closeCode}) while waiting for ${type}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${type} push within ${timeoutMs} ms; got ${JSON.stringify(this.pushes.slice(from)).slice(0, 500)}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.pushWaiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  /** Waits for the connection to close; returns the close code. */
  async waitClose(timeoutMs = 5000): Promise<number> {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        this.closed,
        new Promise<number>((_, rej) => (timer = setTimeout(() => rej(new Error(`not closed within ${timeoutMs} ms`)), timeoutMs))),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  close(): void {
    this.ws.close();
  }
}

/** SHA-256 hex digest. */
export function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/**
 * Starts the built `svc-fs-node` on a free port with the given exports (`name=path[:ro]`) and
 * extra args; as `options.user` (uid and gid) when given.
 */
export function startFsNode(
  exportSpecs: string[],
  options: { args?: string[]; env?: NodeJS.ProcessEnv; user?: { uid: number; gid: number } } = {},
): Promise<Running> {
  const args = ['--port', '0', ...exportSpecs.flatMap((e) => ['--export', e]), ...(options.args ?? [])];
  return startProcess(BIN.fsNode, args, options.env ?? {}, 20_000, options.user);
}

/** Runs the built `svc-fs-node` to completion (for start-up failures). */
export function runFsNode(args: string[], env: NodeJS.ProcessEnv = {}): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [BIN.fsNode, ...args], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 20_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
