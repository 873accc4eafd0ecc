/**
 * e2e: fewer round trips per small file, as negotiated FS extensions
 * (docs/protocol.md "FS extensions"), over real processes, WebSockets, files and FUSE mounts.
 *
 * - The wire: `open_read` and `prefetch` granted or not (`--fs-features`), byte-exact on the
 *   JSON and binary data paths, bounded, confined, counted in `svc_fs_bytes_read_total`, and
 *   followed by the node's invalidation pushes.
 * - Round trips: a cold `cat` of a small file is one FS request after lookup (FUSE and
 *   `svc-fs-mount cat`); reading a directory of small files in order costs a few requests.
 * - Coherence: a file changed, truncated, replaced by rename or deleted on the node's disk or
 *   through another mount is seen with its new content through the mount within 2 s, a file
 *   that was prefetched and never opened included; a prefetch never reads outside the export.
 * - Bounded prefetch: `ls -la` and `find` of 5,000 small files read no file content; `cat` of
 *   one of them reads at most one batch.
 * - Extensions off on either side: the mount still works.
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { Errno, OpenFlags } from '../libs/protocol/src';
// eslint-disable-next-line @typescript-eslint/no-require-imports -- the package has no types; the cast gives the part used here
const parsePrometheus = require('parse-prometheus-text-format') as (
  text: string,
) => Array<{ name: string; metrics: Array<{ value?: string; labels?: Record<string, string> }> }>;
import { FsPeer, startFsNode } from './helpers/fs-peer';
import { fuseUnavailable, killMount, runMount } from './helpers/fs-mount';
import { parseEndpointSpec, StaticTopologySource, WorkspaceRouter } from '../libs/fs/src/router';
import { BIN, cleanupTmp, killAll, Running, sleep, tmpDir, waitFor } from './support/processes';

const FEATURES = ['open_read', 'prefetch'];
/** Environment of a node granting every extension, whatever the test run's own setting. */
const ALL_FEATURES = { SVC_FS_NODE_FEATURES: 'all', SVC_METRICS_PORT: '0' };

const peers: FsPeer[] = [];

async function connect(url: string, options: { binary?: boolean; features?: string[] } = {}): Promise<FsPeer> {
  const p = await FsPeer.connect(url, options);
  peers.push(p);
  return p;
}

/** A counter of the node's Prometheus metrics (summed over its label sets). */
async function counter(node: Running, name: string, labels: Record<string, string> = {}): Promise<number> {
  // A new connection each time: a kept-alive one the server closes meanwhile fails the fetch.
  const text = await (await fetch(`${node.opsUrl}/metrics`, { headers: { connection: 'close' } })).text();
  const family = parsePrometheus(text).find((f) => f.name === name);
  return (family?.metrics ?? []).filter((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v)).reduce((s, m) => s + Number(m.value ?? 0), 0);
}

