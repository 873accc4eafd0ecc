/**
 * Wire shapes of the FS session protocol on `/v2/fs` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"), shared by the FS
 * node server (libs/fs) and FS clients (libs/client, the workspace router).
 *
 * Units: sizes and offsets in bytes; `at`/`mt`/`ct` in ns since the epoch (JSON numbers: a
 * JavaScript reader loses precision below about 256 ns, which docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)" accepts); node ids
 * and handles are unsigned integers below 2^53.
 */
import { Errno, FsError } from './errors';

/** WebSocket path of FS sessions on an FS node (docs/protocol.md "Transport"). */
export const FS_ENDPOINT_PATH = '/v2/fs';

/** Request type prefix of FS operations: `acheron.t_fs_<op>` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). */
export const FS_REQUEST_PREFIX = 'acheron.t_fs_';
/** Reply type prefix: `acheron.r_fs_<op>`. */
export const FS_REPLY_PREFIX = 'acheron.r_fs_';
/** Error reply type of FS sessions (docs/protocol.md "Envelope and errors"). */
export const FS_ERROR_TYPE = 'acheron.err_fs';
/** Push: a node changed (payload {@link InvalEvent}). */
export const FS_INVAL_EVENT = 'acheron.e_fs_inval';
/** Push: a directory's entries changed (payload {@link InvalDirEvent}). */
export const FS_INVAL_DIR_EVENT = 'acheron.e_fs_inval_dir';

/** Every FS operation of docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)", in table order. */
export const FS_OPS = [
  'hello',
  'exports',
  'lookup',
  'getattr',
  'setattr',
  'readdirp',
  'open',
  'create',
  'read',
  'write',
  'fsync',
  'close',
  'truncate',
  'unlink',
  'mkdir',
  'rmdir',
  'rename',
  'symlink',
  'readlink',
  'statfs',
] as const;
export type FsOp = (typeof FS_OPS)[number];

/**
 * The fallocate(2) modes `t_fs_fallocate` takes (Linux values): 0 (allocate, the size grows
 * to cover the range), KEEP_SIZE (1: allocate, the size stays), PUNCH_HOLE|KEEP_SIZE (3:
 * deallocate, reads give zeros), ZERO_RANGE (0x10) and ZERO_RANGE|KEEP_SIZE (0x11: zeros,
 * allocated). Any other mode is 95 EOPNOTSUPP (ENOTSUP, the same number on Linux).
 */
export const FALLOCATE_MODES: readonly number[] = [0, 1, 3, 0x10, 0x11];

