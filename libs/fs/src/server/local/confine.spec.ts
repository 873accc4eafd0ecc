import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Errno, FsError } from '@svc/protocol';
import { confinedResolve, isInside, validateName } from './confine';

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
