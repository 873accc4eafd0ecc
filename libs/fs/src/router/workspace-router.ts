/**
 * WorkspaceRouter: one path-based filesystem over a project's mounts. This
 * module is its path API (the façade); each part has its own module:
 *
 * - `./mount-table`: a workspace path resolves to a mount by the longest `mount_path` prefix;
 *   the directories above mount paths form a synthetic read-only tree (`readdir /` lists first
 *   segments).
 * - `./failover` ({@link MountRoutes}): each mount path has an ordered list of candidates (an
 *   FS endpoint and export): the control plane's selected mount first, then the rest by the
 *   selection rule. A mount is served from one candidate (its *active* endpoint) and moves to
 *   the next when that one fails (connect refused, hello rejected, session dropped, timeout).
 *   Idempotent operations (lookup, getattr, readdirp, readlink, statfs, open for read, read)
 *   are retried on the next candidate; a mutation whose request was in flight when the
 *   endpoint failed is EIO (it may or may not have been applied); one not yet sent is retried.
 * - `./open-files` ({@link OpenFiles}): router file handles; a read on a read-only handle
 *   whose session died re-opens the file on the new endpoint. `./chunked-io` splits reads and
 *   writes into `max_read` / `max_write` requests.
 * - `./path-walk`: path -> node id resolution walks `lookup` with a per-endpoint cache
 *   ({@link LookupCache}): the node's `acheron.e_fs_inval*` pushes mark entries unverified
 *   (looked up again before use, still used to name the paths of later pushes), the router's
 *   own removals and renames drop subtrees, failover or a topology change drops the whole
 *   cache. A failure after starting from a cached id (ENOENT/ESTALE) checks that id with one
 *   `getattr`: still known, the error stands; forgotten, its subtree is dropped and the walk
 *   starts higher up.
 * - `./inval-fanout`: node pushes -> `inval` / `inval_dir` events; `./router-status`:
 *   `describe` / `probe` diagnostics; `./paths`: path helpers.
 *
 * Events (for a FUSE layer on top; shapes in `./router-events`): `topology`
 * ({@link TopologyChange}), `failover` ({@link FailoverEvent}), `unavailable`
 * ({@link UnavailableEvent}: the session serving a mount ended, so nothing learnt from it can
 * be invalidated any more), `inval` ({@link PathInval}), `inval_dir` ({@link DirInval}).
 *
 * Errors are {@link FsError} (Linux errno, docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"); {@link MountUnavailableError} when
 * no candidate of a mount can be used.
 */
import { EventEmitter } from 'node:events';
// eslint-disable-next-line @typescript-eslint/no-unused-vars -- named in setAckBarrier's documentation
import { type ACK_BARRIER_MAX_MS } from '@svc/client';
import { DEFAULT_KEEPALIVE_MS, DEFAULT_KEEPALIVE_TIMEOUT_MS, type FramedData, type PrefetchedFile } from '@svc/client';
import { type Cred, Errno, FsError, type FsPayload, type FsReply, type GetlkReply, type LockPayload, type WriteThen } from '@svc/protocol/wire';
import { EndpointPool, EndpointPoolOptions, EndpointSession } from './endpoint-pool';
import { ActiveEndpoint, MountRoutes, OpContext } from './failover';
import { Attr, DirEntry, InvalDirEvent, InvalEvent, NodeKind, OpenFlags, SetAttr, StatFs } from './fs-types';
import { InvalFanout } from './inval-fanout';
// eslint-disable-next-line @typescript-eslint/no-unused-vars -- named in the module comment's {@link}
import type { LookupCache } from './lookup-cache';
import { DEFAULT_LOOKUP_CACHE_ENTRIES } from './lookup-cache';
import { MountTable, Resolution } from './mount-table';
import { DEFAULT_OPEN_READ_BYTES, OpenFiles, type WriteThenResult } from './open-files';
export type { WriteThenResult } from './open-files';
import { isStale, walk, Walked, withNode } from './path-walk';
import { normalizePath, parentPath, relJoin, relSplit, splitParent } from './paths';
// eslint-disable-next-line @typescript-eslint/no-unused-vars -- named in the comments' {@link} and @throws
import type { MountUnavailableError } from './router-errors';
import type { RouterEmit, TopologyChange } from './router-events';
// eslint-disable-next-line @typescript-eslint/no-unused-vars -- named in the module comment's {@link}
import type { DirInval, FailoverEvent, PathInval, UnavailableEvent } from './router-events';
import { describeMounts, MountStatus, ProbeResult, probeMounts } from './router-status';
import { Topology } from './topology';
import { TopologySource } from './topology-source';

export type { DirAttrEvent, DirInval, FailoverEvent, PathInval, RouterEvents, TopologyChange, UnavailableEvent } from './router-events';
export type { CandidateStatus, MountStatus, ProbeResult } from './router-status';

/**
 * Default deadlines of the router, ms (docs/protocol.md "Workspace router and `svc-fs-mount` (client side)"): a
 * hung node is found by the keepalive (no answer for `keepaliveTimeoutMs` while requests
 * wait) or by a connect + hello that takes `connectTimeoutMs`; an operation's connects and
 * retries end by `opDeadlineMs` after its start; `requestTimeoutMs` bounds one request on a
 * node that still answers pings.
 */
