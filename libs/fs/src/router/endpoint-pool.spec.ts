/**
 * EndpointPool and hung endpoints, against tiny real `ws` nodes
 * (test/helpers/stub-fs-node.ts): a hung endpoint fails at once instead of costing a connect
 * timeout per call, is reconnected in the background, and serves again by itself once it
 * answers; a connect cut short by an operation's deadline, or a refused one, is not "hung".
 */
// jest's own typed expect: its asymmetric matchers (expect.stringContaining) are not `any`
import { expect } from '@jest/globals';
import { performance } from 'node:perf_hooks';
import { ConnectionError } from '@svc/client';
import { startStubNode, StubNode } from '../../../../test/helpers/stub-fs-node';
import { EndpointPool, EndpointSession } from './endpoint-pool';

const nodes: StubNode[] = [];
const pools: EndpointPool[] = [];
afterEach(async () => {
  for (const p of pools.splice(0)) p.close();
  await Promise.all(nodes.splice(0).map((n) => n.close()));
});

async function node(): Promise<StubNode> {
  const n = await startStubNode();
  nodes.push(n);
  return n;
}

function pool(options: ConstructorParameters<typeof EndpointPool>[0] = {}): EndpointPool {
  const p = new EndpointPool({ connectTimeoutMs: 600, keepaliveMs: 100, keepaliveTimeoutMs: 400, probeIntervalMs: 200, ...options });
  pools.push(p);
  return p;
}

async function timedReject(p: Promise<unknown>): Promise<{ err: unknown; ms: number }> {
  const t0 = performance.now();
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  return { err, ms: performance.now() - t0 };
}

describe('EndpointPool: hung endpoints', () => {
  it('a session found hung makes the endpoint fail at once, then serve again by itself once it answers', async () => {
    const n = await node();
    const p = pool();
    const hung: string[] = [];
    p.on('hung', (key: string) => hung.push(key));
    const s1 = await p.get(n.url);
    expect(await s1.client.request('statfs', { node: 1 })).toEqual({ ok: 'statfs' });
    n.mode = 'hung';
    await expect(s1.client.request('getattr', { node: 1 })).rejects.toMatchObject({ reason: 'hung' });
    expect(hung).toEqual([`${n.url}\n`]);
    expect(p.isHung(n.url)).toBe(true);
    // every later call fails at once: no connect timeout per call
    for (let i = 0; i < 3; i++) {
      const r = await timedReject(p.get(n.url, undefined, 5000));
      expect(r.err).toBeInstanceOf(ConnectionError);
      expect(r.err).toMatchObject({
        reason: 'hung',
        sent: false,
        message: expect.stringMatching(/^no answer from .* within 400 ms \(hung for [\d.]+ s; reconnecting in the background\)$/),
      });
      expect(r.ms).toBeLessThan(50);
    }
    // the node answers again: a background reconnect brings a new session, without a call
    const recovered = new Promise<EndpointSession>((r) => p.once('recovered', r));
    n.mode = 'normal';
    const s2 = await recovered;
    expect(p.isHung(n.url)).toBe(false);
    expect(s2).not.toBe(s1);
    expect(await p.get(n.url)).toBe(s2);
    expect(await s2.client.request('statfs', { node: 1 })).toEqual({ ok: 'statfs' });
  });

  it('a whole connect timeout marks the endpoint hung; one cut short by a caller deadline does not', async () => {
    const n = await node();
    n.mode = 'hung';
    const p = pool({ connectTimeoutMs: 500, probeIntervalMs: 60_000 });
    const short = await timedReject(p.get(n.url, undefined, 150));
    expect(short.err).toMatchObject({ reason: 'timeout', message: `no answer from ${n.url} within 150 ms (connect)` });
    expect(short.ms).toBeLessThan(450);
    expect(p.isHung(n.url)).toBe(false);
    const full = await timedReject(p.get(n.url, undefined, 5000));
    expect(full.err).toMatchObject({ reason: 'timeout', message: `no answer from ${n.url} within 500 ms (connect)` });
    expect(full.ms).toBeGreaterThanOrEqual(450);
    expect(p.isHung(n.url)).toBe(true);
    expect((await timedReject(p.get(n.url))).err).toMatchObject({ reason: 'hung' });
  });

  it('a refused endpoint is not hung (it fails fast by itself)', async () => {
    const n = await node();
    const url = n.url;
    await n.close();
    nodes.splice(0);
    const p = pool();
    const r = await timedReject(p.get(url));
    expect(r.err).toMatchObject({ reason: 'unreachable' });
    expect(p.isHung(url)).toBe(false);
  });

  it('a hung endpoint nobody asks for is no longer probed after probeIdleMs', async () => {
    const n = await node();
    const p = pool({ probeIdleMs: 300 });
    const s = await p.get(n.url);
    n.mode = 'hung';
    await expect(s.client.request('getattr', { node: 1 })).rejects.toMatchObject({ reason: 'hung' });
    expect(p.isHung(n.url)).toBe(true);
    await new Promise((r) => setTimeout(r, 1500));
    expect(p.isHung(n.url)).toBe(false);
    const sessionsBefore = n.sessions;
    n.mode = 'normal';
    await new Promise((r) => setTimeout(r, 600));
    expect(n.sessions).toBe(sessionsBefore); // nothing reconnects in the background any more
    expect(await p.get(n.url)).toBeInstanceOf(EndpointSession); // a call connects in the foreground
  });
});
