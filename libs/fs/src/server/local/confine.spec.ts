import { execFileSync } from 'node:child_process';
import {
  constants as C,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  realpathSync,
  renameSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { lstat, open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Errno, FsError } from '@svc/protocol';
import { OpenFlags } from '@svc/protocol';
import { confinedAt, confinedResolve, depthBelowSync, dirKeyOf, isInside, validateName } from './confine';
import { KEPT_DIRS_MAX, LocalDirBackend } from './local-dir.backend';

function errnoOf(fn: () => unknown): number | undefined {
  try {
    fn();
  } catch (e) {
    return (e as FsError).errno;
  }
  return undefined;
}

async function errnoOfAsync(p: Promise<unknown>): Promise<number | undefined> {
  try {
    await p;
  } catch (e) {
    return (e as FsError).errno;
  }
  return undefined;
}

describe('validateName', () => {
  it.each([['..'], ['.'], [''], ['a/b'], ['/abs'], ['nul\0'], [42 as unknown as string]])('refuses %j with EINVAL', (name) => {
    expect(errnoOf(() => validateName(name))).toBe(Errno.EINVAL);
  });
  it('refuses more than 255 bytes with ENAMETOOLONG and accepts 255', () => {
    expect(errnoOf(() => validateName('x'.repeat(256)))).toBe(Errno.ENAMETOOLONG);
    expect(errnoOf(() => validateName('é'.repeat(128)))).toBe(Errno.ENAMETOOLONG);
    expect(validateName('x'.repeat(255))).toBe('x'.repeat(255));
    expect(validateName('...')).toBe('...');
    expect(validateName('.hidden')).toBe('.hidden');
  });
});

describe('isInside', () => {
  it('compares whole path components', () => {
    expect(isInside('/srv/root', '/srv/root')).toBe(true);
    expect(isInside('/srv/root', '/srv/root/a')).toBe(true);
    expect(isInside('/srv/root', '/srv/rootx')).toBe(false);
    expect(isInside('/srv/root', '/srv')).toBe(false);
    expect(isInside('/', '/anything')).toBe(true);
  });
});

describe('confinedResolve', () => {
  let base: string;
  let root: string;
  beforeAll(() => {
    base = realpathSync(mkdtempSync(join(tmpdir(), 'svc-confine-')));
    root = join(base, 'root');
    mkdirSync(join(root, 'dir', 'sub'), { recursive: true });
    mkdirSync(join(base, 'outside'));
    writeFileSync(join(root, 'dir', 'f.txt'), 'x');
    writeFileSync(join(base, 'outside', 'secret'), 's');
    symlinkSync('dir/f.txt', join(root, 'rel'));
    symlinkSync(join(root, 'dir'), join(root, 'abs'));
    symlinkSync('../outside/secret', join(root, 'out'));
    symlinkSync(join(base, 'outside'), join(root, 'absout'));
    symlinkSync('sub/../../dir/f.txt', join(root, 'dir', 'twisty'));
    symlinkSync('loop', join(root, 'loop'));
    symlinkSync(`${root}/../outside`, join(root, 'sneaky'));
    symlinkSync('missing', join(root, 'dangling'));
  });
  afterAll(() => rmSync(base, { recursive: true, force: true }));

  it('resolves links that stay inside', async () => {
    expect(await confinedResolve(root, ['rel'])).toBe(join(root, 'dir', 'f.txt'));
    expect(await confinedResolve(root, ['abs', 'f.txt'])).toBe(join(root, 'dir', 'f.txt'));
    expect(await confinedResolve(root, ['dir', 'twisty'])).toBe(join(root, 'dir', 'f.txt'));
    expect(await confinedResolve(root, [])).toBe(root);
  });

  it('refuses links that leave the root with EACCES, without looking outside', async () => {
    expect(await errnoOfAsync(confinedResolve(root, ['out']))).toBe(Errno.EACCES);
    expect(await errnoOfAsync(confinedResolve(root, ['absout', 'secret']))).toBe(Errno.EACCES);
    expect(await errnoOfAsync(confinedResolve(root, ['sneaky']))).toBe(Errno.EACCES);
  });

  it('reports loops, missing entries and files used as directories', async () => {
    expect(await errnoOfAsync(confinedResolve(root, ['loop']))).toBe(Errno.ELOOP);
    expect(await errnoOfAsync(confinedResolve(root, ['dangling']))).toBe(Errno.ENOENT);
    expect(await errnoOfAsync(confinedResolve(root, ['dir', 'f.txt', 'x']))).toBe(Errno.ENOTDIR);
  });
});

describe('confinedAt', () => {
  let base: string;
  let root: string;
  let outside: string;
  beforeEach(() => {
    base = realpathSync(mkdtempSync(join(tmpdir(), 'svc-confine-at-')));
    root = join(base, 'root');
    outside = join(base, 'outside');
    mkdirSync(join(root, 'dir', 'sub'), { recursive: true });
    mkdirSync(outside);
    writeFileSync(join(root, 'dir', 'f.txt'), 'inside');
    writeFileSync(join(outside, 'f.txt'), 'outside');
    symlinkSync('dir/f.txt', join(root, 'file_link'));
    symlinkSync('dir', join(root, 'dir_link'));
  });
  afterEach(() => rmSync(base, { recursive: true, force: true }));

  it('hands over an entry of a held directory (O_NOFOLLOW) or a held directory itself (no O_NOFOLLOW)', async () => {
    const file = await confinedAt(root, ['file_link'], async (e) => e);
    expect(file.path).toMatch(/^\/proc\/self\/fd\/\d+\/f\.txt$/);
    expect(file.nofollow).toBe(C.O_NOFOLLOW);
    expect(file.real).toBe(join(root, 'dir', 'f.txt'));
    expect(file.st.isFile()).toBe(true);
    const up = await confinedAt(root, ['dir', 'sub', '..'], async (e) => e);
    expect(up.path).toMatch(/^\/proc\/self\/fd\/\d+$/);
    expect(up.nofollow).toBe(0);
    expect(up.real).toBe(join(root, 'dir'));
    expect(up.st.isDirectory()).toBe(true);
    expect((await confinedAt(root, [], async (e) => e)).real).toBe(root);
  });

  it('a link to a file used with a trailing slash is ENOTDIR, as for the kernel', async () => {
    symlinkSync('dir/f.txt/', join(root, 'slashed'));
    expect(await errnoOfAsync(confinedResolve(root, ['slashed']))).toBe(Errno.ENOTDIR);
    symlinkSync('dir/', join(root, 'dir_slashed'));
    expect(await confinedResolve(root, ['dir_slashed'])).toBe(join(root, 'dir'));
  });

  it('acts on the entry it resolved even when an ancestor is swapped for an outside link meanwhile', async () => {
    const content = await confinedAt(root, ['dir_link', 'f.txt'], async (e) => {
      renameSync(join(root, 'dir'), join(root, 'dir.orig'));
      symlinkSync(outside, join(root, 'dir'));
      const fh = await open(e.path, C.O_RDONLY | e.nofollow);
      try {
        return (await fh.readFile()).toString();
      } finally {
        await fh.close();
      }
    });
    expect(content).toBe('inside');
    // Resolved again now, the swapped directory leads outside.
    expect(await errnoOfAsync(confinedResolve(root, ['dir_link', 'f.txt']))).toBe(Errno.EACCES);
  });

  it('an entry that became a symlink before use (ELOOP) is looked at again and followed', async () => {
    writeFileSync(join(root, 'plain'), 'plain');
    let calls = 0;
    const real = await confinedAt(root, ['plain'], async (e) => {
      if (calls++ === 0) {
        unlinkSync(join(root, 'plain'));
        symlinkSync('dir/f.txt', join(root, 'plain'));
        await open(e.path, C.O_RDONLY | e.nofollow); // ELOOP
      }
      return e.real;
    });
    expect(real).toBe(join(root, 'dir', 'f.txt'));
    expect(calls).toBe(2);
  });

  it('an entry that vanished before use is ENOENT; one that keeps changing ends in ELOOP, not a loop forever', async () => {
    const gone = confinedAt(root, ['file_link'], async (e) => {
      unlinkSync(join(root, 'dir', 'f.txt'));
      return lstat(e.path);
    });
    await expect(gone).rejects.toMatchObject({ code: 'ENOENT' });
    let calls = 0;
    const restless = confinedAt(root, ['dir'], async () => {
      calls++;
      throw Object.assign(new Error('ELOOP'), { code: 'ELOOP' });
    });
    expect(await errnoOfAsync(restless)).toBe(Errno.ELOOP);
    expect(calls).toBeLessThanOrEqual(41);
  });

  it('errors of `use` other than ELOOP/ENOTDIR pass through unchanged; descriptors are closed', async () => {
    const before = countFds();
    const boom = new Error('boom');
    await expect(confinedAt(root, ['dir_link', 'sub'], async () => Promise.reject(boom))).rejects.toBe(boom);
    for (let i = 0; i < 20; i++) await confinedResolve(root, ['dir_link', 'sub', '..', 'f.txt']).catch(() => undefined);
    expect(countFds()).toBe(before);
  });

  it('links unlinked and recreated in a tight loop: the real path or ENOENT/ENOTDIR/ELOOP/EACCES, never a system error, never outside', async () => {
    symlinkSync('../outside', join(root, 'out_link'));
    mkdirSync(join(root, 'swap'));
    const end = Date.now() + 700;
    let stop = false;
    const churn = (async () => {
      let i = 0;
      while (Date.now() < end) {
        for (const [name, target] of [
          ['dir_link', 'dir'],
          ['file_link', 'dir/f.txt'],
          ['out_link', '../outside'],
        ]) {
          try {
            unlinkSync(join(root, name));
          } catch {
            /* raced */
          }
          symlinkSync(target, join(root, name));
        }
        rmSync(join(root, 'swap'), { recursive: true, force: true });
        if (i % 3 === 0) mkdirSync(join(root, 'swap'));
        else if (i % 3 === 1) symlinkSync(i % 2 ? 'dir' : '../outside', join(root, 'swap'));
        else writeFileSync(join(root, 'swap'), 'file');
        i++;
        await new Promise((r) => setImmediate(r));
      }
      stop = true;
    })();
    const seen = new Map<string, number>();
    const paths = [['dir_link', 'f.txt'], ['file_link'], ['dir_link'], ['out_link', 'f.txt'], ['swap', 'f.txt'], ['swap'], ['dir_link', 'sub', '..', 'f.txt']];
    const walker = async (k: number) => {
      for (let i = k; !stop; i++) {
        const rel = paths[i % paths.length];
        try {
          // Used as LocalDirBackend uses it: opened without following a link.
          const real = await confinedAt(root, rel, async (e) => {
            await (await open(e.path, C.O_RDONLY | C.O_NONBLOCK | e.nofollow)).close();
            return e.real;
          });
          expect(isInside(root, real)).toBe(true);
          seen.set('ok', (seen.get('ok') ?? 0) + 1);
        } catch (e) {
          const code = e instanceof FsError ? `errno ${e.errno}` : `${(e as NodeJS.ErrnoException).code}`;
          seen.set(code, (seen.get(code) ?? 0) + 1);
        }
      }
    };
    await Promise.all([churn, ...Array.from({ length: 8 }, (_, k) => walker(k))]);
    const allowed = ['ok', `errno ${Errno.ENOENT}`, `errno ${Errno.ENOTDIR}`, `errno ${Errno.ELOOP}`, `errno ${Errno.EACCES}`, 'ENOENT'];
    // 'ENOENT' (a Node error of `use` itself): the entry vanished after the walk handed it over.
    expect([...seen.keys()].filter((k) => !allowed.includes(k))).toEqual([]);
    expect(seen.get('ok')).toBeGreaterThan(0);
    expect(lstatSync(join(outside, 'f.txt')).size).toBe(7);
  });
});

describe('paths longer than PATH_MAX', () => {
  /** 17 names of 250 bytes: 4,267 bytes below the root, more than the kernel prints. */
  const chain = Array.from({ length: 17 }, (_, i) => `${String(i).padStart(3, '0')}${'x'.repeat(247)}`);
  let base: string;
  let root: string;

  beforeEach(() => {
    base = realpathSync(mkdtempSync(join(tmpdir(), 'svc-longpath-')));
    root = join(base, 'root');
    mkdirSync(root);
  });
  // rm(1) walks with *at() calls; Node's rmSync stops at paths over PATH_MAX.
  afterEach(() => execFileSync('rm', ['-rf', base]));

  it('depthBelowSync places the root at 0, a directory by its depth, and what is outside as null, leaking no descriptor', async () => {
    mkdirSync(join(root, 'a', 'b', 'c'), { recursive: true });
    const key = dirKeyOf(lstatSync(root, { bigint: true }));
    const fds = countFds();
    for (const [path, depth] of [
      [root, 0],
      [join(root, 'a', 'b', 'c'), 3],
      [base, null],
      ['/', null],
    ] as const) {
      const fh = await open(path, C.O_RDONLY | C.O_DIRECTORY);
      try {
        expect(depthBelowSync(key, fh.fd)).toBe(depth);
      } finally {
        await fh.close();
      }
    }
    expect(countFds()).toBe(fds);
  });

  it('LocalDirBackend serves a tree deeper than PATH_MAX: mkdir, create, write, stat, readdir, rename, symlink confined', async () => {
    const backend = await LocalDirBackend.at(root, { ro: false });
    try {
      for (let i = 0; i < chain.length; i++) await backend.mkdir(chain.slice(0, i), chain[i], 0o755);
      expect(Buffer.byteLength(chain.join('/'))).toBeGreaterThan(4096);
      const { file } = await backend.create(chain, 'f', 0o644, OpenFlags.O_RDWR);
      await file.write(Buffer.from('deep'), 0);
      await file.close();
      expect((await backend.getattr([...chain, 'f'])).size).toBe(4);
      expect(await backend.readdir(chain)).toEqual(['f']);
      const { file: dir } = await backend.open(chain, OpenFlags.O_RDONLY);
      await dir.close();
      await backend.rename(chain, 'f', chain, 'g');
      expect(await backend.readdir(chain)).toEqual(['g']);
      // A relative target that stays inside is made; one that climbs above the root is refused.
      await backend.symlink(chain, 'in', `${'../'.repeat(chain.length)}x`);
      expect(await backend.readlink([...chain, 'in'])).toBe(`${'../'.repeat(chain.length)}x`);
      await expect(backend.symlink(chain, 'out', `${'../'.repeat(chain.length + 1)}x`)).rejects.toMatchObject({ errno: Errno.EACCES });
    } finally {
      await backend.close();
    }
  });
});

function countFds(): number {
  return readdirSync('/proc/self/fd').length;
}

describe('LocalDirBackend: directories kept pinned between operations', () => {
  let base: string;
  let root: string;
  let outside: string;

  beforeEach(() => {
    base = realpathSync(mkdtempSync(join(tmpdir(), 'svc-kept-')));
    root = join(base, 'root');
    outside = join(base, 'outside');
    mkdirSync(root);
    mkdirSync(outside);
  });
  afterEach(() => rmSync(base, { recursive: true, force: true }));

  async function touch(backend: LocalDirBackend, dir: string[], name: string): Promise<void> {
    const { file } = await backend.create(dir, name, 0o644, OpenFlags.O_RDWR);
    await file.close();
  }

  it('acts in what the path leads to now: a directory moved away and made again, replaced by a link out, removed', async () => {
    const backend = await LocalDirBackend.at(root, { ro: false });
    mkdirSync(join(root, 'a'));
    await touch(backend, ['a'], 'f1');
    renameSync(join(root, 'a'), join(root, 'a-old'));
    mkdirSync(join(root, 'a'));
    await touch(backend, ['a'], 'f2');
    expect({ a: readdirSync(join(root, 'a')), old: readdirSync(join(root, 'a-old')) }).toEqual({ a: ['f2'], old: ['f1'] });
    rmSync(join(root, 'a'), { recursive: true });
    symlinkSync(outside, join(root, 'a'));
    expect(await errnoOfAsync(touch(backend, ['a'], 'f3'))).toBe(Errno.EACCES);
    unlinkSync(join(root, 'a'));
    expect(await errnoOfAsync(touch(backend, ['a'], 'f4'))).toBe(Errno.ESTALE);
    expect(readdirSync(outside)).toEqual([]);
  });

  it('follows a link inside the root to where it leads now', async () => {
    const backend = await LocalDirBackend.at(root, { ro: false });
    mkdirSync(join(root, 'x'));
    mkdirSync(join(root, 'y'));
    symlinkSync('x', join(root, 'link'));
    await touch(backend, ['link'], 'one');
    unlinkSync(join(root, 'link'));
    symlinkSync('y', join(root, 'link'));
    await touch(backend, ['link'], 'two');
    expect({ x: readdirSync(join(root, 'x')), y: readdirSync(join(root, 'y')) }).toEqual({ x: ['one'], y: ['two'] });
  });

  it(`keeps at most ${KEPT_DIRS_MAX} directories: descriptors do not grow with the directories worked in`, async () => {
    const backend = await LocalDirBackend.at(root, { ro: false });
    for (let i = 0; i < 50; i++) mkdirSync(join(root, `d${i}`));
    await backend.getattr(['d0']);
    const fds = countFds();
    for (let i = 0; i < 50; i++) await touch(backend, [`d${i}`], 'f');
    expect(countFds() - fds).toBeLessThanOrEqual(KEPT_DIRS_MAX);
    expect(countFds() - fds).toBeGreaterThan(0);
  });
});
