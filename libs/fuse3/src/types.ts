/**
 * The values that cross between a libfuse 3 low-level filesystem ({@link Operations}) and the
 * kernel: attributes, entries, open replies, directory entries, locks, statfs, the caller's
 * context, and the errno-carrying {@link FuseError}.
 *
 * Units: sizes and offsets in bytes (JS numbers, exact below 2^53), times in ns since the epoch
 * as bigint, timeouts in seconds (fractions allowed). Inode numbers, file handles and generations
 * are numbers below 2^53: the filesystem hands them out, and the binding refuses larger ones.
 */
import { constants as osConstants } from 'node:os';

/** Attributes of an inode, as `stat(2)` reports them. */
export interface Attr {
  /** Inode number (`st_ino`). */
  ino: number;
  /** Type and permission bits (`S_IFREG | 0o644`, ...). */
  mode: number;
  nlink: number;
  uid: number;
  gid: number;
  /** Device number of a device file. */
  rdev?: number;
  /** Bytes. */
  size: number;
  /** Preferred I/O size, bytes (0: the kernel's default). */
  blksize?: number;
  /** 512-byte blocks allocated. */
  blocks?: number;
  /** Last access, ns since the epoch. */
  atimeNs: bigint;
  /** Last modification of the content, ns since the epoch. */
  mtimeNs: bigint;
  /** Last change of the inode, ns since the epoch. */
  ctimeNs: bigint;
}

/**
 * A name's inode as the kernel caches it (`fuse_entry_param`): the answer of lookup, mknod,
 * mkdir, symlink, link, create and of each readdirplus entry. Every entry with `ino` ≠ 0 given to
 * the kernel adds one to that inode's lookup count, which {@link Operations.forget} takes back.
 * `ino` 0 (with `entryTimeout`) answers a lookup negatively and lets the kernel cache that the name
 * does not exist.
 */
export interface Entry {
  ino: number;
  /** Distinguishes inodes that reuse a number over the filesystem's life (NFS export). */
  generation?: number;
  /** The attributes (required unless `ino` is 0). */
  attr?: Attr;
  /** How long the kernel may use the name → inode mapping without a new lookup, seconds. */
  entryTimeout: number;
  /** How long the kernel may use `attr` without a getattr, seconds. */
  attrTimeout: number;
}

/** The answer of getattr and setattr. An {@link Entry} fits it too. */
export interface AttrReply {
  attr: Attr;
  /** How long the kernel may use `attr` without asking again, seconds. */
  attrTimeout: number;
}

/** The answer of open and opendir (`fuse_file_info`); all flags default to false. */
export interface OpenReply {
  /** File handle: passed back with every request on this open file. */
  fh: number;
  /** Bypass the page cache for this open file (reads and writes reach the filesystem as issued). */
  directIo?: boolean;
  /** Keep the pages the kernel cached for the inode from earlier opens. */
  keepCache?: boolean;
  /** The file cannot seek (a stream). */
  nonseekable?: boolean;
  /** opendir: the kernel may cache the directory's entries. */
  cacheReaddir?: boolean;
  /** No flush request on close. */
  noflush?: boolean;
  /** Parallel direct writes to the file; honoured with libfuse 3.15 or later (`binding.parallelDirectWrites`). */
  parallelDirectWrites?: boolean;
}

/** The answer of create: the new name's entry and the open file. */
export interface CreateReply {
  entry: Entry;
  open: OpenReply;
}

/** A readdir entry. */
export interface DirEntry {
  /** A file name: no '/', no NUL. */
  name: string;
  /** Inode number (`d_ino`); adds no lookup count. */
  ino: number;
  /** Only the type bits (`S_IFMT`) are used. */
  mode: number;
  /** The offset the kernel passes back to continue after this entry. */
  nextOffset: number;
}

/**
 * A readdirplus entry: with `entry` (ino ≠ 0) it is a lookup of the name, counted as one lookup
 * when the kernel takes it (see {@link Operations.readdirplus}); without it, or for `.` and `..`,
 * only `ino` and `mode` are listed.
 */
export interface DirEntryPlus {
  name: string;
  nextOffset: number;
  entry?: Entry;
  /** Used without `entry`. */
  ino?: number;
  /** Used without `entry`: only the type bits. */
  mode?: number;
}

/** The answer of statfs (`statvfs`); counts of blocks are in `frsize` units. */
export interface Statfs {
  /** Block size, bytes (default 4096). */
  bsize?: number;
  /** Fragment size, bytes (default `bsize`). */
  frsize?: number;
  blocks?: number;
  bfree?: number;
  bavail?: number;
  files?: number;
  ffree?: number;
  favail?: number;
  /** Longest file name, bytes (default 255). */
  namemax?: number;
}

/** A POSIX record lock (`struct flock`). */
export interface Lock {
  /** `F_RDLCK` (0), `F_WRLCK` (1) or `F_UNLCK` (2). */
  type: number;
  /** `SEEK_SET` (0); the kernel sends absolute ranges. */
  whence: number;
  /** First byte. */
  start: number;
  /** Bytes; 0 means to the end of the file. */
  len: number;
  /** The process holding a conflicting lock (getlk answer), else 0. */
  pid: number;
}

