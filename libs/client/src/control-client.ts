/**
 * ControlClient: a control session on `svc`. Opens the WebSocket with the
 * bearer role token, performs `control.version` + `control.connect`, correlates replies by
 * `id`, and emits server pushes. Also carries runtime (Acheron) requests, correlated by `tag`.
 */
import { EventEmitter } from 'node:events';
import type WebSocket from 'ws';
import { ConnectionError } from './connection-error';
import { openWebSocket } from './open-websocket';
import type { ClientTls } from './tls-options';
import { ACHERON_VERSION, CONTROL_PROTOCOL, MAX_TAG } from '@svc/protocol/wire';

/** A `control.error` / `acheron.error` reply. */
export class ControlError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ControlError';
  }
}

export { ConnectionError };

/** Time allowed per request, ms, unless {@link ControlClientOptions.requestTimeoutMs} says otherwise. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

export interface ControlClientOptions {
  /** Server URL, e.g. `ws://127.0.0.1:18790/` or `wss://svc.example:18790/`. */
  url: string;
  /** Bearer role token. */
  token: string;
  /** CAs a `wss://` server is verified against (default: the system CAs). */
  tls?: ClientTls;
  /** Agent id for `control.connect` (default `default`). */
  agentId?: string;
  /** Time allowed for connecting and negotiating, ms (default 10000). */
  connectTimeoutMs?: number;
  /** Default time allowed per request, ms (default {@link DEFAULT_REQUEST_TIMEOUT_MS}). */
  requestTimeoutMs?: number;
}

/** The `control.connect_ack` payload. */
export interface ConnectAck {
  agent_id: string;
  role: 'admin' | 'user';
  protocol: string;
  session: string;
  project_id: string | null;
  workspace: { mounts: unknown[] };
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * Events: `event` (type: string, payload: unknown) for every server push; `close`
 * (code: number, reason: string) when the session ends.
 */
export class ControlClient extends EventEmitter {
  private nextId = 1;
  private nextTag = 1;
  private readonly pending = new Map<string | number, Pending>();
  private readonly pendingTags = new Map<number, Pending>();
  private closed = false;
  /** The server's `control.connect_ack` payload. */
  connectAck: ConnectAck;

  private constructor(
    private readonly ws: WebSocket,
    private readonly requestTimeoutMs: number,
  ) {
    super();
    ws.on('message', (data, isBinary) => {
      // a Buffer: the socket's binaryType is the default, 'nodebuffer'
      if (!isBinary) this.onMessage((data as Buffer).toString());
    });
    ws.on('close', (code, reason) => {
      this.closed = true;
      const err = new ConnectionError(`connection closed (${code}${reason.length ? `: ${reason.toString()}` : ''})`, 'closed');
      for (const p of [...this.pending.values(), ...this.pendingTags.values()]) {
        clearTimeout(p.timer);
        p.reject(err);
      }
      this.pending.clear();
      this.pendingTags.clear();
      this.emit('close', code, reason.toString());
    });
    ws.on('error', () => undefined);
  }

  /**
   * Connects and negotiates (`control.version` and `control.connect`, sent together: one round
   * trip).
   * @throws ConnectionError `unauthorized` (HTTP 401), `unreachable`, `timeout`, `protocol`,
   *   `tls` (certificate refused or TLS handshake failed; the token was not sent)
   * @throws ControlError when the server rejects the negotiation
   */
  static async connect(options: ControlClientOptions): Promise<ControlClient> {
    const timeoutMs = options.connectTimeoutMs ?? 10_000;
    const ws = await openWebSocket(options.url, {
      timeoutMs,
      headers: { Authorization: `Bearer ${options.token}` },
      what: 'server',
      refusedHint: 'is svc running?',
      tls: options.tls,
    });
    const client = new ControlClient(ws, options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS);
    // Both sent at once: the server handles negotiation frames in order (docs/protocol.md), so
    // connect sees the phase version set, and a rejected version closes the session before it.
    const version = client.request('control.version', { protocol: CONTROL_PROTOCOL }, timeoutMs);
    const connect = client.request<ConnectAck>('control.connect', options.agentId ? { agent_id: options.agentId } : {}, timeoutMs);
    connect.catch(() => undefined);
    try {
      await version;
      client.connectAck = await connect;
    } catch (e) {
      client.close();
      throw e;
    }
    return client;
  }

