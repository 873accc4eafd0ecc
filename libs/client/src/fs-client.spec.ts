/**
 * FsClient keepalive and deadlines (issue 11 item 3) against a tiny real `ws` server that
 * speaks just enough of PROTOCOL.md 8 (hello, then one reply per request) and can stop
 * answering altogether (no replies, no pongs: a SIGSTOPped node), answer late while still
 * answering pings (a busy node), or answer pushes without pongs.
 */
import { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import WebSocket, { WebSocketServer } from 'ws';
import { ConnectionError } from './connection-error';
import { FsClient } from './fs-client';

type Mode = 'normal' | 'hung' | 'slow' | 'pushes' | 'mute-hello' | 'no-reply';

interface Peer {
  url: string;
  mode: Mode;
  /** Reply delay in `slow` mode, ms. */
  slowMs: number;
  pings: number;
  requests: number;
  close(): Promise<void>;
}

/** Starts the test node: answers pings itself unless `hung`, replies per `mode`. */
async function startPeer(mode: Mode = 'normal'): Promise<Peer> {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', autoPong: false });
  await new Promise<void>((r) => wss.once('listening', () => r()));
  const peer: Peer = {
    url: `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/v2/fs`,
    mode,
    slowMs: 0,
    pings: 0,
    requests: 0,
    close: () =>
      new Promise<void>((r) => {
        for (const c of wss.clients) c.terminate();
        wss.close(() => r());
      }),
  };
  wss.on('connection', (ws: WebSocket) => {
    const timers: NodeJS.Timeout[] = [];
    ws.on('close', () => timers.forEach((t) => clearTimeout(t)));
    ws.on('ping', (data) => {
      peer.pings++;
      if (peer.mode !== 'hung') ws.pong(data);
    });
    ws.on('message', (raw) => {
      const msg = JSON.parse(raw.toString()) as { type: string; tag: number };
      const reply = (type: string, payload: object) => ws.send(JSON.stringify({ channel: 'acheron', type, tag: msg.tag, ok: true, payload }));
      if (msg.type === 'acheron.t_fs_hello') {
        if (peer.mode === 'mute-hello') return;
        return reply('acheron.r_fs_hello', { protocol: 'acheron-fs', caps: { binary_data: false, max_read: 1 << 20, max_write: 1 << 20 } });
      }
      peer.requests++;
      const op = msg.type.replace('acheron.t_fs_', '');
      if (peer.mode === 'hung' || peer.mode === 'no-reply') return;
      if (peer.mode === 'slow') {
        timers.push(setTimeout(() => reply(`acheron.r_fs_${op}`, { late: true }), peer.slowMs));
        return;
      }
      if (peer.mode === 'pushes') {
        // never a pong, but a push every 150 ms, then the reply
        for (let i = 1; i <= 8; i++) timers.push(setTimeout(() => ws.send(JSON.stringify({ channel: 'acheron', type: 'acheron.e_fs_inval', payload: { node: 1, what: 'attr', gen: i } })), i * 150));
        timers.push(setTimeout(() => reply(`acheron.r_fs_${op}`, { after_pushes: true }), 9 * 150));
        return;
      }
      reply(`acheron.r_fs_${op}`, { ok: op });
    });
  });
  return peer;
}

const peers: Peer[] = [];
const clients: FsClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.terminate();
  await Promise.all(peers.splice(0).map((p) => p.close()));
});

async function setup(options: { keepaliveMs?: number; keepaliveTimeoutMs?: number; requestTimeoutMs?: number } = {}, mode: Mode = 'normal') {
  const peer = await startPeer(mode);
  peers.push(peer);
  const client = await FsClient.connect({ url: peer.url, connectTimeoutMs: 3000, ...options });
  clients.push(client);
  return { peer, client };
}

/** Settles `p`, returning the error (or null) and the time it took, ms. */
async function timed(p: Promise<unknown>): Promise<{ err: unknown; ms: number; value?: unknown }> {
  const t0 = performance.now();
  try {
    const value = await p;
    return { err: null, ms: performance.now() - t0, value };
  } catch (err) {
    return { err, ms: performance.now() - t0 };
  }
}

