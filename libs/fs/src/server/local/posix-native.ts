/**
 * Loads the POSIX calls addon (native/posix, C over Node-API, built by `npm ci` or
 * `npm run build:native` into native/posix/build/Release/svc_posix.node): the Linux system calls
 * the local backend needs and Node.js has no API for (mknod, the l* and f* xattr calls,
 * renameat2, fallocate, utimensat on a symlink, linkat). Loaded on first call, and optional:
 * {@link loadPosixNative} returns null where it is not built, and {@link posixNativeUnavailable}
 * says why.
 *
 * Every function runs its system call on the libuv thread pool and returns a Promise. A wrong
 * argument type throws a TypeError synchronously; a failed call rejects with a
 * {@link PosixNativeError}. Paths and xattr names are strings, given to the kernel as their UTF-8
 * bytes (a NUL character in them is a TypeError).
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** What a Debian machine needs to build the addon (it uses nothing beyond libc). */
export const POSIX_DEBIAN_PACKAGES = 'gcc make python3';

const BINARY = join('native', 'posix', 'build', 'Release', 'svc_posix.node');

/** The rejection of a failed call. Its message: `<syscall> <path>: <strerror>` (`<syscall> <path> -> <dest>: ...` for two paths, `fd <n>` for a descriptor). */
export interface PosixNativeError extends Error {
  /** The positive errno number (17). */
  errno: number;
  /** Its name as Node.js spells it ('EEXIST'; 95 is 'ENOTSUP'); `E<number>` when it has none. */
  code: string;
  /** The system call ('renameat2', 'lgetxattr', ...). */
  syscall: string;
  /** The path, or the file descriptor of the f* calls and fallocate. */
  path: string | number;
  /** The second path of renameat2 and linkat. */
  dest?: string;
}

/** A time for {@link PosixNative.utimensat}: nanoseconds since the epoch, `'now'` (UTIME_NOW) or `'omit'` (UTIME_OMIT: left as it is). */
export type UtimeNs = bigint | 'now' | 'omit';

/** The numbers the functions take (Linux values). */
export interface PosixConstants {
  /** File type bits of mknod's mode. */
  readonly S_IFIFO: number;
  readonly S_IFSOCK: number;
  readonly S_IFCHR: number;
  readonly S_IFBLK: number;
  readonly S_IFREG: number;
  /** setxattr flags: fail with EEXIST when the name exists (1); with ENODATA when it does not (2). */
  readonly XATTR_CREATE: number;
  readonly XATTR_REPLACE: number;
  /** renameat2 flags: fail with EEXIST when the new path exists (1); swap the two paths, which must both exist (2). */
  readonly RENAME_NOREPLACE: number;
  readonly RENAME_EXCHANGE: number;
  /** utimensat: the times of a symlink itself (0x100). */
  readonly AT_SYMLINK_NOFOLLOW: number;
  /** linkat: a link to what a symlink points to (0x400); without it, to the symlink itself. */
  readonly AT_SYMLINK_FOLLOW: number;
  /** fallocate modes: the size stays as it is (1); deallocate the range, with KEEP_SIZE (2). */
  readonly FALLOC_FL_KEEP_SIZE: number;
  readonly FALLOC_FL_PUNCH_HOLE: number;
}

