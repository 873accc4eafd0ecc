import { spawnSync } from 'node:child_process';
import { closeSync, lstatSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { types } from 'node:util';
import { loadPosixNative, PosixConstants, posixNativeUnavailable, PosixNative } from './posix-native';

const ROOT = resolve(__dirname, '..', '..', '..', '..', '..');
const BINARY = join(ROOT, 'native', 'posix', 'build', 'Release', 'svc_posix.node');

const native = loadPosixNative();
const reason = posixNativeUnavailable();
if (reason) process.stdout.write(`posix-native tests skipped: ${reason}\n`);
const describeNative = native ? describe : describe.skip;

/**
 * The first directory whose file system takes `user.*` xattrs on a regular file: the temporary
 * directory, /var/tmp, the repository's tmp/ (ignored by git); with why each failed. A child
 * process tries them, since the addon is asynchronous and the tests to skip are chosen now.
 */
function xattrDir(): { dir: string | null; why: string } {
  if (!native) return { dir: null, why: 'no addon' };
  const candidates = [...new Set([tmpdir(), '/var/tmp', join(ROOT, 'tmp')])];
  const probe = `
    const fs = require('node:fs'), path = require('node:path');
    const m = { exports: {} };
    process.dlopen(m, process.argv[1]);
    (async () => {
      for (const dir of process.argv.slice(2)) {
        let d;
        try {
          if (!fs.existsSync(dir)) fs.mkdirSync(dir);
          d = fs.mkdtempSync(path.join(dir, 'posix-xattr-probe-'));
          fs.writeFileSync(path.join(d, 'f'), '');
          await m.exports.lsetxattr(path.join(d, 'f'), 'user.probe', Buffer.from('x'), 0);
          console.log(JSON.stringify({ dir }));
          return;
        } catch (e) {
          console.log(JSON.stringify({ dir, code: e.code || e.message }));
        } finally {
          if (d) fs.rmSync(d, { recursive: true, force: true });
        }
      }
    })();`;
  const r = spawnSync(process.execPath, ['-e', probe, BINARY, ...candidates], { encoding: 'utf8', timeout: 10_000 });
  const tries = r.stdout
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { dir: string; code?: string });
  const ok = tries.find((t) => !t.code);
  return { dir: ok?.dir ?? null, why: tries.map((t) => `${t.dir}: ${t.code ?? 'ok'}`).join(', ') || `the probe failed: ${r.error?.message ?? r.stderr}` };
}

const xattrs = xattrDir();
if (native && !xattrs.dir) process.stdout.write(`posix-native xattr tests skipped: no candidate directory takes user xattrs (${xattrs.why})\n`);
const describeXattr = xattrs.dir ? describe : describe.skip;