/** The new values of a setattr; only those named by the `toSet` bits ({@link SETATTR}) are meaningful. */
export interface SetattrValues {
  mode: number;
  uid: number;
  gid: number;
  size: number;
  /** With {@link SETATTR.ATIME_NOW}: the kernel's current time. */
  atimeNs: bigint;
  mtimeNs: bigint;
  ctimeNs: bigint;
}

/**
 * The `toSet` bits of setattr (`FUSE_SET_ATTR_*`). `ATIME`/`MTIME`: set that time to the value
 * given; with `ATIME_NOW`/`MTIME_NOW` as well: set it to the current time (`utimensat` with
 * `UTIME_NOW`, `touch` without a date). A time set with `UTIME_OMIT` has neither bit.
 */
export const SETATTR = {
  MODE: 1 << 0,
  UID: 1 << 1,
  GID: 1 << 2,
  SIZE: 1 << 3,
  ATIME: 1 << 4,
  MTIME: 1 << 5,
  ATIME_NOW: 1 << 7,
  MTIME_NOW: 1 << 8,
  CTIME: 1 << 10,
  KILL_SUID: 1 << 11,
  KILL_SGID: 1 << 12,
} as const;

/** One inode's lookup count to give back (`fuse_forget_data`). */
export interface Forget {
  ino: number;
  nlookup: number;
}

/** What the release of an open file carries. */
export interface ReleaseInfo {
  /** The open flags. */
  flags: number;
  /** A flush is to be done as well (the last close, when the kernel skipped the flush). */
  flush: boolean;
  /** The flock locks of `lockOwner` on this file are to be released. */
  flockRelease: boolean;
  lockOwner: bigint;
}

/** What a write carries besides the data. */
export interface WriteInfo {
  /** The open flags of the file handle. */
  flags: number;
  /** A write-back of cached pages (writeback cache): the caller's context and `fh` may not be the writer's. */
  writepage: boolean;
}

/** The connection as negotiated at init (`fuse_conn_info`); `capable` and `want` are `FUSE_CAP_*` bits. */
export interface ConnInfo {
  protoMajor: number;
  protoMinor: number;
  /** What the kernel offers. */
  capable: number;
  /** What the session uses. */
  want: number;
  /** Bytes. */
  maxWrite: number;
  /** Bytes (0: the kernel's limit). */
  maxRead: number;
  /** Bytes. */
  maxReadahead: number;
  maxBackground: number;
  congestionThreshold: number;
  /** Granularity of the times the kernel keeps with the writeback cache, ns. */
  timeGran: number;
}

/**
 * The caller of a request: its credentials (`fuse_req_ctx`), and the request's interruption.
 * `umask` is set for mknod, mkdir and create (0 otherwise).
 */
export class RequestContext {
  /** True once the kernel interrupted the request (the caller got a signal). */
  interrupted = false;
  private controller: AbortController | null = null;

  constructor(
    /** The request's id (the one {@link Operations.interrupt} names). */
    readonly id: number,
    readonly uid: number,
    readonly gid: number,
    readonly pid: number,
    readonly umask: number,
  ) {}

  /** Aborted when the kernel interrupts the request (made on first use). */
  get signal(): AbortSignal {
    this.controller ??= new AbortController();
    if (this.interrupted) this.controller.abort();
    return this.controller.signal;
  }

  /** Marks the request interrupted (called by the session). */
  markInterrupted(): void {
    this.interrupted = true;
    this.controller?.abort();
  }
}

/** errno numbers by name (`ENOENT` → 2), from Node's `os.constants.errno`. */
export const ERRNO: Readonly<Record<string, number>> = osConstants.errno;

/**
 * An error answered to the kernel as `errno` (fuse_reply_err): throw it from an operation.
 * Other errors are answered EIO, or with the errno of their `code` (`ENOENT`, ...) when they
 * carry one, as Node's fs errors do.
 */
export class FuseError extends Error {
  /** A positive errno number (`ENOENT` is 2). */
  readonly errno: number;

  /** @param errno a positive errno number or its name (`'ENOENT'`). */
  constructor(errno: number | string, message?: string) {
    const n = typeof errno === 'string' ? ERRNO[errno] : errno;
    if (!Number.isInteger(n) || n <= 0 || n >= 1000) throw new TypeError(`not an errno: ${String(errno)}`);
    super(message ?? `${errnoName(n)} (errno ${n})`);
    this.name = 'FuseError';
    this.errno = n;
  }
}

/** The name of an errno number (`2` → `ENOENT`), or `errno N`. */
export function errnoName(n: number): string {
  for (const [name, value] of Object.entries(ERRNO)) if (value === n) return name;
  return `errno ${n}`;
}

/**
 * The errno to answer for an error thrown by an operation: a {@link FuseError}'s, else the one
 * named by a string `code` (Node's fs errors), else null (answered EIO).
 */
export function errnoOf(err: unknown): number | null {
  if (err instanceof FuseError) return err.errno;
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && ERRNO[code] !== undefined) return ERRNO[code];
  return null;
}