export const ROUTER_DEADLINES = {
  connectTimeoutMs: 2000,
  requestTimeoutMs: 15_000,
  keepaliveMs: DEFAULT_KEEPALIVE_MS,
  keepaliveTimeoutMs: DEFAULT_KEEPALIVE_TIMEOUT_MS,
  opDeadlineMs: 4000,
} as const;

/** Router tuning. Times in ms. */
export interface WorkspaceRouterOptions {
  /** Ask nodes for the binary data path (default true; false forces JSON + base64). */
  binary?: boolean;
  /**
   * FS extensions to ask nodes for (docs/protocol.md "FS extensions"; default
   * `SVC_FS_CLIENT_FEATURES`, else all). Empty: the base protocol.
   */
  features?: readonly string[];
  /**
   * Bytes a read-only {@link WorkspaceRouter.open} asks for with the `open_read` extension,
   * unless the caller says (default 128 KiB; 0: plain opens).
   */
  openReadBytes?: number;
  /** Connect + hello limit per candidate (default 2000); a node that lets it pass is hung. */
  connectTimeoutMs?: number;
  /**
   * Limit of one request on a node that still answers keepalive pings; a timeout counts as an
   * endpoint failure (default 15000).
   */
  requestTimeoutMs?: number;
  /** Keepalive ping interval while requests wait (default 1000; 0 turns keepalive off). */
  keepaliveMs?: number;
  /** A node that answered nothing for this long while requests wait is hung (default 2500). */
  keepaliveTimeoutMs?: number;
  /**
   * Budget of one operation from its start: its connects and retries on other candidates
   * end by then, so timeouts do not add up per call (default 4000).
   */
  opDeadlineMs?: number;
  /** A failed candidate is tried only after the others for this long (default 2000). */
  failureBackoffMs?: number;
  /** Paths cached per mount (default 65536). */
  lookupCacheEntries?: number;
  /** Default `max` of {@link WorkspaceRouter.readdir} (default 512). */
  readdirMax?: number;
  /** Injected FS session factory (tests, DI); default FsClient.connect. */
  connect?: EndpointPoolOptions['connect'];
}

/** The result of {@link WorkspaceRouter.readdir}. */
export interface ReaddirPage {
  entries: DirEntry[];
  /** Cookie for the next page (pass it back); meaningless when `eof`. */
  next: number;
  eof: boolean;
}

const SYNTHETIC_DIR_MODE = 0o040555;

/** `payload` with the caller's `cred` when there is one and the node of `a` granted `posix` (the member belongs to that extension). */
function withCred<P extends object>(a: ActiveEndpoint, payload: P, cred: Cred | undefined): P & { cred?: Cred } {
  return cred && a.session.client.has('posix') ? { ...payload, cred } : payload;
}

/**
 * The FS client of endpoint `a` when its node granted the `posix` extension.
 * @throws FsError `errno` (default ENOSYS: the operation is not there) naming `what` otherwise
 */
function posixOf(a: ActiveEndpoint, what: string, errno: number = Errno.ENOSYS): ActiveEndpoint['session']['client'] {
  if (!a.session.client.has('posix')) throw new FsError(errno, `${what}: the node at ${a.session.url} does not grant the posix extension`);
  return a.session.client;
}

/**
 * The workspace filesystem. Create with a {@link TopologySource}, call {@link start}, then use
 * the path API; {@link close} when done.
 */
export class WorkspaceRouter extends EventEmitter {
  private table = new MountTable([]);
  private readonly pool: EndpointPool;
  /** The failover state machine: candidates and active endpoint per mount path. */
  private readonly routes: MountRoutes;
  /** Router file handles. */
  private readonly files: OpenFiles;
  private topologyTs = Date.now();
  private topologyGen = 0;
  private readonly readdirMax: number;
  private closed = false;
  private readonly onTopology = (t: Topology) => this.applyTopology(t);
  private readonly fanout: InvalFanout;

  constructor(
    readonly source: TopologySource,
    private readonly options: WorkspaceRouterOptions = {},
  ) {
    super();
    this.pool = new EndpointPool({
      binary: options.binary ?? true,
      features: options.features,
      connectTimeoutMs: options.connectTimeoutMs ?? ROUTER_DEADLINES.connectTimeoutMs,
      requestTimeoutMs: options.requestTimeoutMs ?? ROUTER_DEADLINES.requestTimeoutMs,
      keepaliveMs: options.keepaliveMs ?? ROUTER_DEADLINES.keepaliveMs,
      keepaliveTimeoutMs: options.keepaliveTimeoutMs ?? ROUTER_DEADLINES.keepaliveTimeoutMs,
      connect: options.connect,
    });
    const emit: RouterEmit = (name, ev) => void this.emit(name, ev);
    this.routes = new MountRoutes(this.pool, emit, {
      opDeadlineMs: options.opDeadlineMs ?? ROUTER_DEADLINES.opDeadlineMs,
      failureBackoffMs: options.failureBackoffMs ?? 2000,
      lookupCacheEntries: options.lookupCacheEntries ?? DEFAULT_LOOKUP_CACHE_ENTRIES,
    });
    this.files = new OpenFiles(this.routes, options.openReadBytes ?? DEFAULT_OPEN_READ_BYTES);
    this.readdirMax = options.readdirMax ?? 512;
    const fanout = (this.fanout = new InvalFanout(this.routes, emit));
    this.pool.on('inval', (s: EndpointSession, ev: InvalEvent) => {
      if (ev.what !== 'attr') this.files.dataChanged(s, ev.node);
      fanout.inval(s, ev);
    });
    this.pool.on('inval_dir', (s: EndpointSession, ev: InvalDirEvent) => fanout.invalDir(s, ev));
    this.pool.on('session_closed', (s: EndpointSession) => this.routes.sessionClosed(s));
  }

