/**
 * LocalDirBackend: an export served from a directory on the node's disk (`source_kind`
 * `local_dir`), confined to its root (docs/protocol.md "Confinement"; see confine.ts for the
 * rules). Metadata calls, the creation and close of files and small writes go through
 * {@link MetaIo} (in place while the disk answers them quickly, else on the thread pool); opens
 * of existing files, reads, larger writes, fsync, truncation and listings run on the pool.
 *
 * Every operation pins the directory it works in: `open(dir, O_PATH|O_DIRECTORY)`, then checks
 * that the descriptor's real path is inside the root, then acts on `/proc/self/fd/<fd>/<name>`.
 * Operations that must not follow a final symlink (setattr, truncate) act on an
 * `O_PATH|O_NOFOLLOW` descriptor of the entry through its `/proc/self/fd` link (the kernel
 * applies chmod/chown/utimes/truncate to exactly that inode: ENOTSUP/ELOOP for a symlink);
 * unlink, rmdir, rename, mkdir and symlink never follow a final symlink. `open` follows a final
 * symlink only through {@link confinedAt}, opens with O_NOFOLLOW|O_NONBLOCK, refuses
 * special files (devices, fifos, sockets: EACCES) and checks the real path of the new descriptor.
 *
 * Races with changes on disk: every system error is answered as its errno (toFsError), and a
 * link or directory that vanishes or changes while a path is resolved gets the errno the
 * filesystem would give (ENOENT, ENOTDIR, ELOOP; EACCES when it leads outside), never an
 * internal error (see {@link confinedAt} and {@link LocalDirBackend.pinDir}).
 * Linux only (`/proc/self/fd`).
 */
import { Logger } from '@nestjs/common';
import {
  closeSync,
  constants as C,
  fstat,
  fsync as fsyncCb,
  ftruncate as ftruncateCb,
  lstat as lstatCb,
  open as openCb,
  read as readCb,
  watch as fsWatch,
  BigIntStats,
} from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { promisify } from 'node:util';
import { lstat, readdir, realpath, stat, statfs, truncate } from 'node:fs/promises';
import { Errno, FsError, NAME_MAX, NodeKind, OpenFlags, StatFs, wantsWrite } from '@svc/protocol';
import type { FsAttrChanges, FsBackend, FsOpenFile, FsOwner, FsStat, FsWatch, FsWatchEvent, SmallFileRead } from '../fs-backend';
import { confinedAt, depthBelowSync, DirKey, dirKeyOf, fdPath, isInside, isPathTooLong, realPathOfFdSync } from './confine';
import { toFsError } from './errno';
import { MetaIo, MetaIoMode } from './meta-io';
import { loadPosixNative, PosixNative } from './posix-native';

const O_PATH = OpenFlags.O_PATH;
/** The set-group-ID mode bit. */
const S_ISGID = 0o2000;
/** Client open flags passed through to open(2); the access mode is added separately. */
const PASS_FLAGS = OpenFlags.O_TRUNC | OpenFlags.O_APPEND | OpenFlags.O_DSYNC | OpenFlags.O_SYNC | OpenFlags.O_NOATIME | OpenFlags.O_DIRECTORY;
/** Open flags never accepted from a client. */
const REFUSED_FLAGS = OpenFlags.O_PATH | OpenFlags.O_TMPFILE;

/**
 * Files {@link LocalDirBackend.readSmallFiles} has in the thread pool at once: enough to keep
 * libuv's 4 threads and the disk queue busy, few enough to leave room for other sessions' calls.
 */
const SMALL_READS_IN_FLIGHT = 16;

/**
 * Directories a backend keeps pinned between operations ({@link LocalDirBackend.pinDir}): the
 * ones worked in lately, each an O_PATH descriptor.
 */
export const KEPT_DIRS_MAX = 16;

/** Default limit of directory watches per backend (inotify watches are a per-user kernel resource). */
export const DEFAULT_MAX_WATCHES = 8192;

/** Converts Node's bigint stats to an {@link FsStat} (ns times as JSON-safe numbers). */
export function toFsStat(st: BigIntStats): FsStat {
  const type = Number(st.mode) & C.S_IFMT;
  const kind = type === C.S_IFDIR ? NodeKind.DIR : type === C.S_IFLNK ? NodeKind.SYMLINK : NodeKind.FILE;
  return {
    kind,
    mode: Number(st.mode),
    nlink: Number(st.nlink),
    uid: Number(st.uid),
    gid: Number(st.gid),
    size: Number(st.size),
    atimeNs: Number(st.atimeNs),
    mtimeNs: Number(st.mtimeNs),
    ctimeNs: Number(st.ctimeNs),
    fileKey: `${st.dev}:${st.ino}`,
    ...(st.birthtimeNs > 0n ? { birthNs: Number(st.birthtimeNs) } : {}),
    ...(st.rdev !== 0n ? { rdev: Number(st.rdev) } : {}),
  };
}

function isServable(mode: number): boolean {
  const type = mode & C.S_IFMT;
  return type === C.S_IFREG || type === C.S_IFDIR;
}

