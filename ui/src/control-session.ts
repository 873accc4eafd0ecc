/**
 * The dashboard's WebSocket session with `svc` (docs/protocol.md "Envelope and errors", docs/namespace.md): the same control
 * protocol every client speaks. The upgrade is authenticated by the dashboard's HttpOnly
 * session cookie (the browser sends it; this code never sees it) and the server checks the
 * page's Origin. Negotiates `control.version` / `control.connect`, then the runtime session
 * (`acheron.t_version`, `acheron.t_attach`) to read namespace files such as
 * `/projects/<id>/STATUS.json`.
 */

/** A `control.error` / `acheron.error` reply. */
export class RequestError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** A server push: `{type, payload}` of an envelope without id or tag. */
export type PushHandler = (type: string, payload: Record<string, unknown>) => void;

interface Pending {
  resolve(payload: unknown): void;
  reject(err: Error): void;
  timer: number;
}

const REQUEST_TIMEOUT_MS = 15_000;
const ROOT_FID = 0;

/** One negotiated session; `closed` resolves when the socket ends. */
export class ControlSession {
  private nextId = 1;
  private nextTag = 1;
  private nextFid = 1;
  private readonly pendingIds = new Map<number, Pending>();
  private readonly pendingTags = new Map<number, Pending>();
  private iounit = 65536;
  readonly closed: Promise<void>;

  private constructor(
    private readonly ws: WebSocket,
    private readonly onPush: PushHandler,
  ) {
    this.closed = new Promise((resolve) => {
      ws.addEventListener('close', () => {
        for (const p of [...this.pendingIds.values(), ...this.pendingTags.values()]) {
          clearTimeout(p.timer);
          p.reject(new RequestError('closed', 'connection closed'));
        }
        this.pendingIds.clear();
        this.pendingTags.clear();
        resolve();
      });
    });
    ws.addEventListener('message', (ev) => this.onMessage(ev.data));
  }

  /**
   * Opens the WebSocket on this page's host (`ws:`, or `wss:` under https) and negotiates.
   * @throws RequestError `refused` when the upgrade fails (no session, wrong origin, server down)
   */
  static async open(agentId: string, onPush: PushHandler): Promise<ControlSession> {
    const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/`;
    const ws = new WebSocket(url);
    await new Promise<void>((resolve, reject) => {
      ws.addEventListener('open', () => resolve(), { once: true });
      ws.addEventListener('close', () => reject(new RequestError('refused', `could not open ${url}`)), { once: true });
    });
    const s = new ControlSession(ws, onPush);
    await s.request('control.version', { protocol: 'unified-v2' });
    await s.request('control.connect', { agent_id: agentId });
    const v = await s.acheron<{ msize: number }>('acheron.t_version', { version: 'acheron-1', msize: 1 << 20 });
    s.iounit = Math.max(4096, v.msize - 1024);
    await s.acheron('acheron.t_attach', { fid: ROOT_FID });
    return s;
  }

  /** A control request; resolves with the reply payload. @throws RequestError */
  request<T = Record<string, unknown>>(type: string, payload: Record<string, unknown> = {}): Promise<T> {
    const id = this.nextId++;
    return this.send(this.pendingIds, id, { channel: 'control', type, id, payload }) as Promise<T>;
  }

  /** A runtime request with root fields (`fid`, `path`, ...). @throws RequestError */
  acheron<T = Record<string, unknown>>(type: string, fields: Record<string, unknown>): Promise<T> {
    const tag = this.nextTag;
    this.nextTag = this.nextTag >= 0xfffffffe ? 1 : this.nextTag + 1;
    return this.send(this.pendingTags, tag, { channel: 'acheron', type, tag, ...fields }) as Promise<T>;
  }

  /**
   * Reads a whole namespace file (walk, open, read to EOF, clunk) as UTF-8 text.
   * @param path absolute namespace path, e.g. `/projects/proj-1/STATUS.json`
   * @throws RequestError `enoent` and the like
   */
  async readFile(path: string): Promise<string> {
    const fid = this.nextFid++;
    await this.acheron('acheron.t_walk', { fid: ROOT_FID, newfid: fid, path: path.split('/').filter((s) => s.length > 0) });
    try {
      const { iounit } = await this.acheron<{ iounit: number }>('acheron.t_open', { fid, mode: 'r' });
      const count = iounit > 0 ? iounit : this.iounit;
      const parts: Uint8Array[] = [];
      for (let offset = 0; ;) {
        const r = await this.acheron<{ data_b64: string; n: number; eof: boolean }>('acheron.t_read', { fid, offset, count });
        if (r.n > 0) parts.push(Uint8Array.from(atob(r.data_b64), (c) => c.charCodeAt(0)));
        offset += r.n;
        if (r.eof || r.n === 0) break;
      }
      const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
      let at = 0;
      for (const p of parts) {
        all.set(p, at);
        at += p.length;
      }
      return new TextDecoder().decode(all);
    } finally {
      this.acheron('acheron.t_clunk', { fid }).catch(() => undefined);
    }
  }

  close(): void {
    this.ws.close(1000);
  }

  private send(map: Map<number, Pending>, key: number, envelope: object): Promise<unknown> {
    if (this.ws.readyState !== WebSocket.OPEN) return Promise.reject(new RequestError('closed', 'connection closed'));
    return new Promise((resolve, reject) => {
      const timer = window.setTimeout(() => {
        map.delete(key);
        reject(new RequestError('timeout', 'no reply in time'));
      }, REQUEST_TIMEOUT_MS);
      map.set(key, { resolve, reject, timer });
      this.ws.send(JSON.stringify(envelope));
    });
  }

  private onMessage(data: unknown): void {
    if (typeof data !== 'string') return;
    let msg: Record<string, unknown>;
    try {
      msg = JSON.parse(data) as Record<string, unknown>;
    } catch {
      return;
    }
    const byId = typeof msg.id === 'number' ? this.pendingIds.get(msg.id) : undefined;
    const byTag = msg.channel === 'acheron' && typeof msg.tag === 'number' ? this.pendingTags.get(msg.tag) : undefined;
    const p = byId ?? byTag;
    if (!p) {
      if (!('ok' in msg) && typeof msg.type === 'string') this.onPush(msg.type, (msg.payload ?? {}) as Record<string, unknown>);
      return;
    }
    clearTimeout(p.timer);
    if (byId) this.pendingIds.delete(msg.id as number);
    else this.pendingTags.delete(msg.tag as number);
    if (msg.ok === true) p.resolve(msg.payload ?? {});
    else {
      const e = (msg.error ?? {}) as { code?: string; message?: string };
      p.reject(new RequestError(e.code ?? 'unknown', e.message ?? 'request failed'));
    }
  }
}