/** The addon's functions: each a system call of the same name (`l*` on the path itself, symlinks not followed; `f*` on a descriptor). */
export interface PosixNative {
  /**
   * mknod(2).
   * @param mode the type bits (S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK, S_IFREG) and the permission bits (the umask applies)
   * @param rdev the device number (dev_t as it is, e.g. a stat's rdev) of a S_IFCHR or S_IFBLK node; 0 otherwise
   */
  mknod(path: string, mode: number, rdev: number | bigint): Promise<void>;
  /** The value of xattr `name` ('user.x'); ENODATA when there is none. */
  lgetxattr(path: string, name: string): Promise<Buffer>;
  /** @param flags 0, XATTR_CREATE or XATTR_REPLACE */
  lsetxattr(path: string, name: string, value: Buffer, flags: number): Promise<void>;
  /** The names of the xattrs the caller may see. */
  llistxattr(path: string): Promise<string[]>;
  /** ENODATA when there is none. */
  lremovexattr(path: string, name: string): Promise<void>;
  fgetxattr(fd: number, name: string): Promise<Buffer>;
  fsetxattr(fd: number, name: string, value: Buffer, flags: number): Promise<void>;
  flistxattr(fd: number): Promise<string[]>;
  fremovexattr(fd: number, name: string): Promise<void>;
  /**
   * renameat2(2) of paths (relative ones from the process's working directory).
   * @param flags 0, RENAME_NOREPLACE or RENAME_EXCHANGE (EINVAL where the file system has neither)
   */
  renameat2(oldPath: string, newPath: string, flags: number): Promise<void>;
  /**
   * fallocate(2).
   * @param mode 0 (allocate, extending the size), or FALLOC_FL_* bits
   * @param offset bytes, an integer up to 2^53 - 1
   * @param length bytes, an integer up to 2^53 - 1 (0 is EINVAL)
   */
  fallocate(fd: number, mode: number, offset: number, length: number): Promise<void>;
  /**
   * utimensat(2) on a path (from the working directory).
   * @param flags 0 or AT_SYMLINK_NOFOLLOW (the times of a symlink itself)
   */
  utimensat(path: string, atimeNs: UtimeNs, mtimeNs: UtimeNs, flags: number): Promise<void>;
  /**
   * linkat(2) of paths (from the working directory).
   * @param flags 0 (a symlink at oldPath is linked itself) or AT_SYMLINK_FOLLOW
   */
  linkat(oldPath: string, newPath: string, flags: number): Promise<void>;
  /**
   * A lock of the node's own on open file `fd`, never waiting, on the calling thread:
   * `kind` 0 an open file description lock (fcntl F_OFD_SETLK) over [start, start + len) bytes
   * (len 0: to the end of the file), 1 flock(2) with LOCK_NB (start and len unused); `type` 0
   * unlock, 1 read (shared), 2 write (exclusive).
   * @returns 0, or the errno (11 EAGAIN: a conflicting lock is held elsewhere)
   * @throws TypeError for a wrong argument
   */
  hostLock(fd: number, kind: 0 | 1, type: 0 | 1 | 2, start: number, len: number): number;
  readonly constants: PosixConstants;
}

/** The functions the addon must export (checked at load). */
const FUNCTIONS = [
  'mknod',
  'lgetxattr',
  'lsetxattr',
  'llistxattr',
  'lremovexattr',
  'fgetxattr',
  'fsetxattr',
  'flistxattr',
  'fremovexattr',
  'renameat2',
  'fallocate',
  'utimensat',
  'linkat',
  'hostLock',
] as const;

let loaded: PosixNative | null = null;
let unavailable: string | null = null;

/** The built binary: looked for in the first directory up from this file that holds native/posix (the repository, or the image's /app). */
function binaryPath(): string | null {
  for (let dir = __dirname; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'native', 'posix', 'binding.gyp')) || existsSync(join(dir, BINARY))) return join(dir, BINARY);
    if (dirname(dir) === dir) return null;
  }
}

/** Loads the addon, or says why it cannot. */
function load(): PosixNative | string {
  const file = binaryPath();
  const advice = `build it with \`npm run build:native\` (Debian: apt-get install ${POSIX_DEBIAN_PACKAGES})`;
  if (!file || !existsSync(file)) return `the POSIX calls addon is not built (${file ?? BINARY} is missing): ${advice}`;
  const mod = { exports: {} as unknown };
  try {
    process.dlopen(mod, file);
  } catch (e) {
    return `the POSIX calls addon ${file} cannot be loaded (${(e as Error).message}): ${advice}`;
  }
  const b = mod.exports as Partial<Record<(typeof FUNCTIONS)[number], unknown>> & { constants?: unknown };
  const absent = FUNCTIONS.filter((f) => typeof b[f] !== 'function');
  if (absent.length > 0 || typeof b.constants !== 'object' || b.constants === null) {
    return `the POSIX calls addon ${file} is out of date (${absent.length > 0 ? `without ${absent.join(', ')}` : 'without constants'}): ${advice}`;
  }
  return b as PosixNative;
}

/** The addon, loaded on first call; null when it is not built or cannot be loaded ({@link posixNativeUnavailable} says why). */
export function loadPosixNative(): PosixNative | null {
  if (!loaded && unavailable === null) {
    const r = load();
    if (typeof r === 'string') unavailable = r;
    else loaded = r;
  }
  return loaded;
}

/** Why the addon cannot be used (naming the Debian packages and `npm run build:native`), or null when it can. */
export function posixNativeUnavailable(): string | null {
  loadPosixNative();
  return unavailable;
}