function splitParent(path: readonly string[]): [readonly string[], string] {
  if (path.length === 0) throw new FsError(Errno.EINVAL, 'the export root has no parent');
  return [path.slice(0, -1), path[path.length - 1]];
}

/** open(2) on the thread pool returning the descriptor number (O_PATH descriptors are closed with {@link closePath}). */
const openFd = promisify(openCb) as (path: string, flags: number) => Promise<number>;

/**
 * Closes an O_PATH or read-only descriptor at once, without a thread-pool round trip: closing
 * one never waits for the filesystem (no data to flush).
 */
function closePath(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    /* already closed */
  }
}

/** Runs a filesystem call, mapping Node errors to FsErrors. */
async function fsCall<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    throw toFsError(e);
  }
}

/** pread(2) on the pool: bytes read. */
const preadAsync = (fd: number, buffer: Buffer, offset: number, length: number, position: number): Promise<number> =>
  new Promise((resolve, reject) => readCb(fd, buffer, offset, length, position, (e, n) => (e ? reject(e) : resolve(n))));
const fsyncAsync = promisify(fsyncCb);
const ftruncateAsync = promisify(ftruncateCb);

/**
 * An open file of a local export: a descriptor read on the thread pool, written through
 * {@link MetaIo.write} (small writes in place), synced and truncated on the pool, closed through
 * {@link MetaIo.close}. Calls on the pool are counted: close waits for them, so the descriptor
 * number is never reused under a call still queued.
 */
class LocalOpenFile implements FsOpenFile {
  private closed = false;
  /** Calls on the descriptor not finished yet, and who waits for none to be left (close). */
  private busy = 0;
  private idle: (() => void) | null = null;

  constructor(
    private readonly fd: number,
    readonly readable: boolean,
    readonly writable: boolean,
    private readonly isDir: boolean,
    private readonly io: MetaIo,
  ) {}

  get descriptor(): number {
    return this.fd;
  }

  /** Runs `fn` on the descriptor, counted in {@link busy}. @throws FsError EBADF once closed; what `fn` threw as an FsError */
  private async use<T>(fn: (fd: number) => Promise<T>): Promise<T> {
    if (this.closed) throw new FsError(Errno.EBADF);
    this.busy++;
    try {
      return await fn(this.fd);
    } catch (e) {
      throw toFsError(e);
    } finally {
      if (--this.busy === 0 && this.idle) this.idle();
    }
  }

  async read(buffer: Buffer, position: number): Promise<number> {
    if (this.isDir && !this.closed) throw new FsError(Errno.EISDIR);
    // Only regular files are served, and pread(2) of a regular file returns fewer bytes than
    // asked only at its end: a short read ends the loop instead of a second read that returns 0
    // (one thread-pool round trip less for every small file; bench:fuse-latency).
    return this.use(async (fd) => {
      let total = 0;
      while (total < buffer.length) {
        const want = buffer.length - total;
        const n = await preadAsync(fd, buffer, total, want, position + total);
        total += n;
        if (n < want) break;
      }
      return total;
    });
  }

  async write(data: Buffer, position: number): Promise<number> {
    return this.use(async (fd) => {
      let total = 0;
      while (total < data.length) {
        const n = await this.io.write(fd, data, total, data.length - total, position + total);
        if (n === 0) throw new FsError(Errno.EIO, 'short write');
        total += n;
      }
      return total;
    });
  }

  async stat(): Promise<FsStat> {
    return this.use(async (fd) => toFsStat(await this.io.fstat(fd)));
  }

  async sync(): Promise<void> {
    await this.use((fd) => fsyncAsync(fd));
  }

  /** fallocate(2) of the descriptor through native/posix (EBADF when it is not open for writing, as Linux says). */
  async allocate(mode: number, offset: number, length: number): Promise<FsStat> {
    if (this.closed) throw new FsError(Errno.EBADF);
    if (!this.writable) throw new FsError(Errno.EBADF, 'the file is not open for writing');
    const posix = loadPosixNative();
    if (!posix) throw new FsError(Errno.ENOTSUP, 'fallocate needs native/posix');
    await this.use((fd) => posix.fallocate(fd, mode, offset, length));
    return this.stat();
  }

  /** ftruncate(2) of the descriptor (EINVAL when it is not open for writing, as Linux says). */
  async truncate(size: number): Promise<FsStat> {
    if (this.closed) throw new FsError(Errno.EBADF);
    if (!this.writable) throw new FsError(Errno.EINVAL, 'the file is not open for writing');
    await this.use((fd) => ftruncateAsync(fd, size));
    return this.stat();
  }

