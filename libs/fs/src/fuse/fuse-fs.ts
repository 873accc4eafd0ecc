/**
 * The FUSE layer of `svc-fs-mount mount` (issue 4 item 4): fuse-native operations on top of
 * the WorkspaceRouter (failover included), with the caches a FUSE user expects:
 *
 * - attribute cache, filled by getattr and by readdir (readdirp returns attributes, so
 *   `ls -l`, `find`, `grep -R` and `git status` cost no round trip per file);
 * - directory listing cache (readdir is answered from it) and a negative-lookup cache;
 * - read-ahead for sequential readers (1 MiB requests, several in flight, tolerant of the
 *   kernel's concurrent, slightly out-of-order read-ahead requests);
 * - write-behind for sequential writes (coalesced into 1 MiB requests, flushed on
 *   flush/fsync/release, errors reported there);
 * - lazy read-only opens: a file this mount opened for reading before, whose attributes have
 *   not changed since (same node id, ctime, mode and owner), is opened on the node only when a
 *   read actually reaches it; with the kernel's page cache kept across opens (`auto_cache`:
 *   kept while mtime and size are unchanged) a warm `grep -R` then needs no round trip at all.
 *
 * These client-side caches live `cacheTtlMs` (default 60 s) and are invalidated by the node's
 * `acheron.e_fs_inval*` pushes (router `inval`/`inval_dir` events, sent for changes made on
 * the node by anyone), by topology changes, failovers and lost sessions (for the mount path
 * concerned only: a reorder of candidates that keeps the serving endpoint drops nothing), and
 * by this mount's own mutations. The kernel's own attribute and entry caches cannot be
 * invalidated from here, so they keep the short `attrTtlMs` (the mount's
 * `attr_timeout`/`entry_timeout`).
 */
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Attr, BINARY_HEADER_ROOM, Errno, FsError, NodeKind, OpenFlags, StatFs } from '@svc/protocol/wire';
import { BufferPool } from '../buffer-pool';
import type { FailoverEvent, TopologyChange, UnavailableEvent, WorkspaceRouter } from '../router/workspace-router';

/** Options of {@link FuseFs}. */
export interface FuseFsOptions {
  /** Kernel attribute / entry cache lifetime, ms (default 1000); the client caches live at least as long. */
  attrTtlMs?: number;
  /** Lifetime of the client-side caches (attributes, listings, negative lookups, open proofs), ms (default 60000). */
  cacheTtlMs?: number;
  /** Refuse every mutation with EROFS. */
  readOnly?: boolean;
  /** Bytes fetched ahead of a sequential reader (default 4 MiB). */
  readAheadBytes?: number;
  /** Size of one read-ahead or write-behind request, bytes (default 1 MiB). */
  chunkBytes?: number;
  /**
   * After answering an operation, keep the event loop polling instead of sleeping for this
   * long, µs (default 1000; 0 never; never on a single CPU). The next operation of a busy
   * caller is then picked up without the wake-up of an idle CPU, which costs tens of µs per
   * operation on virtual machines; an idle mount does not poll.
   */
  pollUs?: number;
  /** An operation still unanswered after this long is answered ETIMEDOUT, ms (default 60000). */
  opTimeoutMs?: number;
}

/** Linux ETIMEDOUT, the answer of an operation that took longer than `opTimeoutMs`. */
const ETIMEDOUT = 110;

/** The stat object fuse-native expects (times in ms). */
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

type Cb<T = void> = (err: number, value?: T, extra?: unknown) => void;

/**
 * Converts a router attribute (ns times) to a fuse-native stat (ms times). `blksize`, the
 * preferred I/O size, is the 1 MiB of a read-ahead chunk: `cat`, `cp` and friends size their
 * buffers by it, so they make 8x fewer system calls than with 128 KiB.
 */
export function toFuseStat(a: Attr): FuseStat {
  return {
    mode: a.m,
    uid: a.u,
    gid: a.g,
    size: a.sz,
    nlink: a.n || 1,
    ino: a.id,
    blksize: 1024 * 1024,
    blocks: Math.ceil(a.sz / 512),
    atime: Math.floor(a.at / 1e6),
    mtime: Math.floor(a.mt / 1e6),
    ctime: Math.floor(a.ct / 1e6),
  };
}

