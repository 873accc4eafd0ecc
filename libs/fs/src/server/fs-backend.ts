/**
 * The export provider port: what
 * one export must do for the FS operations of docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)", in terms of paths below the export
 * root. {@link FsService} owns node ids, handles, sessions and events and calls a backend for
 * the filesystem work; a backend owns its confinement.
 *
 * Implementations: {@link LocalDirBackend} (a directory on the node's disk). A synthetic export
 * (e.g. a terminal service with `README.md` and `control/invoke.json`) implements the same port.
 *
 * Paths are arrays of names below the root (`[]` = the root); every name has passed
 * `validateName`. Errors are {@link FsError}s with Linux errno numbers.
 */
import type { StatFs } from '@svc/protocol';

/** What a backend reports about one node; times in ns since the epoch, size in bytes. */
export interface FsStat {
  /** 1 file (or any non-directory, non-symlink type), 2 directory, 3 symlink. */
  kind: 1 | 2 | 3;
  /** Full st_mode (type and permission bits). */
  mode: number;
  nlink: number;
  uid: number;
  gid: number;
  size: number;
  atimeNs: number;
  mtimeNs: number;
  ctimeNs: number;
  /**
   * The file's identity on the node's filesystem (device and inode number), the same for every
   * name of one file (hard links); absent when the backend cannot tell.
   */
  fileKey?: string;
  /** When the file was made (statx birth time), ns since the epoch; absent when the filesystem does not tell. */
  birthNs?: number;
  /** The device number of a character or block device (`st_rdev`); absent or 0 otherwise. */
  rdev?: number;
}

/** Attribute changes of `setattr`/`truncate`; `size` in bytes, times in ns since the epoch. */
export interface FsAttrChanges {
  mode?: number;
  uid?: number;
  gid?: number;
  size?: number;
  atimeNs?: number;
  mtimeNs?: number;
}

/** Who a new object belongs to (a node running as root makes it the caller's). */
export interface FsOwner {
  uid: number;
  gid: number;
}

/** An open file of a backend; positions and counts in bytes. */
export interface FsOpenFile {
  readonly readable: boolean;
  readonly writable: boolean;
  /** The operating system's descriptor of the file, when the backend has one (the node's own locks on it go through it). */
  readonly descriptor?: number;
  /** Reads up to `buffer.length` bytes at `position`; returns the count (0 at end of file). @throws FsError EISDIR for a directory */
  read(buffer: Buffer, position: number): Promise<number>;
  /** Writes all of `data` at `position` (appends when opened with O_APPEND); returns the count. */
  write(data: Buffer, position: number): Promise<number>;
  /** Flushes data and metadata to stable storage. */
  sync(): Promise<void>;
  /** The attributes of the open file (also once its name is gone: nlink 0). Absent: the backend cannot tell (ENOTSUP). */
  stat?(): Promise<FsStat>;
  /**
   * Sets the file's size to `size` bytes through this open file (ftruncate(2): allowed by the
   * open's write access, whatever the file's mode now, also once its name is gone) and returns
   * its attributes. Absent: the backend cannot (ENOTSUP).
   * @throws FsError EBADF (not open for writing), EFBIG, ENOSPC
   */
  truncate?(size: number): Promise<FsStat>;
  /**
   * fallocate(2) of `length` bytes at `offset` with `mode` (one of FALLOCATE_MODES) through
   * this open file; returns its attributes. Absent: the backend cannot (ENOTSUP).
   * @throws FsError EBADF (not open for writing), ENOTSUP (the filesystem has no such mode),
   *   ENOSPC, EFBIG
   */
  allocate?(mode: number, offset: number, length: number): Promise<FsStat>;
  /** Closes the file; further calls fail with EBADF. */
  close(): Promise<void>;
}

/**
 * A change seen by a directory watch: `rename` (entry added, removed or moved) or `change` (an
 * entry's content or attributes) of entry `name`. `name` null: the change cannot be named, or
 * the watched directory itself was removed, moved or replaced (the watch is dead after it).
 */
export type FsWatchEvent = { type: 'rename' | 'change'; name: string | null };

/**
 * One file of {@link FsBackend.readSmallFiles}: the attributes of the file opened and its bytes
 * (null when it is not a regular file or is larger than asked), or why it could not be read
 * (an FsError with the errno; anything else counts as EIO).
 */
export type SmallFileRead = { stat: FsStat; data: Buffer | null } | { error: unknown };

/** A live directory watch. */
export interface FsWatch {
  /** Stops the watch; its listener is not called after this returns, not even for earlier changes. */
  close(): void;
}

/** The export provider port; see module documentation. */
export interface FsBackend {
  /** `source_kind` of the export (`local_dir`, `synthetic`, ...). */
  readonly sourceKind: string;
  /** Export capabilities listed by `exports`. */
  readonly caps: Record<string, unknown>;
  /**
   * Reads several small files of directory `dir` at once, for the `prefetch` extension
   * (docs/protocol.md "FS extensions"): each of `names` is opened read-only without following
   * it (a symlink there: ELOOP), its attributes are taken from the open file, and when it is a
   * regular file of at most `maxBytes[i]` bytes its content is read (up to size + 1 bytes, so a
   * file that grew meanwhile reads longer than its attributes say). One result per name, in
   * order; a failure of one name is its result, never a rejection (only `dir` itself failing
   * rejects, with an FsError).
   *
   * Only a backend whose reads have no effect but their bytes implements it, so the node may
   * read files nobody opened yet: a synthetic tree whose reads act (a terminal's
   * `invoke.json`) leaves it out, and `prefetch` is then ENOTSUP.
   */
  readSmallFiles?(dir: readonly string[], names: readonly string[], maxBytes: readonly number[]): Promise<SmallFileRead[]>;