  /** Closes the descriptor once the calls on it are finished; later calls are EBADF. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.busy > 0) await new Promise<void>((resolve) => (this.idle = resolve));
    await fsCall(() => this.io.close(this.fd));
  }
}

/** Options of {@link LocalDirBackend}. */
export interface LocalDirOptions {
  /** Refuse every mutation (EROFS), also at this layer. */
  ro: boolean;
  /** Most directory watches at once (default {@link DEFAULT_MAX_WATCHES}). */
  maxWatches?: number;
  /** Where metadata calls run (default `auto`: in place while the disk answers quickly; see {@link MetaIo}). */
  metaIo?: MetaIoMode;
}

/**
 * A time in ns since the epoch as the seconds value `fs.utimes` takes, exact to the µs:
 * libuv truncates that double to whole µs, so half a µs is added to keep e.g. `.123 s`
 * (not exactly representable) from landing on `.122999 s`.
 */
export function utimesSeconds(ns: number): number {
  return (Math.round(ns / 1000) + 0.5) / 1e6;
}

/** @see module documentation */
export class LocalDirBackend implements FsBackend {
  readonly sourceKind = 'local_dir';
  readonly caps: Record<string, unknown>;
  private readonly log = new Logger('LocalDirBackend');
  private readonly maxWatches: number;
  /** The metadata calls (stat, O_PATH opens, chmod, unlink, rename, ...). */
  private readonly io: MetaIo;
  private readonly watches = new Set<ReturnType<typeof fsWatch>>();
  private watchLimitLogged = false;

  /**
   * @param root the real path of the export root (no symlinks, absolute); see {@link LocalDirBackend.at}
   * @param rootKey its device and inode number
   */
  private constructor(
    readonly root: string,
    private readonly rootKey: DirKey,
    private readonly options: LocalDirOptions,
  ) {
    this.maxWatches = options.maxWatches ?? DEFAULT_MAX_WATCHES;
    this.io = new MetaIo(options.metaIo ?? 'auto', this.log, `export root ${root}`);
    this.posix = loadPosixNative();
    this.caps = {
      rw: !options.ro,
      symlink: true,
      statfs: true,
      events: true,
      case_sensitive: true,
      hardlink: true,
      xattr: this.posix !== null,
      special_files: this.posix !== null,
      // Running as root, the node makes objects owned by the caller (`cred`); else by itself.
      identity: process.getuid?.() === 0 ? 'caller' : 'node',
    };
  }

  /** The syscalls Node has no API for (mknod, xattrs, renameat2), when native/posix is built. */
  private readonly posix: PosixNative | null;

  /**
   * Directories kept pinned ({@link pinDir}), by real path, least recently used first: the
   * descriptor, the operations using it now, and whether it goes once they are done.
   */
  private readonly kept = new Map<string, { fd: number; users: number; dropped: boolean }>();
  /** The same entries by descriptor, for {@link unpinDir}. */
  private readonly keptFds = new Map<number, { fd: number; users: number; dropped: boolean }>();

  /** {@link posix}. @throws FsError `errno` naming what is missing when native/posix is not built */
  private native(what: string, errno: number): PosixNative {
    if (!this.posix) throw new FsError(errno, `${what} needs native/posix, which is not built on this node (npm run build:native)`);
    return this.posix;
  }

  /**
   * The path that names the entry `path` itself for the l* syscalls: `name` below its pinned
   * directory, or the root directory itself.
   */
  private atName<T>(path: readonly string[], fn: (p: string) => Promise<T>): Promise<T> {
    if (path.length === 0) return this.inDir([], (fd) => fn(`${fdPath(fd)}/.`));
    const [dir, name] = splitParent(path);
    return this.inDir(dir, (fd) => fn(fdPath(fd, name)));
  }

  async mknod(dir: readonly string[], name: string, mode: number, rdev: number, owner?: FsOwner): Promise<FsStat> {
    this.refuseIfRo();
    const posix = this.native('mknod', Errno.EPERM);
    return this.inDir(dir, async (fd) => {
      const p = fdPath(fd, name);
      await posix.mknod(p, mode, rdev);
      if (owner) await this.own(fd, owner, (uid, gid) => this.io.lchown(p, uid, gid));
      // The requested permission bits exactly, whatever the process umask.
      await this.io.chmod(p, mode & 0o7777);
      return toFsStat(await this.io.lstat(p));
    });
  }

  async link(path: readonly string[], newDir: readonly string[], newName: string): Promise<FsStat> {
    this.refuseIfRo();
    const [dir, name] = splitParent(path);
    // link(2) does not follow a final symlink: the new name is another name of the link itself.
    return this.inDir(dir, (from) =>
      this.inDir(newDir, async (to) => {
        await this.io.link(fdPath(from, name), fdPath(to, newName));
        return toFsStat(await this.io.lstat(fdPath(to, newName)));
      }),
    );
  }

  async getxattr(path: readonly string[], name: string): Promise<Buffer> {
    const posix = this.native('extended attributes', Errno.ENOTSUP);
    return this.atName(path, (p) => posix.lgetxattr(p, name));
  }

  async setxattr(path: readonly string[], name: string, value: Buffer, flags: number): Promise<void> {
    this.refuseIfRo();
    const posix = this.native('extended attributes', Errno.ENOTSUP);
    await this.atName(path, (p) => posix.lsetxattr(p, name, value, flags));
  }

  async listxattr(path: readonly string[]): Promise<string[]> {
    const posix = this.native('extended attributes', Errno.ENOTSUP);
    return this.atName(path, (p) => posix.llistxattr(p));
  }