  /**
   * Sets what every FS session's acknowledgement of invalidation pushes waits for (at most
   * {@link ACK_BARRIER_MAX_MS}): a FUSE layer passes the settling of the kernel notifications
   * its `inval` and `inval_dir` listeners queued, so another client's mutation returns only
   * once this client's kernel has dropped what it held.
   */
  setAckBarrier(barrier: () => Promise<unknown>): void {
    this.pool.ackBarrier = barrier;
  }

  /**
   * Reads the first topology and starts following the source.
   * @throws what the source's first read throws (control plane unreachable, project_auth_failed, ...)
   */
  async start(): Promise<Topology> {
    const t = await this.source.start();
    this.applyTopology(t);
    this.source.on('topology', this.onTopology);
    return t;
  }

  /** The current topology (as last applied). */
  get topology(): Topology {
    return this.source.current;
  }

  /** Mount paths, longest first. */
  get mountPaths(): readonly string[] {
    return this.table.mountPaths;
  }

  /** Closes every session and the topology source. Open handles become invalid. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.source.off('topology', this.onTopology);
    this.source.close();
    this.routes.close();
    this.pool.close();
    this.files.clear();
  }

  // ---------------------------------------------------------------------------------------
  // Path API (absolute workspace paths; errors are FsError with Linux errno)

  /**
   * Attributes of a path (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)" Attr). Synthetic directories get a read-only
   * directory attr (`id` 0, mode 040555, times of the last topology change).
   * @throws FsError ENOENT (nothing there), EINVAL (bad path), MountUnavailableError
   */
  async getattr(path: string): Promise<Attr> {
    const r = this.existing(path);
    if (r.kind === 'synthetic') return this.syntheticAttr();
    return this.atNode(r.mountPath, r.rel, async (a, w) => w.attr ?? (await a.session.client.request('getattr', { node: w.id })).attr);
  }

  /**
   * One page of a directory listing. Entries never include `.`/`..`. Mount paths directly
   * below the directory are listed too (synthetic entries, and nested mounts on the last page).
   * @param cookie 0 for the first page, then the previous page's `next`
   * @param max most entries per page (default 512)
   * @throws FsError ENOENT, ENOTDIR, EACCES, MountUnavailableError
   */
  async readdir(path: string, cookie = 0, max = this.readdirMax): Promise<ReaddirPage> {
    const r = this.existing(path);
    if (r.kind === 'synthetic') {
      const attr = this.syntheticAttr();
      const start = Math.max(0, Math.floor(cookie));
      const slice = r.children.slice(start, start + Math.max(1, max));
      return { entries: slice.map((name) => ({ name, attr })), next: start + slice.length, eof: start + slice.length >= r.children.length };
    }
    const overlays = this.table.overlaysOf(r.path);
    const page = await this.atNode(r.mountPath, r.rel, async (a, w) => {
      const p = await a.session.client.request('readdirp', { node: w.id }, { cookie, max });
      for (const e of p.ents) a.cache.set(relJoin(r.rel, e.name), e.attr.id);
      return p;
    });
    if (overlays.length === 0) return { entries: page.ents, next: page.next, eof: page.eof };
    const hidden = new Set(overlays);
    const entries = page.ents.filter((e) => !hidden.has(e.name));
    if (page.eof) {
      const attr = this.syntheticAttr();
      for (const name of overlays) entries.push({ name, attr });
    }
    return { entries, next: page.next, eof: page.eof };
  }

  /**
   * Every entry of a directory (pages of {@link readdir} until eof).
   * @throws as {@link readdir}
   */
  async readdirAll(path: string, pageSize = this.readdirMax): Promise<DirEntry[]> {
    const out: DirEntry[] = [];
    let cookie = 0;
    for (;;) {
      const p = await this.readdir(path, cookie, pageSize);
      out.push(...p.entries);
      if (p.eof) return out;
      cookie = p.next;
    }
  }

  /**
   * Opens a file. Opening read-only is idempotent (retried on the next candidate); with write
   * flags the open is a mutation (EIO if the endpoint failed while it was in flight). A
   * read-only open on a node that granted `open_read` brings the file's first bytes along
   * (reads of them need no round trip) and, for a file that came back whole, leaves no handle
   * on the node (see {@link OpenFiles.open}).
   * @param flags Linux O_* bits ({@link OpenFlags})
   * @param options.readBytes bytes to bring along with a read-only open (default `openReadBytes`; 0: none)
   * @returns a router file handle (`fh`) for read/write/fsync/close, the node id of the file
   *   opened (`id`), and the file's attr when
   *   the node sent it (open_read)
   * @throws FsError ENOENT, EISDIR (synthetic directory), EACCES, EROFS, MountUnavailableError
   */
  async open(path: string, flags: number = OpenFlags.O_RDONLY, options: { readBytes?: number } = {}): Promise<{ fh: number; id: number; attr?: Attr }> {
    const r = this.existing(path);
    if (r.kind === 'synthetic') throw new FsError(Errno.EISDIR, `${r.path}: is a directory`);
    return this.files.open(r, flags, options.readBytes);
  }