describeNative('posix-native', () => {
  // (describe.skip runs this body too, without the addon)
  const posix = native as PosixNative;
  const c = (native?.constants ?? {}) as PosixConstants;
  let dir: string;
  beforeAll(() => (dir = mkdtempSync(join(tmpdir(), 'posix-native-'))));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('exports the Linux values of its constants', () => {
    expect({ ...c }).toEqual({
      S_IFIFO: 0o010000,
      S_IFSOCK: 0o140000,
      S_IFCHR: 0o020000,
      S_IFBLK: 0o060000,
      S_IFREG: 0o100000,
      XATTR_CREATE: 1,
      XATTR_REPLACE: 2,
      RENAME_NOREPLACE: 1,
      RENAME_EXCHANGE: 2,
      AT_SYMLINK_NOFOLLOW: 0x100,
      AT_SYMLINK_FOLLOW: 0x400,
      FALLOC_FL_KEEP_SIZE: 1,
      FALLOC_FL_PUNCH_HOLE: 2,
    });
    expect(posixNativeUnavailable()).toBeNull();
  });

  describe('mknod', () => {
    it('makes a FIFO with the mode asked', async () => {
      const p = join(dir, 'fifo');
      await expect(posix.mknod(p, c.S_IFIFO | 0o600, 0)).resolves.toBeUndefined();
      const st = lstatSync(p);
      expect(st.isFIFO()).toBe(true);
      expect(st.mode & 0o170000).toBe(c.S_IFIFO);
      expect(st.mode & 0o7777).toBe(0o600);
    });

    it('makes a socket and a regular file', async () => {
      await posix.mknod(join(dir, 'sock'), c.S_IFSOCK | 0o600, 0);
      expect(lstatSync(join(dir, 'sock')).isSocket()).toBe(true);
      await posix.mknod(join(dir, 'reg'), c.S_IFREG | 0o600, 0n);
      const st = lstatSync(join(dir, 'reg'));
      expect([st.isFile(), st.size]).toEqual([true, 0]);
    });

    it('rejects an existing name with EEXIST', async () => {
      const p = join(dir, 'taken');
      writeFileSync(p, 'x');
      const err = await posix.mknod(p, c.S_IFIFO | 0o600, 0).catch((e: unknown) => e);
      expect(types.isNativeError(err)).toBe(true); // an Error of the main realm, not of the test's
      expect(err).toMatchObject({ errno: 17, code: 'EEXIST', syscall: 'mknod', path: p, message: `mknod ${p}: File exists` });
      expect(readFileSync(p, 'utf8')).toBe('x');
    });
  });

  describeXattr('xattrs', () => {
    let xdir: string;
    beforeAll(() => (xdir = mkdtempSync(join(xattrs.dir!, 'posix-native-xattr-'))));
    afterAll(() => rmSync(xdir, { recursive: true, force: true }));

    it('sets, gets, lists and removes user.test on a path', async () => {
      const p = join(xdir, 'f');
      writeFileSync(p, '');
      await expect(posix.lsetxattr(p, 'user.test', Buffer.from('value 1'), 0)).resolves.toBeUndefined();
      expect((await posix.lgetxattr(p, 'user.test')).toString()).toBe('value 1');
      expect(await posix.llistxattr(p)).toContain('user.test');
      await posix.lsetxattr(p, 'user.test', Buffer.alloc(2000, 7), c.XATTR_REPLACE);
      expect(await posix.lgetxattr(p, 'user.test')).toEqual(Buffer.alloc(2000, 7));
      await posix.lsetxattr(p, 'user.empty', Buffer.alloc(0), c.XATTR_CREATE);
      expect(await posix.lgetxattr(p, 'user.empty')).toEqual(Buffer.alloc(0));
      await expect(posix.lremovexattr(p, 'user.test')).resolves.toBeUndefined();
      await posix.lremovexattr(p, 'user.empty');
      expect(await posix.llistxattr(p)).not.toContain('user.test');
      await expect(posix.lremovexattr(p, 'user.test')).rejects.toMatchObject({ errno: 61, code: 'ENODATA', syscall: 'lremovexattr' });
    });

    it('rejects XATTR_CREATE of an existing name with EEXIST, XATTR_REPLACE of a missing one and a get of a missing one with ENODATA', async () => {
      const p = join(xdir, 'g');
      writeFileSync(p, '');
      await posix.lsetxattr(p, 'user.test', Buffer.from('a'), 0);
      await expect(posix.lsetxattr(p, 'user.test', Buffer.from('b'), c.XATTR_CREATE)).rejects.toMatchObject({ errno: 17, code: 'EEXIST' });
      expect((await posix.lgetxattr(p, 'user.test')).toString()).toBe('a');
      await expect(posix.lsetxattr(p, 'user.none', Buffer.from('b'), c.XATTR_REPLACE)).rejects.toMatchObject({ errno: 61, code: 'ENODATA' });
      await expect(posix.lgetxattr(p, 'user.none')).rejects.toMatchObject({
        errno: 61,
        code: 'ENODATA',
        syscall: 'lgetxattr',
        message: `lgetxattr ${p}: No data available`,
      });
    });

    it('does the same on a file descriptor', async () => {
      const p = join(xdir, 'h');
      writeFileSync(p, '');
      const fd = openSync(p, 'r+');
      try {
        await posix.fsetxattr(fd, 'user.test', Buffer.from('by fd'), c.XATTR_CREATE);
        expect((await posix.fgetxattr(fd, 'user.test')).toString()).toBe('by fd');
        expect((await posix.lgetxattr(p, 'user.test')).toString()).toBe('by fd');
        expect(await posix.flistxattr(fd)).toContain('user.test');
        await posix.fremovexattr(fd, 'user.test');
        await expect(posix.fgetxattr(fd, 'user.test')).rejects.toMatchObject({ errno: 61, code: 'ENODATA', syscall: 'fgetxattr', path: fd });
      } finally {
        closeSync(fd);
      }
    });

    it('works on a symlink itself (l*), not on its target', async () => {
      const target = join(xdir, 'target');
      writeFileSync(target, '');
      symlinkSync(target, join(xdir, 'link'));
      await posix.lsetxattr(target, 'user.test', Buffer.from('t'), 0);
      // user xattrs are not allowed on symlinks: EPERM, and the target is not touched
      await expect(posix.lsetxattr(join(xdir, 'link'), 'user.test', Buffer.from('l'), 0)).rejects.toMatchObject({ errno: 1, code: 'EPERM' });
      await expect(posix.lgetxattr(join(xdir, 'link'), 'user.test')).rejects.toMatchObject({ errno: 61 });
      expect((await posix.lgetxattr(target, 'user.test')).toString()).toBe('t');
    });
  });

  describe('renameat2', () => {
    it('RENAME_NOREPLACE onto an existing file rejects with EEXIST and moves nothing', async () => {
      const a = join(dir, 'nr-a');
      const b = join(dir, 'nr-b');
      writeFileSync(a, 'a');
      writeFileSync(b, 'b');
      await expect(posix.renameat2(a, b, c.RENAME_NOREPLACE)).rejects.toMatchObject({
        errno: 17,
        code: 'EEXIST',
        syscall: 'renameat2',
        path: a,
        dest: b,
        message: `renameat2 ${a} -> ${b}: File exists`,
      });
      expect([readFileSync(a, 'utf8'), readFileSync(b, 'utf8')]).toEqual(['a', 'b']);
      await posix.renameat2(a, join(dir, 'nr-c'), c.RENAME_NOREPLACE);
      expect(readFileSync(join(dir, 'nr-c'), 'utf8')).toBe('a');
    });

    it('RENAME_EXCHANGE swaps two files', async () => {
      const a = join(dir, 'x-a');
      const b = join(dir, 'x-b');
      writeFileSync(a, 'first');
      writeFileSync(b, 'second');
      await posix.renameat2(a, b, c.RENAME_EXCHANGE);
      expect([readFileSync(a, 'utf8'), readFileSync(b, 'utf8')]).toEqual(['second', 'first']);
    });
  });

  it('fallocate extends a file to the length, and KEEP_SIZE keeps its size', async () => {
    const p = join(dir, 'alloc');
    writeFileSync(p, 'abc');
    const fd = openSync(p, 'r+');
    try {
      await posix.fallocate(fd, 0, 0, 1 << 20);
      expect(statSync(p).size).toBe(1 << 20);
      expect(readFileSync(p).subarray(0, 4)).toEqual(Buffer.from('abc\0'));
      await posix.fallocate(fd, c.FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20);
      expect(statSync(p).size).toBe(1 << 20);
      await expect(posix.fallocate(fd, 0, 0, 0)).rejects.toMatchObject({ errno: 22, code: 'EINVAL', syscall: 'fallocate', path: fd });
    } finally {
      closeSync(fd);
    }
  });

  describe('utimensat', () => {
    const T1 = 1_600_000_000_123_456_789n;
    const T2 = 1_650_000_000_987_654_321n;

    it('with AT_SYMLINK_NOFOLLOW sets the times of a symlink, not of its target', async () => {
      const target = join(dir, 'ut-target');
      const link = join(dir, 'ut-link');
      writeFileSync(target, '');
      utimesSync(target, 1_000_000, 1_000_000);
      symlinkSync(target, link);
      await posix.utimensat(link, T1, T2, c.AT_SYMLINK_NOFOLLOW);
      const l = lstatSync(link, { bigint: true });
      expect([l.atimeNs, l.mtimeNs]).toEqual([T1, T2]);
      expect(statSync(target, { bigint: true }).mtimeNs).toBe(1_000_000_000_000_000n);
      // without the flag: the target's
      await posix.utimensat(link, T2, T1, 0);
      expect(statSync(target, { bigint: true }).mtimeNs).toBe(T1);
      expect(lstatSync(link, { bigint: true }).mtimeNs).toBe(T2);
    });

    it("'omit' leaves a time as it is, 'now' sets the current time, times before the epoch work", async () => {
      const p = join(dir, 'ut-file');
      writeFileSync(p, '');
      await posix.utimensat(p, T1, T2, 0);
      await posix.utimensat(p, 'omit', T1, 0);
      let st = statSync(p, { bigint: true });
      expect([st.atimeNs, st.mtimeNs]).toEqual([T1, T1]);
      const before = BigInt(Date.now() - 1000) * 1_000_000n;
      await posix.utimensat(p, 'now', 'omit', 0);
      st = statSync(p, { bigint: true });
      expect(st.atimeNs).toBeGreaterThan(before);
      expect(st.mtimeNs).toBe(T1);
      await posix.utimensat(p, -1_500_000_000n, 'omit', 0);
      expect(statSync(p, { bigint: true }).atimeNs).toBe(-1_500_000_000n);
    });
  });

  describe('linkat', () => {
    it('makes a second link to a file', async () => {
      const a = join(dir, 'ln-a');
      writeFileSync(a, 'x');
      await posix.linkat(a, join(dir, 'ln-b'), 0);
      expect(statSync(a).nlink).toBe(2);
      expect(statSync(join(dir, 'ln-b')).ino).toBe(statSync(a).ino);
      await expect(posix.linkat(a, join(dir, 'ln-b'), 0)).rejects.toMatchObject({ errno: 17, code: 'EEXIST', syscall: 'linkat' });
    });

    it('links a symlink itself without AT_SYMLINK_FOLLOW, its target with it', async () => {
      const target = join(dir, 'ln-target');
      const link = join(dir, 'ln-link');
      writeFileSync(target, 'x');
      symlinkSync(target, link);
      await posix.linkat(link, join(dir, 'ln-of-link'), 0);
      expect(lstatSync(join(dir, 'ln-of-link')).isSymbolicLink()).toBe(true);
      expect(lstatSync(join(dir, 'ln-of-link')).ino).toBe(lstatSync(link).ino);
      await posix.linkat(link, join(dir, 'ln-of-target'), c.AT_SYMLINK_FOLLOW);
      expect(lstatSync(join(dir, 'ln-of-target')).ino).toBe(statSync(target).ino);
      expect(statSync(target).nlink).toBe(2);
    });
  });

  it('throws a TypeError synchronously for an argument of the wrong type', () => {
    const p = join(dir, 'never');
    const bad: [string, () => unknown][] = [
      ['path not a string', () => posix.mknod(1 as unknown as string, c.S_IFIFO, 0)],
      ['mode not a number', () => posix.mknod(p, '0644' as unknown as number, 0)],
      ['rdev negative', () => posix.mknod(p, c.S_IFIFO, -1)],
      ['value not a Buffer', () => posix.lsetxattr(p, 'user.test', 'v' as unknown as Buffer, 0)],
      ['name missing', () => (posix.lgetxattr as (path: string) => unknown)(p)],
      ['fd not an integer', () => posix.fgetxattr(1.5, 'user.test')],
      ['offset above 2^53', () => posix.fallocate(0, 0, 2 ** 54, 1)],
      ['time a number of ms', () => posix.utimensat(p, 1000 as unknown as bigint, 'now', 0)],
      ['time an unknown word', () => posix.utimensat(p, 'later' as 'now', 'now', 0)],
      ['path with a NUL', () => posix.linkat(`${p}\0x`, p, 0)],
      ['flags not a number', () => posix.renameat2(p, p, null as unknown as number)],
    ];
    for (const [what, call] of bad) expect({ what, threw: thrown(call) }).toEqual({ what, threw: 'TypeError' });
    expect(() => lstatSync(p)).toThrow();
  });

  it('rejects with the errno of the call and its name', async () => {
    const missing = join(dir, 'missing', 'x');
    await expect(posix.llistxattr(missing)).rejects.toMatchObject({ errno: 2, code: 'ENOENT', message: `llistxattr ${missing}: No such file or directory` });
    await expect(posix.flistxattr(2 ** 30)).rejects.toMatchObject({ errno: 9, code: 'EBADF', path: 2 ** 30 });
    mkdirSync(join(dir, 'd'));
    await expect(posix.renameat2(join(dir, 'd'), join(dir, 'd', 'sub'), 0)).rejects.toMatchObject({ errno: 22, code: 'EINVAL' });
  });
});

/** The name of the error `call` throws synchronously (a returned Promise is awaited by nobody: it must not be one that rejects). */
function thrown(call: () => unknown): string {
  try {
    const r = call();
    if (r instanceof Promise) r.catch(() => undefined);
    return 'returned';
  } catch (e) {
    return (e as Error).constructor.name;
  }
}