  async removexattr(path: readonly string[], name: string): Promise<void> {
    this.refuseIfRo();
    const posix = this.native('extended attributes', Errno.ENOTSUP);
    await this.atName(path, (p) => posix.lremovexattr(p, name));
  }

  /**
   * Opens an export on directory `path`.
   * @throws Error (plain, for configuration errors) when `path` does not exist or is not a directory
   */
  static async at(path: string, options: LocalDirOptions): Promise<LocalDirBackend> {
    const real = await realpath(path);
    const st = await stat(real, { bigint: true });
    if (!st.isDirectory()) throw Object.assign(new Error(`${path} is not a directory`), { code: 'ENOTDIR' });
    return new LocalDirBackend(real, dirKeyOf(st), options);
  }

  private join(path: readonly string[]): string {
    if (path.length === 0) return this.root;
    return this.root === '/' ? `/${path.join('/')}` : `${this.root}/${path.join('/')}`;
  }

  /**
   * Pins directory `dir` (a final symlink is followed) as an O_PATH descriptor whose real path
   * is inside the root. The real path is read from `/proc/self/fd` synchronously (see
   * {@link realPathOfFdSync}), and the caller lets go of the descriptor with {@link unpinDir}.
   *
   * A directory whose real path is its path below the root (no symlink on the way) stays
   * pinned for the next operations ({@link KEPT_DIRS_MAX} of them, least recently used first
   * out): the next pin reads the kept descriptor's real path again and uses it only while that
   * is still the path, so it is the directory the path leads to now, through directories only,
   * inside the root; a directory moved, removed or replaced since is pinned anew. That saves an
   * open(2) and a close(2) per operation; the check is the one every pin makes.
   *
   * The common case is one open(2) of the whole path. When that fails, the failure may have
   * happened outside the root (a symlink leading out) or because something on the path changed
   * during the lookup: the path is then walked again with {@link confinedAt}, which looks at
   * nothing outside the root, and its answer is the one given (EACCES for a link that leads
   * out, ENOENT, ENOTDIR, ELOOP as the filesystem says now) or, when the path resolves now, its
   * directory is pinned.
   * @returns the descriptor number
   * @throws FsError EACCES (outside the root), ENOENT, ENOTDIR, ELOOP
   */
  private async pinDir(dir: readonly string[]): Promise<number> {
    const path = this.join(dir);
    const kept = this.keptDir(path);
    if (kept !== null) return kept;
    let fd: number;
    try {
      fd = await this.io.openFd(path, O_PATH | C.O_DIRECTORY);
    } catch {
      try {
        fd = await confinedAt(this.root, dir, (entry) => this.io.openFd(entry.path, O_PATH | C.O_DIRECTORY | entry.nofollow), this.io);
      } catch (e) {
        throw toFsError(e);
      }
    }
    let place: string;
    try {
      place = this.placeOf(fd);
    } catch (e) {
      closePath(fd);
      throw toFsError(e);
    }
    if (place === path) this.keep(path, fd);
    return fd;
  }

  /**
   * The kept descriptor of directory `path` (one more user), when it is still at that path;
   * else null (a kept one that is not goes).
   */
  private keptDir(path: string): number | null {
    const k = this.kept.get(path);
    if (!k) return null;
    let here = false;
    try {
      here = realPathOfFdSync(k.fd) === path;
    } catch {
      here = false;
    }
    this.kept.delete(path);
    if (!here) {
      this.drop(k);
      return null;
    }
    // Most recently used last.
    this.kept.set(path, k);
    k.users++;
    return k.fd;
  }

  /** Keeps `fd`, just pinned at `path` for one user; the least recently used unused one goes beyond {@link KEPT_DIRS_MAX}. */
  private keep(path: string, fd: number): void {
    const old = this.kept.get(path);
    if (old) {
      this.kept.delete(path);
      this.drop(old);
    }
    const k = { fd, users: 1, dropped: false };
    this.kept.set(path, k);
    this.keptFds.set(fd, k);
    if (this.kept.size <= KEPT_DIRS_MAX) return;
    for (const [p, e] of this.kept) {
      if (e.users > 0) continue;
      this.kept.delete(p);
      this.drop(e);
      return;
    }
  }

  /** `k` is no longer kept: closed now, or by its last user's {@link unpinDir}. */
  private drop(k: { fd: number; users: number; dropped: boolean }): void {
    k.dropped = true;
    if (k.users > 0) return;
    this.keptFds.delete(k.fd);
    closePath(k.fd);
  }

  /** Lets go of a descriptor {@link pinDir} gave: closed unless it is kept. */
  private unpinDir(fd: number): void {
    const k = this.keptFds.get(fd);
    if (!k) return closePath(fd);
    k.users--;
    if (k.dropped && k.users === 0) {
      this.keptFds.delete(fd);
      closePath(fd);
    }
  }

