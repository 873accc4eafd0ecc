/**
 * What the FUSE layer hands to fuse-native: router attributes as fuse-native stats, and
 * failures as negative Linux errno numbers (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)" errno; the numbers are the `Errno`
 * table of libs/protocol).
 */
import { Attr, Errno, FsError } from '@svc/protocol/wire';

/**
 * ns in one unit of the times fuse-native takes and hands over: ms (1e6) as published, µs (1e3)
 * when built by `scripts/fuse-native-build.cjs` (its binding exports `svc_time_unit_us`).
 */
let timeUnitNs = 1e6;

/** Sets the unit of fuse-native's times, ns (1e6: ms, 1e3: µs); the mount calls it once fuse-native is loaded. */
export function setFuseTimeUnitNs(ns: 1e6 | 1e3): void {
  timeUnitNs = ns;
}

/** The unit of fuse-native's times, ns (see {@link setFuseTimeUnitNs}). */
export function fuseTimeUnitNs(): number {
  return timeUnitNs;
}

/** The stat object fuse-native expects (times since the epoch in {@link fuseTimeUnitNs} units, sizes in bytes). */
export interface FuseStat {
  mode: number;
  uid: number;
  gid: number;
  size: number;
  nlink: number;
  ino: number;
  blksize: number;
  blocks: number;
  atime: number;
  mtime: number;
  ctime: number;
}

/**
 * Converts a router attribute (ns times) to a fuse-native stat ({@link fuseTimeUnitNs} times). `blksize`, the
 * preferred I/O size, is the 1 MiB of a read-ahead chunk: `cat`, `cp` and friends size their
 * buffers by it, so they make 8x fewer system calls than with 128 KiB.
 * @param ino the inode number to report (default the node id; the mount reports FuseInodes numbers, fuse-inodes.ts)
 */
export function toFuseStat(a: Attr, ino: number = a.id): FuseStat {
  return {
    mode: a.m,
    uid: a.u,
    gid: a.g,
    size: a.sz,
    nlink: a.n || 1,
    ino,
    blksize: 1024 * 1024,
    blocks: Math.ceil(a.sz / 512),
    atime: Math.floor(a.at / timeUnitNs),
    mtime: Math.floor(a.mt / timeUnitNs),
    ctime: Math.floor(a.ct / timeUnitNs),
  };
}

/**
 * The negative errno fuse-native wants for a failure: `-errno` of an {@link FsError} or of any
 * object with a numeric `errno`, else -EIO.
 */
export function fuseErrno(e: unknown): number {
  if (e instanceof FsError || (typeof e === 'object' && e !== null && typeof (e as { errno?: unknown }).errno === 'number')) {
    const n = (e as { errno: number }).errno;
    return -Math.abs(n);
  }
  return -Errno.EIO;
}
