/**
 * A mounted libfuse 3 low-level session: {@link mount} starts it with an {@link Operations}
 * object; the session turns each request the binding hands over into a call of the operation
 * and its result (or thrown error) into the reply, runs kernel notifications and unmounts.
 *
 * Threads: the binding reads requests on its own thread and queues each to this event loop
 * without waiting for it; replies are written from here; notifications run on another thread of
 * the binding, each resolving a Promise. Nothing here blocks the event loop on the kernel (see
 * native/fuse3/svc_fuse3.c).
 */
import { EventEmitter } from 'node:events';
import { statSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { Fuse3Binding, loadFuse3Binding, MsgKind, NativeConn, NativeHandle, NotifyKind, Op, OP_NAMES } from './binding';
import type { Operations } from './operations';
import { Attr, ConnInfo, DirEntryPlus, Entry, ERRNO, errnoOf, Forget, FuseError, Lock, RequestContext, SetattrValues } from './types';

/**
 * Connection settings negotiated at init. A capability set to true is asked for (when the
 * kernel offers it), false is turned off, undefined keeps libfuse's default: on are asyncRead,
 * parallelDirops, autoInvalData, handleKillpriv, asyncDio, atomicOTrunc, posixLocks when getlk
 * and setlk are implemented, flockLocks when flock is, readdirplus 'auto' when readdirplus is.
 */
export interface ConnOptions {
  /** Writes are cached by the kernel and written back later (timestamps kept by the kernel). */
  writebackCache?: boolean;
  /** true: every readdir is a readdirplus; 'auto': the kernel chooses per directory; false: never. */
  readdirplus?: boolean | 'auto';
  asyncRead?: boolean;
  spliceRead?: boolean;
  spliceWrite?: boolean;
  spliceMove?: boolean;
  posixLocks?: boolean;
  flockLocks?: boolean;
  atomicOTrunc?: boolean;
  exportSupport?: boolean;
  dontMask?: boolean;
  autoInvalData?: boolean;
  explicitInvalData?: boolean;
  asyncDio?: boolean;
  parallelDirops?: boolean;
  posixAcl?: boolean;
  handleKillpriv?: boolean;
  cacheSymlinks?: boolean;
  noOpenSupport?: boolean;
  noOpendirSupport?: boolean;
  /** Largest write request, bytes (libfuse's default and limit: 1 MiB where the kernel allows it). */
  maxWrite?: number;
  /** Largest read request, bytes (also passed as the `max_read` mount option). */
  maxRead?: number;
  /** Largest readahead, bytes (at most the kernel's). */
  maxReadahead?: number;
  /** Most background requests (readahead, async direct I/O) at a time. */
  maxBackground?: number;
  congestionThreshold?: number;
  /** Granularity of the times the filesystem keeps, ns (1: full ns; 1e9: seconds). */
  timeGran?: number;
}

/** Mount options (fuse_session_new's `-o` options) and connection settings. */
export interface MountOptions {
  /** The source shown in /proc/mounts (`fsname`), default `svc-fuse3`. */
  fsname?: string;
  /** The type shown as `fuse.<subtype>`. */
  subtype?: string;
  /** Other users may use the mount (needs user_allow_other in /etc/fuse.conf when not root). */
  allowOther?: boolean;
  allowRoot?: boolean;
  /** The kernel checks permissions from the mode bits (else the filesystem must). */
  defaultPermissions?: boolean;
  readOnly?: boolean;
  /** fusermount3 unmounts when this process dies. */
  autoUnmount?: boolean;
  /** libfuse prints every request to stderr. */
  debug?: boolean;
  /** More `-o` options, one per element (`nosuid`, `max_read=...`). */
  options?: string[];
  conn?: ConnOptions;
  /**
   * When no request is queued, the binding's loop thread goes on reading /dev/fuse for this
   * long before it sleeps, µs (default 0: it sleeps at once; ignored on one CPU). A caller that
   * waits for each answer (stat in a loop) sends its next request soon after, and waking a
   * sleeping thread costs tens of µs on a virtual machine: the spin can save that wake-up, at
   * the price of up to this much CPU time after each burst of requests, and it costs time where
   * the spinning thread takes a CPU the event loop or the callers need. Measure before choosing
   * (`npm run bench:fuse3` runs both).
   */
  spinUs?: number;
}

/** How a session ended: asked by {@link FuseSession.unmount}, by the kernel (`fusermount3 -u`, `umount` or an abort from outside), or an error. */
export interface UnmountedInfo {
  reason: 'unmount' | 'external' | 'error';
  message?: string;
}

const CAP_OPTIONS: Readonly<Record<string, string>> = {
  writebackCache: 'WRITEBACK_CACHE',
  asyncRead: 'ASYNC_READ',
  spliceRead: 'SPLICE_READ',
  spliceWrite: 'SPLICE_WRITE',
  spliceMove: 'SPLICE_MOVE',
  posixLocks: 'POSIX_LOCKS',
  flockLocks: 'FLOCK_LOCKS',
  atomicOTrunc: 'ATOMIC_O_TRUNC',
  exportSupport: 'EXPORT_SUPPORT',
  dontMask: 'DONT_MASK',
  autoInvalData: 'AUTO_INVAL_DATA',
  explicitInvalData: 'EXPLICIT_INVAL_DATA',
  asyncDio: 'ASYNC_DIO',
  parallelDirops: 'PARALLEL_DIROPS',
  posixAcl: 'POSIX_ACL',
  handleKillpriv: 'HANDLE_KILLPRIV',
  cacheSymlinks: 'CACHE_SYMLINKS',
  noOpenSupport: 'NO_OPEN_SUPPORT',
  noOpendirSupport: 'NO_OPENDIR_SUPPORT',
};

/** The {@link Operations} method of each operation code. */
const METHODS: readonly (keyof Operations)[] = OP_NAMES.map((n) => (n === 'copy_file_range' ? 'copyFileRange' : n));

const EIO = ERRNO.EIO;
const ENOSYS = ERRNO.ENOSYS;
const EACCES = ERRNO.EACCES;
const ENOENT = ERRNO.ENOENT;
const ENOTCONN = ERRNO.ENOTCONN;

/** A `-o` option value with libfuse's separators escaped. */
function optionValue(v: string): string {
  return v.replace(/[\\,]/g, (c) => `\\${c}`);
}

/** fuse_session_new's arguments for `options`. */
function sessionArgs(options: MountOptions): string[] {
  const o = [`fsname=${optionValue(options.fsname ?? 'svc-fuse3')}`];
  if (options.subtype) o.push(`subtype=${optionValue(options.subtype)}`);
  if (options.allowOther) o.push('allow_other');
  if (options.allowRoot) o.push('allow_root');
  if (options.defaultPermissions) o.push('default_permissions');
  if (options.readOnly) o.push('ro');
  if (options.autoUnmount) o.push('auto_unmount');
  if (options.conn?.maxRead !== undefined) o.push(`max_read=${options.conn.maxRead}`);
  o.push(...(options.options ?? []));
  return ['svc-fuse3', ...(options.debug ? ['-d'] : []), '-o', o.join(',')];
}

/** The binding's connection settings for `conn`. */
function nativeConn(binding: Fuse3Binding, conn: ConnOptions = {}): NativeConn {
  let want = 0;
  let unwant = 0;
  const set = (cap: string, on: boolean | undefined) => {
    const bit = binding.caps[cap];
    if (on === undefined || bit === undefined) return;
    if (on) want |= bit;
    else unwant |= bit;
  };
  for (const [option, cap] of Object.entries(CAP_OPTIONS)) set(cap, conn[option as keyof ConnOptions] as boolean | undefined);
  if (conn.readdirplus !== undefined) {
    set('READDIRPLUS', conn.readdirplus !== false);
    set('READDIRPLUS_AUTO', conn.readdirplus === 'auto');
  }
  return {
    want,
    unwant,
    maxWrite: conn.maxWrite,
    maxRead: conn.maxRead,
    maxReadahead: conn.maxReadahead,
    maxBackground: conn.maxBackground,
    congestionThreshold: conn.congestionThreshold,
    timeGran: conn.timeGran,
  };
}

/**
 * Mounts `ops` on `mountpoint` (an existing directory) through libfuse 3's low-level API; as
 * root with mount(2), else through fusermount3.
 * @returns the session once mounted and the connection negotiated (after `ops.init`)
 * @throws Error when the binding is not built (naming the packages), the mount point is not a
 *   directory, libfuse refuses the options, or the mount fails (with libfuse's message)
 */
export async function mount(mountpoint: string, ops: Operations, options: MountOptions = {}): Promise<FuseSession> {
  const binding = loadFuse3Binding();
  const dir = resolvePath(mountpoint);
  let isDir = false;
  try {
    isDir = statSync(dir).isDirectory();
  } catch (e) {
    throw new Error(`mount point ${dir}: ${(e as Error).message}`);
  }
  if (!isDir) throw new Error(`mount point ${dir} is not a directory`);
  const session = new FuseSession(binding, dir, ops, options);
  await session.mounted;
  return session;
}

/** The sessions not ended yet, closed at process exit (see {@link FuseSession.closeSync}). */
const live = new Set<FuseSession>();
let exitHook = false;

function closeAtExit(session: FuseSession): void {
  live.add(session);
  void session.ended.then(() => live.delete(session));
  if (exitHook) return;
  exitHook = true;
  process.on('exit', () => {
    for (const s of live) s.closeSync();
  });
}

interface Pending<T> {
  resolve: (v: T) => void;
  reject: (e: unknown) => void;
}

/** The events of a {@link FuseSession}, with their arguments. */
export interface FuseSessionEvents {
  /** The session ended (after ops.destroy); emitted once. */
  unmounted: [info: UnmountedInfo];
  /** An operation failed with an error that is not a {@link FuseError} (answered EIO), or its reply was refused. */
  operationError: [error: unknown, op: string];
}

/**
 * One mounted filesystem. Events: `unmounted` ({@link UnmountedInfo}), `operationError`
 * (error, operation name): without a listener the first of each operation is written to stderr.
 */
export class FuseSession extends EventEmitter<FuseSessionEvents> {
  /** The connection as negotiated (set before {@link mount} resolves). */
  conn: ConnInfo | null = null;
  /** Resolves when the session ends, however it ends (never rejects). */
  readonly ended: Promise<UnmountedInfo>;
  /** @internal resolves when mounted and initialised, rejects when the mount fails */
  readonly mounted: Promise<void>;
  /**
   * Called after each answer given to the kernel from JS, with the inode the request was about
   * (its first argument) and those of the entries the answer gave (lookup, create, mkdir,
   * readdirplus, ...): the kernel may hold new attributes, pages or names of them since. Not
   * for what the binding answers itself.
   */
  onContact: ((ino: number) => void) | null = null;

  private readonly handle: NativeHandle;
  private readonly implemented: boolean[];
  private readonly contexts = new Map<number, RequestContext>();
  private readonly notifies = new Map<number, Pending<boolean>>();
  private readonly reported = new Set<string>();
  private state: 'mounting' | 'mounted' | 'ended' = 'mounting';
  private resolveEnded!: (info: UnmountedInfo) => void;
  private mountWait!: Pending<void>;

  /** Use {@link mount}. */
  constructor(
    private readonly binding: Fuse3Binding,
    readonly mountpoint: string,
    private readonly ops: Operations,
    options: MountOptions,
  ) {
    super();
    this.ended = new Promise((resolve) => (this.resolveEnded = resolve));
    this.mounted = new Promise((resolve, reject) => (this.mountWait = { resolve, reject }));
    this.mounted.catch(() => undefined); // awaited by mount(); rejected again for nobody after the end
    this.implemented = METHODS.map((m) => typeof ops[m] === 'function');
    const mask = this.implemented.reduce((acc, on, i) => (on ? acc + 2 ** i : acc), 0);
    const conn = { ...nativeConn(binding, options.conn), spinUs: options.spinUs };
    this.handle = binding.mount(mountpoint, sessionArgs(options), mask, conn, this.dispatch);
    closeAtExit(this);
  }

  /** Whether the negotiated connection uses capability `cap` (`'WRITEBACK_CACHE'`, a key of `binding.caps`). */
  wants(cap: string): boolean {
    const bit = this.binding.caps[cap];
    return this.conn !== null && bit !== undefined && (this.conn.want & bit) !== 0;
  }

  /**
   * Tells the kernel to drop what it cached of inode `ino`: its attributes, and its pages from
   * `offset` for `length` bytes (0: to the end). A negative `offset` drops the attributes only.
   * With the writeback cache, dirty pages are written back first (through this session).
   * Runs on the binding's notify thread, after the notifications queued before it.
   * @returns true, or false when the kernel had nothing cached for `ino` (as after the end of the
   *   session, when nothing is cached any more)
   * @throws FuseError with the kernel's errno otherwise (ENOSYS on a kernel without it)
   */
  notifyInvalInode(ino: number, offset = 0, length = 0): Promise<boolean> {
    return this.notify(NotifyKind.InvalInode, ino, offset, length);
  }

  /**
   * Lets the binding answer read-only opens of inode `ino` itself (`on`: no request reaches JS
   * for them, their flush and release neither, unless {@link fastLocks} is on), or stops it
   * (`on` false). Such opens carry file handle {@link FuseSession.fastFh} and keep the kernel's
   * page cache; reads and lock requests through them come to {@link Operations} like any other. The caller turns it off before
   * it acts on a change of the inode (an invalidation, a write, a removal). Takes effect for the
   * opens the kernel sends after the call.
   * @returns false when the inode could not be listed (opens then keep coming to JS)
   */
  fastOpen(ino: number, on: boolean): boolean {
    if (this.state === 'ended') return false;
    return this.binding.fastOpen(this.handle, ino, on);
  }

  /**
   * Sends the flushes and releases of the binding's opens of inode `ino` ({@link fastOpen}) to
   * {@link Operations.flush} and {@link Operations.release} (`on`: locks were taken through such
   * an open, and each close of its owner must release them), or lets the binding answer them again.
   * @returns false when the inode could not be listed
   */
  fastLocks(ino: number, on: boolean): boolean {
    if (this.state === 'ended') return false;
    return this.binding.fastLocks(this.handle, ino, on);
  }

  /**
   * Lets the binding answer the kernel's getxattr of `security.capability` for inode `ino` with
   * ENODATA itself (`on`: the file has none; no request reaches JS), or stops it (`on` false).
   * The caller turns it off before it acts on a change of the inode's extended attributes.
   * @returns false when the inode could not be listed (those getxattrs then keep coming to JS)
   */
  noCaps(ino: number, on: boolean): boolean {
    if (this.state === 'ended') return false;
    return this.binding.noCaps(this.handle, ino, on);
  }

  /**
   * The kernel drops the attributes it holds of inode `ino` (not its pages), at once on this
   * thread rather than through the notification queue: the kernel takes no lock for it, so it
   * may be called while the kernel waits for the reply of an operation that holds a directory's
   * lock (an entry notification in the queue may wait for that lock).
   * @returns true when done; false when the kernel holds no such inode or the session ended
   */
  invalAttrNow(ino: number): boolean {
    if (this.state === 'ended') return false;
    return this.binding.invalAttr(this.handle, ino) === 0;
  }

  /**
   * Lets the binding answer the kernel's next getattr of directory `ino` with `attr`
   * (attribute timeout `timeoutS`, s) itself, once, within 1 s: the kernel asks for a
   * directory's attributes after each change of its entries, and the caller knows them from the
   * change's reply. null: not any more (`ino` 0: for no inode). The binding drops them itself
   * when a request about `ino` (as the inode or a parent) comes to JS, when a notification
   * about it is queued, and at its forget; the caller drops them when it learns they changed
   * otherwise.
   * @returns false when they could not be kept (the getattr then comes to JS)
   */
  fastAttr(ino: number, attr: Attr | null, timeoutS = 0): boolean {
    if (this.state === 'ended') return false;
    return this.binding.fastAttr(this.handle, ino, attr, timeoutS);
  }

  /** Turns {@link fastOpen} off for every inode. */
  fastOpenNone(): void {
    if (this.state !== 'ended') this.binding.fastOpen(this.handle, 0, false);
  }

  /** The opens and releases ({@link fastOpen}) and getattrs ({@link fastAttr}) the binding answered itself so far. */
  fastOpenStats(): { opens: number; releases: number; getattrs: number } {
    if (this.state === 'ended') return { opens: 0, releases: 0, getattrs: 0 };
    return this.binding.fastOpenStats(this.handle);
  }

  /** The file handle of the opens the binding answers itself ({@link fastOpen}). */
  get fastFh(): number {
    return this.binding.fastFh;
  }

  /**
   * Tells the kernel to drop the cached entry `name` in directory `parent` (and the directory's
   * attributes). Waits in the kernel while a request on that directory is in progress (run off
   * the event loop, so that request can be answered meanwhile).
   * @returns true, or false when the kernel had no such entry
   */
  notifyInvalEntry(parent: number, name: string): Promise<boolean> {
    return this.notify(NotifyKind.InvalEntry, parent, 0, 0, name);
  }

  /**
   * Tells the kernel that the cached entry `name` in directory `parent` has expired: its next
   * use looks it up again, but it stays in the dentry cache meanwhile, so a process whose
   * working directory is at or below it keeps its path (getcwd) when the lookup finds the same
   * inode. Kernels before 6.2 invalidate it instead ({@link notifyInvalEntry}).
   * @returns true, or false when the kernel had no such entry
   */
  notifyExpireEntry(parent: number, name: string): Promise<boolean> {
    return this.notify(NotifyKind.ExpireEntry, parent, 0, 0, name);
  }

  /**
   * As {@link notifyInvalEntry}, for a name removed elsewhere: inotify watchers of `child` are
   * told it was deleted when the cached entry points to it.
   */
  notifyDelete(parent: number, child: number, name: string): Promise<boolean> {
    return this.notify(NotifyKind.Delete, parent, child, 0, name);
  }

  /**
   * Unmounts and ends the session. By default a regular unmount first, which lets the kernel
   * write back dirty pages through the session; when it is refused (EBUSY: files open) or with
   * `lazy`, the mount is detached (umount -l) and the connection closed, so requests still
   * waiting get ENOTCONN. Never waits for the kernel on the event loop.
   * @returns how the session ended
   */
  unmount(options: { lazy?: boolean } = {}): Promise<UnmountedInfo> {
    if (this.state !== 'ended') this.binding.unmount(this.handle, !options.lazy);
    return this.ended;
  }

  /**
   * Ends the session now, blocking this thread until the binding's threads are done (without the
   * event loop, which a notification or a polite unmount would need): requests still waiting get
   * ENOTCONN, the mount is detached (lazy unmount) and the connection closed. Called for every
   * session still mounted at process exit (`process.exit()` included), so that no dead mount
   * ("Transport endpoint is not connected") is left behind. `unmounted` follows if the event
   * loop runs again.
   */
  closeSync(): void {
    if (this.state !== 'ended') this.binding.closeSync(this.handle);
  }

  private notify(kind: NotifyKind, ino: number, a: number, b: number, name?: string): Promise<boolean> {
    const job = this.state === 'ended' ? 0 : this.binding.notify(this.handle, kind, ino, a, b, name);
    if (job === 0) return Promise.resolve(false); // the session has ended: nothing is cached
    return new Promise((resolve, reject) => this.notifies.set(job, { resolve, reject }));
  }

  /** The binding's messages (see {@link DispatchFn}); never throws. */
  private readonly dispatch = (
    kind: MsgKind,
    op: number,
    id: number,
    p3: unknown,
    p4: unknown,
    p5: unknown,
    p6: unknown,
    a0: unknown,
    a1: unknown,
    a2: unknown,
    a3: unknown,
    a4: unknown,
    a5: unknown,
    a6: unknown,
    a7: unknown,
  ): void => {
    try {
      switch (kind) {
        case MsgKind.Request:
          if (!this.implemented[op]) {
            this.binding.replyErr(this.handle, id, ENOSYS);
            return;
          }
          void this.request(op, id, new RequestContext(id, p3 as number, p4 as number, p5 as number, p6 as number), a0, a1, a2, a3, a4, a5, a6, a7);
          return;
        case MsgKind.Forget: {
          const flat = p3 as number[];
          const list: Forget[] = [];
          for (let i = 0; i < flat.length; i += 2) list.push({ ino: flat[i], nlookup: flat[i + 1] });
          this.forget(list);
          return;
        }
        case MsgKind.Interrupt: {
          const ctx = this.contexts.get(id);
          if (!ctx || ctx.interrupted) return;
          ctx.markInterrupted();
          this.ops.interrupt?.(ctx);
          return;
        }
        case MsgKind.Init:
          this.init(p3 as ConnInfo);
          return;
        case MsgKind.NotifyDone: {
          const p = this.notifies.get(id);
          if (!p) return;
          this.notifies.delete(id);
          const rc = p3 as number;
          if (rc === 0) p.resolve(true);
          else if (rc === -ENOENT || rc === -ENOTCONN)
            p.resolve(false); // nothing cached, or no session any more
          else p.reject(new FuseError(-rc));
          return;
        }
        case MsgKind.End:
          this.end({ reason: p3 as UnmountedInfo['reason'], ...(typeof p4 === 'string' ? { message: p4 } : {}) });
          return;
      }
    } catch (e) {
      this.report(kind === MsgKind.Request ? (OP_NAMES[op] ?? 'request') : 'session', e);
    }
  };

  private init(conn: ConnInfo): void {
    this.conn = conn;
    void Promise.resolve()
      .then(() => this.ops.init?.(conn))
      .then(
        () => {
          if (this.state !== 'mounting') return;
          this.state = 'mounted';
          this.mountWait.resolve();
        },
        (e: unknown) => {
          this.mountWait.reject(e);
          this.unmount({ lazy: true }).catch(() => undefined);
        },
      );
  }

  private end(info: UnmountedInfo): void {
    if (this.state === 'ended') return;
    const wasMounted = this.conn !== null;
    this.state = 'ended';
    for (const ctx of this.contexts.values()) ctx.markInterrupted();
    this.contexts.clear();
    for (const p of this.notifies.values()) p.resolve(false);
    this.notifies.clear();
    this.mountWait.reject(new Error(`mount on ${this.mountpoint} failed: ${info.message ?? info.reason}`));
    const finish = () => {
      this.resolveEnded(info);
      try {
        this.emit('unmounted', info);
      } catch (e) {
        this.report('unmounted listener', e);
      }
    };
    if (!wasMounted || !this.ops.destroy) return finish();
    void Promise.resolve()
      .then(() => this.ops.destroy?.())
      .catch((e: unknown) => this.report('destroy', e))
      .finally(finish);
  }

  /** Calls ops.forget (errors are reported, there is no reply); none after the end, when every count is 0. */
  private forget(list: Forget[]): void {
    if (list.length === 0 || !this.ops.forget || this.state === 'ended') return;
    try {
      const r = this.ops.forget(list);
      if (r) r.catch((e: unknown) => this.report('forget', e));
    } catch (e) {
      this.report('forget', e);
    }
  }

  /** Answers with an entry; a lookup count the kernel did not get (request answered already) is given back. */
  private replyEntry(id: number, entry: Entry): void {
    let sent = false;
    try {
      sent = this.binding.replyEntry(this.handle, id, entry);
    } finally {
      if (!sent && entry.ino) this.forget([{ ino: entry.ino, nlookup: 1 }]);
    }
    if (sent && entry.ino) this.onContact?.(entry.ino);
  }

  /**
   * The readdirplus entries the kernel did not take a lookup count for (past those packed, `.`
   * and `..`, or all when nothing was sent) go back through forget.
   */
  private giveBack(entries: readonly DirEntryPlus[], taken: number): void {
    let back: Forget[] | null = null;
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i];
      if (!e.entry?.ino) continue;
      if (i < taken && e.name !== '.' && e.name !== '..') continue;
      (back ??= []).push({ ino: e.entry.ino, nlookup: 1 });
    }
    if (back) this.forget(back);
  }

  private async request(op: Op, id: number, ctx: RequestContext, ...a: unknown[]): Promise<void> {
    const b = this.binding;
    const h = this.handle;
    const o = this.ops;
    this.contexts.set(id, ctx);
    try {
      switch (op) {
        case Op.Lookup:
          return this.replyEntry(id, await o.lookup!(a[0] as number, a[1] as string, ctx));
        case Op.Getattr: {
          const r = await o.getattr!(a[0] as number, a[1] as number | undefined, ctx);
          b.replyAttr(h, id, r.attr, r.attrTimeout);
          return;
        }
        case Op.Setattr: {
          const r = await o.setattr!(a[0] as number, a[1] as number, a[2] as SetattrValues, a[3] as number | undefined, ctx);
          b.replyAttr(h, id, r.attr, r.attrTimeout);
          return;
        }
        case Op.Readlink:
          b.replyReadlink(h, id, await o.readlink!(a[0] as number, ctx));
          return;
        case Op.Mknod:
          return this.replyEntry(id, await o.mknod!(a[0] as number, a[1] as string, a[2] as number, a[3] as number, ctx));
        case Op.Mkdir:
          return this.replyEntry(id, await o.mkdir!(a[0] as number, a[1] as string, a[2] as number, ctx));
        case Op.Unlink:
          await o.unlink!(a[0] as number, a[1] as string, ctx);
          break;
        case Op.Rmdir:
          await o.rmdir!(a[0] as number, a[1] as string, ctx);
          break;
        case Op.Symlink:
          return this.replyEntry(id, await o.symlink!(a[0] as number, a[1] as string, a[2] as string, ctx));
        case Op.Rename:
          await o.rename!(a[0] as number, a[1] as string, a[2] as number, a[3] as string, a[4] as number, ctx);
          break;
        case Op.Link:
          return this.replyEntry(id, await o.link!(a[0] as number, a[1] as number, a[2] as string, ctx));
        case Op.Open:
          b.replyOpen(h, id, await o.open!(a[0] as number, a[1] as number, ctx));
          return;
        case Op.Read:
          b.replyBuf(h, id, await o.read!(a[0] as number, a[1] as number, a[2] as number, a[3] as number, ctx));
          return;
        case Op.Write: {
          const info = { flags: a[4] as number, writepage: a[5] as boolean };
          b.replyWrite(h, id, await o.write!(a[0] as number, a[1] as number, a[2] as number, a[3] as Buffer, info, ctx));
          return;
        }
        case Op.Flush:
          await o.flush!(a[0] as number, a[1] as number, a[2] as bigint, ctx);
          break;
        case Op.Release: {
          const info = { flags: a[2] as number, flush: a[3] as boolean, flockRelease: a[4] as boolean, lockOwner: a[5] as bigint };
          await o.release!(a[0] as number, a[1] as number, info, ctx);
          break;
        }
        case Op.Fsync:
          await o.fsync!(a[0] as number, a[1] as number, a[2] as boolean, ctx);
          break;
        case Op.Opendir:
          b.replyOpen(h, id, await o.opendir!(a[0] as number, a[1] as number, ctx));
          return;
        case Op.Readdir:
          b.replyDir(h, id, await o.readdir!(a[0] as number, a[1] as number, a[2] as number, a[3] as number, ctx));
          return;
        case Op.Readdirplus: {
          const entries = await o.readdirplus!(a[0] as number, a[1] as number, a[2] as number, a[3] as number, ctx);
          let taken = 0;
          try {
            taken = Math.max(0, b.replyDir(h, id, entries));
          } finally {
            this.giveBack(entries, taken);
          }
          if (this.onContact) for (let i = 0; i < taken && i < entries.length; i++) if (entries[i].entry?.ino) this.onContact(entries[i].entry!.ino);
          return;
        }
        case Op.Releasedir:
          await o.releasedir!(a[0] as number, a[1] as number, ctx);
          break;
        case Op.Fsyncdir:
          await o.fsyncdir!(a[0] as number, a[1] as number, a[2] as boolean, ctx);
          break;
        case Op.Statfs:
          b.replyStatfs(h, id, await o.statfs!(a[0] as number, ctx));
          return;
        case Op.Setxattr:
          await o.setxattr!(a[0] as number, a[1] as string, a[2] as Buffer, a[3] as number, ctx);
          break;
        case Op.Getxattr: {
          const value = await o.getxattr!(a[0] as number, a[1] as string, ctx);
          if (a[2] === 0) b.replyXattr(h, id, value.length);
          else b.replyBuf(h, id, value);
          return;
        }
        case Op.Listxattr: {
          const names = await o.listxattr!(a[0] as number, ctx);
          const list = Buffer.from(names.map((n) => `${n}\0`).join(''));
          if (a[1] === 0) b.replyXattr(h, id, list.length);
          else b.replyBuf(h, id, list);
          return;
        }
        case Op.Removexattr:
          await o.removexattr!(a[0] as number, a[1] as string, ctx);
          break;
        case Op.Access:
          if ((await o.access!(a[0] as number, a[1] as number, ctx)) === false) throw new FuseError(EACCES);
          break;
        case Op.Create: {
          const r = await o.create!(a[0] as number, a[1] as string, a[2] as number, a[3] as number, ctx);
          let sent = false;
          try {
            sent = b.replyCreate(h, id, r.entry, r.open);
          } finally {
            if (!sent && r.entry.ino) this.forget([{ ino: r.entry.ino, nlookup: 1 }]);
          }
          if (sent && r.entry.ino) this.onContact?.(r.entry.ino);
          return;
        }
        case Op.Getlk:
          b.replyLock(h, id, await o.getlk!(a[0] as number, a[1] as number, a[2] as bigint, a[3] as Lock, ctx));
          return;
        case Op.Setlk:
          await o.setlk!(a[0] as number, a[1] as number, a[2] as bigint, a[3] as Lock, a[4] as boolean, ctx);
          break;
        case Op.Flock:
          await o.flock!(a[0] as number, a[1] as number, a[2] as bigint, a[3] as number, ctx);
          break;
        case Op.Fallocate:
          await o.fallocate!(a[0] as number, a[1] as number, a[2] as number, a[3] as number, a[4] as number, ctx);
          break;
        case Op.Lseek:
          b.replyLseek(h, id, await o.lseek!(a[0] as number, a[1] as number, a[2] as number, a[3] as number, ctx));
          return;
        case Op.CopyFileRange: {
          const n = await o.copyFileRange!(
            a[0] as number,
            a[1] as number,
            a[2] as number,
            a[3] as number,
            a[4] as number,
            a[5] as number,
            a[6] as number,
            a[7] as number,
            ctx,
          );
          b.replyWrite(h, id, n);
          return;
        }
        default:
          b.replyErr(h, id, ENOSYS);
          return;
      }
      b.replyErr(h, id, 0);
    } catch (e) {
      this.fail(op, id, e);
    } finally {
      this.contexts.delete(id);
      if (this.onContact && typeof a[0] === 'number' && a[0] > 0) this.onContact(a[0]);
    }
  }

  /** Answers a failed operation: its errno ({@link errnoOf}), else EIO and a report. */
  private fail(op: Op, id: number, e: unknown): void {
    const errno = errnoOf(e);
    if (errno === null) this.report(OP_NAMES[op] ?? 'request', e);
    try {
      this.binding.replyErr(this.handle, id, errno ?? EIO);
    } catch (err) {
      this.report(OP_NAMES[op] ?? 'request', err);
    }
  }

  /** An error that cannot be answered to the kernel as an errno: `operationError`, else stderr once per operation. Never throws. */
  private report(op: string, e: unknown): void {
    if (this.listenerCount('operationError') > 0) {
      try {
        this.emit('operationError', e, op);
        return;
      } catch (err) {
        e = err; // the listener threw: written below
        op = `operationError listener (${op})`;
      }
    }
    if (this.reported.has(op)) return;
    this.reported.add(op);
    process.stderr.write(`svc fuse3 (${this.mountpoint}): ${op} failed: ${(e as Error)?.stack ?? String(e)}\n`);
  }
}