  /**
   * Where directory descriptor `fd` is: its real path, or, when that is longer than the kernel
   * prints (over PATH_MAX), a stand-in with as many components below the root as it has (all
   * that judging a relative symlink target needs).
   * @throws FsError EACCES when it is outside the root; ENOENT when it was deleted
   */
  private placeOf(fd: number): string {
    try {
      const real = realPathOfFdSync(fd);
      if (!isInside(this.root, real)) throw new FsError(Errno.EACCES, 'outside the export root');
      return real;
    } catch (e) {
      if (!isPathTooLong(e)) throw e;
    }
    const depth = depthBelowSync(this.rootKey, fd);
    if (depth === null) throw new FsError(Errno.EACCES, 'outside the export root');
    return [this.root === '/' ? '' : this.root, ...new Array<string>(depth).fill('d')].join('/') || '/';
  }

  /**
   * Throws EACCES unless descriptor `fd` is inside the root, judged by its real path. A path
   * longer than the kernel prints (over PATH_MAX) is judged for a directory by
   * {@link depthBelowSync}; anything else was opened by name, without following a final
   * symlink, in a directory pinned and checked this way (or by {@link confinedAt}), so it is
   * inside as that directory is.
   * @param isDir whether `fd` is a directory
   * @throws FsError EACCES (outside), ENOENT (deleted)
   */
  private checkInside(fd: number, isDir: boolean): void {
    if (isDir) {
      this.placeOf(fd);
      return;
    }
    try {
      if (!isInside(this.root, realPathOfFdSync(fd))) throw new FsError(Errno.EACCES, 'outside the export root');
    } catch (e) {
      if (!isPathTooLong(e)) throw e;
    }
  }

  /**
   * Runs `fn` with directory `dir` pinned (descriptor number), then unpins it.
   * @throws FsError ESTALE when the directory itself is gone (no longer at its path): an ENOENT
   *   from `fn` is about the entry, never the directory; ENOTDIR when a file is there
   */
  private async inDir<T>(dir: readonly string[], fn: (fd: number) => Promise<T>): Promise<T> {
    let fd: number;
    try {
      fd = await this.pinDir(dir);
    } catch (e) {
      if (e instanceof FsError && e.errno === Errno.ENOENT) throw new FsError(Errno.ESTALE, `directory /${dir.join('/')} is gone`);
      throw e;
    }
    try {
      return await fn(fd);
    } catch (e) {
      throw toFsError(e);
    } finally {
      this.unpinDir(fd);
    }
  }

  /** Opens `dir/name` itself (never following it) as O_PATH, checked inside the root, for `fn`. */
  private async atEntry<T>(path: readonly string[], fn: (fd: number) => Promise<T>): Promise<T> {
    const run = async (fd: number): Promise<T> => {
      try {
        this.checkInside(fd, false);
        return await fn(fd);
      } catch (e) {
        throw toFsError(e);
      } finally {
        // The root's descriptor may be kept; an entry's is closed.
        this.unpinDir(fd);
      }
    };
    if (path.length === 0) return run(await this.pinDir([]));
    const [dir, name] = splitParent(path);
    return this.inDir(dir, async (dfd) => run(await this.io.openFd(fdPath(dfd, name), O_PATH | C.O_NOFOLLOW)));
  }

  private refuseIfRo(): void {
    if (this.options.ro) throw new FsError(Errno.EROFS);
  }

  async getattr(path: readonly string[]): Promise<FsStat> {
    if (path.length === 0) return this.inDir([], async (fd) => toFsStat(await this.io.stat(fdPath(fd))));
    const [dir, name] = splitParent(path);
    return this.lookup(dir, name);
  }

  async lookup(dir: readonly string[], name: string): Promise<FsStat> {
    return this.inDir(dir, async (fd) => toFsStat(await this.io.lstat(fdPath(fd, name))));
  }

  async readdir(dir: readonly string[]): Promise<string[]> {
    return this.inDir(dir, (fd) => readdir(fdPath(fd)));
  }

  /**
   * All lstat(2) calls are queued at once through the callback API (no promise per call: a
   * batch of hundreds of names costs the thread pool's time, little of the event loop's).
   */
  async lookupMany(dir: readonly string[], names: readonly string[]): Promise<Array<FsStat | null>> {
    return this.inDir(
      dir,
      (fd) =>
        new Promise((resolve, reject) => {
          const out = new Array<FsStat | null>(names.length);
          let left = names.length;
          let failed = false;
          if (left === 0) return resolve(out);
          names.forEach((name, i) =>
            lstatCb(fdPath(fd, name), { bigint: true }, (e, st) => {
              if (failed) return;
              if (e && e.code !== 'ENOENT') {
                failed = true;
                return reject(e);
              }
              out[i] = e ? null : toFsStat(st);
              if (--left === 0) resolve(out);
            }),
          );
        }),
    );
  }