/**
 * FS extensions (docs/protocol.md "FS extensions"): a client lists the names it wants in the hello payload `features`, the node
 * answers with those it grants in `caps.features`; a session that was granted none speaks the
 * base protocol exactly.
 * - `open_read`: `t_fs_open` may carry `read` (bytes) and `close_at_eof`; the reply carries the
 *   first bytes of the file and its attr, and the handle is closed by the node when the whole
 *   file came back (one round trip for a small file).
 * - `prefetch`: `t_fs_prefetch` reads several small regular files of one directory in one
 *   request (bounded per file and per batch).
 * - `dir_estale`: in an operation on an entry of a directory (`lookup`, `readdirp`, `create`,
 *   `mkdir`, `symlink`, `unlink`, `rmdir`, `rename`, `prefetch`), ENOENT means the directory is
 *   there and the entry is not; a directory that is gone (an id the node no longer knows, a
 *   path no longer there) is ESTALE (116). A client can then trust a negative lookup under a
 *   cached directory id without asking whether that id is still valid.
 * - `inval_ack`: an `e_fs_inval`/`e_fs_inval_dir` push sent for another session's commit
 *   carries `seq` (1, 2, ... per session), and the client answers `t_fs_ack {seq}` once it has
 *   applied every push up to `seq` to its caches (pushes without `seq` need no ack). The node then replies to another session's mutation (close,
 *   fsync, rename, create, ...) only after each session it pushed to has acknowledged those
 *   pushes, or after {@link INVAL_ACK_WAIT_MS}: what one client made durable is never read
 *   stale from another client's cache at its next open, however the two sockets are scheduled.
 * - `posix`: the POSIX operations the base protocol lacks: the attributes of an open file
 *   (`t_fs_fgetattr`, also once its name is gone), truncation through an open file
 *   (`t_fs_ftruncate`: ftruncate(2), whatever the file's mode now, also once its name is gone),
 *   space allocation through an open file (`t_fs_fallocate`, {@link FALLOCATE_MODES}), hard
 *   links (`t_fs_link`), special files (`t_fs_mknod`), extended attributes (`t_fs_getxattr`, `setxattr`, `listxattr`,
 *   `removexattr`), `rename` flags, and locks held by the node for every session of every
 *   client (`t_fs_lock`, `t_fs_getlk`, `t_fs_lock_cancel`): POSIX byte-range locks per lock
 *   owner and `flock` locks per open file description, so two clients exclude each other as
 *   two processes on one machine do ({@link LockPayload}).
 * - `inval_own`: a push whose every change was made through the receiving session's own
 *   requests carries `own: true` ({@link InvalEvent.own}).
 * - `dir_attr`: the reply to an operation that adds, removes or renames an entry (`create` that
 *   made the file, `mkdir`, `symlink`, `mknod`, `link`, `unlink`, `rmdir`, `rename`) carries the
 *   directory's attributes after it as `dir_attr` ({@link DirAttrReply}; rename's old
 *   directory, when another, as `old_dir_attr`), so a client knows the directory's new times,
 *   size and link count without asking for them; `rename` also carries the attributes of the
 *   entry under its new name ({@link RenameReply}).
 * - `write_then`: a `write` may carry what the node does once all its bytes are written, in the
 *   same round trip ({@link WriteThen}, {@link WriteReply}): set attributes of the file as
 *   `setattr` does, then fsync it as `fsync` does (an editor's save, a journal's commit, tar's
 *   times after the data).
 */
export const FS_FEATURES = ['open_read', 'prefetch', 'dir_estale', 'inval_ack', 'posix', 'inval_own', 'dir_attr', 'write_then'] as const;
export type FsFeature = (typeof FS_FEATURES)[number];

/**
 * The longest a node holds a mutation's reply waiting for another session's `t_fs_ack` of its
 * pushes (the `inval_ack` extension), ms; a session that misses it is not waited for again
 * until it has acknowledged every push sent to it.
 */
export const INVAL_ACK_WAIT_MS = 1000;

/** Most names a hello's `features` may list, and the longest name, characters. */
export const HELLO_MAX_FEATURES = 64;
export const FEATURE_NAME_MAX = 64;

/**
 * Parses a feature list as given on a command line or in the environment
 * (`--fs-features`, `SVC_FS_NODE_FEATURES`, `SVC_FS_CLIENT_FEATURES`): names separated by
 * commas (blanks ignored), `all` for every extension this build knows, `none` for none.
 * @param text the list; undefined or blank means `all`
 * @param what the flag or variable named in errors
 * @returns the extensions, in {@link FS_FEATURES} order, without duplicates
 * @throws Error naming `what` and the known names for an unknown name, or `none`/`all` mixed with names
 */
export function parseFsFeatures(text: string | undefined, what: string): FsFeature[] {
  const names = (text ?? '')
    .split(',')
    .map((n) => n.trim())
    .filter((n) => n !== '');
  if (names.length === 0 || (names.length === 1 && names[0] === 'all')) return [...FS_FEATURES];
  if (names.length === 1 && names[0] === 'none') return [];
  const known = new Set<string>(FS_FEATURES);
  for (const n of names) {
    if (n === 'none' || n === 'all') throw new Error(`${what}: "${n}" cannot be combined with other names`);
    if (!known.has(n)) throw new Error(`${what}: unknown FS extension "${n}" (known: ${FS_FEATURES.join(', ')}; or all, none)`);
  }
  return FS_FEATURES.filter((f) => names.includes(f));
}

