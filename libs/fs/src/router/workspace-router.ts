/**
 * WorkspaceRouter (issue 3 item 7): one path-based filesystem over a project's mounts.
 *
 * - A workspace path resolves to a mount by the longest `mount_path` prefix; the directories
 *   above mount paths form a synthetic read-only tree (`readdir /` lists first segments).
 * - Each mount path has an ordered list of candidates (an FS endpoint and export): the
 *   control plane's selected mount first, then the rest by the selection rule. The router
 *   serves a mount from one candidate (its *active* endpoint) and moves to the next when that
 *   one fails (connect refused, hello rejected, session dropped, timeout).
 * - Idempotent operations (lookup, getattr, readdirp, readlink, statfs, open for read, read)
 *   are retried on the next candidate; a mutation whose request was in flight when the
 *   endpoint failed is EIO (it may or may not have been applied); one not yet sent is retried.
 *   A read on a read-only handle whose session died re-opens the file on the new endpoint.
 * - Path -> node id resolution walks `lookup` with a per-endpoint cache ({@link LookupCache}):
 *   the node's `acheron.e_fs_inval*` pushes mark entries unverified (looked up again before
 *   use, still used to name the paths of later pushes), the router's own removals and renames
 *   drop subtrees, failover or a topology change drops the whole cache. A failure after
 *   starting from a cached id (ENOENT/ESTALE) checks that id with one `getattr`: still
 *   known, the error stands; forgotten, its subtree is dropped and the walk starts higher up.
 *
 * Events (for a FUSE layer on top): `topology` ({@link TopologyChange}), `failover`
 * ({@link FailoverEvent}), `unavailable` ({@link UnavailableEvent}: the session serving a mount
 * ended, so nothing learnt from it can be invalidated any more), `inval` ({@link PathInval}),
 * `inval_dir` ({@link DirInval}).
 *
 * Errors are {@link FsError} (Linux errno, PROTOCOL.md 8); {@link MountUnavailableError} when
 * no candidate of a mount can be used.
 */
import { EventEmitter } from 'node:events';
import { ConnectionError, FramedData, framedBytes, isFramedData } from '@svc/client';
import { Errno, FsError } from '@svc/protocol/wire';
import { EndpointPool, EndpointPoolOptions, EndpointSession } from './endpoint-pool';
import { Attr, DirEntry, InvalDirEvent, InvalEvent, NodeKind, OpenFlags, SetAttr, StatFs } from './fs-types';
import { DEFAULT_LOOKUP_CACHE_ENTRIES, LookupCache } from './lookup-cache';
import { joinPath, MountTable, normalizePath, Resolution, splitParent } from './mount-table';
import { CandidateFailure, isEndpointFailure, messageOf, MountUnavailableError } from './router-errors';
import { candidateKey, candidatesFingerprint, MountCandidate, Topology } from './topology';
import { TopologySource } from './topology-source';

/** Router tuning. Times in ms. */
export interface WorkspaceRouterOptions {
  /** Ask nodes for the binary data path (default true; false forces JSON + base64). */
  binary?: boolean;
  /** Connect + hello limit per candidate (default 3000). */
  connectTimeoutMs?: number;
  /** Per-request limit; a timeout counts as an endpoint failure (default 15000). */
  requestTimeoutMs?: number;
  /** A failed candidate is tried only after the others for this long (default 2000). */
  failureBackoffMs?: number;
  /** Paths cached per mount (default 65536). */
  lookupCacheEntries?: number;
  /** Default `max` of {@link WorkspaceRouter.readdir} (default 512). */
  readdirMax?: number;
  /** Injected FS session factory (tests, DI); default FsClient.connect. */
  connect?: EndpointPoolOptions['connect'];
}

/**
 * `topology` event: which mount paths appeared or disappeared, and which changed the endpoint
 * that serves them (their next operation connects anew). Candidates only reordered, with the
 * serving endpoint kept (two online nodes alternating by lease expiry), are no change.
 */
export interface TopologyChange {
  mountPaths: string[];
  added: string[];
  removed: string[];
  changed: string[];
}

/** `failover` event: a mount moved from one candidate to another (or reconnected). */
export interface FailoverEvent {
  mount_path: string;
  from: string | null;
  to: string;
  cause: string | null;
}

/** `unavailable` event: the FS session serving a mount ended; the mount moves on at its next use. */
export interface UnavailableEvent {
  mount_path: string;
  cause: string;
}

/** `inval` event: a node's attributes or data changed (`what` as in `acheron.e_fs_inval`). */
export interface PathInval {
  mount_path: string;
  /** Workspace paths known for the node (may be empty when the router never resolved it). */
  paths: string[];
  node: number;
  what: 'attr' | 'data' | 'all';
}

/** `inval_dir` event: a directory's entries changed. */
export interface DirInval {
  mount_path: string;
  paths: string[];
  dir: number;
}

/** One candidate as reported by {@link WorkspaceRouter.describe}. */
export interface CandidateStatus {
  node_id: string | null;
  node_name: string | null;
  export_name: string;
  fs_url: string | null;
  state: MountCandidate['state'];
  selected: boolean;
  /** True for the candidate currently serving the mount. */
  active: boolean;
  /** Whether a token is configured for the hello (never the token itself). */
  auth: boolean;
  /** Last failure of this candidate seen by the router. */
  last_error: string | null;
}

