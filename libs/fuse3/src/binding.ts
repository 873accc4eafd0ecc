/**
 * Loads the native binding (native/fuse3, C over Node-API, built by `npm ci` or
 * `npm run build:native` into native/fuse3/build/Release/svc_fuse3.node) and describes its
 * functions. Loaded on first use, so that importing this library works where FUSE is absent;
 * {@link fuse3Unavailable} says why it cannot be used.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Attr, DirEntry, DirEntryPlus, Entry, Lock, OpenReply, Statfs } from './types';

/** What a Debian machine needs to build the binding and to mount with it. */
export const DEBIAN_PACKAGES = 'libfuse3-dev fuse3 gcc make pkg-config python3';

const BINARY = join('native', 'fuse3', 'build', 'Release', 'svc_fuse3.node');

/** Operation codes, in the order of the binding's `ops` (checked at load). */
export enum Op {
  Lookup,
  Forget,
  Getattr,
  Setattr,
  Readlink,
  Mknod,
  Mkdir,
  Unlink,
  Rmdir,
  Symlink,
  Rename,
  Link,
  Open,
  Read,
  Write,
  Flush,
  Release,
  Fsync,
  Opendir,
  Readdir,
  Readdirplus,
  Releasedir,
  Fsyncdir,
  Statfs,
  Setxattr,
  Getxattr,
  Listxattr,
  Removexattr,
  Access,
  Create,
  Getlk,
  Setlk,
  Flock,
  Fallocate,
  Lseek,
  CopyFileRange,
}

/** The binding's operation names, by {@link Op} code: also the {@link Operations} method names, but `copy_file_range`. */
export const OP_NAMES = [
  'lookup',
  'forget',
  'getattr',
  'setattr',
  'readlink',
  'mknod',
  'mkdir',
  'unlink',
  'rmdir',
  'symlink',
  'rename',
  'link',
  'open',
  'read',
  'write',
  'flush',
  'release',
  'fsync',
  'opendir',
  'readdir',
  'readdirplus',
  'releasedir',
  'fsyncdir',
  'statfs',
  'setxattr',
  'getxattr',
  'listxattr',
  'removexattr',
  'access',
  'create',
  'getlk',
  'setlk',
  'flock',
  'fallocate',
  'lseek',
  'copy_file_range',
] as const;

/** Kinds of the messages the binding sends to the dispatch function (its first argument). */
export enum MsgKind {
  Request,
  Interrupt,
  Init,
  NotifyDone,
  End,
  Forget,
}

/** Notification kinds of `notify`. */
export enum NotifyKind {
  InvalInode,
  InvalEntry,
  Delete,
  ExpireEntry,
}

/**
 * The dispatch function the binding calls on the JS thread for every message:
 * `(kind, op, id, uid, gid, pid, umask, a0, ..., a7)` for a request (a0.. are the operation's
 * arguments in the order of {@link Operations}, without ctx); for the other kinds the payload is
 * in the fourth argument (`uid`'s place): Init: the {@link ConnInfo}; NotifyDone (id: job):
 * 0 or a negative errno; Forget: `[ino, nlookup, ...]`; End: the reason
 * (`'unmount' | 'external' | 'error'`), with a message fifth.
 */
export type DispatchFn = (kind: number, op: number, id: number, ...args: unknown[]) => void;

/** The session handle of the binding (opaque). */
export type NativeHandle = object & { readonly __fuse3: unique symbol };

/** Connection settings applied in the binding's init (`FUSE_CAP_*` bits to want and to drop, sizes in bytes), and the loop thread's spin. */
export interface NativeConn {
  want: number;
  unwant: number;
  maxWrite?: number;
  maxRead?: number;
  maxReadahead?: number;
  maxBackground?: number;
  congestionThreshold?: number;
  timeGran?: number;
  /** How long the loop thread goes on reading /dev/fuse before it sleeps, µs. */
  spinUs?: number;
}

/**
 * The binding's functions. A reply takes the request's id and returns true when sent, false when
 * the request was answered already or its session ended (nothing is sent). Reply data of the
 * wrong shape throws a TypeError and answers the request EIO.
 */
