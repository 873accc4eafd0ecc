/**
 * What the FUSE layer hands to the kernel: router attributes as libfuse attributes (times in ns),
 * and failures as {@link FuseError}s carrying the errno (the numbers are the `Errno` table of
 * libs/protocol, which are Linux's).
 */
import { FuseError, type Attr as KernelAttr } from '@svc/fuse3';
import { Attr, Errno, FsError } from '@svc/protocol/wire';

/**
 * Converts a router attribute (ns times) to the attributes the kernel caches (times to the µs,
 * {@link usTimeNs}). `blksize`, the
 * preferred I/O size, is the 1 MiB of a read-ahead chunk: `cat`, `cp` and friends size their
 * buffers by it, so they make 8x fewer system calls than with 128 KiB.
 * @param ino the inode number `stat` reports (`st_ino`; the mount's stable numbers, fuse-inodes.ts)
 */
export function toKernelAttr(a: Attr, ino: number): KernelAttr {
  return {
    ino,
    mode: a.m,
    nlink: Number.isInteger(a.n) && a.n >= 0 ? a.n : 1,
    uid: a.u,
    gid: a.g,
    size: a.sz,
    blksize: 1024 * 1024,
    blocks: Math.ceil(a.sz / 512),
    atimeNs: usTimeNs(a.at),
    mtimeNs: usTimeNs(a.mt),
    ctimeNs: usTimeNs(a.ct),
    rdev: a.rd ?? 0,
  };
}

/**
 * A wire time (ns since the epoch as a double, exact to about 256 ns) as whole µs in ns: the
 * granularity the mount declares to the kernel, and what a time set through a node keeps.
 */
export function usTimeNs(ns: number): bigint {
  return BigInt(Math.round(ns / 1000)) * 1000n;
}

/**
 * The errno of a failure: that of an {@link FsError} or of any object with a numeric `errno`
 * (positive or negative), else EIO.
 */
export function errnoOfFailure(e: unknown): number {
  if (e instanceof FsError) return Math.abs(e.errno ?? Errno.EIO) || Errno.EIO;
  const n = (e as { errno?: unknown } | null)?.errno;
  return typeof n === 'number' && n !== 0 ? Math.abs(n) : Errno.EIO;
}

/** A failure as the {@link FuseError} the kernel is answered with (its message kept). */
export function toFuseError(e: unknown): FuseError {
  if (e instanceof FuseError) return e;
  return new FuseError(errnoOfFailure(e), e instanceof Error ? e.message : undefined);
}