/** `prefetch` limits (docs/protocol.md "FS extensions"): most names per request. */
export const PREFETCH_MAX_NAMES = 1024;
/** `prefetch` `max_file`: default and largest accepted (larger is clamped), bytes. */
export const PREFETCH_DEFAULT_MAX_FILE = 64 * 1024;
export const PREFETCH_MAX_FILE = 1024 * 1024;
/** `prefetch` `max_total` (bytes of file data per reply): default and largest accepted (larger is clamped). */
export const PREFETCH_DEFAULT_MAX_TOTAL = 1024 * 1024;
export const PREFETCH_MAX_TOTAL = 4 * 1024 * 1024;

/** Largest `read` `len` (larger is clamped) and `write` data (larger is EINVAL), bytes (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). */
export const MAX_READ = 1024 * 1024;
export const MAX_WRITE = 1024 * 1024;

/** Longest name of one directory entry, bytes of UTF-8 (Linux NAME_MAX). */
export const NAME_MAX = 255;
/** Longest symlink target, bytes of UTF-8 (Linux PATH_MAX - 1). */
export const SYMLINK_MAX = 4095;

/**
 * Node kind in {@link Attr.k} (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). Other file types (fifo, socket, device)
 * report k=1 and their type in `m`.
 */
export const NodeKind = { FILE: 1, DIR: 2, SYMLINK: 3 } as const;
export type NodeKindValue = (typeof NodeKind)[keyof typeof NodeKind];

/**
 * Linux open(2) flag bits as sent in `open` / `create` `flags` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). The numbers are
 * the x86-64/arm64 Linux values whatever the client's platform.
 */
export const OpenFlags = {
  O_RDONLY: 0,
  O_WRONLY: 1,
  O_RDWR: 2,
  /** Mask of the access mode bits. */
  O_ACCMODE: 3,
  O_CREAT: 0o100,
  O_EXCL: 0o200,
  O_NOCTTY: 0o400,
  O_TRUNC: 0o1000,
  O_APPEND: 0o2000,
  O_NONBLOCK: 0o4000,
  O_DSYNC: 0o10000,
  O_DIRECTORY: 0o200000,
  O_NOFOLLOW: 0o400000,
  O_NOATIME: 0o1000000,
  O_CLOEXEC: 0o2000000,
  O_SYNC: 0o4010000,
  O_PATH: 0o10000000,
  O_TMPFILE: 0o20200000,
} as const;

/** True when open `flags` ask for write access, truncation, appending or creation (refused on `:ro` exports). */
export function wantsWrite(flags: number): boolean {
  const acc = flags & OpenFlags.O_ACCMODE;
  return acc === OpenFlags.O_WRONLY || acc === OpenFlags.O_RDWR || (flags & (OpenFlags.O_TRUNC | OpenFlags.O_APPEND | OpenFlags.O_CREAT)) !== 0;
}

/**
 * Attributes of one node (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): `id` node id, `k` kind ({@link NodeKind}), `m` full
 * st_mode (type and permission bits), `n` link count, `u`/`g` owner ids, `sz` size in bytes,
 * `at`/`mt`/`ct` access/modification/change times in ns since the epoch, `gen` the node's
 * generation (grows whenever the node is seen or told to have changed).
 */
export interface Attr {
  id: number;
  k: number;
  m: number;
  n: number;
  u: number;
  g: number;
  sz: number;
  at: number;
  mt: number;
  ct: number;
  gen: number;
  /** The device number (`st_rdev`) of a character or block device (the `posix` extension); absent otherwise. */
  rd?: number;
}

