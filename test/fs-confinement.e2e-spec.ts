/**
 * e2e: confinement of `svc-fs-node` exports (docs/protocol.md "Confinement"). Traversal attempts across every operation, each refused; then a sentinel tree
 * OUTSIDE the export root is checked byte for byte, mode for mode and mtime for mtime, and the
 * directory holding the root is checked for new entries. The node process must stay up.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { Errno, OpenFlags } from '../libs/protocol/src';
import { FsPeer, startFsNode } from './helpers/fs-peer';
import { cleanupTmp, killAll, Running, tmpDir } from './support/processes';

const SECRET = 'TOP SECRET: outside the export\n';

let base: string;
let root: string;
let outside: string;
let node: Running;
let p: FsPeer;
let r: number;
/** Node ids by path below the root, looked up once. */
const ids: Record<string, number> = {};
let before: string;

/** A stable description of every entry below `dir`: type, mode, size, mtime (ns), content hash, link text. */
function snapshot(dir: string): string {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const name of fs.readdirSync(d).sort()) {
      const path = join(d, name);
      const st = fs.lstatSync(path, { bigint: true });
      let extra = '';
      if (st.isSymbolicLink()) extra = `-> ${fs.readlinkSync(path)}`;
      else if (st.isFile()) extra = createHash('sha256').update(fs.readFileSync(path)).digest('hex');
      out.push(`${path.slice(base.length)} mode=${st.mode.toString(8)} size=${st.size} mtime=${st.mtimeNs} uid=${st.uid} ${extra}`);
      if (st.isDirectory()) walk(path);
    }
  };
  const st = fs.lstatSync(dir, { bigint: true });
  out.push(`${dir.slice(base.length) || '/'} mode=${st.mode.toString(8)} mtime=${st.mtimeNs}`);
  walk(dir);
  return out.join('\n');
}

/** What must never change: the outside tree and the list of entries next to the root. */
function sentinel(): string {
  return `${snapshot(outside)}\n--\n${fs.readdirSync(base).sort().join(',')}\n${fs.lstatSync(base, { bigint: true }).mtimeNs}`;
}

async function id(path: string): Promise<number> {
  if (ids[path] === undefined) ids[path] = (await p.walk(r, path)).id;
  return ids[path];
}

beforeAll(async () => {
  base = tmpDir('svc-fs-confine-');
  root = join(base, 'root');
  outside = join(base, 'outside');
  fs.mkdirSync(join(outside, 'sub'), { recursive: true });
  fs.mkdirSync(join(outside, 'mirror', 'b', 'c'), { recursive: true });
  fs.writeFileSync(join(outside, 'secret.txt'), SECRET, { mode: 0o640 });
  fs.writeFileSync(join(outside, 'sub', 'inner.txt'), 'outside inner');
  fs.writeFileSync(join(outside, 'inner.txt'), 'outside twin of victim/inner.txt');
  fs.writeFileSync(join(outside, 'mirror', 'b', 'c', 'deep.txt'), 'outside twin of a/b/c/deep.txt');
  fs.symlinkSync('../root/file.txt', join(outside, 'back_in'));
  fs.chmodSync(outside, 0o750);

  fs.mkdirSync(join(root, 'dir'), { recursive: true });
  fs.mkdirSync(join(root, 'victim'));
  fs.mkdirSync(join(root, 'a', 'b', 'c'), { recursive: true });
  fs.writeFileSync(join(root, 'file.txt'), 'inside');
  fs.writeFileSync(join(root, 'dir', 'nested.txt'), 'nested');
  fs.writeFileSync(join(root, 'victim', 'inner.txt'), 'victim inner');
  fs.writeFileSync(join(root, 'a', 'b', 'c', 'deep.txt'), 'deep inside');
  const links: Array<[string, string]> = [
    ['escape_file', '../outside/secret.txt'],
    ['escape_abs', join(outside, 'secret.txt')],
    ['escape_dir', '../outside'],
    ['escape_dir_abs', outside],
    ['chain', 'escape_dir'],
    ['dangling_out', '../outside/not-there.txt'],
    ['dangling_out_dir', '../outside/newdir'],
    ['out_and_back', '../outside/back_in'],
    ['loop', 'loop'],
    ['inside_link', 'file.txt'],
    ['dir/up', '../..'],
    ['dir/back', '../dir'],
    ['abs_in', join(root, 'dir')],
    ['devzero', '/dev/zero'],
    ['proc', '/proc/self/cwd'],
    ['etc', '/etc'],
  ];
  for (const [name, target] of links) fs.symlinkSync(target, join(root, name));
  execFileSync('mkfifo', [join(root, 'fifo')]);
  fs.mkdirSync(join(base, 'other'));

  before = sentinel();
  node = await startFsNode([`work=${root}`, `other=${join(base, 'other')}`]);
  p = await FsPeer.connect(node.url);
  r = await p.root('work');
});