describe('FsClient keepalive', () => {
  it('a node that stops answering (no reply, no pong) fails every pending request with `hung` at the keepalive limit', async () => {
    const { peer, client } = await setup({ keepaliveMs: 200, keepaliveTimeoutMs: 700, requestTimeoutMs: 30_000 });
    expect(await client.request('getattr', { node: 1 })).toEqual({ ok: 'getattr' });
    peer.mode = 'hung';
    const hung: ConnectionError[] = [];
    client.on('hung', (e: ConnectionError) => hung.push(e));
    const closed = new Promise<void>((r) => client.once('close', () => r()));
    const a = timed(client.request('lookup', { node: 1 }, { name: 'x' }));
    await new Promise((r) => setTimeout(r, 300));
    const b = timed(client.request('write', { h: 1 }, { off: 0, data_b64: '' }));
    const [ra, rb] = await Promise.all([a, b]);
    for (const r of [ra, rb]) {
      expect(r.err).toBeInstanceOf(ConnectionError);
      expect(r.err).toMatchObject({ reason: 'hung', sent: true });
      expect((r.err as Error).message).toBe(`no answer from ${peer.url} within 700 ms`);
    }
    // measured from the first request, not from each request: no deadline per call adds up
    expect(ra.ms).toBeGreaterThanOrEqual(650);
    expect(ra.ms).toBeLessThan(2000);
    expect(rb.ms).toBeLessThan(ra.ms);
    expect(peer.pings).toBeGreaterThanOrEqual(2);
    expect(hung).toHaveLength(1);
    expect(client.isOpen).toBe(false);
    expect(client.failure?.reason).toBe('hung');
    await closed;
    // nothing more is sent on the dropped session
    await expect(client.request('getattr', { node: 1 })).rejects.toMatchObject({ reason: 'closed', sent: false, message: expect.stringContaining('no answer from') });
  });

  it('a busy node that answers pings but replies late is not declared hung', async () => {
    const { peer, client } = await setup({ keepaliveMs: 150, keepaliveTimeoutMs: 500, requestTimeoutMs: 30_000 }, 'slow');
    peer.slowMs = 1800;
    const r = await timed(client.request('fsync', { h: 1 }));
    expect(r.err).toBeNull();
    expect(r.value).toEqual({ late: true });
    expect(r.ms).toBeGreaterThanOrEqual(1700);
    expect(peer.pings).toBeGreaterThanOrEqual(5);
    expect(client.isOpen).toBe(true);
  });

  it('any frame counts as an answer: pushes keep a session alive without pongs', async () => {
    const { client } = await setup({ keepaliveMs: 100, keepaliveTimeoutMs: 500, requestTimeoutMs: 30_000 }, 'pushes');
    const r = await timed(client.request('readdirp', { node: 1 }, { cookie: 0, max: 10 }));
    expect(r.err).toBeNull();
    expect(r.value).toEqual({ after_pushes: true });
    expect(r.ms).toBeGreaterThan(1000);
    expect(client.isOpen).toBe(true);
  });

  it('an idle session sends no pings and is not dropped, even by a node that stopped answering', async () => {
    const { peer, client } = await setup({ keepaliveMs: 100, keepaliveTimeoutMs: 300 });
    await client.request('getattr', { node: 1 });
    peer.mode = 'hung';
    const before = peer.pings;
    await new Promise((r) => setTimeout(r, 1000));
    expect(peer.pings).toBe(before);
    expect(client.isOpen).toBe(true);
    // the next request finds out
    await expect(client.request('getattr', { node: 1 })).rejects.toMatchObject({ reason: 'hung' });
  });

  it('a request the node never answers, on a session that answers pings, ends at requestTimeoutMs and the session stays', async () => {
    const { peer, client } = await setup({ keepaliveMs: 100, keepaliveTimeoutMs: 300, requestTimeoutMs: 900 }, 'no-reply');
    const r = await timed(client.request('read', { h: 1 }, { off: 0, len: 10 }));
    expect(r.err).toMatchObject({ reason: 'timeout', message: `no reply from ${peer.url} within 900 ms` });
    expect(r.ms).toBeGreaterThanOrEqual(850);
    expect(client.isOpen).toBe(true);
    expect(client.pendingCount).toBe(0);
  });

  it('keepaliveMs 0 turns the pings off', async () => {
    const { peer, client } = await setup({ keepaliveMs: 0, keepaliveTimeoutMs: 200, requestTimeoutMs: 800 }, 'no-reply');
    const r = await timed(client.request('read', { h: 1 }, { off: 0, len: 10 }));
    expect(r.err).toMatchObject({ reason: 'timeout' });
    expect(peer.pings).toBe(0);
    expect(client.isOpen).toBe(true);
  });
});

describe('FsClient.connect', () => {
  it('connect and hello share one limit: a node that accepts but never says hello fails at connectTimeoutMs', async () => {
    const peer = await startPeer('mute-hello');
    peers.push(peer);
    const r = await timed(FsClient.connect({ url: peer.url, connectTimeoutMs: 800, keepaliveTimeoutMs: 10_000 }));
    expect(r.err).toBeInstanceOf(ConnectionError);
    expect(r.err).toMatchObject({ reason: 'timeout', message: `no answer from ${peer.url} within 800 ms (connect and hello)` });
    expect(r.ms).toBeGreaterThanOrEqual(750);
    expect(r.ms).toBeLessThan(1500);
  });
});