/** The negative errno fuse-native wants for a failure (EIO for anything unknown). */
export function fuseErrno(e: unknown): number {
  if (e instanceof FsError || (typeof e === 'object' && e !== null && typeof (e as { errno?: unknown }).errno === 'number')) {
    const n = (e as { errno: number }).errno;
    return -Math.abs(n);
  }
  return -Errno.EIO;
}

function parentOf(path: string): string {
  const i = path.lastIndexOf('/');
  return i <= 0 ? '/' : path.slice(0, i);
}

function join(dir: string, name: string): string {
  return dir === '/' ? `/${name}` : `${dir}/${name}`;
}

interface Expiring<T> {
  value: T;
  expires: number;
}

/** One chunk fetched (or being fetched) ahead of a reader. */
type Chunk = Promise<{ data: Buffer; eof: boolean }>;

/** Read-ahead, write-behind and node-handle state of one open file (one FUSE file handle). */
class OpenState {
  /** The router's handle once the file is open on the node (at once for writers, lazily for readers). */
  fh: number | null = null;
  /** The node open in progress of a lazy reader. */
  opening: Promise<number> | null = null;
  /**
   * End of the stream a sequential reader is consuming (bytes): reads near it are served from
   * aligned chunks fetched ahead. The kernel sends read-ahead requests concurrently, so they
   * arrive slightly out of order: "near" is a window, not an exact offset.
   */
  head = 0;
  /** Size of the file as learnt from a short chunk (no chunk is fetched at or past it). */
  eofAt = Infinity;
  /** Size of the file when it was opened (bytes; Infinity when unknown): read-ahead stops there, reads do not. */
  sizeHint = Infinity;
  /** Prefetched chunks by offset (multiples of the chunk size). */
  readonly chunks = new Map<number, Chunk>();
  /**
   * Write-behind data not sent yet: `pendingLen` bytes for offset `pendingOff`, gathered in
   * `block` after {@link BINARY_HEADER_ROOM} free bytes (the request frame is completed there).
   */
  block: Buffer | null = null;
  pendingOff = 0;
  pendingLen = 0;
  /** Background writes not yet acknowledged. */
  readonly inflight = new Set<Promise<void>>();
  /** First error of a background write, reported at the next write/flush/release. */
  error: unknown = null;

  constructor(
    /** Workspace path; follows renames. */
    public path: string,
    readonly writable: boolean,
    /** Open flags (Linux O_* bits) for the node open. */
    readonly flags: number,
  ) {}

  /** True while written data has not reached the node. */
  get dirty(): boolean {
    return this.pendingLen > 0 || this.inflight.size > 0;
  }

  /** Forgets what was read ahead; `written`: the file changed through this handle (its size is unknown now). */
  resetReadAhead(written = false): void {
    this.chunks.clear();
    this.eofAt = Infinity;
    if (written) this.sizeHint = Infinity;
  }
}

/** Most entries each client cache holds; past it the oldest tenth is dropped. */
const MAX_CACHE_ENTRIES = 200_000;

/** Sets `key` in a bounded insertion-ordered cache (the oldest entries go first). */
function cacheSet<K, V>(map: Map<K, V>, key: K, value: V): void {
  map.delete(key);
  if (map.size >= MAX_CACHE_ENTRIES) {
    let drop = Math.ceil(MAX_CACHE_ENTRIES / 10);
    for (const k of map.keys()) {
      map.delete(k);
      if (--drop === 0) break;
    }
  }
  map.set(key, value);
}

/**
 * What a successful read-only open on the node proved about a file: opening it again is
 * expected to succeed while these attributes are unchanged (a chmod, chown, write or
 * replacement changes the node id or ctime).
 */
function openProof(a: Attr): string {
  return `${a.id}:${a.ct}:${a.m}:${a.u}:${a.g}`;
}

/** A cached directory listing: names (in order), their set, and the stats handed to readdir. */
interface Listing {
  names: string[];
  has: Set<string>;
  stats: FuseStat[];
}

/**
 * fuse-native operations over a WorkspaceRouter; see module documentation. Create it, then
 * pass {@link FuseFs.ops} to `new Fuse(mountpoint, ops, options)`.
 */