  /** True while the session is open. */
  get isOpen(): boolean {
    return !this.closed;
  }

  /**
   * Sends one control request and waits for its reply.
   * @param type `control.X` or just `X`
   * @param payload request payload (default `{}`)
   * @param timeoutMs per-request limit, ms
   * @returns the reply payload
   * @throws ControlError for `control.error`; ConnectionError when the session ends or times out
   */
  request<T = unknown>(type: string, payload: object = {}, timeoutMs = this.requestTimeoutMs): Promise<T> {
    const fullType = type.startsWith('control.') ? type : `control.${type}`;
    const id = this.nextId++;
    return this.track(this.pending, id, { channel: 'control', type: fullType, id, payload }, timeoutMs) as Promise<T>;
  }

  /**
   * Sends one runtime (Acheron) request with root fields and waits for its reply.
   * @param type `acheron.t_X`
   * @param fields root fields (`fid`, `newfid`, `path`, `offset`, `count`, `data_b64`, `version`, `msize`, ...)
   * @returns the reply payload
   * @throws ControlError for `acheron.error`; ConnectionError when the session ends or times out
   */
  acheron<T = unknown>(type: string, fields: Record<string, unknown> = {}, timeoutMs = this.requestTimeoutMs): Promise<T> {
    const tag = this.nextTag;
    this.nextTag = this.nextTag >= MAX_TAG ? 1 : this.nextTag + 1;
    return this.track(this.pendingTags, tag, { channel: 'acheron', type, tag, ...fields }, timeoutMs) as Promise<T>;
  }

  /** Negotiates the runtime session: `acheron.t_version` then `acheron.t_attach` on `fid`. */
  async attach(fid = 0, msize = 65536): Promise<{ msize: number; roots: string[] }> {
    const v = await this.acheron<{ msize: number }>('acheron.t_version', { version: ACHERON_VERSION, msize });
    const a = await this.acheron<{ roots: string[] }>('acheron.t_attach', { fid });
    return { msize: v.msize, roots: a.roots };
  }

  /** Closes the session (1000). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.ws.close(1000);
  }

  private track<K>(map: Map<K, Pending>, key: K, envelope: object, timeoutMs: number): Promise<unknown> {
    if (this.closed) return Promise.reject(new ConnectionError('connection closed', 'closed'));
    // Encoded first: a payload that cannot be encoded (a cycle, a BigInt) rejects with nothing registered.
    let frame: string;
    try {
      frame = JSON.stringify(envelope);
    } catch (e) {
      return Promise.reject(e);
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        map.delete(key);
        reject(new ConnectionError(`no reply within ${timeoutMs} ms`, 'timeout'));
      }, timeoutMs);
      map.set(key, { resolve, reject, timer });
      this.ws.send(frame);
    });
  }

  private onMessage(text: string): void {
    let msg: Record<string, unknown>;
    try {
      msg = JSON.parse(text) as Record<string, unknown>;
    } catch {
      return;
    }
    const hasId = msg.channel === 'control' && 'id' in msg && (typeof msg.id === 'number' || typeof msg.id === 'string');
    const hasTag = msg.channel === 'acheron' && typeof msg.tag === 'number';
    const p = hasId ? this.pending.get(msg.id as number) : hasTag ? this.pendingTags.get(msg.tag as number) : undefined;
    if (!p) {
      if (!('ok' in msg)) this.emit('event', msg.type, msg.payload);
      else if (msg.ok === false) this.emit('stray_error', msg.error);
      return;
    }
    clearTimeout(p.timer);
    if (hasId) this.pending.delete(msg.id as number);
    else this.pendingTags.delete(msg.tag as number);
    if (msg.ok === true) p.resolve(msg.payload ?? {});
    else {
      const error = (msg.error ?? {}) as { code?: string; message?: string };
      p.reject(new ControlError(error.code ?? 'unknown', error.message ?? 'request failed'));
    }
  }
}