  /**
   * {@link FsBackend.readSmallFiles}: the directory is pinned once; each name is opened
   * relative to it with O_NOFOLLOW|O_NONBLOCK (one name below a directory checked inside the
   * root cannot lead out, and a fifo does not block), then fstat, one pread of size + 1 bytes
   * and close: three thread-pool calls per file through the callback API, the close done at
   * once (a read-only descriptor has nothing to flush), {@link SMALL_READS_IN_FLIGHT} files at
   * a time. A non-regular file is closed unread (its attributes are returned).
   */
  async readSmallFiles(dir: readonly string[], names: readonly string[], maxBytes: readonly number[]): Promise<SmallFileRead[]> {
    return this.inDir(
      dir,
      (dfd) =>
        new Promise<SmallFileRead[]>((resolve) => {
          const out = new Array<SmallFileRead>(names.length);
          let next = 0;
          let done = 0;
          const finish = (i: number, r: SmallFileRead) => {
            out[i] = r;
            if (++done === names.length) resolve(out);
            else if (next < names.length) start(next++);
          };
          const start = (i: number) =>
            openCb(fdPath(dfd, names[i]), C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK, (e, fd) => {
              if (e) return finish(i, { error: toFsError(e) });
              const closeWith = (r: SmallFileRead) => {
                closePath(fd);
                finish(i, r);
              };
              fstat(fd, { bigint: true }, (e2, st) => {
                if (e2) return closeWith({ error: toFsError(e2) });
                const stat = toFsStat(st);
                if ((stat.mode & C.S_IFMT) !== C.S_IFREG || stat.size > maxBytes[i]) return closeWith({ stat, data: null });
                const buf = Buffer.allocUnsafe(stat.size + 1);
                readCb(fd, buf, 0, buf.length, 0, (e3, n) => closeWith(e3 ? { error: toFsError(e3) } : { stat, data: buf.subarray(0, n) }));
              });
            });
          if (names.length === 0) return resolve(out);
          while (next < names.length && next < SMALL_READS_IN_FLIGHT) start(next++);
        }),
    );
  }

  async setattr(path: readonly string[], changes: FsAttrChanges): Promise<FsStat> {
    this.refuseIfRo();
    return this.atEntry(path, async (fd) => {
      // Through /proc/self/fd/<O_PATH fd> the kernel acts on exactly this inode: a symlink
      // itself (chmod ENOTSUP, truncate ELOOP), never its target.
      const p = fdPath(fd);
      if (changes.mode !== undefined) await this.io.chmod(p, changes.mode & 0o7777);
      if (changes.uid !== undefined || changes.gid !== undefined) await this.io.chown(p, changes.uid ?? -1, changes.gid ?? -1);
      if (changes.size !== undefined) await truncate(p, changes.size);
      if (changes.atimeNs !== undefined || changes.mtimeNs !== undefined) {
        const now = await this.io.fstat(fd);
        const at = changes.atimeNs ?? Number(now.atimeNs);
        const mt = changes.mtimeNs ?? Number(now.mtimeNs);
        await this.io.utimes(p, utimesSeconds(at), utimesSeconds(mt));
      }
      return toFsStat(await this.io.fstat(fd));
    });
  }

  async open(path: readonly string[], flags: number): Promise<{ file: FsOpenFile; stat: FsStat }> {
    flags &= ~(OpenFlags.O_CREAT | OpenFlags.O_EXCL);
    const acc = flags & OpenFlags.O_ACCMODE;
    if (acc === OpenFlags.O_ACCMODE || (flags & REFUSED_FLAGS) !== 0) throw new FsError(Errno.EINVAL, 'unsupported open flags');
    if (this.options.ro && wantsWrite(flags)) throw new FsError(Errno.EROFS);
    const local = acc | (flags & PASS_FLAGS) | C.O_NOFOLLOW | C.O_NONBLOCK;
    if (path.length === 0) return this.checkOpened(await fsCall(() => openFd(this.root, local)), acc);
    const [dir, name] = splitParent(path);
    const dirFd = await this.pinDir(dir);
    let fd: number;
    try {
      const entry = fdPath(dirFd, name);
      const st = await fsCall(() => this.io.lstat(entry));
      if (st.isSymbolicLink()) {
        if (flags & OpenFlags.O_NOFOLLOW) throw new FsError(Errno.ELOOP);
        return await this.openConfined(path, local, acc);
      }
      if (!isServable(Number(st.mode))) throw new FsError(Errno.EACCES, 'special files are not served');
      try {
        fd = await openFd(entry, local);
      } catch (e) {
        // ELOOP: it became a symlink since the lstat; follow it as if it had been one.
        if ((e as NodeJS.ErrnoException).code === 'ELOOP' && !(flags & OpenFlags.O_NOFOLLOW)) return await this.openConfined(path, local, acc);
        throw toFsError(e);
      }
    } finally {
      this.unpinDir(dirFd);
    }
    return this.checkOpened(fd, acc);
  }

  /**
   * Opens `path`, following symlinks only inside the root ({@link confinedAt}): special files
   * are refused (EACCES) before they are opened, and the new descriptor is checked like any.
   * @param local open(2) flags including O_NOFOLLOW (dropped only for a directory the walk holds)
   */
  private async openConfined(path: readonly string[], local: number, acc: number): Promise<{ file: FsOpenFile; stat: FsStat }> {
    let fd: number;
    try {
      fd = await confinedAt(
        this.root,
        path,
        (entry) => {
          if (!isServable(Number(entry.st.mode))) throw new FsError(Errno.EACCES, 'special files are not served');
          return openFd(entry.path, (local & ~C.O_NOFOLLOW) | entry.nofollow);
        },
        this.io,
      );
    } catch (e) {
      throw toFsError(e);
    }
    return this.checkOpened(fd, acc);
  }