export class FuseFs {
  private readonly ttl: number;
  private readonly readOnly: boolean;
  private readonly readAhead: number;
  private readonly chunk: number;
  private readonly attrs = new Map<string, Expiring<Attr>>();
  private readonly missing = new Map<string, number>();
  private readonly dirs = new Map<string, Expiring<Listing>>();
  /** Paths opened read-only on the node, with the {@link openProof} of their attributes then. */
  private readonly proofs = new Map<string, string>();
  private readonly files = new Map<number, OpenState>();
  private nextFh = 1;
  /** Write-behind blocks: header room + one chunk. */
  private readonly blocks: BufferPool;
  private readonly pollMs: number;
  private pollUntil = 0;
  private polling = false;
  private readonly opTimeoutMs: number;
  /** Operations not answered yet, by sequence number: start time and the ETIMEDOUT answer. */
  private readonly unanswered = new Map<number, { at: number; timeout: () => void }>();
  private nextOp = 1;
  private watchdog: NodeJS.Timeout | null = null;

  constructor(
    private readonly router: WorkspaceRouter,
    options: FuseFsOptions = {},
  ) {
    this.ttl = Math.max(options.cacheTtlMs ?? 60_000, options.attrTtlMs ?? 1000);
    this.readOnly = options.readOnly ?? false;
    this.chunk = options.chunkBytes ?? 1024 * 1024;
    this.readAhead = options.readAheadBytes ?? 4 * this.chunk;
    this.blocks = new BufferPool(BINARY_HEADER_ROOM + this.chunk, 8);
    this.pollMs = availableParallelism() > 1 ? (options.pollUs ?? 1000) / 1000 : 0;
    this.opTimeoutMs = options.opTimeoutMs ?? 60_000;
    router.on('inval', (e: { paths: string[] }) => e.paths.forEach((p) => this.forget(p)));
    router.on('inval_dir', (e: { paths: string[] }) => e.paths.forEach((p) => this.forgetDir(p)));
    // What was learnt through one endpoint goes with it; other mounts keep their caches.
    router.on('topology', (e: TopologyChange) => {
      if (e.added.length > 0 || e.removed.length > 0) this.forgetAll(); // the synthetic tree changed
      else for (const path of e.changed) this.forgetTree(path);
    });
    router.on('failover', (e: FailoverEvent) => this.forgetTree(e.mount_path));
    router.on('unavailable', (e: UnavailableEvent) => this.forgetTree(e.mount_path));
  }

  /** Drops every cached attribute, listing, negative lookup and open proof. */
  forgetAll(): void {
    this.attrs.clear();
    this.missing.clear();
    this.dirs.clear();
    this.proofs.clear();
  }

  /** Drops what is cached about `path` and its parent's listing. */
  forget(path: string): void {
    this.attrs.delete(path);
    this.missing.delete(path);
    this.dirs.delete(path);
    this.proofs.delete(path);
    this.dirs.delete(parentOf(path));
  }

  /** Drops everything cached at or below `path` (a renamed or removed directory). */
  private forgetTree(path: string): void {
    if (path === '/') return this.forgetAll();
    this.forget(path);
    const prefix = `${path}/`;
    for (const map of [this.attrs, this.missing, this.dirs, this.proofs] as Array<Map<string, unknown>>) {
      for (const p of map.keys()) if (p.startsWith(prefix)) map.delete(p);
    }
  }

  /** Drops the listing of `dir` and the negative lookups below it. */
  private forgetDir(dir: string): void {
    this.dirs.delete(dir);
    this.attrs.delete(dir);
    const prefix = dir === '/' ? '/' : `${dir}/`;
    for (const p of this.missing.keys()) if (p.startsWith(prefix)) this.missing.delete(p);
  }

  private remember(path: string, attr: Attr, now = Date.now()): void {
    cacheSet(this.attrs, path, { value: attr, expires: now + this.ttl });
    this.missing.delete(path);
  }

  /** The cached attributes of `path` while fresh. */
  private cachedAttr(path: string): Attr | undefined {
    const hit = this.attrs.get(path);
    return hit && hit.expires > Date.now() ? hit.value : undefined;
  }