  /**
   * Reads the small regular files `names` of directory `dir` in one request (the `prefetch`
   * extension, docs/protocol.md "FS extensions"); the node opens each as `open` would (confined,
   * never through a symlink) and bounds what it returns.
   * @param maxFile bytes per file; @param maxTotal bytes of data in all (the node clamps both)
   * @returns one entry per name (`data`, or `skip`/`errno`), or null when the node serving the
   *   mount did not grant `prefetch` (or `dir` is not in a mount)
   * @throws FsError for the directory (ENOENT, ENOTDIR, ENOTSUP, ...), MountUnavailableError
   */
  async prefetch(dir: string, names: readonly string[], maxFile: number, maxTotal: number): Promise<PrefetchedFile[] | null> {
    const r = this.resolve(dir);
    if (r.kind !== 'mount') return null;
    return this.routes.withMount(r.mountPath, async (a) => {
      if (!a.session.client.has('prefetch')) return null;
      return withNode(a, r.rel, async (w) => {
        const files = await a.session.client.prefetch(w.id, names, maxFile, maxTotal);
        for (const f of files) if (f.attr) a.cache.set(relJoin(r.rel, f.name), f.attr.id);
        return files;
      });
    });
  }

  /**
   * Creates (or, without O_EXCL, opens) a file and returns a handle.
   * @param mode permission bits, e.g. 0o644
   * @param flags O_* bits; O_CREAT is implied
   * @param cred the caller (a node that applies the caller's identity makes the file theirs)
   * @returns the router handle, the file's attributes, and `made`: true when the reply says the
   *   file was made by this request (with `dir_attr`, whose directory attributes come only
   *   then), false when that is not known
   * @throws FsError EEXIST (O_EXCL), ENOENT (parent), EROFS, MountUnavailableError
   */
  async create(
    path: string,
    mode = 0o644,
    flags: number = OpenFlags.O_WRONLY | OpenFlags.O_TRUNC,
    cred?: Cred,
  ): Promise<{ fh: number; attr: Attr; made: boolean }> {
    const t = this.mutationTarget(path, 'create');
    const r = await this.files.create(t, mode, flags, cred);
    this.dirChanged(r.active, r.dir, t.path, r.dirAttr);
    return { fh: r.fh, attr: r.attr, made: r.dirAttr !== undefined };
  }

  /**
   * Whose identity the node serving `path` applies ({@link ActiveEndpoint.identity}): `caller`
   * (objects are made the caller's) or `node` (the node's user owns everything); null when no
   * endpoint serves it now (the synthetic tree, or not connected yet).
   */
  identityAt(path: string): 'caller' | 'node' | null {
    const r = this.resolve(path);
    if (r.kind !== 'mount') return null;
    try {
      return this.routes.route(r.mountPath).active?.identity ?? null;
    } catch {
      return null;
    }
  }

  /**
   * Drops the bytes kept from the open of handle `fh` (`open_read`): the file is being written
   * through another handle of this client, so the next read of `fh` goes to the node.
   * Unknown handles are ignored.
   */
  dropOpenData(fh: number): void {
    this.files.dropFirst(fh);
  }

  /**
   * Reads up to `len` bytes at byte offset `off` (split into `max_read` requests in flight).
   * A read-only handle whose session died is re-opened on the next candidate transparently.
   * @returns the bytes (shorter than `len` only at end of file) and whether EOF was reached
   * @throws FsError EBADF (unknown handle), EIO (session lost on a writable handle)
   */
  async read(fh: number, off: number, len: number): Promise<{ data: Buffer; eof: boolean }> {
    return this.files.read(fh, off, len);
  }

  /**
   * Writes `data` at byte offset `off` (split into `max_write` requests in flight). A write
   * whose session failed while it was in flight is EIO.
   * @param data the bytes, or {@link FramedData} (bytes with room for the frame header in front,
   *   sent without a copy when they fit in one request)
   * @returns bytes written (all of them unless an error is thrown)
   * @throws FsError EBADF, EIO, ENOSPC, EROFS
   */
  async write(fh: number, off: number, input: Uint8Array | FramedData): Promise<number> {
    return this.files.write(fh, off, input);
  }

  /**
   * Writes `input` at byte offset `off` and has the node do `then` (set attributes, then fsync)
   * once it is written, in one request: {@link OpenFiles.writeThen}.
   * @returns null when that cannot be one request (nothing was sent), else what the node did
   * @throws FsError EBADF, EIO, ENOSPC, EROFS
   */
  async writeThen(fh: number, off: number, input: FramedData, then: WriteThen): Promise<WriteThenResult | null> {
    return this.files.writeThen(fh, off, input, then);
  }

  /**
   * Flushes a handle to stable storage on the node.
   * @throws FsError EBADF, EIO
   */
  async fsync(fh: number): Promise<void> {
    return this.files.fsync(fh);
  }