  /** Checks a new descriptor (regular file or directory, inside the root) and wraps it; closes it on failure. */
  private async checkOpened(fd: number, acc: number): Promise<{ file: FsOpenFile; stat: FsStat }> {
    try {
      const st = await this.io.fstat(fd);
      if (!isServable(Number(st.mode))) throw new FsError(Errno.EACCES, 'special files are not served');
      this.checkInside(fd, st.isDirectory());
      const stat = toFsStat(st);
      const isDir = stat.kind === NodeKind.DIR;
      if (isDir && acc !== OpenFlags.O_RDONLY) throw new FsError(Errno.EISDIR);
      const file = new LocalOpenFile(fd, acc !== OpenFlags.O_WRONLY, acc !== OpenFlags.O_RDONLY, isDir, this.io);
      return { file, stat };
    } catch (e) {
      await this.io.close(fd).catch(() => undefined);
      throw toFsError(e);
    }
  }

  async create(
    dir: readonly string[],
    name: string,
    mode: number,
    flags: number,
    owner?: FsOwner,
  ): Promise<{ file: FsOpenFile; stat: FsStat; created: boolean }> {
    this.refuseIfRo();
    const acc = flags & OpenFlags.O_ACCMODE;
    if (acc === OpenFlags.O_ACCMODE || (flags & REFUSED_FLAGS) !== 0) throw new FsError(Errno.EINVAL, 'unsupported open flags');
    const local = acc | (flags & PASS_FLAGS) | C.O_NOFOLLOW | C.O_NONBLOCK;
    return this.inDir(dir, async (dfd) => {
      const entry = fdPath(dfd, name);
      let fd: number | undefined;
      let created = true;
      // An entry removed between the EEXIST and the open of what existed is created after all
      // (as open(2) with O_CREAT would); a name that keeps vanishing ends in ENOENT.
      for (let attempt = 1; fd === undefined; attempt++) {
        try {
          // O_EXCL never follows a symlink at `name`, so nothing is created through one.
          fd = await this.io.createFile(entry, local | C.O_CREAT | C.O_EXCL, mode & 0o7777);
          created = true;
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'EEXIST' || (flags & OpenFlags.O_EXCL) !== 0) throw e;
          created = false;
          try {
            fd = await openFd(entry, local);
          } catch (e2) {
            if ((e2 as NodeJS.ErrnoException).code !== 'ENOENT' || attempt >= 3) throw e2;
          }
        }
      }
      const opened = await this.checkOpened(fd, acc);
      if (opened.stat.kind === NodeKind.DIR) {
        await opened.file.close();
        throw new FsError(Errno.EISDIR);
      }
      if (created) {
        try {
          const made = fd;
          if (owner) await this.own(dfd, owner, (uid, gid) => this.io.fchown(made, uid, gid));
          // The requested permission bits exactly, whatever the process umask (after the chown, which clears set-ID bits).
          await this.io.fchmod(made, mode & 0o7777);
          opened.stat = toFsStat(await this.io.fstat(made));
        } catch (e) {
          await opened.file.close().catch(() => undefined);
          throw e;
        }
      }
      return { ...opened, created };
    });
  }

  async mkdir(dir: readonly string[], name: string, mode: number, owner?: FsOwner): Promise<FsStat> {
    this.refuseIfRo();
    // A directory made in a set-group-ID directory is set-group-ID too (Linux).
    const inherited = await this.inDir(dir, async (fd) => {
      await this.io.mkdir(fdPath(fd, name), mode & 0o7777);
      if (owner) await this.own(fd, owner, (uid, gid) => this.io.lchown(fdPath(fd, name), uid, gid));
      return (Number((await this.io.fstat(fd)).mode) & S_ISGID) !== 0 ? S_ISGID : 0;
    });
    // The requested permission bits exactly, whatever the process umask.
    return this.atEntry([...dir, name], async (fd) => {
      await this.io.chmod(fdPath(fd), (mode & 0o7777) | inherited);
      return toFsStat(await this.io.fstat(fd));
    });
  }

  /**
   * Gives a new entry of pinned directory `dirFd` to `owner` through `chownTo`: its uid, and its
   * gid unless the directory has the set-group-ID bit (the entry keeps the directory's group).
   */
  private async own(dirFd: number, owner: FsOwner, chownTo: (uid: number, gid: number) => Promise<void>): Promise<void> {
    const setgid = (Number((await this.io.fstat(dirFd)).mode) & S_ISGID) !== 0;
    await chownTo(owner.uid, setgid ? -1 : owner.gid);
  }

