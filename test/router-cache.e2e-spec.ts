/**
 * e2e: the router's lookup cache against a real `svc-fs-node`, counted with
 * the node's own `svc_fs_ops_total`: a lookup of a missing name below a cached directory costs
 * one lookup and one check of the directory, and keeps the cache; a path removed and created
 * again through another session is found again; candidates reordered with the serving node
 * kept (two online nodes alternating by lease expiry) cost no reconnect and no cache.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { FsClient } from '../libs/client/src';
import { Errno, OpenFlags } from '../libs/protocol/src';
import { parseEndpointSpec, StaticTopologySource, topologyFromEndpoints, TopologyChange, WorkspaceRouter } from '../libs/fs/src/router';
import { cleanupTmp, killAll, Running, tmpDir } from './support/processes';
import { startFsNode } from './helpers/fs-peer';

// eslint-disable-next-line @typescript-eslint/no-require-imports -- the package has no types; the cast gives the part used here
const parsePrometheus = require('parse-prometheus-text-format') as (
  text: string,
) => Array<{ name: string; metrics: Array<{ value?: string; labels?: Record<string, string> }> }>;

let node: Running;
let work: string;
let router: WorkspaceRouter;

/** `svc_fs_ops_total` by op (all results) of `of` (default: the first node). */
async function opCounts(of: Running = node): Promise<Record<string, number>> {
  const text = await (await fetch(`${of.opsUrl}/metrics`)).text();
  const counts: Record<string, number> = {};
  for (const m of parsePrometheus(text).find((f) => f.name === 'svc_fs_ops_total')?.metrics ?? []) {
    const op = m.labels!.op;
    counts[op] = (counts[op] ?? 0) + Number(m.value);
  }
  return counts;
}

async function delta(fn: () => Promise<unknown>, of: Running = node): Promise<Record<string, number>> {
  const before = await opCounts(of);
  await fn();
  const after = await opCounts(of);
  const d: Record<string, number> = {};
  for (const [op, n] of Object.entries(after)) if (n !== (before[op] ?? 0)) d[op] = n - (before[op] ?? 0);
  return d;
}

beforeAll(async () => {
  work = tmpDir('router-cache-');
  mkdirSync(join(work, 'd', 'e'), { recursive: true });
  writeFileSync(join(work, 'd', 'e', 'f.txt'), 'f');
  node = await startFsNode([`work=${work}`], { env: { SVC_METRICS_PORT: '0' } });
  router = new WorkspaceRouter(new StaticTopologySource([parseEndpointSpec(`w=${node.url}#work@/w`)]));
  await router.start();
});

afterAll(async () => {
  router?.close();
  await killAll();
  cleanupTmp();
});

it('a missing name below a cached directory costs one lookup (and one check of the directory without dir_estale), and keeps the cache', async () => {
  await router.getattr('/w/d/e/f.txt');
  const misses = await delta(async () => {
    for (let i = 0; i < 10; i++) await expect(router.getattr(`/w/d/e/missing-${i}`)).rejects.toMatchObject({ errno: Errno.ENOENT });
  });
  // The node says itself that the directory is there (dir_estale) unless one side has the extensions off.
  const told = ![process.env.SVC_FS_CLIENT_FEATURES, process.env.SVC_FS_NODE_FEATURES].includes('none');
  expect(misses).toEqual(told ? { lookup: 10 } : { lookup: 10, getattr: 10 });
  // the cached path still resolves without a lookup
  expect(await delta(() => router.getattr('/w/d/e/f.txt'))).toEqual({ getattr: 1 });
});

it('finds a path again after another session removed and re-created it through the node', async () => {
  await router.getattr('/w/d/e/f.txt');
  const other = await FsClient.connect({ url: node.url });
  try {
    const { exports } = await other.request('exports');
    const rootId = exports.find((x) => x.name === 'work')!.root;
    const d = (await other.request('lookup', { node: rootId }, { name: 'd' })).attr.id;
    const e = (await other.request('lookup', { node: d }, { name: 'e' })).attr.id;
    await other.request('unlink', { node: e }, { name: 'f.txt' });
    await other.request('rmdir', { node: d }, { name: 'e' });
    await other.request('mkdir', { node: d }, { name: 'e', mode: 0o755 });
    const e2 = (await other.request('lookup', { node: d }, { name: 'e' })).attr.id;
    expect(e2).not.toBe(e);
    const created = await other.request('create', { node: e2 }, { name: 'f.txt', mode: 0o644, flags: OpenFlags.O_WRONLY });
    await other.request('close', { h: created.h });
  } finally {
    other.close();
  }
  expect((await router.getattr('/w/d/e/f.txt')).k).toBeDefined();
  await expect(router.getattr('/w/d/e/missing')).rejects.toMatchObject({ errno: Errno.ENOENT });
});

it('keeps its endpoint and cache when the candidates of a mount are only reordered', async () => {
  writeFileSync(join(work, 'd', 'g.txt'), 'g');
  const second = await startFsNode([`work=${work}`], { env: { SVC_METRICS_PORT: '0' } });
  const specs = [parseEndpointSpec(`a=${node.url}#work@/s`), parseEndpointSpec(`b=${second.url}#work@/s`)];
  /** A topology source the test drives: candidates a then b, later b then a. */
  class Driven extends StaticTopologySource {
    push(order: typeof specs): void {
      this.current = topologyFromEndpoints(order);
      this.emit('topology', this.current);
    }
  }
  const source = new Driven(specs);
  const r = new WorkspaceRouter(source);
  const changes: TopologyChange[] = [];
  r.on('topology', (c: TopologyChange) => changes.push(c));
  await r.start();
  try {
    await r.getattr('/s/d/g.txt');
    const seen = changes.length;
    source.push([specs[1], specs[0]]);
    // no change to report: nothing that was learnt through the mount is stale
    expect(changes.slice(seen).flatMap((c) => [...c.added, ...c.removed, ...c.changed])).toEqual([]);
    const onSecond = await delta(async () => {
      expect(await delta(() => r.getattr('/s/d/g.txt'))).toEqual({ getattr: 1 });
    }, second);
    expect(onSecond).toEqual({});
  } finally {
    r.close();
  }
});