/** One mount path as reported by {@link WorkspaceRouter.describe}. */
export interface MountStatus {
  mount_path: string;
  candidates: CandidateStatus[];
}

/** Result of probing one candidate ({@link WorkspaceRouter.probe}). */
export interface ProbeResult {
  ok: boolean;
  /** Time for connect (when needed) + exports + getattr of the export root, ms. */
  ms: number;
  /** Export root attributes when ok. */
  root?: Attr;
  read_only?: boolean;
  binary?: boolean;
  node?: string;
  error?: string;
  errno?: number | null;
}

/** The candidate a mount is served from, with its session, export root and lookup cache. */
interface Active {
  candidate: MountCandidate;
  key: string;
  session: EndpointSession;
  root: number;
  ro: boolean;
  cache: LookupCache;
}

/** Per-operation state: whether the mutating request has been handed to the session. */
interface OpContext {
  committed: boolean;
}

class MountRoute {
  candidates: MountCandidate[] = [];
  fingerprint = '';
  active: Active | null = null;
  /** The last endpoint that served the mount (for `failover` events). */
  last: Active | null = null;
  acquiring: Promise<Active> | null = null;
  readonly failedUntil = new Map<string, number>();
  readonly lastError = new Map<string, string>();

  constructor(readonly mountPath: string) {}
}

/** An open file of the router: which mount/path, on which endpoint, with which remote handle. */
interface OpenFile {
  fh: number;
  path: string;
  mountPath: string;
  rel: string;
  flags: number;
  readOnly: boolean;
  active: Active;
  h: number;
  reopening: Promise<void> | null;
}

/** The result of {@link WorkspaceRouter.readdir}. */
export interface ReaddirPage {
  entries: DirEntry[];
  /** Cookie for the next page (pass it back); meaningless when `eof`. */
  next: number;
  eof: boolean;
}

const SYNTHETIC_DIR_MODE = 0o040555;

function describeCandidate(c: MountCandidate): string {
  return `${c.node_name ?? c.node_id ?? 'node'} (${c.fs_url ?? 'no fs_url'}#${c.export_name})`;
}

function isStale(e: unknown): boolean {
  return e instanceof FsError && (e.errno === Errno.ENOENT || e.errno === Errno.ESTALE);
}

function relJoin(rel: string, name: string): string {
  return rel === '' ? name : `${rel}/${name}`;
}

function relSplit(rel: string): { parent: string; name: string } {
  const i = rel.lastIndexOf('/');
  return i < 0 ? { parent: '', name: rel } : { parent: rel.slice(0, i), name: rel.slice(i + 1) };
}

/**
 * The workspace filesystem. Create with a {@link TopologySource}, call {@link start}, then use
 * the path API; {@link close} when done.
 */
export class WorkspaceRouter extends EventEmitter {
  private table = new MountTable([]);
  private readonly routes = new Map<string, MountRoute>();
  private readonly files = new Map<number, OpenFile>();
  private nextFh = 1;
  private readonly pool: EndpointPool;
  private topologyTs = Date.now();
  private topologyGen = 0;
  private readonly failureBackoffMs: number;
  private readonly cacheEntries: number;
  private readonly readdirMax: number;
  private closed = false;
  private readonly onTopology = (t: Topology) => this.applyTopology(t);

  constructor(
    readonly source: TopologySource,
    private readonly options: WorkspaceRouterOptions = {},
  ) {
    super();
    this.pool = new EndpointPool({
      binary: options.binary ?? true,
      connectTimeoutMs: options.connectTimeoutMs ?? 3000,
      requestTimeoutMs: options.requestTimeoutMs ?? 15_000,
      connect: options.connect,
    });
    this.failureBackoffMs = options.failureBackoffMs ?? 2000;
    this.cacheEntries = options.lookupCacheEntries ?? DEFAULT_LOOKUP_CACHE_ENTRIES;
    this.readdirMax = options.readdirMax ?? 512;
    this.pool.on('inval', (s: EndpointSession, ev: InvalEvent) => this.onInval(s, ev));
    this.pool.on('inval_dir', (s: EndpointSession, ev: InvalDirEvent) => this.onInvalDir(s, ev));
    this.pool.on('session_closed', (s: EndpointSession) => this.onSessionClosed(s));
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
    this.pool.close();
    this.files.clear();
  }

  // ---------------------------------------------------------------------------------------
  // Path API (absolute workspace paths; errors are FsError with Linux errno)

  /**
   * Attributes of a path (PROTOCOL.md 8 Attr). Synthetic directories get a read-only
   * directory attr (`id` 0, mode 040555, times of the last topology change).
   * @throws FsError ENOENT (nothing there), EINVAL (bad path), MountUnavailableError
   */
  async getattr(path: string): Promise<Attr> {
    const r = this.resolve(path);
    if (r.kind === 'synthetic') return this.syntheticAttr();
    if (r.kind === 'none') throw new FsError(Errno.ENOENT, `${r.path}: not in the workspace`);
    return this.withMount(r.mountPath, async (a) =>
      this.retryStale(a, r.rel, async () => {
        const w = await this.walk(a, r.rel, true);
        if (w.attr) return w.attr;
        return (await a.session.client.request<{ attr: Attr }>('getattr', { node: w.id })).attr;
      }),
    );
  }