  /**
   * Closes a handle. For a read-only handle a lost session is not an error; for a writable
   * one it is EIO (written data may be lost).
   * @throws FsError EBADF, EIO
   */
  async release(fh: number): Promise<void> {
    return this.files.release(fh);
  }

  /**
   * The attributes of the open file of handle `fh`, from the node, also once its name is gone
   * (fstat of an unlinked file).
   * @throws FsError EBADF, ENOTSUP (the node cannot tell), EIO
   */
  async fgetattr(fh: number): Promise<Attr> {
    return this.files.fgetattr(fh);
  }

  /**
   * Sets the size of the open file of handle `fh` (ftruncate(2): its write access decides, also
   * once its name is gone).
   * @throws FsError EBADF, EINVAL (not open for writing; a size that is not a safe integer
   *   >= 0), ENOTSUP (the node cannot: truncate by path), EIO
   */
  async ftruncate(fh: number, size: number): Promise<Attr> {
    if (!Number.isSafeInteger(size) || size < 0) throw new FsError(Errno.EINVAL, `invalid size ${size}`);
    return this.files.ftruncate(fh, size);
  }

  /**
   * fallocate(2) of `len` bytes at `off` through handle `fh`, `mode` one of FALLOCATE_MODES.
   * @throws FsError EBADF, EINVAL (offsets that are not safe integers >= 0), ENOTSUP, ENOSPC, EIO
   */
  async fallocate(fh: number, mode: number, off: number, len: number): Promise<Attr> {
    if (!Number.isSafeInteger(off) || off < 0 || !Number.isSafeInteger(len) || len < 0) throw new FsError(Errno.EINVAL, `invalid range ${off}+${len}`);
    return this.files.fallocate(fh, mode, off, len);
  }

  /**
   * Takes, changes or releases a POSIX or `flock` lock on the file of handle `fh`, held by the
   * node that serves it for every client; a waiting one is cancelled when `signal` aborts.
   * @throws FsError EAGAIN (conflict without wait), EDEADLK, EINTR (cancelled), ENOLCK (the
   *   session that held this handle's locks is gone, or the node holds no locks), EBADF
   */
  async lock(fh: number, payload: LockPayload, signal?: AbortSignal): Promise<void> {
    return this.files.lock(fh, payload, signal);
  }

  /**
   * The first lock of another owner that would conflict with `payload` on the file of handle
   * `fh`, or `{type: "un"}`.
   * @throws FsError ENOLCK, EBADF
   */
  async getlk(fh: number, payload: FsPayload<'getlk'>): Promise<GetlkReply> {
    return this.files.getlk(fh, payload);
  }

  /**
   * Sets a file's size in bytes.
   * @throws FsError ENOENT, EISDIR, EROFS, EINVAL, EIO (in flight when the endpoint failed)
   */
  async truncate(path: string, size: number): Promise<Attr> {
    if (!Number.isSafeInteger(size) || size < 0) throw new FsError(Errno.EINVAL, `invalid size ${size}`);
    return this.mutateNode(path, (a, id) => a.session.client.request('truncate', { node: id }, { sz: size }).then((r) => r.attr));
  }

  /**
   * Changes mode/owner/size/times (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)" `setattr`; times in ns since the epoch).
   * @throws FsError ENOENT, EPERM, EROFS, EIO
   */
  async setattr(path: string, attrs: SetAttr): Promise<Attr> {
    return this.mutateNode(path, (a, id) => a.session.client.request('setattr', { node: id }, attrs).then((r) => r.attr));
  }

  /**
   * Creates a directory.
   * @param mode permission bits (default 0o755)
   * @param cred the caller (a node that applies the caller's identity makes the directory theirs; the same for symlink and mknod)
   * @returns the directory's attributes, and `made`: true when the reply carried `dir_attr`, whose
   *   node watches a directory it makes from before its reply (every later change in it by
   *   anyone else is pushed to this router)
   * @throws FsError EEXIST, ENOENT (parent), EROFS (read-only export or synthetic tree), EIO
   */
  async mkdir(path: string, mode = 0o755, cred?: Cred): Promise<{ attr: Attr; made: boolean }> {
    return this.addEntry(path, 'mkdir', (a, parent, name) => a.session.client.request('mkdir', { node: parent }, withCred(a, { name, mode }, cred)));
  }

  /**
   * Removes an empty directory.
   * @throws FsError ENOENT, ENOTDIR, ENOTEMPTY, EBUSY (a mount root), EROFS, EIO
   */
  async rmdir(path: string): Promise<void> {
    return this.removeEntry(path, 'rmdir');
  }

  /**
   * Removes a file or symlink.
   * @throws FsError ENOENT, EISDIR, EBUSY (a mount root), EROFS, EIO
   */
  async unlink(path: string): Promise<void> {
    return this.removeEntry(path, 'unlink');
  }