export interface Fuse3Binding {
  /** Starts a session: the mount itself runs on the session's thread (then an Init or End message). */
  mount(mountpoint: string, args: string[], opsMask: number, conn: NativeConn, dispatch: DispatchFn): NativeHandle;
  /** Ends a session: `polite`: a regular unmount first (dirty pages are written back), then the end. */
  unmount(handle: NativeHandle, polite: boolean): void;
  /**
   * Ends a session now on the calling thread, without the event loop: requests still waiting
   * get ENOTCONN, the mount is detached, the session's threads are joined (process exit).
   */
  closeSync(handle: NativeHandle): void;
  /** Queues a notification; its job id (a NotifyDone message follows), or 0 when the session is not running. */
  notify(handle: NativeHandle, kind: NotifyKind, ino: number, offsetOrChild: number, length: number, name?: string): number;
  /**
   * Read-only opens of inode `ino` are answered by the binding (`on`), with file handle
   * {@link fastFh}, or go to JS again (off); ino 0 with off: every inode. False when `ino`
   * could not be listed (out of memory, or above 2^27).
   */
  fastOpen(handle: NativeHandle, ino: number, on: boolean): boolean;
  /** The opens, releases and getattrs the binding answered itself so far. */
  fastOpenStats(handle: NativeHandle): { opens: number; releases: number; getattrs: number };
  /**
   * The flushes and releases of {@link fastFh} on inode `ino` go to JS (`on`) or are answered by
   * the binding (off). False when `ino` could not be listed.
   */
  fastLocks(handle: NativeHandle, ino: number, on: boolean): boolean;
  /**
   * The kernel's getxattr of `security.capability` for inode `ino` is answered ENODATA by the
   * binding (`on`) or goes to JS (off); ino 0 with off: every inode. False when `ino` could not
   * be listed.
   */
  noCaps(handle: NativeHandle, ino: number, on: boolean): boolean;
  /**
   * The kernel's next getattr of directory `ino`, within 1 s, is answered by the binding with
   * `attr` (attribute timeout `timeout`, s), once; null: not (ino 0: for no inode). A request
   * about `ino` (as the inode or a parent) that goes to JS, a notification about it and its
   * forget drop it too. False when it could not be kept (out of memory, or not running).
   */
  fastAttr(handle: NativeHandle, ino: number, attr: Attr | null, timeout: number): boolean;
  /** The kernel drops the attributes of `ino` now (not its pages): 0, or the negative errno (-ENOTCONN: not running). */
  invalAttr(handle: NativeHandle, ino: number): number;
  /** errno 0 answers success to the operations that return nothing. */
  replyErr(handle: NativeHandle, id: number, errno: number): boolean;
  replyEntry(handle: NativeHandle, id: number, entry: Entry): boolean;
  replyCreate(handle: NativeHandle, id: number, entry: Entry, open: OpenReply): boolean;
  /** @param timeout seconds */
  replyAttr(handle: NativeHandle, id: number, attr: Attr, timeout: number): boolean;
  replyReadlink(handle: NativeHandle, id: number, target: string | Buffer): boolean;
  replyOpen(handle: NativeHandle, id: number, open: OpenReply): boolean;
  replyWrite(handle: NativeHandle, id: number, count: number): boolean;
  /** read (cut to the size asked), readlink, getxattr and listxattr data (ERANGE when larger than asked). */
  replyBuf(handle: NativeHandle, id: number, data: Buffer): boolean;
  replyStatfs(handle: NativeHandle, id: number, statfs: Statfs): boolean;
  /** The size of the xattr value or list, for a getxattr or listxattr that asked with size 0. */
  replyXattr(handle: NativeHandle, id: number, size: number): boolean;
  replyLock(handle: NativeHandle, id: number, lock: Lock): boolean;
  replyLseek(handle: NativeHandle, id: number, offset: number): boolean;
  /** Packs entries until the size asked is full; how many were packed, or -1 when nothing was sent. */
  replyDir(handle: NativeHandle, id: number, entries: readonly (DirEntry | DirEntryPlus)[]): number;
  /** Operation names by code. */
  readonly ops: readonly string[];
  /** `FUSE_CAP_*` values by name without the prefix (`WRITEBACK_CACHE`). */
  readonly caps: Readonly<Record<string, number>>;
  /** libfuse's version, 100 * major + minor (314). */
  readonly libfuseVersion: number;
  /** Whether {@link OpenReply.parallelDirectWrites} reaches the kernel (libfuse 3.15 or later). */
  readonly parallelDirectWrites: boolean;
  /** The file handle of the opens the binding answers itself ({@link fastOpen}): 2^32. */
  readonly fastFh: number;
}

/** The file handle of the read-only opens the binding answers itself ({@link Fuse3Binding.fastOpen}). */
export const FAST_FH = 2 ** 32;

let loaded: Fuse3Binding | null = null;
let loadError: Error | null = null;

/** The built binary: looked for in the first directory up from this file that holds native/fuse3. */
function binaryPath(): string | null {
  for (let dir = __dirname; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'native', 'fuse3', 'binding.gyp')) || existsSync(join(dir, BINARY))) return join(dir, BINARY);
    if (dirname(dir) === dir) return null;
  }
}

/**
 * The binding, loaded on first call.
 * @throws Error naming the Debian packages when it is not built or cannot be loaded
 */
export function loadFuse3Binding(): Fuse3Binding {
  if (loaded) return loaded;
  if (loadError) throw loadError;
  const file = binaryPath();
  const advice = `build it with \`npm run build:native\` (Debian: apt-get install ${DEBIAN_PACKAGES})`;
  try {
    if (!file || !existsSync(file)) throw new Error(`the libfuse 3 binding is not built (${file ?? BINARY} is missing): ${advice}`);
    const mod = { exports: {} as unknown };
    try {
      process.dlopen(mod, file);
    } catch (e) {
      throw new Error(`the libfuse 3 binding ${file} cannot be loaded (${(e as Error).message}): ${advice}`);
    }
    const b = mod.exports as Fuse3Binding;
    if (
      b.ops.length !== OP_NAMES.length ||
      b.ops.some((n, i) => n !== OP_NAMES[i]) ||
      typeof b.fastOpen !== 'function' ||
      typeof b.noCaps !== 'function' ||
      b.fastFh !== FAST_FH
    ) {
      throw new Error(`the libfuse 3 binding ${file} is out of date (its operations differ): ${advice}`);
    }
    loaded = b;
    return b;
  } catch (e) {
    loadError = e as Error;
    throw loadError;
  }
}

/** Why FUSE 3 mounts cannot work here (no binding, no /dev/fuse, no fusermount3 for a non-root user), or null. */
export function fuse3Unavailable(): string | null {
  try {
    loadFuse3Binding();
  } catch (e) {
    return (e as Error).message;
  }
  if (!existsSync('/dev/fuse')) return '/dev/fuse is missing';
  if (process.getuid?.() !== 0 && !['/usr/bin/fusermount3', '/bin/fusermount3'].some((f) => existsSync(f))) {
    return 'fusermount3 is missing (Debian: apt-get install fuse3)';
  }
  return null;
}