afterAll(async () => {
  p?.close();
  await killAll();
  cleanupTmp();
});

describe('names that are not one path component', () => {
  it.each([
    ['..', Errno.EINVAL],
    ['.', Errno.EINVAL],
    ['', Errno.EINVAL],
    ['../outside/secret.txt', Errno.EINVAL],
    ['/etc/passwd', Errno.EINVAL],
    ['file.txt\0', Errno.EINVAL],
    ['..\0', Errno.EINVAL],
    ['x'.repeat(256), Errno.ENAMETOOLONG],
    ['é'.repeat(128), Errno.ENAMETOOLONG],
  ])('lookup %j is refused', async (name, errno) => {
    expect(await p.errno('lookup', { node: r }, { name })).toBe(errno);
  });

  it('a 255-byte name is a valid name (ENOENT, not EINVAL)', async () => {
    expect(await p.errno('lookup', { node: r }, { name: 'y'.repeat(255) })).toBe(Errno.ENOENT);
  });

  it.each([
    ['create', { name: '../pwned.txt', mode: 0o644, flags: OpenFlags.O_RDWR }],
    ['create', { name: '/tmp/pwned.txt', mode: 0o644, flags: OpenFlags.O_RDWR }],
    ['mkdir', { name: '..', mode: 0o755 }],
    ['mkdir', { name: '../pwned', mode: 0o755 }],
    ['unlink', { name: '../outside/secret.txt' }],
    ['rmdir', { name: '../outside/sub' }],
    ['symlink', { name: '../pwned-link', target: 'x' }],
    ['symlink', { name: 'a/b', target: 'x' }],
  ])('%s %j is EINVAL', async (op, payload) => {
    expect(await p.errno(op, { node: r }, payload)).toBe(Errno.EINVAL);
  });

  it('rename with a traversing source name is EINVAL', async () => {
    expect(await p.errno('rename', {}, { old_parent: r, old_name: '../outside/secret.txt', new_parent: r, new_name: 'stolen' })).toBe(Errno.EINVAL);
  });

  it('rename of a directory to a traversing target name is EINVAL', async () => {
    expect(await p.errno('rename', {}, { old_parent: r, old_name: 'dir', new_parent: r, new_name: '../outside/dir' })).toBe(Errno.EINVAL);
    expect(await p.errno('rename', {}, { old_parent: r, old_name: 'dir', new_parent: r, new_name: '..' })).toBe(Errno.EINVAL);
    expect(fs.existsSync(join(root, 'dir', 'nested.txt'))).toBe(true);
  });
});