  async symlink(dir: readonly string[], name: string, target: string, owner?: FsOwner): Promise<FsStat> {
    this.refuseIfRo();
    return this.inDir(dir, async (fd) => {
      // A link that leads out of the root is refused (traversal attempts are refused),
      // judged on its text resolved from the directory's real path; links found on disk that
      // lead out are still never followed (see atEntry and pinDir).
      if (target === '' || target.includes('\0')) throw new FsError(Errno.EINVAL, 'symlink target must be a non-empty string without NUL');
      const resolved = resolvePath(this.placeOf(fd), target);
      if (!isInside(this.root, resolved)) {
        throw new FsError(Errno.EACCES, `symlink target ${JSON.stringify(target)} leads outside the export root`);
      }
      await this.io.symlink(target, fdPath(fd, name));
      if (owner) await this.own(fd, owner, (uid, gid) => this.io.lchown(fdPath(fd, name), uid, gid));
      return toFsStat(await this.io.lstat(fdPath(fd, name)));
    });
  }

  async readlink(path: readonly string[]): Promise<string> {
    const [dir, name] = splitParent(path);
    return this.inDir(dir, (fd) => this.io.readlink(fdPath(fd, name)));
  }

  async unlink(dir: readonly string[], name: string): Promise<void> {
    this.refuseIfRo();
    await this.inDir(dir, (fd) => this.io.unlink(fdPath(fd, name)));
  }

  async rmdir(dir: readonly string[], name: string): Promise<void> {
    this.refuseIfRo();
    await this.inDir(dir, (fd) => this.io.rmdir(fdPath(fd, name)));
  }

  async rename(oldDir: readonly string[], oldName: string, newDir: readonly string[], newName: string, flags = 0): Promise<void> {
    this.refuseIfRo();
    const posix = flags === 0 ? null : this.native('rename flags', Errno.EINVAL);
    await this.inDir(oldDir, (from) =>
      this.inDir(newDir, (to) =>
        posix ? posix.renameat2(fdPath(from, oldName), fdPath(to, newName), flags) : this.io.rename(fdPath(from, oldName), fdPath(to, newName)),
      ),
    );
  }

  async statfs(path: readonly string[]): Promise<StatFs> {
    const figures = (fd: number) =>
      statfs(fdPath(fd)).then((s) => ({
        bsize: s.bsize,
        frsize: s.bsize,
        blocks: s.blocks,
        bfree: s.bfree,
        bavail: s.bavail,
        files: s.files,
        ffree: s.ffree,
        namemax: NAME_MAX,
      }));
    try {
      return await this.inDir(path, figures);
    } catch (e) {
      // A file: the figures of the directory holding it.
      if (e instanceof FsError && e.errno === Errno.ENOTDIR && path.length > 0) return this.inDir(path.slice(0, -1), figures);
      throw e;
    }
  }

  async watch(dir: readonly string[], listener: (event: FsWatchEvent) => void): Promise<FsWatch | null> {
    if (this.watches.size >= this.maxWatches) {
      if (!this.watchLimitLogged)
        this.log.warn({ msg: 'directory watch limit reached; further directories get no on-disk change events', limit: this.maxWatches });
      this.watchLimitLogged = true;
      return null;
    }
    return this.inDir(dir, async (fd) => {
      let real: string;
      try {
        real = realPathOfFdSync(fd);
      } catch (e) {
        // Deeper than PATH_MAX: the watch could not tell its own removal by path. Such a
        // directory gets no on-disk change events (changes through sessions are still pushed).
        if (isPathTooLong(e)) return null;
        throw e;
      }
      const ino = (await this.io.stat(fdPath(fd))).ino;
      // The watch is set on the pinned directory's inode through its descriptor, not by path:
      // a directory swapped for a symlink meanwhile cannot make it watch something outside.
      // inotify names events on the watched directory itself by the last component of that
      // path: the descriptor number.
      const watchPath = fdPath(fd);
      const self = String(fd);
      let watcher: ReturnType<typeof fsWatch>;
      // Nothing is reported once the watch is closed, not even by a check still in flight: a
      // late "gone" from a replaced watch must not tear down the watch that succeeded it.
      let closed = false;
      const close = () => {
        closed = true;
        if (this.watches.delete(watcher)) watcher.close();
      };
      const report = (event: FsWatchEvent) => {
        if (!closed) listener(event);
      };
      // The directory itself was removed, moved or replaced: the watch is dead. Say so with a
      // name-less event (the service drops the watch and sets up a new one on next use).
      const gone = () => {
        if (closed) return;
        close();
        listener({ type: 'rename', name: null });
      };
      try {
        watcher = fsWatch(watchPath, { persistent: false }, (type, filename) => {
          const name = typeof filename === 'string' && filename.length > 0 ? filename : null;
          const event: FsWatchEvent = { type: type === 'change' ? 'change' : 'rename', name };
          // An event on the watched directory itself (see `self`), or on an entry that happens to
          // have that name: the inode number tells.
          if (name === self && type === 'rename') {
            lstat(real, { bigint: true }).then(
              (st) => (st.ino === ino ? report(event) : gone()),
              () => gone(),
            );
            return;
          }
          report(event);
        });
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (!this.watchLimitLogged) this.log.warn({ msg: 'cannot watch a directory; on-disk changes there send no events', code });
        this.watchLimitLogged = code === 'ENOSPC';
        return null;
      }
      this.watches.add(watcher);
      watcher.on('error', gone);
      return { close };
    });
  }

  async close(): Promise<void> {
    for (const w of this.watches) w.close();
    this.watches.clear();
  }
}
