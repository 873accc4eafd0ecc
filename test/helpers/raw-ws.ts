/**
 * A raw WebSocket peer for protocol tests: sends exactly the frames a test writes and records
 * every frame and the close code, with no client-side protocol help.
 */
import WebSocket from 'ws';

export interface Received {
  [k: string]: unknown;
  channel?: string;
  type?: string;
  id?: unknown;
  tag?: unknown;
  ok?: boolean;
  payload?: Record<string, unknown>;
  error?: { code?: string; errno?: number; message: string };
}

export class RawPeer {
  readonly messages: Received[] = [];
  private waiters: Array<() => void> = [];
  closeCode: number | null = null;
  closeReason = '';
  readonly closed: Promise<number>;

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data, isBinary) => {
      this.messages.push(isBinary ? { binary: data } : (JSON.parse((data as Buffer).toString()) as Received));
      this.wake();
    });
    this.closed = new Promise((r) =>
      ws.on('close', (code, reason) => {
        this.closeCode = code;
        this.closeReason = reason.toString();
        this.wake();
        r(code);
      }),
    );
    ws.on('error', () => undefined);
  }

  /** Opens a connection; rejects with the HTTP status on a refused upgrade. */
  static open(url: string, token: string | null, path = ''): Promise<RawPeer> {
    return new Promise((resolve, reject) => {
      const headers: Record<string, string> = token === null ? {} : { Authorization: `Bearer ${token}` };
      const ws = new WebSocket(url + path, { headers, perMessageDeflate: false });
      ws.once('open', () => resolve(new RawPeer(ws)));
      ws.once('unexpected-response', (_req, res) => reject(Object.assign(new Error(`HTTP ${res.statusCode}`), { status: res.statusCode })));
      ws.once('error', reject);
    });
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  send(frame: unknown): void {
    this.ws.send(typeof frame === 'string' || Buffer.isBuffer(frame) ? frame : JSON.stringify(frame));
  }

  /** Waits for the n-th received message (0-based) or the close. */
  async nth(n: number, timeoutMs = 5000): Promise<Received> {
    const deadline = Date.now() + timeoutMs;
    while (this.messages.length <= n) {
      if (this.closeCode !== null) throw new Error(`closed (${this.closeCode}) before message ${n}`);
      if (Date.now() > deadline) throw new Error(`no message ${n} within ${timeoutMs} ms`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
    return this.messages[n];
  }

  /** Sends a frame and waits for the next message. */
  async roundTrip(frame: unknown, timeoutMs = 5000): Promise<Received> {
    const n = this.messages.length;
    this.send(frame);
    return this.nth(n, timeoutMs);
  }

  /** Waits for the connection to close; returns the close code. */
  async waitClose(timeoutMs = 5000): Promise<number> {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        this.closed,
        new Promise<number>((_, rej) => {
          timer = setTimeout(() => rej(new Error(`not closed within ${timeoutMs} ms`)), timeoutMs);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Waits for a pushed event of `type` (no id/tag), starting at message index `from`. */
  async waitEvent(type: string, timeoutMs = 5000, from = 0, match: (m: Received) => boolean = () => true): Promise<Received> {
    const deadline = Date.now() + timeoutMs;
    for (let i = from; ; i++) {
      const m = await this.nth(i, Math.max(1, deadline - Date.now()));
      if (m.type === type && !('ok' in m) && match(m)) return m;
    }
  }

  /** Negotiates a control session: version then connect. Returns the connect_ack payload. */
  async negotiate(agentId?: string): Promise<Record<string, unknown>> {
    const v = await this.roundTrip({ channel: 'control', type: 'control.version', id: 'v', payload: { protocol: 'unified-v2' } });
    if (!v.ok) throw new Error(`version failed: ${JSON.stringify(v)}`);
    const c = await this.roundTrip({ channel: 'control', type: 'control.connect', id: 'c', payload: agentId ? { agent_id: agentId } : {} });
    if (!c.ok) throw new Error(`connect failed: ${JSON.stringify(c)}`);
    return c.payload!;
  }

  close(): void {
    this.ws.close();
  }
}