/** Requests answered by `node` for each FS op (`svc_fs_ops_total`, all results). */
async function ops(node: Running): Promise<Record<string, number>> {
  const text = await (await fetch(`${node.opsUrl}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const m of parsePrometheus(text).find((f) => f.name === 'svc_fs_ops_total')?.metrics ?? []) {
    const op = m.labels?.op ?? '';
    out[op] = (out[op] ?? 0) + Number(m.value ?? 0);
  }
  return out;
}

/** What changed between two {@link ops} readings (ops that did not move are left out). */
function opsDelta(after: Record<string, number>, before: Record<string, number>): Record<string, number> {
  const d: Record<string, number> = {};
  for (const [op, n] of Object.entries(after)) if (n !== (before[op] ?? 0)) d[op] = n - (before[op] ?? 0);
  return d;
}

const reason = fuseUnavailable();
if (reason) process.stdout.write(`FUSE e2e tests skipped: ${reason}\n`);
const describeFuse = reason ? describe.skip : describe;

interface Mount {
  proc: ChildProcess;
  /** Where the node's export `work` is seen. */
  dir: string;
  mnt: string;
}
const mounts: Mount[] = [];

/** `svc-fs-mount --endpoint w=URL#work@/w [args] mount MNT`; the export is at `<mnt>/w`. */
async function startMount(url: string, args: string[] = [], env: NodeJS.ProcessEnv = {}): Promise<Mount> {
  const mnt = join(tmpDir('svc-small-mnt-'), 'm');
  fs.mkdirSync(mnt);
  const proc = spawn(process.execPath, [BIN.fsMount, '--endpoint', `w=${url}#work@/w`, ...args, 'mount', mnt, '--attr-ttl-ms', '1000'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, SVC_LOG_LEVEL: 'warn', ...env },
  });
  let out = '';
  let err = '';
  proc.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  proc.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  const m = { proc, dir: join(mnt, 'w'), mnt };
  mounts.push(m);
  await waitFor(() => out.includes(`mounted on ${mnt}`), 20_000).catch((e) => {
    throw new Error(`${(e as Error).message}\nstdout: ${out}\nstderr: ${err}`);
  });
  return m;
}

afterAll(async () => {
  for (const p of peers) p.close();
  for (const m of mounts) killMount(m.proc, m.mnt);
  await killAll();
  cleanupTmp();
});

describe('the extensions on the wire (svc-fs-node)', () => {
  let work: string;
  let outside: string;
  let node: Running;
  let bare: Running;
  const content = new Map<string, Buffer>();

  beforeAll(async () => {
    const base = tmpDir('svc-small-wire-');
    work = join(base, 'work');
    outside = join(base, 'outside');
    fs.mkdirSync(join(work, 'many'), { recursive: true });
    fs.mkdirSync(outside);
    fs.writeFileSync(join(outside, 'secret.txt'), 'SECRET outside the export\n');
    for (let i = 0; i < 50; i++) {
      const data = randomBytes(1 + ((i * 397) % 3000));
      content.set(`f${String(i).padStart(3, '0')}`, data);
      fs.writeFileSync(join(work, 'many', `f${String(i).padStart(3, '0')}`), data);
    }
    fs.writeFileSync(join(work, 'big.bin'), randomBytes(3 * 1024 * 1024 + 17));
    fs.symlinkSync(join(outside, 'secret.txt'), join(work, 'many', 'zz-out'));
    fs.mkdirSync(join(work, 'many', 'zz-dir'));
    [node, bare] = await Promise.all([
      startFsNode([`work=${work}`], { env: ALL_FEATURES }),
      startFsNode([`work=${work}`], { args: ['--fs-features', 'none'], env: ALL_FEATURES }),
    ]);
  });

  it('dir_estale: ENOENT below a directory is about the entry; a directory gone from disk is ESTALE (ENOENT without the extension)', async () => {
    fs.mkdirSync(join(work, 'doomed'));
    const [p, base] = await Promise.all([connect(node.url, { features: ['dir_estale'] }), connect(node.url)]);
    expect(p.hello.caps.features).toEqual(['dir_estale']);
    const ids = await Promise.all([p, base].map(async (x) => (await x.walk(await x.root('work'), 'doomed')).id as number));
    expect(await p.errno('lookup', { node: ids[0] }, { name: 'nothing-here' })).toBe(Errno.ENOENT);
    fs.rmdirSync(join(work, 'doomed'));
    expect(await p.errno('lookup', { node: ids[0] }, { name: 'nothing-here' })).toBe(Errno.ESTALE);
    expect(await p.errno('create', { node: ids[0] }, { name: 'f', mode: 0o644, flags: OpenFlags.O_RDWR })).toBe(Errno.ESTALE);
    expect(await base.errno('lookup', { node: ids[1] }, { name: 'nothing-here' })).toBe(Errno.ENOENT);
    // An id the node never gave out is a directory that is gone, too.
    expect(await p.errno('lookup', { node: 987654 }, { name: 'x' })).toBe(Errno.ESTALE);
    expect(await base.errno('lookup', { node: 987654 }, { name: 'x' })).toBe(Errno.ENOENT);
  });

  it('grants the extensions asked for; a node started with --fs-features none grants none and answers as before', async () => {
    const p = await connect(node.url, { features: [...FEATURES, 'no-such-extension'] });
    expect(p.hello.caps.features).toEqual(FEATURES);
    expect((await connect(node.url)).hello.caps.features).toEqual([]);
    const b = await connect(bare.url, { binary: true, features: FEATURES });
    expect(b.hello.caps.features).toEqual([]);
    const root = await b.root('work');
    const f = await b.walk(root, 'many/f001');
    // `read` is ignored like any unknown member: a plain open reply, the handle open.
    const r = await b.call('open', { node: f.id }, { flags: OpenFlags.O_RDONLY, read: 4096, close_at_eof: true });
    expect(Object.keys(r).sort()).toEqual(['caps', 'gen', 'h']);
    await b.call('close', { h: r.h });
    const err = await b.send('prefetch', { node: root }, { names: ['big.bin'] });
    expect(err.error).toMatchObject({ errno: Errno.ENOSYS, code: 'unknown_type' });
  });

  it.each([
    ['JSON', false],
    ['binary', true],
  ])('open_read returns a small file whole and closed in one round trip, byte-exact (%s)', async (_label, binary) => {
    const p = await connect(node.url, { binary, features: FEATURES });
    const f = await p.walk(await p.root('work'), 'many/f007');
    const want = content.get('f007')!;
    const before = await counter(node, 'svc_fs_bytes_read_total');
    const opensBefore = await counter(node, 'svc_fs_ops_total', { op: 'open' });
    const r = await p.call('open', { node: f.id }, { flags: OpenFlags.O_RDONLY, read: 128 * 1024, close_at_eof: true });
    const data: Buffer = binary ? r.data : Buffer.from(r.data_b64, 'base64');
    expect(data.equals(want)).toBe(true);
    expect(r).toMatchObject({ h: 0, closed: true, eof: true, n: want.length, attr: { id: f.id, k: 1, sz: want.length } });
    expect(await counter(node, 'svc_fs_bytes_read_total')).toBe(before + want.length);
    expect(await counter(node, 'svc_fs_ops_total', { op: 'open' })).toBe(opensBefore + 1);
    expect(await counter(node, 'svc_fs_open_handles')).toBe(0);
  });

  it('open_read of a large file returns the first block and an open handle for the rest', async () => {
    const p = await connect(node.url, { binary: true, features: FEATURES });
    const f = await p.walk(await p.root('work'), 'big.bin');
    const disk = fs.readFileSync(join(work, 'big.bin'));
    const r = await p.call('open', { node: f.id }, { flags: OpenFlags.O_RDONLY, read: 2 * 1024 * 1024, close_at_eof: true });
    expect(r).toMatchObject({ n: 1024 * 1024, eof: false });
    expect(r.h).toBeGreaterThan(0);
    const parts: Buffer[] = [r.data];
    for (let off = r.n as number, eof = false; !eof;) {
      const more = await p.call('read', { h: r.h }, { off, len: 1024 * 1024 });
      parts.push(more.data);
      off += more.data.length;
      eof = more.eof;
    }
    expect(Buffer.concat(parts).equals(disk)).toBe(true);
    await p.call('close', { h: r.h });
    expect((await p.send('open', { node: f.id }, { flags: OpenFlags.O_WRONLY, read: 10 })).error?.errno).toBe(Errno.EINVAL);
  });

  it.each([
    ['JSON', false],
    ['binary', true],
  ])('prefetch returns a directory of small files in one request, byte-exact, never through a symlink or outside (%s)', async (_label, binary) => {
    const p = await connect(node.url, { binary, features: FEATURES });
    const dir = (await p.walk(await p.root('work'), 'many')).id;
    const names = [...content.keys(), 'zz-out', 'zz-dir', '../big.bin'];
    const before = await counter(node, 'svc_fs_bytes_read_total');
    const total = [...content.values()].reduce((s, d) => s + d.length, 0);
    const r = await p.send('prefetch', { node: dir }, { names, max_file: 64 * 1024, max_total: 4 * 1024 * 1024 });
    expect(r.ok).toBe(true);
    const files = r.payload.files as Array<{ name: string; n?: number; errno?: number; attr?: { sz: number }; data_b64?: string }>;
    expect(files.map((f) => f.name)).toEqual(names);
    let at = 0;
    for (const f of files.slice(0, content.size)) {
      const data = binary ? r.data!.subarray(at, (at += f.n!)) : Buffer.from(f.data_b64!, 'base64');
      expect({ name: f.name, same: data.equals(content.get(f.name)!) }).toEqual({ name: f.name, same: true });
      expect(f.attr?.sz).toBe(content.get(f.name)!.length);
    }
    expect(files.slice(content.size).map((f) => [f.name, f.errno])).toEqual([
      ['zz-out', Errno.ELOOP],
      ['zz-dir', Errno.EISDIR],
      ['../big.bin', Errno.EINVAL],
    ]);
    expect(r.payload.n).toBe(total);
    if (binary) expect(r.data!.length).toBe(total);
    expect(JSON.stringify(r.payload)).not.toContain(Buffer.from('SECRET').toString('base64').slice(0, 8));
    expect(await counter(node, 'svc_fs_bytes_read_total')).toBe(before + total);
    expect(await counter(node, 'svc_fs_open_handles')).toBe(0);
  });

  it('prefetch stops at max_total and max_file, and refuses a malformed payload (EINVAL)', async () => {
    const p = await connect(node.url, { binary: true, features: FEATURES });
    const dir = (await p.walk(await p.root('work'), 'many')).id;
    const before = await counter(node, 'svc_fs_bytes_read_total');
    const r = await p.call('prefetch', { node: dir }, { names: [...content.keys()], max_file: 2000, max_total: 10_000 });
    const files = r.files as Array<{ name: string; n?: number; skip?: string }>;
    const read = files.filter((f) => f.n !== undefined).reduce((s, f) => s + f.n!, 0);
    expect(read).toBeLessThanOrEqual(10_000);
    expect(files.filter((f) => f.skip === 'size').every((f) => content.get(f.name)!.length > 2000)).toBe(true);
    const firstTotal = files.findIndex((f) => f.skip === 'total');
    expect(firstTotal).toBeGreaterThan(0);
    expect(files.slice(firstTotal).every((f) => f.skip === 'total' || f.skip === 'size')).toBe(true);
    expect(await counter(node, 'svc_fs_bytes_read_total')).toBe(before + read);
    for (const bad of [{ names: 'f001' }, { names: [1] }, { names: ['a'], max_total: -1 }, { names: Array.from({ length: 1025 }, () => 'a') }, {}]) {
      expect((await p.send('prefetch', { node: dir }, bad)).error?.errno).toBe(Errno.EINVAL);
    }
  });

  it('pushes e_fs_inval for a prefetched file changed on disk (the session saw it)', async () => {
    const p = await connect(node.url, { binary: true, features: FEATURES });
    const dir = (await p.walk(await p.root('work'), 'many')).id;
    const r = await p.call('prefetch', { node: dir }, { names: ['f010', 'f011'] });
    const id = r.files[1].attr.id as number;
    const from = p.pushes.length;
    fs.appendFileSync(join(work, 'many', 'f011'), 'more');
    const push = await p.waitPush('acheron.e_fs_inval', (e) => e.node === id, 2000, from);
    expect(push.payload.gen).toBeGreaterThan(r.files[1].attr.gen);
  });
});

describe('the router: read-only opens with open_read, prefetch', () => {
  let work: string;
  let node: Running;
  let router: WorkspaceRouter;
  const big = randomBytes(300 * 1024 + 7);

  beforeAll(async () => {
    work = join(tmpDir('svc-small-router-'), 'work');
    fs.mkdirSync(work);
    fs.writeFileSync(join(work, 'small.txt'), 'small file\n');
    fs.writeFileSync(join(work, 'changes.txt'), 'version one\n');
    fs.writeFileSync(join(work, 'big.bin'), big);
    node = await startFsNode([`work=${work}`], { env: ALL_FEATURES });
    router = new WorkspaceRouter(new StaticTopologySource([parseEndpointSpec(`w=${node.url}#work@/w`)]), { features: FEATURES });
    await router.start();
  });

  afterAll(() => router?.close());

  it('a small file comes with its open (attr and bytes), needs no read or close; a read past its end sees it grown', async () => {
    await router.getattr('/w/small.txt');
    let before = await ops(node);
    const { fh, attr } = await router.open('/w/small.txt');
    expect(attr).toMatchObject({ sz: 11, k: 1 });
    expect(await router.read(fh, 0, 4096)).toEqual({ data: Buffer.from('small file\n'), eof: true });
    expect((await router.read(fh, 6, 4)).data.toString()).toBe('file');
    expect(opsDelta(await ops(node), before)).toEqual({ open: 1 });
    fs.appendFileSync(join(work, 'small.txt'), 'more\n');
    before = await ops(node);
    expect(await router.read(fh, 11, 100)).toEqual({ data: Buffer.from('more\n'), eof: true });
    await router.release(fh);
    expect(opsDelta(await ops(node), before)).toEqual({ open: 1, read: 1, close: 1 });
  });

  it('a large file: the first block is served from the open, the rest read from the node, byte-exact', async () => {
    await router.getattr('/w/big.bin');
    const before = await ops(node);
    const { fh, attr } = await router.open('/w/big.bin');
    expect(attr?.sz).toBe(big.length);
    expect((await router.read(fh, 1000, 2000)).data.equals(big.subarray(1000, 3000))).toBe(true);
    const all = await router.read(fh, 0, 1024 * 1024);
    expect(all.eof).toBe(true);
    expect(all.data.equals(big)).toBe(true);
    await router.release(fh);
    expect(opsDelta(await ops(node), before)).toEqual({ open: 1, read: 1, close: 1 });
  });

  it('the node pushing a change drops the bytes kept for an open handle', async () => {
    await router.readdir('/w');
    const { fh } = await router.open('/w/changes.txt');
    expect((await router.read(fh, 0, 100)).data.toString()).toBe('version one\n');
    fs.writeFileSync(join(work, 'changes.txt'), 'version two\n');
    const t0 = Date.now();
    await waitFor(async () => (await router.read(fh, 0, 100)).data.toString() === 'version two\n', 3000, 25);
    expect(Date.now() - t0).toBeLessThanOrEqual(2000);
    await router.release(fh);
  });

  it('prefetch brings small files with their attrs; a router asking no extension gets plain opens and no prefetch', async () => {
    const files = await router.prefetch('/w', ['small.txt', 'big.bin', 'nothing'], 64 * 1024, 1024 * 1024);
    expect(files?.map((f) => [f.name, f.data?.toString(), f.skip, f.errno])).toEqual([
      ['small.txt', 'small file\nmore\n', undefined, undefined],
      ['big.bin', undefined, 'size', undefined],
      ['nothing', undefined, undefined, 2],
    ]);
    const plain = new WorkspaceRouter(new StaticTopologySource([parseEndpointSpec(`w=${node.url}#work@/w`)]), { features: [] });
    try {
      await plain.start();
      const before = await ops(node);
      const { fh, attr } = await plain.open('/w/small.txt');
      expect(attr).toBeUndefined();
      expect((await plain.read(fh, 0, 100)).data.toString()).toBe('small file\nmore\n');
      await plain.release(fh);
      expect(await plain.prefetch('/w', ['small.txt'], 1000, 1000)).toBeNull();
      const d = opsDelta(await ops(node), before);
      expect({ open: d.open, read: d.read, close: d.close, prefetch: d.prefetch }).toEqual({ open: 1, read: 1, close: 1, prefetch: undefined });
    } finally {
      plain.close();
    }
  });
});

describeFuse('small files through the FUSE mount and svc-fs-mount cat', () => {
  let work: string;
  let outside: string;
  let node: Running;
  /** Extensions on (both sides). */
  let m1: Mount;
  /** Another mount of the same node (changes "through another mount"). */
  let m2: Mount;
  const text = (tag: string, n = 200) => `${tag}:`.padEnd(n, tag.slice(-1));
  const cat = (path: string) => runMount(['--endpoint', `w=${node.url}#work@/w`, 'cat', path], { env: { SVC_FS_CLIENT_FEATURES: 'all' } });

  beforeAll(async () => {
    const base = tmpDir('svc-small-fuse-');
    work = join(base, 'work');
    outside = join(base, 'outside');
    fs.mkdirSync(work);
    fs.mkdirSync(outside);
    node = await startFsNode([`work=${work}`], { env: ALL_FEATURES });
    [m1, m2] = await Promise.all([startMount(node.url, [], { SVC_FS_CLIENT_FEATURES: 'all' }), startMount(node.url, [], { SVC_FS_CLIENT_FEATURES: 'all' })]);
  }, 60_000);

  it('a cold cat of a small file is one FS request after lookup: through FUSE and svc-fs-mount cat', async () => {
    fs.mkdirSync(join(work, 'rt'));
    fs.writeFileSync(join(work, 'rt', 'a.txt'), 'small file a\n');
    fs.writeFileSync(join(work, 'rt', 'b.txt'), 'small file b\n');
    fs.readdirSync(join(m1.dir, 'rt'));
    let before = await ops(node);
    expect(fs.readFileSync(join(m1.dir, 'rt', 'a.txt'), 'utf8')).toBe('small file a\n');
    await sleep(300); // a close would be sent in the background
    expect(opsDelta(await ops(node), before)).toEqual({ open: 1 });
    before = await ops(node);
    const r = await cat('/w/rt/b.txt');
    expect({ code: r.code, out: r.stdout.toString() }).toEqual({ code: 0, out: 'small file b\n' });
    const d = opsDelta(await ops(node), before);
    expect({ open: d.open, read: d.read, close: d.close }).toEqual({ open: 1, read: undefined, close: undefined });
  });

  it('reading a directory of small files in order (grep -R) costs a few requests, each byte read once', async () => {
    const dir = join(work, 'seq');
    fs.mkdirSync(dir);
    let total = 0;
    for (let i = 0; i < 100; i++) {
      const body = `${text(`seq ${i}`, 700 + ((i * 37) % 600))}\n`;
      total += body.length;
      fs.writeFileSync(join(dir, `f${String(i).padStart(3, '0')}.txt`), body);
    }
    const before = await ops(node);
    const bytes = await counter(node, 'svc_fs_bytes_read_total');
    const out = execFileSync('grep', ['-R', '-c', 'seq', join(m1.dir, 'seq')], { encoding: 'utf8' });
    expect(out.trim().split('\n')).toHaveLength(100);
    await sleep(300);
    const d = opsDelta(await ops(node), before);
    expect(d.read ?? 0).toBe(0);
    expect(d.close ?? 0).toBe(0);
    expect(d.open).toBeLessThanOrEqual(4);
    expect(d.prefetch).toBeGreaterThanOrEqual(1);
    expect(d.prefetch).toBeLessThanOrEqual(2);
    expect((await counter(node, 'svc_fs_bytes_read_total')) - bytes).toBe(total);
  });

  describe.each([
    ['on the node disk', 'disk'],
    ['through another mount', 'mount'],
  ])('coherence: a change %s is seen within 2 s', (_label, where) => {
    it.each(['changed', 'truncated', 'replaced by rename', 'deleted'])('%s: an opened file and a prefetched, never opened one', async (kind) => {
      const dirName = `coh-${where}-${kind.split(' ')[0]}`;
      const names = Array.from({ length: 12 }, (_, i) => `f${String(i).padStart(2, '0')}`);
      fs.mkdirSync(join(work, dirName));
      for (const n of names) fs.writeFileSync(join(work, dirName, n), text(`${dirName}/${n} v1`));
      const via = (n: string) => (where === 'disk' ? join(work, dirName, n) : join(m2.dir, dirName, n));
      const seen = (n: string) => join(m1.dir, dirName, n);
      // A directory made on the node's disk a moment ago is in the mounts once the node's push
      // arrives (until then a mount that listed the parent knows the name is not there).
      await waitFor(() => fs.existsSync(join(m1.dir, dirName, 'f11')) && fs.existsSync(join(m2.dir, dirName, 'f11')), 2000, 10);
      fs.readdirSync(join(m2.dir, dirName));
      const prefetches = (await ops(node)).prefetch ?? 0;
      expect(fs.readFileSync(seen('f00'), 'utf8')).toBe(text(`${dirName}/f00 v1`));
      expect(fs.readFileSync(seen('f01'), 'utf8')).toBe(text(`${dirName}/f01 v1`));
      await waitFor(async () => ((await ops(node)).prefetch ?? 0) > prefetches, 5000);
      const expected = new Map<string, string | null>();
      for (const n of ['f01', 'f05']) {
        const v2 = text(`${dirName}/${n} v2`);
        if (kind === 'changed') {
          fs.writeFileSync(via(n), v2);
          expected.set(n, v2);
        } else if (kind === 'truncated') {
          fs.truncateSync(via(n), 0);
          expected.set(n, '');
        } else if (kind === 'replaced by rename') {
          fs.writeFileSync(via(`${n}.new`), v2);
          fs.renameSync(via(`${n}.new`), via(n));
          expected.set(n, v2);
        } else {
          fs.unlinkSync(via(n));
          expected.set(n, null);
        }
      }
      const t0 = Date.now();
      const current = (n: string): string | null => {
        try {
          return fs.readFileSync(seen(n), 'utf8');
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
          throw e;
        }
      };
      for (const [n, want] of expected) {
        await waitFor(() => current(n) === want, 4000, 25);
        expect({ file: n, ms: Date.now() - t0 }).toEqual({ file: n, ms: expect.any(Number) });
        expect(Date.now() - t0).toBeLessThanOrEqual(2000);
      }
      // and it stays so; a file next to them is untouched
      for (const [n, want] of expected) expect(current(n)).toBe(want);
      expect(current('f06')).toBe(text(`${dirName}/f06 v1`));
      const r = await cat(`/w/${dirName}/f05`);
      if (expected.get('f05') === null) expect(r.code).not.toBe(0);
      else expect({ code: r.code, out: r.stdout.toString() }).toEqual({ code: 0, out: expected.get('f05') });
    });
  });

  it('a prefetch never reads outside the export, a symlink, a fifo or a directory', async () => {
    fs.writeFileSync(join(outside, 'secret.txt'), 'SECRET outside the export\n');
    const dir = join(work, 'conf');
    fs.mkdirSync(dir);
    const files = ['a', 'b', 'c', 'd', 'e'];
    for (const n of files) fs.writeFileSync(join(dir, n), text(`conf ${n}`, 100));
    fs.symlinkSync(join(outside, 'secret.txt'), join(dir, 'd-out'));
    execFileSync('mkfifo', [join(dir, 'd-fifo')]);
    fs.mkdirSync(join(dir, 'd-sub'));
    fs.writeFileSync(join(dir, 'd-sub', 'inner'), 'inner');
    await waitFor(() => fs.existsSync(join(m1.dir, 'conf', 'd-sub', 'inner')), 2000, 10);
    fs.readdirSync(join(m1.dir, 'conf'));
    const bytes = await counter(node, 'svc_fs_bytes_read_total');
    for (const n of ['a', 'b', 'c']) expect(fs.readFileSync(join(m1.dir, 'conf', n), 'utf8')).toBe(text(`conf ${n}`, 100));
    await sleep(500);
    // a, b opened; c, d and e prefetched; nothing else read
    expect((await counter(node, 'svc_fs_bytes_read_total')) - bytes).toBe(500);
    // (the kernel follows d-out itself, to the path on this host, and opens the fifo itself: the
    // node reads neither)
    expect(fs.readlinkSync(join(m1.dir, 'conf', 'd-out'))).toBe(join(outside, 'secret.txt'));
    expect(fs.statSync(join(m1.dir, 'conf', 'd-fifo')).isFIFO()).toBe(true);
    expect((await counter(node, 'svc_fs_bytes_read_total')) - bytes).toBe(500);
  });

  it('bounded: ls -la and find of 5,000 small files read no content; cat of one reads at most one batch', async () => {
    const dir = join(work, 'big5k');
    fs.mkdirSync(dir);
    for (let i = 0; i < 5000; i++) fs.writeFileSync(join(dir, `f${String(i).padStart(4, '0')}`), text(`big ${i}`, 100));
    const bytes = await counter(node, 'svc_fs_bytes_read_total');
    const before = await ops(node);
    const ls = execFileSync('ls', ['-la', join(m1.dir, 'big5k')], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    expect(ls.trim().split('\n').length).toBe(5003); // "total", . and .., and the files
    const found = execFileSync('find', [join(m1.dir, 'big5k'), '-type', 'f'], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    expect(found.trim().split('\n').length).toBe(5000);
    expect((await counter(node, 'svc_fs_bytes_read_total')) - bytes).toBe(0);
    expect(opsDelta(await ops(node), before).prefetch).toBeUndefined();
    expect(fs.readFileSync(join(m1.dir, 'big5k', 'f2500'), 'utf8')).toBe(text('big 2500', 100));
    expect(execFileSync('cat', [join(m1.dir, 'big5k', 'f2501')], { encoding: 'utf8' })).toBe(text('big 2501', 100));
    const r = await cat('/w/big5k/f2502');
    expect(r.stdout.toString()).toBe(text('big 2502', 100));
    await sleep(500);
    const read = (await counter(node, 'svc_fs_bytes_read_total')) - bytes;
    expect(read).toBeGreaterThanOrEqual(300);
    expect(read).toBeLessThanOrEqual(1024 * 1024);
  });

  it('works with the extensions off on either side', async () => {
    const dir = join(work, 'off');
    fs.mkdirSync(dir);
    for (let i = 0; i < 20; i++) fs.writeFileSync(join(dir, `f${i}`), text(`off ${i}`));
    const bare = await startFsNode([`work=${work}`], { args: ['--fs-features', 'none'], env: ALL_FEATURES });
    const [clientOff, nodeOff] = await Promise.all([
      startMount(node.url, ['--fs-features', 'none']),
      startMount(bare.url, [], { SVC_FS_CLIENT_FEATURES: 'all' }),
    ]);
    for (const m of [clientOff, nodeOff]) {
      const out = execFileSync('grep', ['-R', '-h', 'off', join(m.dir, 'off')], { encoding: 'utf8' });
      expect(out.split('\n').filter(Boolean).sort()).toEqual(Array.from({ length: 20 }, (_, i) => text(`off ${i}`)).sort());
    }
    const r = await runMount(['--endpoint', `w=${bare.url}#work@/w`, 'cat', '/w/off/f3'], { env: { SVC_FS_CLIENT_FEATURES: 'all' } });
    expect(r.stdout.toString()).toBe(text('off 3'));
    const bad = await runMount(['--endpoint', `w=${node.url}#work@/w`, '--fs-features', 'turbo', 'cat', '/w/off/f3']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--fs-features: unknown FS extension "turbo"/);
  });
});
