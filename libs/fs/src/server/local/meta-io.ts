/**
 * MetaIo: the metadata system calls of a local export (stat, open of O_PATH descriptors, chmod,
 * chown, utimes, mkdir, rmdir, unlink, rename, symlink, link, readlink), each returning a
 * Promise as `fs/promises` does, with the same errors (Node's `ENOENT`, `EACCES`, ... errors);
 * also fstat, fchmod and fchown of a descriptor.
 *
 * Where they run: `fs/promises` sends every call to libuv's thread pool and back, two thread
 * wake-ups that cost far more than the call itself on a warm disk (a pool `lstat` measured
 * 46-142 µs against 11-33 µs run in place, on a 2-CPU virtual machine; a node's `unlink` with
 * the directory's attributes after it made four such trips). In `auto` mode (the default) they
 * run on the calling thread, the way sftp-server and Samba run them, while the disk answers
 * them quickly: {@link SLOW_CALLS} calls within {@link SLOW_WINDOW_MS} that each take longer
 * than {@link SLOW_CALL_MS} (a cold disk, a network filesystem under the export) send every call
 * of this export to the pool for {@link POOL_FOR_MS}, so a slow disk costs the event loop a few
 * slow calls per period, not one per request. One slow call alone does not: on a busy machine a
 * quick call is sometimes timed slow because the process was not running. `pool` mode (`svc-fs-node --meta-io pool`) always uses the pool. The creation of a
 * file (an open with O_CREAT, a metadata change of its directory like mkdir), writes of at most
 * {@link IN_PLACE_WRITE_MAX} bytes (a copy into the page cache) and the close of a file are
 * here too. Calls that can take long on any disk (truncate, reads, larger writes, fsync,
 * directory listings, opens of existing files, which may have to read the inode) are not: they
 * stay on the pool.
 */
import { Logger } from '@nestjs/common';
import * as fss from 'node:fs';
import type { BigIntStats, MakeDirectoryOptions } from 'node:fs';
import * as fsp from 'node:fs/promises';
import { promisify } from 'node:util';

/** A call that runs longer than this on the calling thread is slow, ms. */
export const SLOW_CALL_MS = 20;
/** This many slow calls within {@link SLOW_WINDOW_MS} send the export's calls to the pool. */
export const SLOW_CALLS = 3;
/** The window in which {@link SLOW_CALLS} slow calls count, ms. */
export const SLOW_WINDOW_MS = 10_000;
/** How long the export's calls then use the pool before trying in place again, ms. */
export const POOL_FOR_MS = 60_000;

/** Where {@link MetaIo} runs its calls: `auto` (in place while quick, see the module documentation) or `pool`. */
export type MetaIoMode = 'auto' | 'pool';

/** The largest write {@link MetaIo.write} runs in place, bytes; larger ones go to the pool. */
export const IN_PLACE_WRITE_MAX = 64 * 1024;

const openFdAsync = promisify(fss.open) as (path: string, flags: number, mode?: number) => Promise<number>;
const closeAsync = promisify(fss.close);
const writeAsync = (fd: number, buffer: Buffer, offset: number, length: number, position: number): Promise<number> =>
  new Promise((resolve, reject) => fss.write(fd, buffer, offset, length, position, (e, n) => (e ? reject(e) : resolve(n))));
const fchmodAsync = promisify(fss.fchmod);
const fchownAsync = promisify(fss.fchown);
const fstatAsync = (fd: number): Promise<BigIntStats> =>
  new Promise((resolve, reject) => fss.fstat(fd, { bigint: true }, (e, st) => (e ? reject(e) : resolve(st))));

/** @see module documentation */
export class MetaIo {
  /** performance.now() until which calls go to the pool (auto mode, after slow calls). */
  private poolUntil = 0;
  /** performance.now() at the end of the last slow calls in place, oldest first (at most {@link SLOW_CALLS}). */
  private readonly slowAt: number[] = [];

  /**
   * @param mode `auto` or `pool`
   * @param log where the switch to the pool is reported (once per switch)
   * @param what the export it serves, for that report
   */
  constructor(
    readonly mode: MetaIoMode = 'auto',
    private readonly log: Logger | null = null,
    private readonly what = 'export',
  ) {}

  /** True while calls run in place. */
  get inPlace(): boolean {
    return this.mode === 'auto' && performance.now() >= this.poolUntil;
  }

  /**
   * Runs `inPlace` on this thread when {@link inPlace}, timing it (the last of
   * {@link SLOW_CALLS} slow ones within {@link SLOW_WINDOW_MS} sends the next calls to the
   * pool); else `pooled`. Every call below is one of these.
   * @returns a Promise of the result, rejected with what the call threw
   */
  run<T>(inPlace: () => T, pooled: () => Promise<T>): Promise<T> {
    if (!this.inPlace) return pooled();
    const t0 = performance.now();
    try {
      return Promise.resolve(inPlace());
    } catch (e) {
      return Promise.reject(e);
    } finally {
      const now = performance.now();
      const ms = now - t0;
      if (ms > SLOW_CALL_MS) this.slow(now, ms);
    }
  }

  /** Counts a slow call that ended at `now` and took `ms`; the last of {@link SLOW_CALLS} within the window switches to the pool. */
  private slow(now: number, ms: number): void {
    const slowAt = this.slowAt;
    slowAt.push(now);
    while (slowAt.length > 0 && now - slowAt[0] > SLOW_WINDOW_MS) slowAt.shift();
    if (slowAt.length < SLOW_CALLS) return;
    slowAt.length = 0;
    this.poolUntil = now + POOL_FOR_MS;
    this.log?.warn({
      msg: `${SLOW_CALLS} metadata calls within ${SLOW_WINDOW_MS / 1000} s took more than ${SLOW_CALL_MS} ms (the last ${Math.round(ms)} ms): the calls of ${this.what} use the thread pool for ${POOL_FOR_MS / 1000} s`,
      ms: Math.round(ms),
    });
  }

