/**
 * The operations of a libfuse 3 low-level filesystem, in pyfuse3's shape: one async method per
 * request, given inode numbers (the root is {@link ROOT_INO}), returning the reply's data.
 * Throwing a {@link FuseError} answers its errno; another error answers EIO (or the errno of its
 * `code`). Every method is optional: the kernel gets ENOSYS for what is not implemented, except
 * open and opendir (success with fh 0), release and releasedir (success), statfs (a zeroed one
 * with 512-byte blocks) and forget (nothing), which libfuse answers by itself. `ctx` is the caller ({@link RequestContext}).
 *
 * Lookup counts are the filesystem's to keep, as in pyfuse3: every {@link Entry} with `ino` ≠ 0
 * that reaches the kernel (lookup, mknod, mkdir, symlink, link, create, and readdirplus entries)
 * adds one to the inode's count; {@link Operations.forget} takes them back. An inode may be
 * dropped when its count is 0 and no name refers to it.
 */
import type {
  AttrReply,
  ConnInfo,
  CreateReply,
  DirEntry,
  DirEntryPlus,
  Entry,
  Forget,
  Lock,
  OpenReply,
  ReleaseInfo,
  RequestContext,
  SetattrValues,
  Statfs,
  WriteInfo,
} from './types';

/** The inode number of the filesystem's root (`FUSE_ROOT_ID`). */
export const ROOT_INO = 1;

export interface Operations {
  /** The session is mounted and the connection negotiated (before any other request). */
  init?(conn: ConnInfo): void | Promise<void>;
  /** The session ended (after the last request); no reply. Every lookup count is 0 from then on: no forget follows. */
  destroy?(): void | Promise<void>;
  /**
   * The kernel interrupted request `ctx.id` (its caller got a signal): the operation still
   * running for it may answer at once, usually by throwing `FuseError('EINTR')`; `ctx.signal`
   * is aborted as well. Its answer, if it comes later, is dropped.
   */
  interrupt?(ctx: RequestContext): void;

