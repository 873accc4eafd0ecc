/**
 * Confinement of a local export (docs/protocol.md "Confinement"): nothing outside an export's
 * root is ever read, written, listed or stat'ed.
 *
 * The rules, applied by {@link LocalDirBackend}:
 * - a name is one path component: `/`, NUL, `.`, `..` and the empty name are EINVAL, more than
 *   255 bytes ENAMETOOLONG ({@link validateName});
 * - a directory is used only through a pinned file descriptor whose real path
 *   (`readlink /proc/self/fd/N`) is inside the root, and names are resolved relative to it as
 *   `/proc/self/fd/N/<name>` (the *at() semantics: an ancestor swapped for a symlink after the
 *   check cannot redirect the operation);
 * - a symlink is followed only through {@link confinedAt}, which walks the path holding each
 *   directory it passed open (only names inside the root are lstat'ed or read, even when an
 *   ancestor is swapped meanwhile) and answers a link or directory that vanishes or changes
 *   during the walk with the errno the filesystem would give (ENOENT, ENOTDIR, ELOOP; EACCES
 *   for what leads outside), never an internal error; whatever is opened is checked again by
 *   the real path of its descriptor ({@link realPathOfFd});
 * - a descriptor whose real path is longer than the kernel will print (over PATH_MAX: reading
 *   its `/proc/self/fd` link is ENAMETOOLONG) is placed by walking `..` up from it to the root,
 *   compared by device and inode ({@link depthBelowSync}).
 */
import { BigIntStats, closeSync, constants as C, fstatSync, open as openCb, openSync, readlinkSync, Stats } from 'node:fs';
import { lstat, readlink, stat } from 'node:fs/promises';
import { promisify } from 'node:util';
import { Errno, FsError, NAME_MAX, OpenFlags } from '@svc/protocol';
import { errnoOf } from './errno';

const O_PATH = OpenFlags.O_PATH;

/** Most symlinks followed while resolving one path (Linux MAXSYMLINKS). */
export const MAX_SYMLINKS = 40;

/**
 * Checks one directory-entry name (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)").
 * @returns the name
 * @throws FsError EINVAL (not a string, empty, `.`, `..`, contains `/` or NUL), ENAMETOOLONG (over 255 bytes of UTF-8)
 */
export function validateName(name: unknown, field = 'name'): string {
  if (typeof name !== 'string') throw new FsError(Errno.EINVAL, `${field} must be a string`);
  if (name === '' || name === '.' || name === '..') throw new FsError(Errno.EINVAL, `${field} must not be empty, "." or ".."`);
  if (name.includes('/') || name.includes('\0')) throw new FsError(Errno.EINVAL, `${field} must be one path component (no "/" or NUL)`);
  if (Buffer.byteLength(name, 'utf8') > NAME_MAX) throw new FsError(Errno.ENAMETOOLONG, `${field} is longer than ${NAME_MAX} bytes`);
  return name;
}

/** True when absolute, normalised `path` is `root` or below it. */
export function isInside(root: string, path: string): boolean {
  if (root === '/') return path.startsWith('/');
  return path === root || path.startsWith(`${root}/`);
}

/** `/proc/self/fd/<fd>` or `/proc/self/fd/<fd>/<name>`: a path resolved relative to an open descriptor. */
export function fdPath(fd: number, name?: string): string {
  return name === undefined ? `/proc/self/fd/${fd}` : `/proc/self/fd/${fd}/${name}`;
}

/**
 * The real path of what descriptor `fd` refers to.
 * @throws FsError ENOENT when it was deleted (`... (deleted)`)
 */
export async function realPathOfFd(fd: number): Promise<string> {
  const real = await readlink(fdPath(fd));
  if (real.endsWith(' (deleted)') || !real.startsWith('/')) throw new FsError(Errno.ENOENT);
  return real;
}

/**
 * {@link realPathOfFd} without the thread-pool round trip, with the same checks. Safe to call
 * synchronously: reading a `/proc/self/fd` link asks the kernel for the descriptor's path and
 * never waits for the filesystem it points into (a slow or hung export cannot block here).
 * @throws FsError ENOENT when it was deleted (`... (deleted)`)
 */
export function realPathOfFdSync(fd: number): string {
  const real = readlinkSync(fdPath(fd));
  if (real.endsWith(' (deleted)') || !real.startsWith('/')) throw new FsError(Errno.ENOENT);
  return real;
}

/** Device and inode number of a directory: what {@link depthBelowSync} compares. */
export interface DirKey {
  dev: bigint;
  ino: bigint;
}

/** The device and inode number of `st`. */
export function dirKeyOf(st: { dev: bigint; ino: bigint }): DirKey {
  return { dev: st.dev, ino: st.ino };
}

/** True when `e` is the ENAMETOOLONG of reading a `/proc/self/fd` link of a path over PATH_MAX. */
export function isPathTooLong(e: unknown): boolean {
  return (e as NodeJS.ErrnoException | null)?.code === 'ENAMETOOLONG';
}

