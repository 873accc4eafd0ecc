/**
 * Confinement of a local export (PROTOCOL.md 8 "Confinement"): nothing outside an export's
 * root is ever read, written, listed or stat'ed.
 *
 * The rules, applied by {@link LocalDirBackend}:
 * - a name is one path component: `/`, NUL, `.`, `..` and the empty name are EINVAL, more than
 *   255 bytes ENAMETOOLONG ({@link validateName});
 * - a directory is used only through a pinned file descriptor whose real path
 *   (`readlink /proc/self/fd/N`) is inside the root, and names are resolved relative to it as
 *   `/proc/self/fd/N/<name>` (the *at() semantics: an ancestor swapped for a symlink after the
 *   check cannot redirect the operation);
 * - a symlink is followed only after {@link confinedResolve} has resolved it without leaving the
 *   root (only paths inside the root are lstat'ed or read), and whatever is opened is checked
 *   again by the real path of its descriptor ({@link realPathOfFd}).
 */
import { readlinkSync } from 'node:fs';
import { readlink, lstat } from 'node:fs/promises';
import { Errno, FsError, NAME_MAX } from '@svc/protocol';

/** Most symlinks followed while resolving one path (Linux MAXSYMLINKS). */
export const MAX_SYMLINKS = 40;

/**
 * Checks one directory-entry name (PROTOCOL.md 8).
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

/**
 * Resolves `rel` (names below `root`) to a real path inside `root`, following symlinks the way
 * the kernel would but touching nothing outside `root`: each component is lstat'ed below the
 * part already resolved, and a symlink's target is spliced in only while it stays inside
 * (an absolute target must start with `root/`; `..` may not climb above `root`).
 * @param root real path of the export root (no symlinks, no trailing `/`)
 * @param rel path components below the root, or a symlink target split on `/`
 * @returns the real path, inside `root`
 * @throws FsError EACCES (a symlink leads outside the root), ELOOP (more than 40 symlinks),
 *   ENOENT / ENOTDIR (as the kernel would say), or the mapped error of a failing lstat
 */
export async function confinedResolve(root: string, rel: readonly string[]): Promise<string> {
  const pending = [...rel];
  let current = root;
  let links = 0;
  while (pending.length > 0) {
    const comp = pending.shift()!;
    if (comp === '' || comp === '.') continue;
    if (comp === '..') {
      if (current === root) throw new FsError(Errno.EACCES, 'symlink target leaves the export root');
      current = current.slice(0, current.lastIndexOf('/')) || '/';
      continue;
    }
    const next = current === '/' ? `/${comp}` : `${current}/${comp}`;
    let st;
    try {
      st = await lstat(next);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      throw new FsError(code === 'ENOTDIR' ? Errno.ENOTDIR : code === 'ENOENT' ? Errno.ENOENT : code === 'ENAMETOOLONG' ? Errno.ENAMETOOLONG : Errno.EACCES);
    }
    if (st.isSymbolicLink()) {
      if (++links > MAX_SYMLINKS) throw new FsError(Errno.ELOOP);
      const target = await readlink(next);
      if (target.startsWith('/')) {
        if (!isInside(root, target.replace(/\/+$/, '') || '/')) throw new FsError(Errno.EACCES, 'symlink target is outside the export root');
        current = root;
        pending.unshift(...target.slice(root === '/' ? 1 : root.length + 1).split('/'));
      } else {
        pending.unshift(...target.split('/'));
      }
      continue;
    }
    if (pending.some((c) => c !== '' && c !== '.') && !st.isDirectory()) throw new FsError(Errno.ENOTDIR);
    current = next;
  }
  return current;
}