  private async attrOf(path: string): Promise<Attr> {
    const now = Date.now();
    const hit = this.attrs.get(path);
    if (hit && hit.expires > now) return hit.value;
    const miss = this.missing.get(path);
    if (miss !== undefined && miss > now) throw new FsError(Errno.ENOENT);
    // A fresh listing of the parent that lacks the name is as good as a failed lookup.
    const parent = this.dirs.get(parentOf(path));
    if (parent && parent.expires > now && path !== '/' && !parent.value.has.has(path.slice(path.lastIndexOf('/') + 1))) {
      throw new FsError(Errno.ENOENT);
    }
    try {
      const attr = await this.router.getattr(path);
      this.remember(path, attr);
      return attr;
    } catch (e) {
      if (e instanceof FsError && e.errno === Errno.ENOENT) cacheSet(this.missing, path, Date.now() + this.ttl);
      throw e;
    }
  }

  /**
   * The entries of directory `path` as names and stats for readdir: the cached listing while
   * fresh, else read from the node (every entry's attributes are cached on the way).
   */
  private async listing(path: string): Promise<Listing> {
    const now = Date.now();
    const hit = this.dirs.get(path);
    if (hit && hit.expires > now) return hit.value;
    const entries = await this.router.readdirAll(path);
    const done = Date.now();
    const names = entries.map((e) => e.name);
    for (const e of entries) this.remember(join(path, e.name), e.attr, done);
    const value: Listing = { names, has: new Set(names), stats: entries.map((e) => toFuseStat(e.attr)) };
    cacheSet(this.dirs, path, { value, expires: done + this.ttl });
    return value;
  }

  private refuseWrite(): void {
    if (this.readOnly) throw new FsError(Errno.EROFS);
  }

  // ---- answering operations ------------------------------------------------------------

  /**
   * Wraps the callback of one operation: it answers once; the watchdog answers `onTimeout`
   * after `opTimeoutMs` (a late answer is then dropped); each answer starts a short poll.
   * (One watchdog for all operations instead of fuse-native's timer per operation.)
   */
  private guard<A extends unknown[]>(cb: (...args: A) => void, onTimeout: A): (...args: A) => void {
    const id = this.nextOp++;
    this.unanswered.set(id, { at: Date.now(), timeout: () => cb(...onTimeout) });
    if (!this.watchdog) {
      this.watchdog = setInterval(() => this.expire(), Math.min(1000, this.opTimeoutMs));
      this.watchdog.unref();
    }
    return (...args: A) => {
      if (!this.unanswered.delete(id)) return;
      cb(...args);
      this.poll();
    };
  }

  /** Answers ETIMEDOUT to the operations older than `opTimeoutMs`; stops when none is left. */
  private expire(): void {
    const limit = Date.now() - this.opTimeoutMs;
    for (const [id, op] of this.unanswered) {
      if (op.at > limit) break;
      this.unanswered.delete(id);
      op.timeout();
    }
    if (this.unanswered.size === 0 && this.watchdog) {
      clearInterval(this.watchdog);
      this.watchdog = null;
    }
  }

  /** Keeps the event loop polling for `pollMs` from now (see {@link FuseFsOptions.pollUs}). */
  private poll(): void {
    if (this.pollMs <= 0) return;
    this.pollUntil = performance.now() + this.pollMs;
    if (this.polling) return;
    this.polling = true;
    const spin = () => {
      if (performance.now() < this.pollUntil) setImmediate(spin);
      else this.polling = false;
    };
    setImmediate(spin);
  }

  /** Runs an async operation and answers fuse-native's callback (0/value, or -errno). */
  private run<T>(cb: Cb<T>, fn: () => Promise<T>, fallback?: T): void {
    const answer = this.guard(cb, [-ETIMEDOUT]);
    fn().then(
      (v) => answer(0, v),
      (e) => answer(fuseErrno(e), fallback),
    );
  }

  /**
   * Like {@link run} for read and write, whose fuse-native callback takes the byte count as its
   * first argument (a negative errno on failure).
   */
  private runCount(cb: (result: number) => void, fn: () => Promise<number>): void {
    const answer = this.guard(cb, [-ETIMEDOUT]);
    fn().then(
      (n) => answer(n),
      (e) => answer(fuseErrno(e)),
    );
  }

  // ---- opening ------------------------------------------------------------------------