/**
 * How many directories below `root` directory descriptor `fd` is, found by walking `..` up from
 * it, one `O_PATH` descriptor at a time, until a directory with the root's device and inode
 * number (inside: its depth) or `/` (whose `..` is itself: outside). This places a directory
 * whose real path the kernel will not print (longer than PATH_MAX); it costs an open and an
 * fstat per level, all in the dentry cache (a pinned directory's ancestors stay cached), so it
 * is synchronous like {@link realPathOfFdSync}.
 * @param root device and inode number of the export root
 * @param fd a directory descriptor (any open mode, O_PATH included)
 * @returns 0 for the root itself, n for a directory n levels below it; null when outside
 * @throws Node system errors of open(2)/fstat(2) (ENOTDIR when `fd` is not a directory)
 */
export function depthBelowSync(root: DirKey, fd: number): number | null {
  let cur = fd;
  try {
    for (let depth = 0; ; depth++) {
      const st = fstatSync(cur, { bigint: true });
      if (st.dev === root.dev && st.ino === root.ino) return depth;
      const up = openSync(fdPath(cur, '..'), O_PATH | C.O_DIRECTORY);
      const upSt = fstatSync(up, { bigint: true });
      if (cur !== fd) closeFd(cur);
      cur = up;
      if (upSt.dev === st.dev && upSt.ino === st.ino) return null;
    }
  } finally {
    if (cur !== fd) closeFd(cur);
  }
}

/** open(2) returning the descriptor number. */
const openFd = promisify(openCb) as (path: string, flags: number) => Promise<number>;

/**
 * The system calls of a walk ({@link confinedAt}), each as `fs/promises` has it (Node's errors):
 * lstat, stat, readlink and an open(2) returning the descriptor number. The default sends them
 * to libuv's thread pool; an export passes its {@link MetaIo}, which runs them in place while the
 * disk answers quickly.
 */
export interface WalkIo {
  lstat(path: string): Promise<Stats | BigIntStats>;
  stat(path: string): Promise<Stats | BigIntStats>;
  readlink(path: string): Promise<string>;
  openFd(path: string, flags: number): Promise<number>;
}

/** {@link WalkIo} on the thread pool. */
const POOL_WALK_IO: WalkIo = { lstat: (p) => lstat(p), stat: (p) => stat(p), readlink: (p) => readlink(p, 'utf8'), openFd };

/** Closes a descriptor the walk opened (O_PATH: nothing to flush, so at once). */
function closeFd(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    /* already closed */
  }
}

