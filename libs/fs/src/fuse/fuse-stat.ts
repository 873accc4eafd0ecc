/**
 * What the FUSE layer hands to fuse-native: router attributes as fuse-native stats, and
 * failures as negative Linux errno numbers (PROTOCOL.md 8 errno; the numbers are the `Errno`
 * table of libs/protocol).
 */
import { Attr, Errno, FsError } from '@svc/protocol/wire';

/** The stat object fuse-native expects (times in ms since the epoch, sizes in bytes). */
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
 * Converts a router attribute (ns times) to a fuse-native stat (ms times). `blksize`, the
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
    atime: Math.floor(a.at / 1e6),
    mtime: Math.floor(a.mt / 1e6),
    ctime: Math.floor(a.ct / 1e6),
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