  /**
   * FUSE open. Writers (and O_TRUNC) are opened on the node at once, so EROFS/EACCES/ENOENT
   * come back here. A reader is opened lazily (no round trip) when this mount opened the same
   * file for reading before and its cached attributes still match that open's
   * {@link openProof}; otherwise at once, which records the proof.
   * @returns the FUSE file handle
   */
  private async open(path: string, flags: number): Promise<number> {
    const writable = (flags & OpenFlags.O_ACCMODE) !== OpenFlags.O_RDONLY || (flags & OpenFlags.O_TRUNC) !== 0;
    if (writable) this.refuseWrite();
    if (flags & OpenFlags.O_TRUNC) await this.flushPath(path);
    const state = new OpenState(path, writable, flags & ~OpenFlags.O_CREAT);
    const attr = writable ? undefined : this.cachedAttr(path);
    if (attr) state.sizeHint = attr.sz;
    if (!attr || attr.k !== NodeKind.FILE || this.proofs.get(path) !== openProof(attr)) await this.nodeHandle(state);
    const fh = this.nextFh++;
    this.files.set(fh, state);
    if (writable) this.forget(path);
    return fh;
  }

  /**
   * The router handle of an open file, opening it on the node first when that was deferred.
   * A successful read-only open records the {@link openProof} of the file's cached attributes.
   */
  private nodeHandle(state: OpenState): Promise<number> {
    if (state.fh !== null) return Promise.resolve(state.fh);
    if (!state.opening) {
      const path = state.path;
      const before = state.writable ? undefined : this.cachedAttr(path);
      state.opening = this.router.open(path, state.flags).then(
        ({ fh }) => {
          state.fh = fh;
          state.opening = null;
          const now = this.cachedAttr(path);
          if (before && now && openProof(before) === openProof(now)) cacheSet(this.proofs, path, openProof(now));
          return fh;
        },
        (e) => {
          state.opening = null;
          this.proofs.delete(path);
          throw e;
        },
      );
    }
    return state.opening;
  }

  /**
   * Opens on the node every handle of `path` that was opened lazily, before this mount removes
   * or replaces the file: an open file stays readable after its name is gone (POSIX), which
   * only a node handle taken before can give. Errors are left to the reads.
   */
  private async pinOpenHandles(path: string): Promise<void> {
    const lazy = [...this.files.values()].filter((s) => s.fh === null && s.path === path);
    await Promise.all(lazy.map((s) => this.nodeHandle(s).catch(() => undefined)));
  }

  /** Closes the node handle of a released file: awaited for writers, in the background for readers. */
  private async closeNode(state: OpenState): Promise<void> {
    const fh = state.fh ?? (state.opening ? await state.opening.catch(() => null) : null);
    if (fh === null) return;
    if (state.writable) await this.router.release(fh);
    else void this.router.release(fh).catch(() => undefined);
  }

  // ---- read-ahead and write-behind ---------------------------------------------------

  /** The chunk at `off` (aligned), from the read-ahead map or a new request. */
  private fetch(fh: number, state: OpenState, off: number): Chunk {
    let p = state.chunks.get(off);
    if (!p) {
      p = this.router.read(fh, off, this.chunk).then((r) => {
        if (r.data.length < this.chunk) state.eofAt = Math.min(state.eofAt, off + r.data.length);
        return r;
      });
      p.catch(() => state.chunks.delete(off));
      state.chunks.set(off, p);
    }
    return p;
  }

  /**
   * FUSE read: `len` bytes at `pos` into `buf`. A reader near the stream head of the handle
   * (sequential, possibly a little out of order) is served from aligned chunks of
   * `chunkBytes`, with `readAheadBytes` requested ahead once the file proved longer than one
   * chunk; any other read goes to the node as asked and moves the head there.
   * @returns bytes copied (fewer than `len` only at the end of the file)
   */
  private async read(fd: number, buf: Buffer, len: number, pos: number): Promise<number> {
    const state = this.files.get(fd);
    if (!state) throw new FsError(Errno.EBADF);
    if (state.dirty || state.error) await this.flushWrites(state);
    const fh = state.fh ?? (await this.nodeHandle(state));
    if (Math.abs(pos - state.head) > this.readAhead) {
      state.resetReadAhead();
      const { data } = await this.router.read(fh, pos, len);
      data.copy(buf);
      state.head = pos + data.length;
      return data.length;
    }
    let copied = 0;
    while (copied < len) {
      const at = pos + copied;
      if (at >= state.eofAt) break;
      const base = at - (at % this.chunk);
      const { data } = await this.fetch(fh, state, base);
      const from = at - base;
      if (from >= data.length) break;
      copied += data.copy(buf, copied, from, Math.min(data.length, from + (len - copied)));
      if (data.length < this.chunk) break;
    }
    const end = pos + copied;
    if (end > state.head) state.head = end;
    // Keep one chunk behind the head for requests that arrive late; drop the rest.
    for (const off of state.chunks.keys()) if (off + 2 * this.chunk <= state.head) state.chunks.delete(off);
    // (fetch handles a failure itself: dropped from the map, reported to the reader that waits for it.)
    const limit = Math.min(state.eofAt, Math.max(state.sizeHint, state.head), state.head + this.readAhead);
    for (let off = state.head - (state.head % this.chunk); off < limit; off += this.chunk) if (!state.chunks.has(off)) void this.fetch(fh, state, off);
    return copied;
  }