/** One `readdirp` entry (never `.` or `..`). */
export interface DirEntry {
  name: string;
  attr: Attr;
}

/**
 * One export as listed by `exports` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): `root` is the node id of its root
 * directory; `source_kind` says what serves it (`local_dir` for a directory on the node's
 * disk, `synthetic` for a generated tree such as a terminal service).
 */
export interface ExportInfo {
  name: string;
  root: number;
  ro: boolean;
  desc: string;
  source_kind: string;
  caps: Record<string, unknown>;
}

/** `acheron.t_fs_hello` payload (docs/protocol.md "Versions and negotiation"). */
export interface FsHelloRequest {
  protocol: string;
  proto: number;
  /** FS session token, required when the node has FS session auth on. */
  auth_token?: string;
  /** Ask for the binary data path (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). */
  binary?: boolean;
  /** Extensions asked for ({@link FS_FEATURES}; unknown names are ignored). */
  features?: string[];
}

/** Capabilities announced in `acheron.r_fs_hello` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"); `max_read`/`max_write` in bytes. */
export interface FsCaps {
  readdirp: boolean;
  symlink: boolean;
  xattr: boolean;
  locks: boolean;
  statfs: boolean;
  events: boolean;
  case_sensitive: boolean;
  max_read: number;
  max_write: number;
  /** True when the binary data path was asked for and is granted. */
  binary_data: boolean;
  /** Extensions granted to this session: those asked for that the node offers (empty: none). */
  features: string[];
}

/** `acheron.r_fs_hello` payload (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). */
export interface FsHelloReply {
  protocol: string;
  proto: number;
  node: { name: string; os: string; ver: string };
  caps: FsCaps;
}

/** `setattr` payload: permission bits, owner ids, size in bytes, times in ns since the epoch. */
export interface SetAttr {
  mode?: number;
  uid?: number;
  gid?: number;
  sz?: number;
  at?: number;
  mt?: number;
}

/**
 * What a `write` asks the node to do once all of its bytes are written (the `write_then`
 * extension), in this order: `set` the file's attributes as `setattr` on the handle's node does
 * (no size: that is `ftruncate`), then `sync` (true) it to stable storage as `fsync` does. Nothing
 * of it is done after a write that failed or wrote fewer bytes than it carried.
 */
export interface WriteThen {
  set?: Omit<SetAttr, 'sz'>;
  sync?: boolean;
}

/**
 * The reply to `write`: `n` bytes written. With {@link WriteThen}: `attr`, the file's
 * attributes after `set`; or, when `set` or `sync` failed after the bytes were written,
 * `then_errno` and `then_message` (the bytes stay written; what came after the failed step was
 * not done).
 */
export interface WriteReply {
  n: number;
  attr?: Attr;
  then_errno?: number;
  then_message?: string;
}

/** `readdirp` reply: `next` is the cookie of the following page; `dir_gen` the directory's entry generation. */
export interface ReaddirpReply {
  ents: DirEntry[];
  next: number;
  eof: boolean;
  dir_gen: number;
}

/** `open` reply: handle `h`, what it may do, and the node's generation at open time. */
export interface OpenReply {
  h: number;
  caps: { rd: boolean; wr: boolean };
  gen: number;
}

/**
 * `open` reply with the `open_read` extension when `read` was given: the {@link OpenReply}
 * fields plus the node's attr after opening, `n` bytes read at offset 0 (in `data_b64` on the
 * JSON path, after the header of a binary frame on the binary path) and `eof` (fewer than asked
 * for came back). `closed`: the node closed the handle itself (`close_at_eof` and `eof`); `h` is
 * then 0. For a directory nothing is read: `n` and `eof` are absent.
 */
export interface OpenReadReply extends OpenReply {
  attr: Attr;
  n?: number;
  eof?: boolean;
  closed?: boolean;
  data_b64?: string;
}

