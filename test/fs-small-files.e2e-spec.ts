/**
 * e2e (issue 11, build item 1): fewer round trips per small file, as negotiated FS extensions
 * (docs/protocol.md "FS extensions"), over real processes, WebSockets, files and FUSE mounts.
 *
 * - The wire: `open_read` and `prefetch` granted or not (`--fs-features`), byte-exact on the
 *   JSON and binary data paths, bounded, confined, counted in `svc_fs_bytes_read_total`, and
 *   followed by the node's invalidation pushes.
 */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { join } from 'node:path';
// eslint-disable-next-line @typescript-eslint/no-require-imports
const parsePrometheus = require('parse-prometheus-text-format') as (text: string) => Array<{ name: string; metrics: Array<{ value?: string; labels?: Record<string, string> }> }>;
import { FsPeer, startFsNode } from './helpers/fs-peer';
import { cleanupTmp, killAll, Running, tmpDir } from './helpers/processes';

const O = { RDONLY: 0, WRONLY: 1, RDWR: 2 };
const E = { ENOENT: 2, EACCES: 13, EISDIR: 21, EINVAL: 22, ENOSYS: 38, ELOOP: 40, ENOTSUP: 95 };
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
  const text = await (await fetch(`${node.opsUrl}/metrics`)).text();
  const family = parsePrometheus(text).find((f) => f.name === name);
  return (family?.metrics ?? []).filter((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v)).reduce((s, m) => s + Number(m.value ?? 0), 0);
}

afterAll(async () => {
  for (const p of peers) p.close();
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

  it('grants the extensions asked for; a node started with --fs-features none grants none and answers as before', async () => {
    const p = await connect(node.url, { features: [...FEATURES, 'no-such-extension'] });
    expect(p.hello.caps.features).toEqual(FEATURES);
    expect((await connect(node.url)).hello.caps.features).toEqual([]);
    const b = await connect(bare.url, { binary: true, features: FEATURES });
    expect(b.hello.caps.features).toEqual([]);
    const root = await b.root('work');
    const f = await b.walk(root, 'many/f001');
    // `read` is ignored like any unknown member: a plain open reply, the handle open.
    const r = await b.call('open', { node: f.id }, { flags: O.RDONLY, read: 4096, close_at_eof: true });
    expect(Object.keys(r).sort()).toEqual(['caps', 'gen', 'h']);
    await b.call('close', { h: r.h });
    const err = await b.send('prefetch', { node: root }, { names: ['big.bin'] });
    expect(err.error).toMatchObject({ errno: E.ENOSYS, code: 'unknown_type' });
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
    const r = await p.call('open', { node: f.id }, { flags: O.RDONLY, read: 128 * 1024, close_at_eof: true });
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
    const r = await p.call('open', { node: f.id }, { flags: O.RDONLY, read: 2 * 1024 * 1024, close_at_eof: true });
    expect(r).toMatchObject({ n: 1024 * 1024, eof: false });
    expect(r.h).toBeGreaterThan(0);
    const parts: Buffer[] = [r.data];
    for (let off = r.n as number, eof = false; !eof; ) {
      const more = await p.call('read', { h: r.h }, { off, len: 1024 * 1024 });
      parts.push(more.data);
      off += more.data.length;
      eof = more.eof;
    }
    expect(Buffer.concat(parts).equals(disk)).toBe(true);
    await p.call('close', { h: r.h });
    expect((await p.send('open', { node: f.id }, { flags: O.WRONLY, read: 10 })).error?.errno).toBe(E.EINVAL);
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
      ['zz-out', E.ELOOP],
      ['zz-dir', E.EISDIR],
      ['../big.bin', E.EINVAL],
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
      expect((await p.send('prefetch', { node: dir }, bad)).error?.errno).toBe(E.EINVAL);
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