  /** lstat(2) with ns times. */
  lstat(path: string): Promise<BigIntStats> {
    return this.run(
      () => fss.lstatSync(path, { bigint: true }),
      () => fsp.lstat(path, { bigint: true }),
    );
  }

  /** stat(2) with ns times (follows a final symlink). */
  stat(path: string): Promise<BigIntStats> {
    return this.run(
      () => fss.statSync(path, { bigint: true }),
      () => fsp.stat(path, { bigint: true }),
    );
  }

  /** fstat(2) of a descriptor with ns times. */
  fstat(fd: number): Promise<BigIntStats> {
    return this.run(
      () => fss.fstatSync(fd, { bigint: true }),
      () => fstatAsync(fd),
    );
  }

  /** open(2) with `flags` (no mode: nothing is created), returning the descriptor number; for O_PATH descriptors. */
  openFd(path: string, flags: number): Promise<number> {
    return this.run(
      () => fss.openSync(path, flags),
      () => openFdAsync(path, flags),
    );
  }

  /**
   * open(2) of a file with O_CREAT (`flags` with its access mode, `mode` the permission bits),
   * returning the descriptor number: the creation is a metadata change of the directory.
   */
  createFile(path: string, flags: number, mode: number): Promise<number> {
    return this.run(
      () => fss.openSync(path, flags, mode),
      () => openFdAsync(path, flags, mode),
    );
  }

  /** close(2) of a descriptor of a file (it may flush on a network filesystem). */
  close(fd: number): Promise<void> {
    return this.run(
      () => fss.closeSync(fd),
      () => closeAsync(fd),
    );
  }

  /**
   * pwrite(2) of `length` bytes of `buffer` from `offset`, at byte `position` of `fd`: in place
   * when at most {@link IN_PLACE_WRITE_MAX} bytes, else on the pool.
   * @returns the bytes written
   */
  write(fd: number, buffer: Buffer, offset: number, length: number, position: number): Promise<number> {
    if (length > IN_PLACE_WRITE_MAX) return writeAsync(fd, buffer, offset, length, position);
    return this.run(
      () => fss.writeSync(fd, buffer, offset, length, position),
      () => writeAsync(fd, buffer, offset, length, position),
    );
  }

  /** fchmod(2) of an open descriptor. */
  fchmod(fd: number, mode: number): Promise<void> {
    return this.run(
      () => fss.fchmodSync(fd, mode),
      () => fchmodAsync(fd, mode),
    );
  }

  /** fchown(2) of an open descriptor (-1 leaves an id as it is). */
  fchown(fd: number, uid: number, gid: number): Promise<void> {
    return this.run(
      () => fss.fchownSync(fd, uid, gid),
      () => fchownAsync(fd, uid, gid),
    );
  }

  /** chmod(2). */
  chmod(path: string, mode: number): Promise<void> {
    return this.run(
      () => fss.chmodSync(path, mode),
      () => fsp.chmod(path, mode),
    );
  }

  /** chown(2) (-1 leaves an id as it is). */
  chown(path: string, uid: number, gid: number): Promise<void> {
    return this.run(
      () => fss.chownSync(path, uid, gid),
      () => fsp.chown(path, uid, gid),
    );
  }

  /** lchown(2). */
  lchown(path: string, uid: number, gid: number): Promise<void> {
    return this.run(
      () => fss.lchownSync(path, uid, gid),
      () => fsp.lchown(path, uid, gid),
    );
  }

  /** utimes(2), times in seconds as `fs.utimes` takes them. */
  utimes(path: string, atime: number, mtime: number): Promise<void> {
    return this.run(
      () => fss.utimesSync(path, atime, mtime),
      () => fsp.utimes(path, atime, mtime),
    );
  }

  /** mkdir(2) of one directory. */
  mkdir(path: string, mode: number): Promise<void> {
    const options: MakeDirectoryOptions = { mode };
    return this.run(
      () => void fss.mkdirSync(path, options),
      async () => void (await fsp.mkdir(path, options)),
    );
  }

  /** rmdir(2). */
  rmdir(path: string): Promise<void> {
    return this.run(
      () => fss.rmdirSync(path),
      () => fsp.rmdir(path),
    );
  }

  /** unlink(2). */
  unlink(path: string): Promise<void> {
    return this.run(
      () => fss.unlinkSync(path),
      () => fsp.unlink(path),
    );
  }

  /** rename(2). */
  rename(from: string, to: string): Promise<void> {
    return this.run(
      () => fss.renameSync(from, to),
      () => fsp.rename(from, to),
    );
  }

  /** symlink(2): `path` made a symlink whose text is `target`. */
  symlink(target: string, path: string): Promise<void> {
    return this.run(
      () => fss.symlinkSync(target, path),
      () => fsp.symlink(target, path),
    );
  }

  /** link(2). */
  link(existing: string, newPath: string): Promise<void> {
    return this.run(
      () => fss.linkSync(existing, newPath),
      () => fsp.link(existing, newPath),
    );
  }

  /** readlink(2), the text as UTF-8. */
  readlink(path: string): Promise<string> {
    return this.run(
      () => fss.readlinkSync(path, 'utf8'),
      () => fsp.readlink(path, 'utf8'),
    );
  }
}