describe('symlinks whose target is outside the root', () => {
  it('lookup reports the link itself (k=3), never the outside object', async () => {
    for (const name of ['escape_dir', 'escape_file', 'escape_abs', 'chain', 'dangling_out']) {
      const { attr } = await p.call('lookup', { node: r }, { name });
      expect(attr.k).toBe(3);
      expect(attr.sz).toBe(Buffer.byteLength(fs.readlinkSync(join(root, name))));
      expect(attr.m).toBe(Number(fs.lstatSync(join(root, name)).mode));
    }
    const g = await p.call('getattr', { node: await id('escape_dir') });
    expect(g.attr.k).toBe(3);
  });

  it.each([
    ['escape_dir', 'secret.txt'],
    ['escape_dir_abs', 'secret.txt'],
    ['chain', 'secret.txt'],
    ['dir/up', 'outside'],
    ['etc', 'passwd'],
    ['proc', 'secret.txt'],
  ])('lookup through %s is EACCES', async (link, name) => {
    expect(await p.errno('lookup', { node: await id(link) }, { name })).toBe(Errno.EACCES);
  });

  it.each([
    ['escape_file', OpenFlags.O_RDONLY],
    ['escape_abs', OpenFlags.O_RDWR],
    ['escape_file', OpenFlags.O_WRONLY | OpenFlags.O_TRUNC],
    ['escape_dir', OpenFlags.O_RDONLY],
    ['out_and_back', OpenFlags.O_RDONLY],
    ['dangling_out', OpenFlags.O_WRONLY | OpenFlags.O_CREAT],
    ['devzero', OpenFlags.O_RDONLY],
  ])('open of %s (flags %o) is EACCES', async (link, flags) => {
    expect(await p.errno('open', { node: await id(link) }, { flags })).toBe(Errno.EACCES);
  });

  it('open of a dangling outside link with O_CREAT creates nothing outside', async () => {
    expect(fs.existsSync(join(outside, 'not-there.txt'))).toBe(false);
  });

  it.each(['escape_dir', 'escape_dir_abs', 'chain', 'dir/up', 'etc'])('readdirp of %s is EACCES', async (link) => {
    expect(await p.errno('readdirp', { node: await id(link) }, { cookie: 0 })).toBe(Errno.EACCES);
  });

  it('create in an outside-pointing directory link is EACCES', async () => {
    expect(await p.errno('create', { node: await id('escape_dir') }, { name: 'pwned.txt', mode: 0o644, flags: OpenFlags.O_RDWR })).toBe(Errno.EACCES);
  });

  it('create over a dangling outside link never follows it (ELOOP) and creates nothing', async () => {
    expect(await p.errno('create', { node: r }, { name: 'dangling_out', mode: 0o644, flags: OpenFlags.O_WRONLY })).toBe(Errno.ELOOP);
    expect(await p.errno('create', { node: r }, { name: 'dangling_out', mode: 0o644, flags: OpenFlags.O_WRONLY | OpenFlags.O_EXCL })).toBe(Errno.EEXIST);
  });

  it('mkdir in an outside-pointing link is EACCES; mkdir over a dangling link is EEXIST', async () => {
    expect(await p.errno('mkdir', { node: await id('escape_dir') }, { name: 'pwned', mode: 0o755 })).toBe(Errno.EACCES);
    expect(await p.errno('mkdir', { node: r }, { name: 'dangling_out_dir', mode: 0o755 })).toBe(Errno.EEXIST);
  });

  it('unlink and rmdir through an outside-pointing link are EACCES', async () => {
    expect(await p.errno('unlink', { node: await id('escape_dir') }, { name: 'secret.txt' })).toBe(Errno.EACCES);
    expect(await p.errno('rmdir', { node: await id('escape_dir_abs') }, { name: 'sub' })).toBe(Errno.EACCES);
  });

  it('rename with an outside-pointing source directory is EACCES', async () => {
    expect(await p.errno('rename', {}, { old_parent: await id('escape_dir'), old_name: 'secret.txt', new_parent: r, new_name: 'stolen' })).toBe(Errno.EACCES);
  });

  it('rename into an outside-pointing target directory is EACCES (a directory too)', async () => {
    expect(await p.errno('rename', {}, { old_parent: r, old_name: 'file.txt', new_parent: await id('escape_dir'), new_name: 'planted' })).toBe(Errno.EACCES);
    expect(await p.errno('rename', {}, { old_parent: r, old_name: 'dir', new_parent: await id('escape_dir_abs'), new_name: 'dir' })).toBe(Errno.EACCES);
    expect(fs.existsSync(join(root, 'file.txt'))).toBe(true);
  });

  it('rename into another export is EXDEV', async () => {
    expect(await p.errno('rename', {}, { old_parent: r, old_name: 'file.txt', new_parent: await p.root('other'), new_name: 'x' })).toBe(Errno.EXDEV);
  });

  it('symlink inside an outside-pointing link is EACCES', async () => {
    expect(await p.errno('symlink', { node: await id('escape_dir') }, { name: 'l', target: 'x' })).toBe(Errno.EACCES);
  });

  it.each([
    ['an absolute path outside', () => join(outside, 'secret.txt')],
    ['/etc/passwd', () => '/etc/passwd'],
    ['a relative path that climbs out', () => '../outside/secret.txt'],
    ['the parent of the root', () => '..'],
    ['many levels up', () => '../../../../..'],
    ['a detour that ends outside', () => 'dir/../../outside'],
  ])('creating a symlink to %s is refused (EACCES), nothing created', async (_what, target) => {
    expect(await p.errno('symlink', { node: r }, { name: 'made_out', target: target() })).toBe(Errno.EACCES);
    expect(fs.lstatSync(join(root, 'made_out'), { throwIfNoEntry: false })).toBeUndefined();
  });

  it('a symlink that stays inside the root is created, relative or absolute', async () => {
    const rel = await p.call('symlink', { node: await id('dir') }, { name: 'up_in', target: '../file.txt' });
    expect(rel.attr.k).toBe(3);
    expect(fs.readlinkSync(join(root, 'dir', 'up_in'))).toBe('../file.txt');
    const abs = await p.call('symlink', { node: r }, { name: 'abs_in_made', target: join(fs.realpathSync(root), 'dir') });
    expect(abs.attr.k).toBe(3);
    expect(await p.errno('symlink', { node: r }, { name: 'empty_target', target: '' })).toBe(Errno.EINVAL);
  });

  it('readlink returns only the link text, never the target content', async () => {
    const { target } = await p.call('readlink', { node: await id('escape_file') });
    expect(target).toBe('../outside/secret.txt');
    expect(target).not.toContain('TOP SECRET');
  });

  it('truncate of an outside-pointing link does not follow it (ELOOP)', async () => {
    expect(await p.errno('truncate', { node: await id('escape_file') }, { sz: 0 })).toBe(Errno.ELOOP);
    expect(fs.readFileSync(join(outside, 'secret.txt'), 'utf8')).toBe(SECRET);
  });

  it('setattr of an outside-pointing link never reaches the target', async () => {
    expect(await p.errno('setattr', { node: await id('escape_abs') }, { mode: 0o777 })).toBe(Errno.ENOTSUP);
    expect(await p.errno('setattr', { node: await id('escape_abs') }, { sz: 0 })).toBe(Errno.ELOOP);
    const { attr } = await p.call('setattr', { node: await id('escape_abs') }, { mt: 1_000_000_000_000_000_000 });
    expect(attr.k).toBe(3);
    expect(Number(fs.lstatSync(join(root, 'escape_abs'), { bigint: true }).mtimeNs)).toBe(1_000_000_000_000_000_000);
  });

  it('statfs through an outside-pointing link is EACCES', async () => {
    expect(await p.errno('statfs', { node: await id('escape_dir') })).toBe(Errno.EACCES);
  });

  it('a symlink loop is ELOOP, not a hang or a crash', async () => {
    expect(await p.errno('open', { node: await id('loop') }, { flags: OpenFlags.O_RDONLY })).toBe(Errno.ELOOP);
    expect(await p.errno('readdirp', { node: await id('loop') }, { cookie: 0 })).toBe(Errno.ELOOP);
    expect(await p.errno('lookup', { node: await id('loop') }, { name: 'x' })).toBe(Errno.ELOOP);
  });

  it('a fifo inside the root is refused (EACCES) without blocking the node', async () => {
    expect(await p.errno('open', { node: await id('fifo') }, { flags: OpenFlags.O_RDONLY })).toBe(Errno.EACCES);
    expect(await p.errno('open', { node: await id('fifo') }, { flags: OpenFlags.O_WRONLY })).toBe(Errno.EACCES);
  });

  it('links that stay inside the root work (controls)', async () => {
    const h = (await p.call('open', { node: await id('inside_link') }, { flags: OpenFlags.O_RDONLY })).h;
    expect(Buffer.from((await p.call('read', { h }, { off: 0, len: 100 })).data_b64, 'base64').toString()).toBe('inside');
    await p.call('close', { h });
    expect((await p.call('lookup', { node: await id('abs_in') }, { name: 'nested.txt' })).attr.k).toBe(1);
    expect((await p.call('lookup', { node: await id('dir/back') }, { name: 'nested.txt' })).attr.k).toBe(1);
    const names = (await p.call('readdirp', { node: await id('abs_in') }, { cookie: 0 })).ents.map((e: { name: string }) => e.name);
    expect(names).toContain('nested.txt');
  });
});

