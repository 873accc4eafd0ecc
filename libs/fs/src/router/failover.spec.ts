/**
 * The router's deadlines with hung nodes, on tiny real `ws` nodes
 * (test/helpers/stub-fs-node.ts) in endpoint mode: a hung primary fails over within the
 * keepalive limit; a hung only-node is EIO at once after it was found hung and serves again
 * by itself; connect timeouts and retries of one operation never add up past its deadline.
 */
import { performance } from 'node:perf_hooks';
import { Errno, FsError } from '@svc/protocol/wire';
import { startStubNode, StubNode } from '../../../../test/helpers/stub-fs-node';
import { parseEndpointSpec, topologyFromEndpoints } from './topology';
import { StaticTopologySource } from './topology-source';
import { FailoverEvent, WorkspaceRouter, WorkspaceRouterOptions } from './workspace-router';

const nodes: StubNode[] = [];
const routers: WorkspaceRouter[] = [];
afterEach(async () => {
  for (const r of routers.splice(0)) r.close();
  await Promise.all(nodes.splice(0).map((n) => n.close()));
});

async function node(size: number): Promise<StubNode> {
  const n = await startStubNode();
  n.size = size;
  nodes.push(n);
  return n;
}

const FAST: WorkspaceRouterOptions = { connectTimeoutMs: 1000, keepaliveMs: 150, keepaliveTimeoutMs: 600, opDeadlineMs: 1500, requestTimeoutMs: 30_000 };

async function router(specs: string[], options: WorkspaceRouterOptions = FAST): Promise<WorkspaceRouter> {
  const r = new WorkspaceRouter(new StaticTopologySource(specs.map((s) => parseEndpointSpec(s))), options);
  routers.push(r);
  await r.start();
  return r;
}

/** Settles `p`: its value or error, and the time it took, ms. */
async function timed<T>(p: Promise<T>): Promise<{ value?: T; err?: unknown; ms: number }> {
  const t0 = performance.now();
  try {
    return { value: await p, ms: performance.now() - t0 };
  } catch (err) {
    return { err, ms: performance.now() - t0 };
  }
}