  /**
   * Renames within one mount; `flags` {@link RENAME_NOREPLACE} (EEXIST when `newPath` exists) or
   * {@link RENAME_EXCHANGE} (the two swap), which need a node granting `posix`.
   * @returns the attributes of the entry under `newPath` after the rename when the node's reply
   *   carried them (the `dir_attr` extension), else undefined
   * @throws FsError EXDEV (different mounts), EBUSY (a mount root), ENOENT, ENOTEMPTY, EEXIST, EROFS, EIO, EINVAL
   */
  async rename(oldPath: string, newPath: string, flags = 0): Promise<Attr | undefined> {
    const from = this.mutationTarget(oldPath, 'rename');
    const to = this.mutationTarget(newPath, 'rename');
    if (from.mountPath !== to.mountPath) {
      throw new FsError(Errno.EXDEV, `cannot rename across mounts (${from.mountPath} -> ${to.mountPath})`);
    }
    return this.routes.withMount(from.mountPath, async (a, ctx) => {
      const run = async (useCache: boolean): Promise<Attr | undefined> => {
        const op = await walk(a, from.parentRel, useCache);
        const np = await walk(a, to.parentRel, useCache);
        ctx.committed = true;
        try {
          if (flags !== 0) posixOf(a, 'rename flags');
          const payload = { old_parent: op.id, old_name: from.name, new_parent: np.id, new_name: to.name };
          const r = await a.session.client.request('rename', {}, flags === 0 ? payload : { ...payload, flags });
          this.dirChanged(a, np.id, to.path, r.dir_attr);
          if (op.id !== np.id) this.dirChanged(a, op.id, from.path, r.old_dir_attr);
          return r.attr;
        } finally {
          a.cache.dropTree(from.rel);
          a.cache.dropTree(to.rel);
        }
      };
      try {
        return await run(true);
      } catch (e) {
        if (!isStale(e) || !(a.cache.get(from.parentRel) !== undefined || a.cache.get(to.parentRel) !== undefined)) throw e;
        a.cache.dropTree(from.parentRel);
        a.cache.dropTree(to.parentRel);
        ctx.committed = false;
        return run(false);
      }
    });
  }

  /**
   * Creates a symlink `path` -> `target` (the node refuses targets that leave the export).
   * @throws FsError EEXIST, ENOENT, EACCES, EROFS, EIO
   */
  async symlink(path: string, target: string, cred?: Cred): Promise<Attr> {
    const r = await this.addEntry(path, 'symlink', (a, parent, name) =>
      a.session.client.request('symlink', { node: parent }, withCred(a, { name, target }, cred)),
    );
    return r.attr;
  }

  /**
   * Creates a FIFO, socket, device or regular file `path` with the type and permission bits of
   * `mode` (`rdev` for a device).
   * @throws FsError EEXIST, ENOENT, EPERM, EROFS, EIO, ENOSYS (the node does not grant `posix`)
   */
  async mknod(path: string, mode: number, rdev = 0, cred?: Cred): Promise<Attr> {
    const r = await this.addEntry(path, 'mknod', (a, parent, name) =>
      posixOf(a, 'mknod').request('mknod', { node: parent }, withCred(a, { name, mode, rdev }, cred)),
    );
    return r.attr;
  }

  /**
   * Makes `newPath` another name of the non-directory `path` (the same mount).
   * @throws FsError EXDEV (different mounts), EEXIST, EPERM (a directory), ENOENT, EROFS, ENOSYS
   */
  async link(path: string, newPath: string): Promise<Attr> {
    const from = this.mutationTarget(path, 'link');
    const to = this.mutationTarget(newPath, 'link');
    if (from.mountPath !== to.mountPath) throw new FsError(Errno.EXDEV, `cannot link across mounts (${from.mountPath} -> ${to.mountPath})`);
    return this.mutateIn(to, async (a, parent, ctx) => {
      const w = await walk(a, from.rel, true);
      ctx.committed = true;
      const r = await posixOf(a, 'link').request('link', { node: w.id }, { new_parent: parent, new_name: to.name });
      a.cache.set(to.rel, r.attr.id);
      this.dirChanged(a, parent, to.path, r.dir_attr);
      return r.attr;
    });
  }

  /**
   * The value of extended attribute `name` of `path` (a final symlink not followed); with `size`
   * 0 only its length (`n`).
   * @throws FsError ENODATA, ERANGE (longer than `size`), ENOTSUP (no xattrs there)
   */
  async getxattr(path: string, name: string, size: number): Promise<{ n: number; value?: Buffer }> {
    const r = this.existing(path);
    if (r.kind === 'synthetic') throw new FsError(Errno.ENODATA);
    return this.atNode(r.mountPath, r.rel, async (a, w) => {
      const got = await posixOf(a, 'getxattr', Errno.ENOTSUP).request('getxattr', { node: w.id }, { name, size });
      return got.value_b64 === undefined ? { n: got.n } : { n: got.n, value: Buffer.from(got.value_b64, 'base64') };
    });
  }

  /** Sets extended attribute `name` of `path`; `flags` {@link XATTR_CREATE} or {@link XATTR_REPLACE}. @throws FsError EEXIST, ENODATA, ENOTSUP, EROFS */
  async setxattr(path: string, name: string, value: Buffer, flags: number): Promise<void> {
    await this.mutateNode(path, (a, id) =>
      posixOf(a, 'setxattr', Errno.ENOTSUP).request('setxattr', { node: id }, { name, value_b64: value.toString('base64'), flags }),
    );
  }