  /**
   * One page of a directory listing. Entries never include `.`/`..`. Mount paths directly
   * below the directory are listed too (synthetic entries, and nested mounts on the last page).
   * @param cookie 0 for the first page, then the previous page's `next`
   * @param max most entries per page (default 512)
   * @throws FsError ENOENT, ENOTDIR, EACCES, MountUnavailableError
   */
  async readdir(path: string, cookie = 0, max = this.readdirMax): Promise<ReaddirPage> {
    const r = this.resolve(path);
    if (r.kind === 'none') throw new FsError(Errno.ENOENT, `${r.path}: not in the workspace`);
    if (r.kind === 'synthetic') {
      const attr = this.syntheticAttr();
      const start = Math.max(0, Math.floor(cookie));
      const slice = r.children.slice(start, start + Math.max(1, max));
      return { entries: slice.map((name) => ({ name, attr })), next: start + slice.length, eof: start + slice.length >= r.children.length };
    }
    const overlays = this.table.overlaysOf(r.path);
    const page = await this.withMount(r.mountPath, async (a) =>
      this.retryStale(a, r.rel, async () => {
        const w = await this.walk(a, r.rel, true);
        const p = await a.session.client.request<{ ents: DirEntry[]; next: number; eof: boolean }>('readdirp', { node: w.id }, { cookie, max });
        for (const e of p.ents) a.cache.set(relJoin(r.rel, e.name), e.attr.id);
        return p;
      }),
    );
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
   * flags the open is a mutation (EIO if the endpoint failed while it was in flight).
   * @param flags Linux O_* bits ({@link OpenFlags})
   * @returns a router file handle (`fh`) for read/write/fsync/close
   * @throws FsError ENOENT, EISDIR (synthetic directory), EACCES, EROFS, MountUnavailableError
   */
  async open(path: string, flags: number = OpenFlags.O_RDONLY): Promise<{ fh: number }> {
    const r = this.resolve(path);
    if (r.kind === 'synthetic') throw new FsError(Errno.EISDIR, `${r.path}: is a directory`);
    if (r.kind === 'none') throw new FsError(Errno.ENOENT, `${r.path}: not in the workspace`);
    const readOnly = (flags & OpenFlags.O_ACCMODE) === OpenFlags.O_RDONLY && (flags & (OpenFlags.O_TRUNC | OpenFlags.O_CREAT)) === 0;
    const { active, h } = await this.withMount(r.mountPath, (a, ctx) => this.openOn(a, ctx, r.rel, flags, readOnly));
    const fh = this.nextFh++;
    this.files.set(fh, { fh, path: r.path, mountPath: r.mountPath, rel: r.rel, flags, readOnly, active, h, reopening: null });
    return { fh };
  }

  /**
   * Creates (or, without O_EXCL, opens) a file and returns a handle.
   * @param mode permission bits, e.g. 0o644
   * @param flags O_* bits; O_CREAT is implied
   * @throws FsError EEXIST (O_EXCL), ENOENT (parent), EROFS, MountUnavailableError
   */
  async create(path: string, mode = 0o644, flags: number = OpenFlags.O_WRONLY | OpenFlags.O_TRUNC): Promise<{ fh: number; attr: Attr }> {
    const t = this.mutationTarget(path, 'create');
    const { active, h, attr } = await this.withMount(t.mountPath, async (a, ctx) =>
      this.retryStale(a, t.parentRel, async () => {
        const p = await this.walk(a, t.parentRel, true);
        ctx.committed = true;
        const res = await a.session.client.request<{ attr: Attr; h: number }>('create', { node: p.id }, { name: t.name, mode, flags: flags | OpenFlags.O_CREAT });
        a.cache.set(t.rel, res.attr.id);
        return { active: a, h: res.h, attr: res.attr };
      }),
    );
    const fh = this.nextFh++;
    this.files.set(fh, { fh, path: t.path, mountPath: t.mountPath, rel: t.rel, flags, readOnly: false, active, h, reopening: null });
    return { fh, attr };
  }

  /**
   * Reads up to `len` bytes at byte offset `off` (split into `max_read` requests in flight).
   * A read-only handle whose session died is re-opened on the next candidate transparently.
   * @returns the bytes (shorter than `len` only at end of file) and whether EOF was reached
   * @throws FsError EBADF (unknown handle), EIO (session lost on a writable handle)
   */
  async read(fh: number, off: number, len: number): Promise<{ data: Buffer; eof: boolean }> {
    const f = this.file(fh);
    for (let attempt = 0; ; attempt++) {
      const active = f.active;
      try {
        return await this.readChunks(active.session, f.h, off, len);
      } catch (e) {
        if (!isEndpointFailure(e)) throw e;
        this.endpointFailed(this.route(f.mountPath), active, e);
        if (!f.readOnly) throw new FsError(Errno.EIO, `${f.path}: the session to ${active.session.url} was lost; the file must be opened again`);
        if (attempt >= this.maxAttempts(f.mountPath)) throw new FsError(Errno.EIO, `${f.path}: ${e.message}`);
        await this.reopen(f, active);
      }
    }
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
    const f = this.file(fh);
    const client = f.active.session.client;
    const max = client.maxWrite;
    if (isFramedData(input) && input.len > max) input = framedBytes(input);
    try {
      if (isFramedData(input)) return await this.writeFully(f, off, input);
      const data = input;
      const parts: Array<Promise<number>> = [];
      for (let o = 0; o < data.length || (o === 0 && data.length === 0); o += max) {
        const chunk = data.subarray(o, Math.min(data.length, o + max));
        parts.push(this.writeFully(f, off + o, chunk));
        if (data.length === 0) break;
      }
      const ns = await Promise.all(parts);
      return ns.reduce((a, b) => a + b, 0);
    } catch (e) {
      if (isEndpointFailure(e)) {
        this.endpointFailed(this.route(f.mountPath), f.active, e);
        throw new FsError(Errno.EIO, `${f.path}: the session to ${f.active.session.url} was lost during a write`);
      }
      throw e;
    }
  }

  /**
   * Flushes a handle to stable storage on the node.
   * @throws FsError EBADF, EIO
   */
  async fsync(fh: number): Promise<void> {
    const f = this.file(fh);
    try {
      await f.active.session.client.request('fsync', { h: f.h });
    } catch (e) {
      if (isEndpointFailure(e)) throw new FsError(Errno.EIO, `${f.path}: the session to ${f.active.session.url} was lost`);
      throw e;
    }
  }

  /**
   * Closes a handle. For a read-only handle a lost session is not an error; for a writable
   * one it is EIO (written data may be lost).
   * @throws FsError EBADF, EIO
   */
  async release(fh: number): Promise<void> {
    const f = this.file(fh);
    this.files.delete(fh);
    try {
      await f.active.session.client.request('close', { h: f.h });
    } catch (e) {
      if (isEndpointFailure(e)) {
        if (f.readOnly) return;
        throw new FsError(Errno.EIO, `${f.path}: the session to ${f.active.session.url} was lost before close`);
      }
      throw e;
    }
  }

  /**
   * Sets a file's size in bytes.
   * @throws FsError ENOENT, EISDIR, EROFS, EINVAL, EIO (in flight when the endpoint failed)
   */
  async truncate(path: string, size: number): Promise<Attr> {
    if (!Number.isSafeInteger(size) || size < 0) throw new FsError(Errno.EINVAL, `invalid size ${size}`);
    return this.mutateNode(path, (a, id) => a.session.client.request<{ attr: Attr }>('truncate', { node: id }, { sz: size }).then((r) => r.attr));
  }

  /**
   * Changes mode/owner/size/times (PROTOCOL.md 8 `setattr`; times in ns since the epoch).
   * @throws FsError ENOENT, EPERM, EROFS, EIO
   */
  async setattr(path: string, attrs: SetAttr): Promise<Attr> {
    return this.mutateNode(path, (a, id) => a.session.client.request<{ attr: Attr }>('setattr', { node: id }, attrs).then((r) => r.attr));
  }

  /**
   * Creates a directory.
   * @param mode permission bits (default 0o755)
   * @throws FsError EEXIST, ENOENT (parent), EROFS (read-only export or synthetic tree), EIO
   */
  async mkdir(path: string, mode = 0o755): Promise<Attr> {
    const t = this.mutationTarget(path, 'mkdir');
    return this.mutateIn(t, async (a, parent, ctx) => {
      ctx.committed = true;
      const r = await a.session.client.request<{ attr: Attr }>('mkdir', { node: parent }, { name: t.name, mode });
      a.cache.set(t.rel, r.attr.id);
      return r.attr;
    });
  }

  /**
   * Removes an empty directory.
   * @throws FsError ENOENT, ENOTDIR, ENOTEMPTY, EBUSY (a mount root), EROFS, EIO
   */
  async rmdir(path: string): Promise<void> {
    const t = this.mutationTarget(path, 'rmdir');
    await this.mutateIn(t, async (a, parent, ctx) => {
      ctx.committed = true;
      try {
        await a.session.client.request('rmdir', { node: parent }, { name: t.name });
      } finally {
        a.cache.dropTree(t.rel);
      }
    });
  }

  /**
   * Removes a file or symlink.
   * @throws FsError ENOENT, EISDIR, EBUSY (a mount root), EROFS, EIO
   */
  async unlink(path: string): Promise<void> {
    const t = this.mutationTarget(path, 'unlink');
    await this.mutateIn(t, async (a, parent, ctx) => {
      ctx.committed = true;
      try {
        await a.session.client.request('unlink', { node: parent }, { name: t.name });
      } finally {
        a.cache.dropTree(t.rel);
      }
    });
  }

  /**
   * Renames within one mount.
   * @throws FsError EXDEV (different mounts), EBUSY (a mount root), ENOENT, ENOTEMPTY, EROFS, EIO
   */
  async rename(oldPath: string, newPath: string): Promise<void> {
    const from = this.mutationTarget(oldPath, 'rename');
    const to = this.mutationTarget(newPath, 'rename');
    if (from.mountPath !== to.mountPath) {
      throw new FsError(Errno.EXDEV, `cannot rename across mounts (${from.mountPath} -> ${to.mountPath})`);
    }
    await this.withMount(from.mountPath, async (a, ctx) => {
      const run = async (useCache: boolean) => {
        const op = await this.walk(a, from.parentRel, useCache);
        const np = await this.walk(a, to.parentRel, useCache);
        ctx.committed = true;
        try {
          await a.session.client.request('rename', {}, { old_parent: op.id, old_name: from.name, new_parent: np.id, new_name: to.name });
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
  async symlink(path: string, target: string): Promise<Attr> {
    const t = this.mutationTarget(path, 'symlink');
    return this.mutateIn(t, async (a, parent, ctx) => {
      ctx.committed = true;
      const r = await a.session.client.request<{ attr: Attr }>('symlink', { node: parent }, { name: t.name, target });
      a.cache.set(t.rel, r.attr.id);
      return r.attr;
    });
  }

  /**
   * The target of a symlink.
   * @throws FsError ENOENT, EINVAL (not a symlink)
   */
  async readlink(path: string): Promise<string> {
    const r = this.resolve(path);
    if (r.kind === 'synthetic') throw new FsError(Errno.EINVAL, `${r.path}: not a symlink`);
    if (r.kind === 'none') throw new FsError(Errno.ENOENT, `${r.path}: not in the workspace`);
    return this.withMount(r.mountPath, (a) =>
      this.retryStale(a, r.rel, async () => {
        const w = await this.walk(a, r.rel, true);
        return (await a.session.client.request<{ target: string }>('readlink', { node: w.id })).target;
      }),
    );
  }

  /**
   * File system statistics of the mount holding `path` (zeros for the synthetic tree).
   * @throws FsError ENOENT, MountUnavailableError
   */
  async statfs(path: string): Promise<StatFs> {
    const r = this.resolve(path);
    if (r.kind !== 'mount') {
      if (r.kind === 'none') throw new FsError(Errno.ENOENT, `${r.path}: not in the workspace`);
      return { bsize: 4096, frsize: 4096, blocks: 0, bfree: 0, bavail: 0, files: 0, ffree: 0, namemax: 255 };
    }
    return this.withMount(r.mountPath, (a) =>
      this.retryStale(a, r.rel, async () => {
        const w = await this.walk(a, r.rel, true);
        return a.session.client.request<StatFs>('statfs', { node: w.id });
      }),
    );
  }

  // ---------------------------------------------------------------------------------------
  // Status

  /** Every mount path with its candidates, which one is active and the last failures (no secrets). */
  describe(): MountStatus[] {
    const out: MountStatus[] = [];
    for (const [path, route] of [...this.routes.entries()].sort(([a], [b]) => (a < b ? -1 : 1))) {
      out.push({
        mount_path: path,
        candidates: route.candidates.map((c) => {
          const key = candidateKey(c);
          return {
            node_id: c.node_id,
            node_name: c.node_name,
            export_name: c.export_name,
            fs_url: c.fs_url,
            state: c.state,
            selected: c.selected,
            active: route.active?.key === key && route.active.session.isOpen,
            auth: typeof c.auth_token === 'string',
            last_error: route.lastError.get(key) ?? null,
          };
        }),
      });
    }
    return out;
  }

  /**
   * Probes every candidate of every mount (or of `mountPath`): connect and hello (reusing an
   * open session), find the export, getattr its root. Never throws; failures are reported.
   * @returns mount path -> one result per candidate, in candidate order
   */
  async probe(mountPath?: string): Promise<Map<string, ProbeResult[]>> {
    const out = new Map<string, ProbeResult[]>();
    const routes = [...this.routes.values()].filter((r) => mountPath === undefined || r.mountPath === mountPath);
    await Promise.all(
      routes.map(async (route) => {
        out.set(
          route.mountPath,
          await Promise.all(
            route.candidates.map(async (c): Promise<ProbeResult> => {
              const t0 = performance.now();
              try {
                if (!c.fs_url) throw new FsError(Errno.ENODEV, `node ${c.node_id ?? c.node_name} has no fs_url (state ${c.state ?? 'unknown'})`);
                const s = await this.pool.get(c.fs_url, c.auth_token);
                const ex = await s.export(c.export_name);
                const { attr } = await s.client.request<{ attr: Attr }>('getattr', { node: ex.root });
                return { ok: true, ms: performance.now() - t0, root: attr, read_only: ex.ro, binary: s.client.binary, node: s.client.hello?.node?.name };
              } catch (e) {
                return { ok: false, ms: performance.now() - t0, error: messageOf(e), errno: e instanceof FsError ? (e.errno ?? null) : null };
              }
            }),
          ),
        );
      }),
    );
    return new Map([...out.entries()].sort(([a], [b]) => (a < b ? -1 : 1)));
  }

  /** Resolves a path against the current mount table (see {@link MountTable.resolve}). */
  resolve(path: string): Resolution {
    return this.table.resolve(normalizePath(path));
  }

  // ---------------------------------------------------------------------------------------
  // Topology

  private applyTopology(t: Topology): void {
    if (this.closed) return;
    const added: string[] = [];
    const changed: string[] = [];
    const removed: string[] = [];
    for (const [path, candidates] of t.mounts) {
      let route = this.routes.get(path);
      if (!route) {
        route = new MountRoute(path);
        this.routes.set(path, route);
        added.push(path);
      }
      const fp = candidatesFingerprint(candidates);
      const moved = route.candidates.length > 0 && fp !== route.fingerprint;
      route.candidates = candidates;
      route.fingerprint = fp;
      if (moved) {
        const served = route.active !== null;
        this.revalidateActive(route);
        if (served && route.active === null) changed.push(path);
      }
    }
    for (const path of [...this.routes.keys()]) {
      if (!t.mounts.has(path)) {
        this.routes.delete(path);
        removed.push(path);
      }
    }
    if (added.length + changed.length + removed.length > 0 || this.topologyGen === 0) {
      this.table = new MountTable(t.mounts.keys());
      this.topologyTs = t.ts_ms;
      this.topologyGen++;
      this.retainSessions();
      const ev: TopologyChange = { mountPaths: [...t.mounts.keys()], added, removed, changed };
      this.emit('topology', ev);
    }
  }

  /**
   * After a candidate list changed: keep the active endpoint when it is still a candidate
   * with the same URL and token and it is not worse than the new preferred one (no churn
   * when two online nodes alternate by lease expiry); otherwise the mount reconnects to the
   * new preferred candidate (with an empty cache).
   */
  private revalidateActive(route: MountRoute): void {
    const a = route.active;
    if (!a) return;
    const same = route.candidates.find((c) => candidateKey(c) === a.key && c.fs_url === a.candidate.fs_url && c.auth_token === a.candidate.auth_token);
    const first = route.candidates[0];
    const worse = same && same.state !== null && same.state !== 'online' && first?.state === 'online';
    if (same && !worse) {
      a.candidate = same;
      return;
    }
    route.active = null;
  }

  private retainSessions(): void {
    const keep = new Set<string>();
    for (const route of this.routes.values()) if (route.active) keep.add(route.active.session.key);
    for (const f of this.files.values()) keep.add(f.active.session.key);
    this.pool.retain(keep);
  }

  // ---------------------------------------------------------------------------------------
  // Candidates and failover

  private route(mountPath: string): MountRoute {
    const r = this.routes.get(mountPath);
    if (!r) throw new FsError(Errno.ENOENT, `mount ${mountPath} is no longer in the topology`);
    return r;
  }

  private maxAttempts(mountPath: string): number {
    return Math.max(1, this.routes.get(mountPath)?.candidates.length ?? 1) + 1;
  }

  /**
   * The active endpoint of a mount, connecting to the first usable candidate when there is
   * none: candidates in order, those that failed within `failureBackoffMs` last.
   * @throws MountUnavailableError when every candidate fails
   */
  private acquire(route: MountRoute): Promise<Active> {
    if (route.active?.session.isOpen) return Promise.resolve(route.active);
    if (!route.acquiring) {
      route.acquiring = this.connectRoute(route).finally(() => {
        route.acquiring = null;
      });
    }
    return route.acquiring;
  }

  private async connectRoute(route: MountRoute): Promise<Active> {
    const previous = route.last;
    route.active = null;
    const now = Date.now();
    const fresh: MountCandidate[] = [];
    const backedOff: MountCandidate[] = [];
    for (const c of route.candidates) ((route.failedUntil.get(candidateKey(c)) ?? 0) > now ? backedOff : fresh).push(c);
    const failures: CandidateFailure[] = [];
    for (const c of [...fresh, ...backedOff]) {
      const key = candidateKey(c);
      try {
        if (!c.fs_url) throw new FsError(Errno.ENODEV, `node ${c.node_id ?? c.node_name} has no fs_url (state ${c.state ?? 'unknown'})`);
        const session = await this.pool.get(c.fs_url, c.auth_token);
        const ex = await session.export(c.export_name);
        if (!this.routes.has(route.mountPath) || !route.candidates.includes(c)) continue;
        const active: Active = { candidate: c, key, session, root: ex.root, ro: ex.ro, cache: new LookupCache(this.cacheEntries) };
        active.cache.set('', ex.root);
        route.active = active;
        route.last = active;
        route.failedUntil.delete(key);
        const previousError = previous ? route.lastError.get(previous.key) : undefined;
        route.lastError.delete(key);
        if (!previous || previous.key !== key || previous.session !== session) {
          const cause = previous ? (previousError ?? null) : null;
          const ev: FailoverEvent = { mount_path: route.mountPath, from: previous ? describeCandidate(previous.candidate) : null, to: describeCandidate(c), cause };
          if (previous) this.emit('failover', ev);
          this.emit('inval_dir', { mount_path: route.mountPath, paths: [route.mountPath], dir: ex.root } satisfies DirInval);
        }
        return active;
      } catch (e) {
        const message = messageOf(e);
        route.failedUntil.set(key, Date.now() + this.failureBackoffMs);
        route.lastError.set(key, message);
        failures.push({ candidate: describeCandidate(c), message, errno: e instanceof FsError && !(e instanceof MountUnavailableError) ? (e.errno ?? null) : null });
      }
    }
    throw new MountUnavailableError(route.mountPath, failures);
  }

  /** Records an endpoint failure seen by an operation: the mount will move on. */
  private endpointFailed(route: MountRoute, a: Active, e: ConnectionError): void {
    route.failedUntil.set(a.key, Date.now() + this.failureBackoffMs);
    route.lastError.set(a.key, e.message);
    if (e.reason === 'timeout') this.pool.discard(a.session);
    if (route.active === a) route.active = null;
  }

  /**
   * Runs `fn` on the mount's active endpoint, failing over on endpoint failures: retried on
   * the next candidate unless `ctx.committed` was set (the mutating request was sent), which
   * is EIO.
   */
  private async withMount<T>(mountPath: string, fn: (a: Active, ctx: OpContext) => Promise<T>): Promise<T> {
    if (this.closed) throw new FsError(Errno.EIO, 'the router is closed');
    const route = this.route(mountPath);
    const max = this.maxAttempts(mountPath);
    for (let attempt = 1; ; attempt++) {
      const a = await this.acquire(route);
      const ctx: OpContext = { committed: false };
      try {
        return await fn(a, ctx);
      } catch (e) {
        if (!isEndpointFailure(e)) throw e;
        this.endpointFailed(route, a, e);
        if (ctx.committed && e.sent) {
          throw new FsError(Errno.EIO, `${mountPath}: ${e.message}; the operation was in flight and may or may not have been applied`);
        }
        if (attempt >= max) throw new FsError(Errno.EIO, `${mountPath}: ${e.message}`);
      }
    }
  }

  private async reopen(f: OpenFile, failed: Active): Promise<void> {
    if (f.active !== failed) return;
    if (!f.reopening) {
      f.reopening = (async () => {
        const { active, h } = await this.withMount(f.mountPath, (a, ctx) => this.openOn(a, ctx, f.rel, f.flags, true));
        f.active = active;
        f.h = h;
      })().finally(() => {
        f.reopening = null;
      });
    }
    await f.reopening;
  }

  private openOn(a: Active, ctx: OpContext, rel: string, flags: number, readOnly: boolean): Promise<{ active: Active; h: number }> {
    return this.retryStale(a, rel, async () => {
      const w = await this.walk(a, rel, true);
      if (!readOnly) ctx.committed = true;
      const r = await a.session.client.request<{ h: number }>('open', { node: w.id }, { flags });
      return { active: a, h: r.h };
    });
  }

  // ---------------------------------------------------------------------------------------
  // Walks and caches

  /**
   * Resolves `rel` to a node id: the longest cached prefix, then one `lookup` per remaining
   * name (each result cached).
   * @returns the id, the attr when the last step was looked up, and whether the cache was used
   */
  private async walk(a: Active, rel: string, useCache: boolean): Promise<{ id: number; attr?: Attr; cached: boolean }> {
    if (rel === '') return { id: a.root, cached: false };
    if (useCache && a.cache.isVerified(rel)) return { id: a.cache.get(rel)!, cached: true };
    const names = rel.split('/');
    let id = a.root;
    let prefix = '';
    let start = 0;
    if (useCache) {
      const hit = a.cache.usablePrefix(names);
      if (hit.depth > 0) {
        id = hit.id!;
        start = hit.depth;
        prefix = names.slice(0, start).join('/');
      }
    }
    const cached = start > 0;
    let attr: Attr | undefined;
    for (let j = start; j < names.length; j++) {
      const r = await a.session.client.request<{ attr: Attr }>('lookup', { node: id }, { name: names[j] });
      attr = r.attr;
      id = attr.id;
      prefix = relJoin(prefix, names[j]);
      a.cache.set(prefix, id);
    }
    return { id, attr, cached };
  }

  /**
   * Runs `fn`, which walks `rel` from its deepest usable cached prefix. When it fails with
   * ENOENT/ESTALE after starting from a cached node id, one `getattr` checks that id: still
   * known to the node, the error stands (what is missing is below it, and the cache stays as
   * it is: a negative lookup costs one more request, not a walk from the root); forgotten (the
   * node removed or renamed it for another session), its cached subtree is dropped and `fn`
   * runs again from the next cached ancestor, or from the export root.
   */
  private async retryStale<T>(a: Active, rel: string, fn: () => Promise<T>): Promise<T> {
    for (let attempts = rel.split('/').length + 1; ; attempts--) {
      const start = this.cachedStart(a, rel);
      try {
        return await fn();
      } catch (e) {
        if (!start || !isStale(e) || attempts <= 0) throw e;
        if (await this.stillKnown(a, start.id)) throw e;
        a.cache.dropTree(start.rel);
      }
    }
  }

  /** Where {@link walk} with the cache starts for `rel`: the cached prefix and its id, or null (the export root). */
  private cachedStart(a: Active, rel: string): { rel: string; id: number } | null {
    if (rel === '') return null;
    if (a.cache.isVerified(rel)) return { rel, id: a.cache.get(rel)! };
    const names = rel.split('/');
    const hit = a.cache.usablePrefix(names);
    return hit.depth > 0 ? { rel: names.slice(0, hit.depth).join('/'), id: hit.id! } : null;
  }

  /**
   * Whether the node still knows node id `id` (its path exists).
   * @throws the `getattr` error when it is not ENOENT/ESTALE
   */
  private async stillKnown(a: Active, id: number): Promise<boolean> {
    try {
      await a.session.client.request('getattr', { node: id });
      return true;
    } catch (e) {
      if (isStale(e)) return false;
      throw e;
    }
  }

  private onInval(s: EndpointSession, ev: InvalEvent): void {
    for (const route of this.routes.values()) {
      const a = route.active;
      if (!a || a.session !== s) continue;
      const rels = ev.what === 'all' ? a.cache.nodeChanged(ev.node) : a.cache.pathsOf(ev.node);
      const e: PathInval = { mount_path: route.mountPath, paths: rels.map((r) => this.workspacePath(route.mountPath, r)), node: ev.node, what: ev.what };
      this.emit('inval', e);
    }
  }

  private onInvalDir(s: EndpointSession, ev: InvalDirEvent): void {
    for (const route of this.routes.values()) {
      const a = route.active;
      if (!a || a.session !== s) continue;
      const rels = a.cache.childrenChanged(ev.dir);
      const e: DirInval = { mount_path: route.mountPath, paths: rels.map((r) => this.workspacePath(route.mountPath, r)), dir: ev.dir };
      this.emit('inval_dir', e);
    }
  }

  private onSessionClosed(s: EndpointSession): void {
    for (const route of this.routes.values()) {
      if (route.active?.session === s) {
        route.failedUntil.set(route.active.key, Date.now() + this.failureBackoffMs);
        route.lastError.set(route.active.key, `FS session to ${s.url} closed`);
        route.active = null;
        this.emit('unavailable', { mount_path: route.mountPath, cause: `FS session to ${s.url} closed` } satisfies UnavailableEvent);
      }
    }
  }

  private workspacePath(mountPath: string, rel: string): string {
    return rel === '' ? mountPath : joinPath(mountPath, rel);
  }

  // ---------------------------------------------------------------------------------------
  // Helpers

  private file(fh: number): OpenFile {
    const f = this.files.get(fh);
    if (!f) throw new FsError(Errno.EBADF, `unknown file handle ${fh}`);
    return f;
  }

  private syntheticAttr(): Attr {
    const ns = this.topologyTs * 1_000_000;
    return { id: 0, k: NodeKind.DIR, m: SYNTHETIC_DIR_MODE, n: 2, u: process.getuid?.() ?? 0, g: process.getgid?.() ?? 0, sz: 0, at: ns, mt: ns, ct: ns, gen: this.topologyGen };
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

  private mutateIn<T>(t: { mountPath: string; parentRel: string }, fn: (a: Active, parent: number, ctx: OpContext) => Promise<T>): Promise<T> {
    return this.withMount(t.mountPath, (a, ctx) =>
      this.retryStale(a, t.parentRel, async () => {
        const p = await this.walk(a, t.parentRel, true);
        return fn(a, p.id, ctx);
      }),
    );
  }

  private mutateNode<T>(path: string, fn: (a: Active, id: number) => Promise<T>): Promise<T> {
    const r = this.resolve(path);
    if (r.kind === 'synthetic') throw new FsError(Errno.EROFS, `${r.path}: the workspace tree above mount paths is read-only`);
    if (r.kind === 'none') throw new FsError(Errno.ENOENT, `${r.path}: not in the workspace`);
    return this.withMount(r.mountPath, (a, ctx) =>
      this.retryStale(a, r.rel, async () => {
        const w = await this.walk(a, r.rel, true);
        ctx.committed = true;
        return fn(a, w.id);
      }),
    );
  }

  private async readChunks(s: EndpointSession, h: number, off: number, len: number): Promise<{ data: Buffer; eof: boolean }> {
    const max = s.client.maxRead;
    if (len <= max) return s.client.read(h, off, len);
    const sizes: number[] = [];
    const parts: Array<Promise<{ data: Buffer; eof: boolean }>> = [];
    for (let o = 0; o < len; o += max) {
      sizes.push(Math.min(max, len - o));
      parts.push(s.client.read(h, off + o, sizes[sizes.length - 1]));
    }
    const results = await Promise.all(parts);
    const bufs: Buffer[] = [];
    let eof = false;
    for (let i = 0; i < results.length; i++) {
      bufs.push(results[i].data);
      if (results[i].eof || results[i].data.length < sizes[i]) {
        eof = results[i].eof;
        break;
      }
    }
    return { data: bufs.length === 1 ? bufs[0] : Buffer.concat(bufs), eof };
  }

  /** Writes all of `data` at `off` (more requests after a short write); framed data goes out as is first. */
  private async writeFully(f: OpenFile, off: number, data: Uint8Array | FramedData): Promise<number> {
    const length = isFramedData(data) ? data.len : data.length;
    let done = 0;
    do {
      const client = f.active.session.client;
      const n = done === 0 ? await client.write(f.h, off, data) : await client.write(f.h, off + done, (isFramedData(data) ? framedBytes(data) : data).subarray(done));
      if (n <= 0 && length > 0) throw new FsError(Errno.EIO, `${f.path}: the node wrote 0 bytes`);
      done += n;
    } while (done < length);
    return done;
  }
}
