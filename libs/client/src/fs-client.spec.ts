/**
 * FsClient keepalive and deadlines against a tiny real `ws` node
 * (test/helpers/stub-fs-node.ts) that can stop answering altogether (no replies, no pongs: a
 * SIGSTOPped node), answer late while still answering pings (a busy node), or push without
 * ponging.
 */
// jest's own typed expect: its asymmetric matchers (expect.stringContaining) are not `any`
import { expect } from '@jest/globals';
import { performance } from 'node:perf_hooks';
import { StubMode as Mode, StubNode as Peer, startStubNode as startPeer } from '../../../test/helpers/stub-fs-node';
import { ConnectionError } from './connection-error';
import { FsClient } from './fs-client';

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
    expect(await client.request('statfs', { node: 1 })).toEqual({ ok: 'statfs' });
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
    await expect(client.request('getattr', { node: 1 })).rejects.toMatchObject({
      reason: 'closed',
      sent: false,
      message: expect.stringContaining('no answer from'),
    });
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

  it('a large reply arriving slowly counts as an answer (bytes, not only whole frames)', async () => {
    const { client } = await setup({ keepaliveMs: 100, keepaliveTimeoutMs: 500, requestTimeoutMs: 30_000 }, 'trickle');
    const r = await timed(client.request('readdirp', { node: 1 }, { cookie: 0, max: 10 }));
    expect(r.err).toBeNull();
    expect((r.value as { pad: string }).pad).toHaveLength(200_000);
    expect(r.ms).toBeGreaterThan(1800);
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

  it('a node that accepts the connection but never answers the upgrade fails at connectTimeoutMs', async () => {
    const peer = await startPeer('hung');
    peers.push(peer);
    const r = await timed(FsClient.connect({ url: peer.url, connectTimeoutMs: 600 }));
    expect(r.err).toMatchObject({ reason: 'timeout', message: `no answer from ${peer.url} within 600 ms (connect)` });
    expect(r.ms).toBeLessThan(1500);
  });
});