  /**
   * FUSE write: `data` at `pos`, gathered into chunks of `chunkBytes` sent in the background (4
   * in flight); a write that does not continue the pending chunk sends it first. Errors of the
   * background writes are reported by the next write, flush, fsync or release.
   * @returns bytes taken (all of `data`)
   */
  private async write(fd: number, data: Buffer, pos: number): Promise<number> {
    this.refuseWrite();
    const state = this.files.get(fd);
    if (!state) throw new FsError(Errno.EBADF);
    if (state.error) {
      const e = state.error;
      state.error = null;
      throw e;
    }
    state.resetReadAhead(true);
    if (state.pendingLen > 0 && pos !== state.pendingOff + state.pendingLen) await this.flushWrites(state);
    // fuse-native reuses `data`'s memory after the callback: the bytes are copied into the block.
    for (let taken = 0; taken < data.length; ) {
      if (state.pendingLen === 0) state.pendingOff = pos + taken;
      state.block ??= this.blocks.acquire();
      const n = data.copy(state.block, BINARY_HEADER_ROOM + state.pendingLen, taken, taken + Math.min(data.length - taken, this.chunk - state.pendingLen));
      state.pendingLen += n;
      taken += n;
      if (state.pendingLen >= this.chunk) this.sendPending(state);
    }
    while (state.inflight.size >= 4) await Promise.race(state.inflight);
    this.forget(state.path);
    return data.length;
  }

  /** Sends the pending chunk in the background; its block goes back to the pool once the node answered. */
  private sendPending(state: OpenState): void {
    const block = state.block;
    if (!block || state.pendingLen === 0) return;
    const len = state.pendingLen;
    const off = state.pendingOff;
    state.block = null;
    state.pendingLen = 0;
    const p = (async () => {
      const fh = state.fh ?? (await this.nodeHandle(state));
      const n = await this.router.write(fh, off, { buf: block, len });
      if (n !== len) throw new FsError(Errno.EIO, 'short write');
    })()
      .catch((e) => {
        state.error ??= e;
      })
      .finally(() => this.blocks.release(block));
    state.inflight.add(p);
    void p.finally(() => state.inflight.delete(p));
  }

  /** Sends pending writes and waits for all background writes; throws the first error. */
  private async flushWrites(state: OpenState): Promise<void> {
    this.sendPending(state);
    while (state.inflight.size > 0) await Promise.all(state.inflight);
    if (state.error) {
      const e = state.error;
      state.error = null;
      throw e;
    }
  }

  private async flushPath(path: string): Promise<void> {
    for (const s of this.files.values()) if (s.path === path && s.dirty) await this.flushWrites(s);
  }

  // ---- fuse-native operations --------------------------------------------------------