/**
 * Why `prefetch` returned a file's attr without its data: `size` (larger than `max_file`),
 * `total` (the batch's `max_total` was used up before it), `changed` (its size changed while it
 * was read: open it to read it).
 */
export type PrefetchSkip = 'size' | 'total' | 'changed';

/**
 * One entry of a `prefetch` reply, in the order of the request's names: with data (`attr`, `n`
 * bytes: `data_b64`, or the next `n` bytes after a binary frame's header), skipped (`attr`,
 * `skip`), or failed (`errno`, as `open` would answer; ELOOP for a symlink, EISDIR for a
 * directory, EACCES for a special file).
 */
export interface PrefetchEntry {
  name: string;
  attr?: Attr;
  n?: number;
  skip?: PrefetchSkip;
  errno?: number;
  data_b64?: string;
}

/** `prefetch` reply: `files` in request order; `n` the byte count of all their data (binary path). */
export interface PrefetchReply {
  files: PrefetchEntry[];
  n: number;
}

/** `read` reply on the JSON path (`data_b64`); on the binary path the bytes follow the header and `data_b64` is absent. */
export interface ReadReply {
  data_b64?: string;
  /** Byte count. */
  n: number;
  eof: boolean;
}

/** `statfs` reply: `bsize`/`frsize` in bytes, block and inode counts, `namemax` in bytes. */
export interface StatFs {
  bsize: number;
  frsize: number;
  blocks: number;
  bfree: number;
  bavail: number;
  files: number;
  ffree: number;
  namemax: number;
}

/**
 * `acheron.e_fs_inval` payload: node `node` changed. `what`: `attr` (attributes only),
 * `data` (content, and so size/times), `all` (anything, including kind or existence; drop
 * every cache of the node). `gen` is the node's generation after the change.
 */
export interface InvalEvent {
  node: number;
  what: 'attr' | 'data' | 'all';
  gen: number;
  /** The push's number in this session (the `inval_ack` extension), to acknowledge with `ack`. */
  seq?: number;
  /** Every change the push reports was made through this session's own requests (the `inval_own` extension). */
  own?: boolean;
}

/** `acheron.e_fs_inval_dir` payload: the entries of directory `dir` changed; `dir_gen` is its new entry generation. */
export interface InvalDirEvent {
  dir: number;
  dir_gen: number;
  /** As {@link InvalEvent.seq}. */
  seq?: number;
  /** As {@link InvalEvent.own}. */
  own?: boolean;
}

/** Root field of a request on a node: `node`, its node id. */
export interface NodeTarget {
  node: number;
}

/** Root field of a request on an open file: `h`, its handle. */
export interface HandleTarget {
  h: number;
}

/** No root field: `hello`, `exports` and `rename` (whose nodes are named in the payload). */
export interface NoTarget {
  node?: never;
  h?: never;
}

/** A payload with no members: the request is all in its type and root fields. */
export type EmptyPayload = Record<string, never>;

/** A reply with no members (`fsync`, `close`, `ack`; `unlink`, `rmdir`, `rename` without `dir_attr`). */
export type EmptyReply = Record<string, never>;

/** A reply that is the node's attributes after the operation. */
export interface AttrReply {
  attr: Attr;
}

/**
 * What the reply to an entry operation carries with the `dir_attr` extension: the attributes,
 * after the operation, of the directory the entry is in (`rename`: the new name's directory)
 * and, for a `rename` between two directories, of the old name's directory. Absent without the
 * extension, when nothing changed (a `create` of a file that existed) or when the node could
 * not read them.
 */
export interface DirAttrReply {
  dir_attr?: Attr;
  old_dir_attr?: Attr;
}

/**
 * The reply to `rename`: {@link DirAttrReply}, and with the `dir_attr` extension `attr`, the
 * attributes of the entry under its new name after the rename (not for RENAME_EXCHANGE; absent
 * when the node could not read them).
 */
export interface RenameReply extends DirAttrReply {
  attr?: Attr;
}