  /** The extended attribute names of `path`; with `size` 0 only the bytes they take (`n`). @throws FsError ERANGE, ENOTSUP */
  async listxattr(path: string, size: number): Promise<{ n: number; names?: string[] }> {
    const r = this.existing(path);
    if (r.kind === 'synthetic') return { n: 0, names: [] };
    return this.atNode(r.mountPath, r.rel, (a, w) => posixOf(a, 'listxattr', Errno.ENOTSUP).request('listxattr', { node: w.id }, { size }));
  }

  /** Removes extended attribute `name` of `path`. @throws FsError ENODATA, ENOTSUP, EROFS */
  async removexattr(path: string, name: string): Promise<void> {
    await this.mutateNode(path, (a, id) => posixOf(a, 'removexattr', Errno.ENOTSUP).request('removexattr', { node: id }, { name }));
  }

  /**
   * The target of a symlink.
   * @throws FsError ENOENT, EINVAL (not a symlink)
   */
  async readlink(path: string): Promise<string> {
    const r = this.existing(path);
    if (r.kind === 'synthetic') throw new FsError(Errno.EINVAL, `${r.path}: not a symlink`);
    return this.atNode(r.mountPath, r.rel, async (a, w) => (await a.session.client.request('readlink', { node: w.id })).target);
  }

  /**
   * File system statistics of the mount holding `path` (zeros for the synthetic tree).
   * @throws FsError ENOENT, MountUnavailableError
   */
  async statfs(path: string): Promise<StatFs> {
    const r = this.existing(path);
    if (r.kind === 'synthetic') return { bsize: 4096, frsize: 4096, blocks: 0, bfree: 0, bavail: 0, files: 0, ffree: 0, namemax: 255 };
    return this.atNode(r.mountPath, r.rel, (a, w) => a.session.client.request('statfs', { node: w.id }));
  }

  // ---------------------------------------------------------------------------------------
  // Status

  /** Every mount path with its candidates, which one is active and the last failures (no secrets). */
  describe(): MountStatus[] {
    return describeMounts(this.routes.values());
  }

  /**
   * Probes every candidate of every mount (or of `mountPath`): connect and hello (reusing an
   * open session), find the export, getattr its root. Never throws; failures are reported.
   * @returns mount path -> one result per candidate, in candidate order
   */
  async probe(mountPath?: string): Promise<Map<string, ProbeResult[]>> {
    const routes = [...this.routes.values()].filter((r) => mountPath === undefined || r.mountPath === mountPath);
    return probeMounts(routes, this.pool);
  }

  /** Resolves a path against the current mount table (see {@link MountTable.resolve}). */
  resolve(path: string): Resolution {
    return this.table.resolve(normalizePath(path));
  }

  // ---------------------------------------------------------------------------------------
  // Topology

  /** Applies a topology: routes updated, a new mount table, sessions no mount or file uses closed, `topology` emitted on change. */
  private applyTopology(t: Topology): void {
    if (this.closed) return;
    const { added, changed, removed } = this.routes.update(t.mounts);
    if (added.length + changed.length + removed.length > 0 || this.topologyGen === 0) {
      this.table = new MountTable(t.mounts.keys());
      this.topologyTs = t.ts_ms;
      this.topologyGen++;
      this.retainSessions();
      const ev: TopologyChange = { mountPaths: [...t.mounts.keys()], added, removed, changed };
      this.emit('topology', ev);
    }
  }

  /** Keeps the pool's sessions that serve a mount or an open file; closes the rest. */
  private retainSessions(): void {
    this.pool.retain(new Set([...this.routes.activeSessionKeys(), ...this.files.sessionKeys()]));
  }

  // ---------------------------------------------------------------------------------------
  // Helpers

  /** The attr of a synthetic directory: read-only, id 0, times of the last topology change. */
  private syntheticAttr(): Attr {
    const ns = this.topologyTs * 1_000_000;
    return {
      id: 0,
      k: NodeKind.DIR,
      m: SYNTHETIC_DIR_MODE,
      n: 2,
      u: process.getuid?.() ?? 0,
      g: process.getgid?.() ?? 0,
      sz: 0,
      at: ns,
      mt: ns,
      ct: ns,
      gen: this.topologyGen,
    };
  }

  /**
   * Where a mutation of `path` happens: mount, its relative path, parent and name.
   * @throws FsError EROFS (synthetic tree), EBUSY (a mount root or a directory above one),
   *   EEXIST (mkdir/create of a directory that exists in the synthetic tree), ENOENT
   */
  private mutationTarget(path: string, op: string): { path: string; mountPath: string; rel: string; parentRel: string; name: string } {
    const r = this.resolve(path);
    if (r.kind === 'synthetic' || (r.kind === 'mount' && r.rel === '')) {
      if (op === 'mkdir' || op === 'create' || op === 'symlink') throw new FsError(Errno.EEXIST, `${r.path}: exists (a workspace directory)`);
      throw new FsError(Errno.EBUSY, `${r.path}: is a mount point or lies above one`);
    }
    if (r.kind === 'none') {
      const parent = r.path === '/' ? null : this.table.resolve(splitParent(r.path).parent);
      if (parent?.kind === 'synthetic') throw new FsError(Errno.EROFS, `${r.path}: the workspace tree above mount paths is read-only`);
      throw new FsError(Errno.ENOENT, `${r.path}: not in the workspace`);
    }
    const { parent, name } = relSplit(r.rel);
    return { path: r.path, mountPath: r.mountPath, rel: r.rel, parentRel: parent, name };
  }