describe('failover with hung nodes', () => {
  it('a primary that stops answering on an open session: the standby answers within the keepalive limit', async () => {
    const a = await node(1);
    const b = await node(2);
    const r = await router([`p=${a.url}@/s`, `q=${b.url}@/s`]);
    const events: FailoverEvent[] = [];
    r.on('failover', (e: FailoverEvent) => events.push(e));
    expect((await r.getattr('/s/f')).sz).toBe(1);
    a.mode = 'hung';
    const t = await timed(r.getattr('/s/g'));
    expect(t.value?.sz).toBe(2);
    expect(t.ms).toBeGreaterThanOrEqual(550);
    expect(t.ms).toBeLessThan(1500);
    expect(events).toEqual([expect.objectContaining({ mount_path: '/s', cause: `no answer from ${a.url} within 600 ms` })]);
    const st = r.describe()[0].candidates;
    expect(st.map((c) => c.active)).toEqual([false, true]);
    expect(st[0].last_error).toBe(`no answer from ${a.url} within 600 ms`);
    // the next operations go to the standby at once
    const next = await timed(r.getattr('/s/h'));
    expect(next.value?.sz).toBe(2);
    expect(next.ms).toBeLessThan(200);
  });

  it('a read on a read-only handle whose node stops answering continues on the standby within the keepalive limit', async () => {
    const a = await node(1);
    const b = await node(2);
    const r = await router([`p=${a.url}@/s`, `q=${b.url}@/s`]);
    const { fh } = await r.open('/s/f');
    expect((await r.read(fh, 0, 100)).data.toString()).toBe('size 1');
    a.mode = 'hung';
    const t = await timed(r.read(fh, 0, 100));
    expect(t.value?.data.toString()).toBe('size 2');
    expect(t.ms).toBeLessThan(1500);
  });

  it('the only node stops answering: EIO within the keepalive limit, then at once every time; it serves again by itself', async () => {
    const a = await node(7);
    const r = await router([`p=${a.url}@/s`]);
    expect((await r.getattr('/s/f')).sz).toBe(7);
    a.mode = 'hung';
    const first = await timed(r.getattr('/s/g'));
    expect(first.err).toBeInstanceOf(FsError);
    expect((first.err as FsError).errno).toBe(Errno.EIO);
    expect((first.err as Error).message).toContain(`no answer from ${a.url} within 600 ms`);
    expect(first.ms).toBeLessThan(1500);
    for (let i = 0; i < 3; i++) {
      const again = await timed(r.getattr(`/s/again-${i}`));
      expect((again.err as FsError).errno).toBe(Errno.EIO);
      expect((again.err as Error).message).toMatch(
        /^mount \/s is unavailable \(1 candidate tried\): p \(.*\): no answer from .* within 600 ms \(hung for [\d.]+ s; reconnecting in the background\)$/,
      );
      expect(again.ms).toBeLessThan(100);
    }
    a.mode = 'normal';
    // no call needed in between: the pool reconnects in the background
    await new Promise((res) => setTimeout(res, 2000));
    const back = await timed(r.getattr('/s/back'));
    expect(back.value?.sz).toBe(7);
    expect(back.ms).toBeLessThan(200);
  });

  it('connect timeouts of one operation do not add up: two hung candidates give EIO by the operation deadline', async () => {
    const a = await node(1);
    const b = await node(2);
    a.mode = 'hung';
    b.mode = 'hung';
    const r = await router([`p=${a.url}@/s`, `q=${b.url}@/s`]);
    const t = await timed(r.getattr('/s/f'));
    expect((t.err as FsError).errno).toBe(Errno.EIO);
    // A gets its whole connect timeout (1000 ms), B what is left of the 1500 ms
    expect((t.err as Error).message).toMatch(
      new RegExp(`p \\(.*\\): no answer from ${a.url} within 1000 ms \\(connect\\); q \\(.*\\): no answer from ${b.url} within \\d+ ms \\(connect\\)$`),
    );
    expect(t.ms).toBeGreaterThanOrEqual(1400);
    expect(t.ms).toBeLessThan(1900);
  });

  it('a retry after a failover is cut at the operation deadline when the next candidate does not answer either', async () => {
    const a = await node(1);
    const b = await node(2);
    // /t keeps a session to B open, so the retry of /s on B needs no connect
    const r = await router([`p=${a.url}@/s`, `q=${b.url}@/s`, `q=${b.url}@/t`], { ...FAST, keepaliveTimeoutMs: 1000 });
    expect((await r.getattr('/s/f')).sz).toBe(1);
    expect((await r.getattr('/t/f')).sz).toBe(2);
    a.mode = 'hung';
    b.mode = 'hung';
    const t = await timed(r.getattr('/s/g'));
    expect((t.err as FsError).errno).toBe(Errno.EIO);
    expect((t.err as Error).message).toBe('/s: no answer within the operation deadline of 1500 ms');
    // A is found hung at 1000 ms; B's keepalive alone would take until 2000 ms: cut at 1500 ms
    expect(t.ms).toBeGreaterThanOrEqual(1400);
    expect(t.ms).toBeLessThan(1900);
  });

  it('a busy node that answers pings is not failed over, however long the reply takes', async () => {
    const a = await node(1);
    const b = await node(2);
    const r = await router([`p=${a.url}@/s`, `q=${b.url}@/s`]);
    const { fh } = await r.open('/s/f');
    a.mode = 'slow';
    a.slowMs = 2500;
    const t = await timed(r.read(fh, 0, 10));
    expect(t.err).toBeUndefined();
    expect(t.ms).toBeGreaterThanOrEqual(2400);
    expect(r.describe()[0].candidates.map((c) => c.active)).toEqual([true, false]);
  });
});

describe('topology updates while a mount connects', () => {
  it('uses the endpoint just reached when a delta rebuilt the candidate list meanwhile', async () => {
    const a = await node(1);
    const specs = [`p=${a.url}@/s`];
    const src = new StaticTopologySource(specs.map((s) => parseEndpointSpec(s)));
    const r = new WorkspaceRouter(src, FAST);
    routers.push(r);
    await r.start();
    const pending = timed(r.getattr('/s/f'));
    // while the connect to p is under way: a new list (new objects) that still holds p
    const next = topologyFromEndpoints([...specs, 'q=ws://127.0.0.1:1/v2/fs@/s'].map((s) => parseEndpointSpec(s)));
    (src as unknown as { current: typeof next }).current = next;
    src.emit('topology', next);
    const t = await pending;
    expect(t.err).toBeUndefined();
    expect(t.value?.sz).toBe(1);
  });
});