  /** The operations object for fuse-native. */
  get ops(): Record<string, (...args: never[]) => void> {
    const f = this;
    const R = this.router;
    return {
      init: (cb: Cb) => cb(0),
      statfs: (path: string, cb: Cb<StatFs>) =>
        f.run(cb, async () => {
          const s = await R.statfs(path);
          return { ...s, favail: s.ffree, fsid: 0, flag: 0, namemax: s.namemax } as StatFs;
        }),
      // Written data still in the write-behind buffer must count in the size a reader sees.
      getattr: (path: string, cb: Cb<FuseStat>) =>
        f.run(cb, async () => {
          await f.flushPath(path);
          return toFuseStat(await f.attrOf(path));
        }),
      fgetattr: (path: string, _fd: number, cb: Cb<FuseStat>) =>
        f.run(cb, async () => {
          await f.flushPath(path);
          return toFuseStat(await f.attrOf(path));
        }),
      access: (path: string, _mode: number, cb: Cb) => f.run(cb, async () => void (await f.attrOf(path))),
      readdir: (path: string, done: (err: number, names?: string[], stats?: FuseStat[]) => void) => {
        const cb = f.guard(done, [-ETIMEDOUT]);
        f.listing(path).then(
          (l) => cb(0, l.names, l.stats),
          (e) => cb(fuseErrno(e)),
        );
      },
      open: (path: string, flags: number, cb: Cb<number>) => f.run(cb, () => f.open(path, flags)),
      create: (path: string, mode: number, cb: Cb<number>) =>
        f.run(cb, async () => {
          f.refuseWrite();
          const { fh: routerFh, attr } = await R.create(path, mode & 0o7777, OpenFlags.O_RDWR | OpenFlags.O_CREAT);
          const state = new OpenState(path, true, OpenFlags.O_RDWR);
          state.fh = routerFh;
          const fh = f.nextFh++;
          f.files.set(fh, state);
          f.forget(path);
          f.remember(path, attr);
          return fh;
        }),
      read: (_path: string, fd: number, buf: Buffer, len: number, pos: number, cb: (n: number) => void) => f.runCount(cb, () => f.read(fd, buf, len, pos)),
      write: (_path: string, fd: number, buf: Buffer, len: number, pos: number, cb: (n: number) => void) => f.runCount(cb, () => f.write(fd, buf.subarray(0, len), pos)),
      flush: (_path: string, fd: number, cb: Cb) =>
        f.run(cb, async () => {
          const s = f.files.get(fd);
          if (s?.dirty || s?.error) await f.flushWrites(s);
        }),
      fsync: (_path: string, _datasync: boolean, fd: number, cb: Cb) =>
        f.run(cb, async () => {
          const s = f.files.get(fd);
          if (!s) throw new FsError(Errno.EBADF);
          await f.flushWrites(s);
          await R.fsync(s.fh ?? (await f.nodeHandle(s)));
        }),
      release: (path: string, fd: number, cb: Cb) =>
        f.run(cb, async () => {
          const s = f.files.get(fd);
          if (!s) return;
          try {
            await f.flushWrites(s);
          } finally {
            f.files.delete(fd);
            await f.closeNode(s);
            if (s.writable) f.forget(path);
          }
        }),
      truncate: (path: string, size: number, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(path);
          f.remember(path, await R.truncate(path, size));
        }),
      ftruncate: (path: string, _fd: number, size: number, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(path);
          f.remember(path, await R.truncate(path, size));
        }),
      chmod: (path: string, mode: number, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          f.proofs.delete(path);
          f.remember(path, await R.setattr(path, { mode: mode & 0o7777 }));
        }),
      chown: (path: string, uid: number, gid: number, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          f.proofs.delete(path);
          f.remember(path, await R.setattr(path, { uid, gid }));
        }),
      utimens: (path: string, atime: number, mtime: number, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(path);
          f.remember(path, await R.setattr(path, { at: Math.round(atime * 1e6), mt: Math.round(mtime * 1e6) }));
        }),
      readlink: (path: string, cb: Cb<string>) => f.run(cb, () => R.readlink(path)),
      unlink: (path: string, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          await f.pinOpenHandles(path);
          await R.unlink(path);
          f.forget(path);
          cacheSet(f.missing, path, Date.now() + f.ttl);
        }),
      mkdir: (path: string, mode: number, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          const attr = await R.mkdir(path, mode & 0o7777);
          f.forget(path);
          f.remember(path, attr);
        }),
      rmdir: (path: string, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          await R.rmdir(path);
          f.forgetTree(path);
        }),
      rename: (src: string, dest: string, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(src);
          await f.pinOpenHandles(dest);
          await R.rename(src, dest);
          f.forgetTree(src);
          f.forgetTree(dest);
          for (const s of f.files.values()) {
            if (s.path === src) s.path = dest;
            else if (s.path.startsWith(`${src}/`)) s.path = dest + s.path.slice(src.length);
          }
        }),
      symlink: (target: string, path: string, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          const attr = await R.symlink(path, target);
          f.forget(path);
          f.remember(path, attr);
        }),
    };
  }
}