  /** The entry of `name` in directory `parent` (one lookup count when `ino` ≠ 0). */
  lookup?(parent: number, name: string, ctx: RequestContext): Promise<Entry>;
  /** The kernel drops `nlookup` references to each inode. No reply; errors are only reported. */
  forget?(forgets: Forget[]): void | Promise<void>;
  /** Attributes of `ino`; `fh` when the kernel asks through an open file. */
  getattr?(ino: number, fh: number | undefined, ctx: RequestContext): Promise<AttrReply>;
  /**
   * Changes the attributes named by `toSet` ({@link SETATTR} bits) to `values`; `fh` when done
   * through an open file (ftruncate, futimens). Returns the attributes after the change.
   */
  setattr?(ino: number, toSet: number, values: SetattrValues, fh: number | undefined, ctx: RequestContext): Promise<AttrReply>;
  /** The target of symbolic link `ino`. */
  readlink?(ino: number, ctx: RequestContext): Promise<string | Buffer>;
  /** Creates a file node (regular, device, fifo, socket) with `mode` (type and permissions, before umask in `ctx.umask`). */
  mknod?(parent: number, name: string, mode: number, rdev: number, ctx: RequestContext): Promise<Entry>;
  /** Creates a directory; `mode` holds the permission bits. */
  mkdir?(parent: number, name: string, mode: number, ctx: RequestContext): Promise<Entry>;
  /** Removes a non-directory name (the inode stays while its lookup count is not 0). */
  unlink?(parent: number, name: string, ctx: RequestContext): Promise<void>;
  /** Removes an empty directory. */
  rmdir?(parent: number, name: string, ctx: RequestContext): Promise<void>;
  /** Creates a symbolic link `name` → `target`. */
  symlink?(parent: number, name: string, target: string, ctx: RequestContext): Promise<Entry>;
  /** Renames; `flags` are renameat2's (`RENAME_NOREPLACE` 1, `RENAME_EXCHANGE` 2). */
  rename?(parent: number, name: string, newParent: number, newName: string, flags: number, ctx: RequestContext): Promise<void>;
  /** Creates a hard link `newName` in `newParent` to `ino`. */
  link?(ino: number, newParent: number, newName: string, ctx: RequestContext): Promise<Entry>;
  /** Opens `ino` with `flags` (open(2)'s, without O_CREAT/O_EXCL/O_NOCTTY). */
  open?(ino: number, flags: number, ctx: RequestContext): Promise<OpenReply>;
  /** Up to `size` bytes at `offset` (fewer only at the end of the file, unless direct I/O). */
  read?(ino: number, fh: number, offset: number, size: number, ctx: RequestContext): Promise<Buffer>;
  /** Writes `data` at `offset`; returns the bytes written. */
  write?(ino: number, fh: number, offset: number, data: Buffer, info: WriteInfo, ctx: RequestContext): Promise<number>;
  /** A close(2) of a descriptor of the open file (there may be several per open). */
  flush?(ino: number, fh: number, lockOwner: bigint, ctx: RequestContext): Promise<void>;
  /** The open file's last reference is gone. */
  release?(ino: number, fh: number, info: ReleaseInfo, ctx: RequestContext): Promise<void>;
  /** Makes the file's data (and with `datasync` false, its metadata) durable. */
  fsync?(ino: number, fh: number, datasync: boolean, ctx: RequestContext): Promise<void>;
  /** Opens directory `ino`. */
  opendir?(ino: number, flags: number, ctx: RequestContext): Promise<OpenReply>;
  /**
   * The entries after `offset` (0: from the start), in order; as many as fit in `size` bytes are
   * sent, the rest are asked for again from the last one's `nextOffset`.
   */
  readdir?(ino: number, fh: number, offset: number, size: number, ctx: RequestContext): Promise<DirEntry[]>;
  /**
   * As readdir, with each entry's {@link Entry}: `ls -l` then needs no lookup per name. Each
   * returned entry with `entry.ino` ≠ 0 counts as one lookup, as for lookup(); the ones the kernel
   * does not take (past `size` bytes, and `.` and `..`) are given back at once through
   * {@link Operations.forget}.
   */
  readdirplus?(ino: number, fh: number, offset: number, size: number, ctx: RequestContext): Promise<DirEntryPlus[]>;
  /** The open directory's last reference is gone. */
  releasedir?(ino: number, fh: number, ctx: RequestContext): Promise<void>;
  fsyncdir?(ino: number, fh: number, datasync: boolean, ctx: RequestContext): Promise<void>;
  /** Filesystem statistics (`df`). */
  statfs?(ino: number, ctx: RequestContext): Promise<Statfs>;
  /** Sets extended attribute `name`; `flags` are setxattr(2)'s (`XATTR_CREATE` 1, `XATTR_REPLACE` 2). */
  setxattr?(ino: number, name: string, value: Buffer, flags: number, ctx: RequestContext): Promise<void>;
  /** The value of extended attribute `name` (throw ENODATA when it has none); sizes are handled by the session. */
  getxattr?(ino: number, name: string, ctx: RequestContext): Promise<Buffer>;
  /** The names of the extended attributes. */
  listxattr?(ino: number, ctx: RequestContext): Promise<string[]>;
  removexattr?(ino: number, name: string, ctx: RequestContext): Promise<void>;
  /** access(2) with `mask` (`R_OK` 4, `W_OK` 2, `X_OK` 1, `F_OK` 0): false or throwing EACCES denies. */
  access?(ino: number, mask: number, ctx: RequestContext): Promise<boolean | void>;
  /** Creates and opens a regular file (open(2) with O_CREAT; `flags` include O_EXCL, O_TRUNC, O_APPEND). */
  create?(parent: number, name: string, mode: number, flags: number, ctx: RequestContext): Promise<CreateReply>;
  /** A lock that would conflict with `lock`, or `lock` with type `F_UNLCK` when none. */
  getlk?(ino: number, fh: number, lockOwner: bigint, lock: Lock, ctx: RequestContext): Promise<Lock>;
  /** Takes or releases a POSIX record lock; `sleep`: wait for it (F_SETLKW), else throw EAGAIN on a conflict. */
  setlk?(ino: number, fh: number, lockOwner: bigint, lock: Lock, sleep: boolean, ctx: RequestContext): Promise<void>;
  /** flock(2): `op` is `LOCK_SH` 1, `LOCK_EX` 2 or `LOCK_UN` 8, with `LOCK_NB` 4 to not wait. */
  flock?(ino: number, fh: number, lockOwner: bigint, op: number, ctx: RequestContext): Promise<void>;
  /** fallocate(2) with `mode` (0: allocate, extending the size). */
  fallocate?(ino: number, fh: number, mode: number, offset: number, length: number, ctx: RequestContext): Promise<void>;
  /** lseek(2) with `SEEK_DATA` (3) or `SEEK_HOLE` (4) (others are the kernel's); returns the offset. */
  lseek?(ino: number, fh: number, offset: number, whence: number, ctx: RequestContext): Promise<number>;
  /** copy_file_range(2): copies `length` bytes; returns the bytes copied. */
  copyFileRange?(
    inoIn: number,
    fhIn: number,
    offsetIn: number,
    inoOut: number,
    fhOut: number,
    offsetOut: number,
    length: number,
    flags: number,
    ctx: RequestContext,
  ): Promise<number>;
}