  /**
   * `path` resolved for an operation on what is there: in a mount, or in the synthetic tree above
   * mount paths.
   * @throws FsError ENOENT (not in the workspace), EINVAL (bad path)
   */
  private existing(path: string): Exclude<Resolution, { kind: 'none' }> {
    const r = this.resolve(path);
    if (r.kind === 'none') throw new FsError(Errno.ENOENT, `${r.path}: not in the workspace`);
    return r;
  }

  /**
   * How every operation on a node of a mount runs: `fn` on the mount's active endpoint (failover
   * and the operation's deadline: {@link MountRoutes.withMount}), with `rel` walked from the
   * lookup cache and walked again after a stale cached id ({@link withNode}).
   * @param rel export-relative path of the node (`''` = the export root)
   * @returns what `fn` returns
   * @throws FsError from the walk or `fn`; MountUnavailableError
   */
  private atNode<T>(mountPath: string, rel: string, fn: (a: ActiveEndpoint, node: Walked, ctx: OpContext) => Promise<T>): Promise<T> {
    return this.routes.withMount(mountPath, (a, ctx) => withNode(a, rel, (w) => fn(a, w, ctx)));
  }

  /** Runs a mutation `fn` in the parent directory of `t` ({@link atNode}). */
  private mutateIn<T>(t: { mountPath: string; parentRel: string }, fn: (a: ActiveEndpoint, parent: number, ctx: OpContext) => Promise<T>): Promise<T> {
    return this.atNode(t.mountPath, t.parentRel, (a, p, ctx) => fn(a, p.id, ctx));
  }

  /**
   * Runs a mutation `fn` on the node at `path` ({@link atNode}; committed once walked).
   * @throws FsError EROFS (synthetic tree), ENOENT (not in the workspace)
   */
  private mutateNode<T>(path: string, fn: (a: ActiveEndpoint, id: number) => Promise<T>): Promise<T> {
    const r = this.existing(path);
    if (r.kind === 'synthetic') throw new FsError(Errno.EROFS, `${r.path}: the workspace tree above mount paths is read-only`);
    return this.atNode(r.mountPath, r.rel, (a, w, ctx) => {
      ctx.committed = true;
      return fn(a, w.id);
    });
  }

  /**
   * Creates the entry `path` (`mkdir`, `symlink`) with `send`, a mutation in its parent
   * directory, and caches the new node's id.
   * @param send sends the request for entry `name` in directory node `parent`
   * @returns the new node's attr, and `made`: the reply carried `dir_attr`
   * @throws FsError as {@link mutationTarget}, and from the request
   */
  private addEntry(
    path: string,
    op: 'mkdir' | 'symlink' | 'mknod',
    send: (a: ActiveEndpoint, parent: number, name: string) => Promise<FsReply<'mkdir' | 'symlink' | 'mknod'>>,
  ): Promise<{ attr: Attr; made: boolean }> {
    const t = this.mutationTarget(path, op);
    return this.mutateIn(t, async (a, parent, ctx) => {
      ctx.committed = true;
      const r = await send(a, parent, t.name);
      a.cache.set(t.rel, r.attr.id);
      this.dirChanged(a, parent, t.path, r.dir_attr);
      return { attr: r.attr, made: r.dir_attr !== undefined };
    });
  }

  /**
   * This router's mutation through `a` changed the entries of directory node `dir`, the parent
   * of workspace path `entryPath`, and its reply gave the directory's attributes after it as
   * `attr` (the `dir_attr` extension; undefined when the node could not read them). A node that
   * granted `dir_attr` pushes none of this to the session that made the change, so here the
   * `dir_attr` event tells the FUSE layer, and a directory the session's mounts know under
   * several paths gets the `inval` and `inval_dir` events of a push (the change went through
   * one of them). Nothing without the extension: the node's pushes tell it all.
   */
  private dirChanged(a: ActiveEndpoint, dir: number, entryPath: string, attr: Attr | undefined): void {
    if (!a.session.client.has('dir_attr')) return;
    if (!this.fanout.knownOnce(a.session, dir)) {
      this.fanout.inval(a.session, { node: dir, what: 'attr', gen: 0 });
      this.fanout.invalDir(a.session, { dir, dir_gen: 0 });
    }
    this.emit('dir_attr', { path: parentPath(entryPath), attr: attr ?? null });
  }

  /**
   * Removes the entry `path` with request `op` (`rmdir`, `unlink`), a mutation in its parent
   * directory; its cached subtree is dropped whatever the outcome.
   * @throws FsError as {@link mutationTarget}, and from the request
   */
  private async removeEntry(path: string, op: 'rmdir' | 'unlink'): Promise<void> {
    const t = this.mutationTarget(path, op);
    await this.mutateIn(t, async (a, parent, ctx) => {
      ctx.committed = true;
      try {
        const r = await a.session.client.request(op, { node: parent }, { name: t.name });
        this.dirChanged(a, parent, t.path, r.dir_attr);
      } finally {
        a.cache.dropTree(t.rel);
      }
    });
  }
}