describe('races: a directory swapped for an outside symlink between lookup and use', () => {
  it('every operation on the swapped directory and below it is EACCES', async () => {
    const victim = await id('victim');
    const inner = await id('victim/inner.txt');
    fs.renameSync(join(root, 'victim'), join(root, 'victim.orig'));
    fs.symlinkSync(outside, join(root, 'victim'));
    const attempts: Array<[string, Record<string, unknown>, Record<string, unknown>]> = [
      ['getattr', { node: inner }, {}],
      ['open', { node: inner }, { flags: OpenFlags.O_RDONLY }],
      ['open', { node: inner }, { flags: OpenFlags.O_WRONLY | OpenFlags.O_TRUNC }],
      ['setattr', { node: inner }, { mode: 0o777 }],
      ['truncate', { node: inner }, { sz: 0 }],
      ['readlink', { node: inner }, {}],
      ['lookup', { node: victim }, { name: 'secret.txt' }],
      ['readdirp', { node: victim }, { cookie: 0 }],
      ['create', { node: victim }, { name: 'pwned.txt', mode: 0o644, flags: OpenFlags.O_RDWR }],
      ['mkdir', { node: victim }, { name: 'pwned', mode: 0o755 }],
      ['symlink', { node: victim }, { name: 'pwned-link', target: 'x' }],
      ['unlink', { node: victim }, { name: 'secret.txt' }],
      ['rmdir', { node: victim }, { name: 'sub' }],
      ['statfs', { node: victim }, {}],
      ['rename', {}, { old_parent: victim, old_name: 'inner.txt', new_parent: r, new_name: 'stolen.txt' }],
      ['rename', {}, { old_parent: r, old_name: 'file.txt', new_parent: victim, new_name: 'planted.txt' }],
    ];
    for (const [op, target, payload] of attempts) expect([op, await p.errno(op, target, payload)]).toEqual([op, Errno.EACCES]);
  });

  it('an ancestor swapped higher up is caught too', async () => {
    const deep = await id('a/b/c/deep.txt');
    const c = await id('a/b/c');
    fs.renameSync(join(root, 'a'), join(root, 'a.orig'));
    fs.symlinkSync(join(outside, 'mirror'), join(root, 'a'));
    expect(await p.errno('getattr', { node: deep })).toBe(Errno.EACCES);
    expect(await p.errno('open', { node: deep }, { flags: OpenFlags.O_RDONLY })).toBe(Errno.EACCES);
    expect(await p.errno('readdirp', { node: c }, { cookie: 0 })).toBe(Errno.EACCES);
    expect(await p.errno('unlink', { node: c }, { name: 'deep.txt' })).toBe(Errno.EACCES);
  });

  it('a handle opened before the swap keeps the inside file', async () => {
    fs.mkdirSync(join(root, 'held'));
    fs.writeFileSync(join(root, 'held', 'f.txt'), 'held inside');
    const f = await id('held/f.txt');
    const h = (await p.call('open', { node: f }, { flags: OpenFlags.O_RDWR })).h;
    fs.renameSync(join(root, 'held'), join(root, 'held.orig'));
    fs.symlinkSync(outside, join(root, 'held'));
    await p.call('write', { h }, { off: 0, data_b64: Buffer.from('HELD').toString('base64') });
    await p.call('close', { h });
    expect(fs.readFileSync(join(root, 'held.orig', 'f.txt'), 'utf8')).toBe('HELD inside');
  });
});

describe('node ids outside the table', () => {
  it.each([
    [{ node: -1 }, Errno.EINVAL],
    [{ node: '../../etc' }, Errno.EINVAL],
    [{ node: 2 ** 53 }, Errno.EINVAL],
    [{ node: 9_000_000_000_000 }, Errno.ENOENT],
  ])('getattr %j is refused', async (target, errno) => {
    expect(await p.errno('getattr', target)).toBe(errno);
  });
});

describe('after every attempt', () => {
  it('nothing outside the root changed and no file appeared next to it', () => {
    expect(sentinel()).toBe(before);
    expect(fs.readFileSync(join(outside, 'secret.txt'), 'utf8')).toBe(SECRET);
    expect(fs.statSync(join(outside, 'secret.txt')).mode & 0o7777).toBe(0o640);
  });

  it('the node is still up and serving', async () => {
    expect(node.proc.exitCode).toBeNull();
    expect((await p.call('getattr', { node: r })).attr.k).toBe(2);
    const fresh = await FsPeer.connect(node.url);
    expect((await fresh.call('exports')).exports).toHaveLength(2);
    fresh.close();
  });
});