/** `acheron.r_fs_exports` payload. */
export interface FsExportsReply {
  exports: ExportInfo[];
}

/** `open` payload: Linux O_* bits ({@link OpenFlags}; default O_RDONLY), and with `open_read` the bytes to read at offset 0 ({@link OpenReadReply}). */
export interface OpenRequest {
  flags?: number;
  read?: number;
  close_at_eof?: boolean;
}

/** `rename` payload: node ids of the two directories and the names in them; `flags` (the `posix` extension) {@link RENAME_NOREPLACE} or {@link RENAME_EXCHANGE}. */
export interface RenameRequest {
  old_parent: number;
  old_name: string;
  new_parent: number;
  new_name: string;
  flags?: number;
}

/** `rename` flags (renameat2(2)): fail EEXIST when the new name exists; swap the two names. */
export const RENAME_NOREPLACE = 1;
export const RENAME_EXCHANGE = 2;
/** `setxattr` flags (setxattr(2)): fail EEXIST when the attribute exists; fail ENODATA when it does not. */
export const XATTR_CREATE = 1;
export const XATTR_REPLACE = 2;

/**
 * The caller of a request that makes an object (`create`, `mkdir`, `symlink`, `mknod`; the
 * `posix` extension): a node whose exports say `caps.identity: "caller"` (it runs as root)
 * makes the object owned by `uid` and, unless the directory has the set-group-ID bit, `gid`;
 * another node ignores it.
 */
export interface Cred {
  uid: number;
  gid: number;
}

/** The kind of a lock: `posix` (fcntl byte ranges, per lock owner) or `flock` (the whole file, per open file description). */
export type LockKind = 'posix' | 'flock';
/** Shared (`rd`), exclusive (`wr`), or a release (`un`). */
export type LockType = 'rd' | 'wr' | 'un';

/**
 * `lock` payload (the `posix` extension), on handle `h`: takes, changes or releases lock `type`
 * of `kind` over `start`..`start + len` (bytes; `len` 0: to the end of the file; both ignored
 * for `flock`) for lock owner `owner` (the client's name for it, unique within the session: a
 * FUSE lock owner, or an open file description for `flock`). Without `wait` a conflicting lock
 * of another owner answers 11 EAGAIN; with `wait` the request waits its turn (first come,
 * first served) until granted, answers 35 EDEADLK when waiting would close a cycle of owners
 * waiting on each other, or 4 EINTR when cancelled by `lock_cancel` with its tag. `pid` (the
 * caller's process id on the client) is kept for `getlk` answers to the same session.
 */
export interface LockPayload {
  kind: LockKind;
  type: LockType;
  start?: number;
  len?: number;
  owner: string;
  wait?: boolean;
  pid?: number;
}

/** `getlk` reply: no conflicting lock (`un`), or the first conflicting one; `owner_here` and `pid` only when this session holds it. */
export type GetlkReply = { type: 'un' } | { type: 'rd' | 'wr'; start: number; len: number; owner_here?: string; pid?: number };

/**
 * Every FS request of a session (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)" and
 * "FS extensions"), by operation: `target` its root fields, `payload` its payload, `reply` the
 * payload of its `acheron.r_fs_<op>`. The client's requests and the node's handlers are typed
 * by this one map. Sizes and offsets in bytes, times in ns since the epoch.
 *
 * `read` and the extensions that carry file data (`open` with `read`, `prefetch`) may carry
 * their bytes after the header of a binary frame instead of in `data_b64`; `write` may send
 * them so, with `n` their count.
 */