  /** Attributes of `path` without following a final symlink. @throws FsError ENOENT, EACCES (outside the root) */
  getattr(path: readonly string[]): Promise<FsStat>;
  /** Attributes of `dir/name` (`dir` is followed when it is a symlink, `name` is not). */
  lookup(dir: readonly string[], name: string): Promise<FsStat>;
  /** The names in directory `dir` (followed when a symlink), without `.` and `..`, in any order. */
  readdir(dir: readonly string[]): Promise<string[]>;
  /** Attributes of several entries of `dir`, null for an entry that is gone. */
  lookupMany(dir: readonly string[], names: readonly string[]): Promise<Array<FsStat | null>>;
  /** Applies attribute changes without following a final symlink; returns the new attributes. */
  setattr(path: readonly string[], changes: FsAttrChanges): Promise<FsStat>;
  /** Opens an existing node (a final symlink is followed, confined) with Linux open `flags` (O_CREAT/O_EXCL ignored). */
  open(path: readonly string[], flags: number): Promise<{ file: FsOpenFile; stat: FsStat }>;
  /**
   * Creates (or, without O_EXCL, opens) regular file `dir/name` with permission bits `mode`;
   * never follows a symlink at `name`. `owner` (on the create, not an open of an existing file):
   * the new file's owner, and its group unless `dir` has the set-group-ID bit (where it keeps
   * the directory's group, as Linux does). The same for `mkdir`, `symlink` and `mknod`.
   */
  create(dir: readonly string[], name: string, mode: number, flags: number, owner?: FsOwner): Promise<{ file: FsOpenFile; stat: FsStat; created: boolean }>;
  /** Creates directory `dir/name` with permission bits `mode`. */
  mkdir(dir: readonly string[], name: string, mode: number, owner?: FsOwner): Promise<FsStat>;
  /** Creates symlink `dir/name` holding `target` (any text, stored as given). */
  symlink(dir: readonly string[], name: string, target: string, owner?: FsOwner): Promise<FsStat>;
  /** The target text of symlink `path`. @throws FsError EINVAL when not a symlink */
  readlink(path: readonly string[]): Promise<string>;
  /** Removes non-directory `dir/name`. @throws FsError EISDIR for a directory */
  unlink(dir: readonly string[], name: string): Promise<void>;
  /** Removes empty directory `dir/name`. @throws FsError ENOTDIR, ENOTEMPTY */
  rmdir(dir: readonly string[], name: string): Promise<void>;
  /**
   * Renames `oldDir/oldName` to `newDir/newName` within this export (replacing as rename(2)
   * does); `flags` as renameat2(2): 1 RENAME_NOREPLACE (EEXIST when the new name exists), 2
   * RENAME_EXCHANGE (the two names swap). @throws FsError EINVAL for flags it cannot apply
   */
  rename(oldDir: readonly string[], oldName: string, newDir: readonly string[], newName: string, flags?: number): Promise<void>;
  /**
   * Creates `dir/name` of the type and permission bits in `mode` (FIFO, socket, character or
   * block device with `rdev`, regular file). Absent: the backend makes none (EPERM).
   * @throws FsError EEXIST, EPERM (a device the node's user may not make)
   */
  mknod?(dir: readonly string[], name: string, mode: number, rdev: number, owner?: FsOwner): Promise<FsStat>;
  /**
   * Makes `newDir/newName` another name of the non-directory `path` (not following a final
   * symlink); returns its attributes (nlink counted). Absent: EPERM, as a filesystem without hard links.
   * @throws FsError EEXIST, EPERM (a directory), EMLINK
   */
  link?(path: readonly string[], newDir: readonly string[], newName: string): Promise<FsStat>;
  /** The value of extended attribute `name` of `path` (a final symlink not followed). @throws FsError ENODATA, ENOTSUP */
  getxattr?(path: readonly string[], name: string): Promise<Buffer>;
  /** Sets extended attribute `name`; `flags` 1 XATTR_CREATE, 2 XATTR_REPLACE. @throws FsError EEXIST, ENODATA, ENOTSUP, EPERM */
  setxattr?(path: readonly string[], name: string, value: Buffer, flags: number): Promise<void>;
  /** The names of the extended attributes of `path`. @throws FsError ENOTSUP */
  listxattr?(path: readonly string[]): Promise<string[]>;
  /** Removes extended attribute `name`. @throws FsError ENODATA, ENOTSUP */
  removexattr?(path: readonly string[], name: string): Promise<void>;
  /** Filesystem figures for the filesystem holding `path` (followed when a symlink). */
  statfs(path: readonly string[]): Promise<StatFs>;
  /**
   * Watches the entries of directory `dir` (not recursive). Returns null when the backend cannot
   * watch it (no watch support, watch limit reached, a directory deeper than PATH_MAX).
   */
  watch?(dir: readonly string[], listener: (event: FsWatchEvent) => void): Promise<FsWatch | null>;
  /** Releases what the backend holds (called at shutdown). */
  close?(): Promise<void>;
}