/** The Node error code of `e` when it is a system error (not an {@link FsError}). */
function sysCode(e: unknown): string | undefined {
  if (e instanceof FsError) return undefined;
  const code = (e as NodeJS.ErrnoException | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** A system error of the walk as the errno the filesystem gave (an FsError passes through). */
function walkError(e: unknown): unknown {
  return sysCode(e) === undefined ? e : new FsError(errnoOf(e));
}

/**
 * What {@link confinedAt} resolved a path to: an entry that is not a symlink, reached only
 * through directories inside the root that the walk holds open.
 */
export interface ConfinedEntry {
  /**
   * The path to hand to a system call: `/proc/self/fd/<dir>/<name>` (the entry in a directory
   * the walk holds), or `/proc/self/fd/<dir>` when the path named such a directory itself
   * (the export root, or after `..`).
   */
  path: string;
  /**
   * Flags to add to an open(2) of {@link path}: `O_NOFOLLOW` for an entry (it was lstat'ed as
   * no symlink; if it became one since, the open fails with ELOOP and the walk looks again);
   * 0 for a `/proc/self/fd/<dir>` link, which has to be followed.
   */
  nofollow: number;
  /** lstat of the entry (never a symlink). */
  st: Stats | BigIntStats;
  /** Its real path, inside the root. */
  real: string;
}

/**
 * Resolves `rel` (names below `root`) the way the kernel would, following symlinks, but touching
 * nothing outside `root`, and hands the result to `use` while the directory holding it is still
 * pinned.
 *
 * The walk holds an `O_PATH|O_DIRECTORY|O_NOFOLLOW` descriptor of each directory it went
 * through (the root first) and looks at every name relative to the last one
 * (`/proc/self/fd/N/<name>`), so an ancestor swapped for a symlink during the walk cannot
 * redirect it: each name is lstat'ed and each link read only inside the root. A symlink's
 * target is spliced in only while it stays inside (an absolute target must start with `root/`;
 * `..` may not climb above `root`).
 *
 * Entries that change while they are looked at get the answer the filesystem would give at
 * some instant, never an internal error: one that vanishes is ENOENT; one that stops being a
 * symlink between its lstat and its readlink (EINVAL), or stops being a directory, or becomes a
 * symlink before it is opened (`use` or the directory open fails with ELOOP, or with ENOTDIR
 * for what was lstat'ed as a directory) is looked at again. Each second look counts as a
 * symlink followed, so a name that keeps changing ends in ELOOP after {@link MAX_SYMLINKS}.
 *
 * @param root real path of the export root (no symlinks, no trailing `/`)
 * @param rel path components below the root
 * @param use called once with the resolved entry; it should throw Node system errors as they
 *   come (ELOOP and ENOTDIR are recognised as above, anything else is passed on unchanged)
 * @param io the system calls of the walk (default: on the thread pool)
 * @returns what `use` returned
 * @throws FsError EACCES (a symlink leads outside the root, or the root itself moved), ELOOP
 *   (more than 40 symlinks), ENOENT / ENOTDIR (as the kernel would say), the errno of another
 *   failing lstat, readlink or open; or whatever `use` threw
 */
export async function confinedAt<T>(root: string, rel: readonly string[], use: (entry: ConfinedEntry) => Promise<T>, io: WalkIo = POOL_WALK_IO): Promise<T> {
  /** Directories held, the root first: descriptor and real path. */
  const dirs: Array<{ fd: number; real: string }> = [];
  try {
    try {
      dirs.push({ fd: await io.openFd(root, O_PATH | C.O_DIRECTORY | C.O_NOFOLLOW), real: root });
    } catch (e) {
      throw walkError(e);
    }
    if (realPathOfFdSync(dirs[0].fd) !== root) throw new FsError(Errno.EACCES, 'the export root moved');
    const pending = [...rel];
    let links = 0;
    /** `comp` changed while it was looked at: look at it again (bounded like following a link). */
    const again = (comp: string) => {
      if (++links > MAX_SYMLINKS) throw new FsError(Errno.ELOOP);
      pending.unshift(comp);
    };
    for (;;) {
      const top = dirs[dirs.length - 1];
      const comp = pending.shift();
      if (comp === undefined) {
        // The path names a directory the walk holds (the root, or one reached by `..`).
        const path = fdPath(top.fd);
        let st: Stats | BigIntStats;
        try {
          st = await io.stat(path);
        } catch (e) {
          throw walkError(e);
        }
        return await use({ path, nofollow: 0, st, real: top.real });
      }
      if (comp === '' || comp === '.') continue;
      if (comp === '..') {
        if (dirs.length === 1) throw new FsError(Errno.EACCES, 'symlink target leaves the export root');
        closeFd(dirs.pop()!.fd);
        continue;
      }
      const entry = fdPath(top.fd, comp);
      const real = top.real === '/' ? `/${comp}` : `${top.real}/${comp}`;
      let st: Stats | BigIntStats;
      try {
        st = await io.lstat(entry);
      } catch (e) {
        throw walkError(e);
      }
      if (st.isSymbolicLink()) {
        if (++links > MAX_SYMLINKS) throw new FsError(Errno.ELOOP);
        let target: string;
        try {
          target = await io.readlink(entry);
        } catch (e) {
          // EINVAL: no longer a symlink (replaced since the lstat); ENOENT: gone.
          if (sysCode(e) === 'EINVAL') {
            pending.unshift(comp);
            continue;
          }
          throw walkError(e);
        }
        if (target.startsWith('/')) {
          if (!isInside(root, target.replace(/\/+$/, '') || '/')) throw new FsError(Errno.EACCES, 'symlink target is outside the export root');
          while (dirs.length > 1) closeFd(dirs.pop()!.fd);
          pending.unshift(...target.slice(root === '/' ? 1 : root.length + 1).split('/'));
        } else {
          pending.unshift(...target.split('/'));
        }
        continue;
      }
      const more = pending.some((c) => c !== '' && c !== '.');
      // A trailing `/` (or `/.`) asks for a directory, as it does of the kernel.
      if ((more || pending.length > 0) && !st.isDirectory()) throw new FsError(Errno.ENOTDIR);
      if (!more) {
        try {
          return await use({ path: entry, nofollow: C.O_NOFOLLOW, st, real });
        } catch (e) {
          const code = sysCode(e);
          if (code === 'ELOOP' || (code === 'ENOTDIR' && st.isDirectory())) {
            again(comp);
            continue;
          }
          throw e;
        }
      }
      let fd: number;
      try {
        fd = await io.openFd(entry, O_PATH | C.O_DIRECTORY | C.O_NOFOLLOW);
      } catch (e) {
        const code = sysCode(e);
        // ENOTDIR/ELOOP: no longer a directory (a symlink or a file now).
        if (code === 'ENOTDIR' || code === 'ELOOP') {
          again(comp);
          continue;
        }
        throw walkError(e);
      }
      dirs.push({ fd, real });
    }
  } finally {
    for (const d of dirs) closeFd(d.fd);
  }
}

/**
 * Resolves `rel` (names below `root`) to a real path inside `root` with {@link confinedAt}.
 * The path is only a name: what is at it may change right after; to act on the entry, use
 * {@link confinedAt}, which pins the directory holding it.
 * @param root real path of the export root (no symlinks, no trailing `/`)
 * @param rel path components below the root, or a symlink target split on `/`
 * @returns the real path, inside `root`
 * @throws FsError as {@link confinedAt}
 */
export function confinedResolve(root: string, rel: readonly string[]): Promise<string> {
  return confinedAt(root, rel, async (entry) => entry.real);
}