export interface FsRequests {
  hello: { target: NoTarget; payload: FsHelloRequest; reply: FsHelloReply };
  exports: { target: NoTarget; payload: EmptyPayload; reply: FsExportsReply };
  lookup: { target: NodeTarget; payload: { name: string }; reply: AttrReply };
  getattr: { target: NodeTarget; payload: EmptyPayload; reply: AttrReply };
  setattr: { target: NodeTarget; payload: SetAttr; reply: AttrReply };
  readdirp: { target: NodeTarget; payload: { cookie?: number; max?: number }; reply: ReaddirpReply };
  open: { target: NodeTarget; payload: OpenRequest; reply: OpenReply | OpenReadReply };
  create: { target: NodeTarget; payload: { name: string; mode?: number; flags?: number; cred?: Cred }; reply: { attr: Attr; h: number } & DirAttrReply };
  read: { target: HandleTarget; payload: { off: number; len: number }; reply: ReadReply };
  write: { target: HandleTarget; payload: { off: number; data_b64?: string; n?: number } & WriteThen; reply: WriteReply };
  fsync: { target: HandleTarget; payload: EmptyPayload; reply: EmptyReply };
  close: { target: HandleTarget; payload: EmptyPayload; reply: EmptyReply };
  truncate: { target: NodeTarget; payload: { sz: number }; reply: AttrReply };
  unlink: { target: NodeTarget; payload: { name: string }; reply: DirAttrReply };
  mkdir: { target: NodeTarget; payload: { name: string; mode?: number; cred?: Cred }; reply: AttrReply & DirAttrReply };
  rmdir: { target: NodeTarget; payload: { name: string }; reply: DirAttrReply };
  rename: { target: NoTarget; payload: RenameRequest; reply: RenameReply };
  symlink: { target: NodeTarget; payload: { name: string; target: string; cred?: Cred }; reply: AttrReply & DirAttrReply };
  readlink: { target: NodeTarget; payload: EmptyPayload; reply: { target: string } };
  statfs: { target: NodeTarget; payload: EmptyPayload; reply: StatFs };
  prefetch: { target: NodeTarget; payload: { names: readonly string[]; max_file?: number; max_total?: number }; reply: PrefetchReply };
  ack: { target: NoTarget; payload: { seq: number }; reply: EmptyReply };
  fgetattr: { target: HandleTarget; payload: EmptyPayload; reply: AttrReply };
  ftruncate: { target: HandleTarget; payload: { sz: number }; reply: AttrReply };
  fallocate: { target: HandleTarget; payload: { mode?: number; off: number; len: number }; reply: AttrReply };
  link: { target: NodeTarget; payload: { new_parent: number; new_name: string }; reply: AttrReply & DirAttrReply };
  mknod: { target: NodeTarget; payload: { name: string; mode: number; rdev?: number; cred?: Cred }; reply: AttrReply & DirAttrReply };
  getxattr: { target: NodeTarget; payload: { name: string; size: number }; reply: { n: number; value_b64?: string } };
  setxattr: { target: NodeTarget; payload: { name: string; value_b64: string; flags?: number }; reply: EmptyReply };
  listxattr: { target: NodeTarget; payload: { size: number }; reply: { n: number; names?: string[] } };
  removexattr: { target: NodeTarget; payload: { name: string }; reply: EmptyReply };
  lock: { target: HandleTarget; payload: LockPayload; reply: EmptyReply };
  getlk: { target: HandleTarget; payload: Omit<LockPayload, 'wait' | 'pid'>; reply: GetlkReply };
  lock_cancel: { target: NoTarget; payload: { tag: number }; reply: EmptyReply };
}

/** The operations of the FS extensions (docs/protocol.md "FS extensions") that are requests of their own. */
export type FsExtensionOp =
  | 'prefetch'
  | 'ack'
  | 'fgetattr'
  | 'ftruncate'
  | 'fallocate'
  | 'link'
  | 'mknod'
  | 'getxattr'
  | 'setxattr'
  | 'listxattr'
  | 'removexattr'
  | 'lock'
  | 'getlk'
  | 'lock_cancel';

/** Every request a session may send: the base operations ({@link FS_OPS}) and the extensions'. Each has its entry in {@link FsRequests}. */
export type FsRequestOp = FsOp | FsExtensionOp;

/** Root fields of request `op` ({@link FsRequests}). */
export type FsTargetOf<K extends FsRequestOp> = FsRequests[K]['target'];
/** Payload of request `op` ({@link FsRequests}). */
export type FsPayload<K extends FsRequestOp> = FsRequests[K]['payload'];
/** Payload of the reply to request `op` ({@link FsRequests}). */
export type FsReply<K extends FsRequestOp> = FsRequests[K]['reply'];

/** The message type of request `op`: `acheron.t_fs_<op>`. */
export function fsRequestType<K extends FsRequestOp>(op: K): `acheron.t_fs_${K}` {
  return `${FS_REQUEST_PREFIX}${op}`;
}

/**
 * Decodes standard base64 strictly (RFC 4648 section 4, padded): the length is a multiple of 4,
 * only the base64 alphabet, padding only at the end. Used for `data_b64` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)").
 * Node's decoder skips characters outside the alphabet and stops at `=`, so any of those shows
 * as a decoded length other than the one the text's length implies; the URL-safe `-` and `_`,
 * which Node also accepts, are refused explicitly. Linear and without a regular expression (a
 * 1 MiB write is 1.4 MB of text).
 * @throws FsError EINVAL when `text` is not strict base64
 */
export function decodeBase64Strict(text: string): Buffer {
  const invalid = () => new FsError(Errno.EINVAL, 'data_b64 is not valid base64 (standard alphabet, padded)');
  if (text.length % 4 !== 0 || text.includes('-') || text.includes('_')) throw invalid();
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  const buf = Buffer.from(text, 'base64');
  if (buf.length !== (text.length / 4) * 3 - padding) throw invalid();
  return buf;
}

/** Bytes encoded per piece by {@link writeBase64}: a multiple of 3, so the pieces join without padding. */
const B64_ENCODE_PIECE = 48 * 1024;
/** Characters decoded per piece by {@link decodeBase64Bytes}: a multiple of 4. */
const B64_DECODE_PIECE = 64 * 1024;

/** Length of the padded base64 text of `n` bytes. */
export function base64Length(n: number): number {
  return Math.ceil(n / 3) * 4;
}

/**
 * Writes the standard, padded base64 text of `data` into `out` at `offset`, as ASCII bytes. It
 * works in pieces of 48 KiB, so no string of the whole text (1.4 MB for a 1 MiB read) is built:
 * such a string lands in V8's old generation and costs a mark-compact to free.
 * @returns bytes written ({@link base64Length} of `data.length`)
 * @throws RangeError when `out` is too short
 */
export function writeBase64(data: Uint8Array, out: Buffer, offset: number): number {
  const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (out.length - offset < base64Length(bytes.length)) throw new RangeError('base64 output buffer too short');
  let o = offset;
  for (let a = 0; a < bytes.length; a += B64_ENCODE_PIECE)
    o += out.write(bytes.toString('base64', a, Math.min(bytes.length, a + B64_ENCODE_PIECE)), o, 'latin1');
  return o - offset;
}

/**
 * Decodes base64 text held as ASCII bytes in `buf[start, end)`, in pieces of 64 KiB (no string
 * of the whole text is built). As lenient as `Buffer.from(text, 'base64')`: for data from a
 * peer that is trusted to send base64 (a node's `data_b64`); use {@link decodeBase64Strict} to
 * validate.
 * @returns the decoded bytes
 */
export function decodeBase64Bytes(buf: Buffer, start: number, end: number): Buffer {
  const out = Buffer.allocUnsafe(Math.floor(((end - start) * 3) / 4));
  let o = 0;
  for (let a = start; a < end; a += B64_DECODE_PIECE) o += out.write(buf.toString('latin1', a, Math.min(end, a + B64_DECODE_PIECE)), o, 'base64');
  return out.subarray(0, o);
}
