/**
 * The FUSE layer of `svc-fs-mount mount`: libfuse 3 low-level operations (our binding,
 * @svc/fuse3) on top of the WorkspaceRouter (failover included).
 *
 * The kernel keeps what it learns for long (`kernelTtlMs`, default 60 s): entries, attributes,
 * the pages of files across opens and the entries of directories across opens (directories are
 * never opened: `no_opendir`), so a warm tree is served by the kernel without reaching this
 * process. That stays coherent because every change is turned into a kernel invalidation of
 * exactly the inodes and entries concerned: the node's `acheron.e_fs_inval*` pushes (router
 * `inval`/`inval_dir` events, sent for changes made on the node by anyone, through any mount),
 * topology changes, failovers and lost sessions (for the mount path concerned only); this
 * mount's own mutations are seen by the kernel itself.
 *
 * Below the kernel, the client-side caches of this process (invalidated by the same events):
 * - attributes and negative lookups, filled by lookups and by listings (`readdirp` carries
 *   attributes; readdirplus hands them to the kernel, so `ls -l`, `find` and `git status` need
 *   no lookup per name);
 * - read-ahead for sequential readers (1 MiB requests, several in flight, tolerant of the
 *   kernel's concurrent, slightly out-of-order read-ahead requests);
 * - write-behind for sequential writes (coalesced into 1 MiB requests, flushed on
 *   flush/fsync/release, errors reported there);
 * - lazy read-only opens: a file this mount opened for reading before, whose attributes have
 *   not changed since (same node id, ctime, mode and owner), is opened on the node only when a
 *   read actually reaches it;
 * - small files in few round trips (the FS extensions of docs/protocol.md): a read-only open
 *   brings the file's first bytes along (`open_read`), and a reader going through a directory's
 *   files gets the next small ones in batches (`prefetch`, {@link PrefetchPolicy}), held
 *   coherent and bounded by {@link PrefetchCache};
 * - listing ahead of a recursive walk (`grep -R`, `find`, {@link ListAhead}).
 *
 * This module composes the parts, each in its own module: `./inode-table` (kernel inodes,
 * lookup counts), `./fuse-caches`, `./prefetch-cache`, `./prefetch-policy`, `./list-ahead`,
 * `./fuse-handles` (open-file table, lazy opens), `./read-ahead`, `./write-behind`,
 * `./fuse-poller` (answering, interrupts, watchdog, polling), `./fuse-ops` (the operations),
 * `./fuse-stat` (attributes and errno for the kernel), `./fuse-inodes` (stable `st_ino`).
 */
import { availableParallelism } from 'node:os';
import { FAST_FH, FuseSession, MountOptions, mount as fuseMount } from '@svc/fuse3';
import { BINARY_HEADER_ROOM, FileType } from '@svc/protocol/wire';
import { BufferPool } from '../buffer-pool';
import type { DirAttrEvent, DirInval, FailoverEvent, PathInval, TopologyChange, UnavailableEvent, WorkspaceRouter } from '../router/workspace-router';
import { DEFAULT_PREFETCH_CACHE_BYTES, FuseCaches } from './fuse-caches';
import { FuseHandles } from './fuse-handles';
import { FuseInodes } from './fuse-inodes';
import { FuseOperations } from './fuse-ops';
import { FusePoller } from './fuse-poller';
import { InodeEntry, InodeTable, ROOT_INO } from './inode-table';
import { ListAhead, ListAheadOptions } from './list-ahead';
import { PrefetchOptions, PrefetchPolicy } from './prefetch-policy';
import { ReadAhead } from './read-ahead';
import { WriteBehind } from './write-behind';

export { toKernelAttr, toFuseError } from './fuse-stat';

/** Largest read and write request between the kernel and the mount, bytes. */
export const FUSE_MAX_IO = 1024 * 1024;

/** Options of {@link FuseFs}. */
export interface FuseFsOptions {
  /** How long the kernel keeps entries and attributes, ms (default 60000); the client caches live at least as long. */
  kernelTtlMs?: number;
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
   * operation on virtual machines; an idle mount does not poll, and neither does a mount
   * waiting for a node's reply (the spin would take a CPU from a node on the same machine).
   */
  pollUs?: number;
  /** An operation still unanswered after this long is answered ETIMEDOUT, ms (default 60000). */
  opTimeoutMs?: number;
  /** Bound of the prefetched file contents held, bytes (default 32 MiB). */
  prefetchCacheBytes?: number;
  /** Prefetch tuning ({@link PrefetchPolicy}). */
  prefetch?: PrefetchOptions;
  /** Listing-ahead tuning ({@link ListAhead}). */
  listAhead?: ListAheadOptions;
  /**
   * Read-only opens of a file whose content this mount knows to be current are answered by the
   * libfuse binding, without a request reaching this process (default true); see
   * {@link FuseOperations} `allowFast`.
   */
  fastOpen?: boolean;
}

/**
 * How long the binding's loop thread goes on reading /dev/fuse after a request before it
 * sleeps, µs ({@link MountOptions.spinUs}): a caller that waits for each answer (an open in
 * `grep -R`, answered by the binding itself) sends its next request within that time, and the
 * wake-up of a sleeping thread costs tens of µs. Measured on 2 cores, warm `grep -R` over
 * 10,000 files: 0.53 s without, 0.22 s with 20 µs, 0.22 s with 100 µs.
 */
export const DEFAULT_LOOP_SPIN_US = 20;

/** Directories whose attributes the binding may hold for the kernel's next getattr at once (see `FuseFs.keepDirAttr`). */
const FAST_ATTRS_MAX = 256;
/** How many more inodes than the kernel holds `FuseFs.dropped` may list before the forgotten ones go. */
const DROPPED_SLACK = 1024;

/** Mount options of {@link FuseFs.mount}. */
export interface FuseMountOptions {
  /** Let other users use the mount (needs user_allow_other in /etc/fuse.conf when not root). */
  allowOther?: boolean;
  /** µs the binding's loop thread reads on before it sleeps (default {@link DEFAULT_LOOP_SPIN_US}; 0: never). */
  loopSpinUs?: number;
}

/** What {@link FuseFs.stats} reports. */
export interface FuseFsStats {
  /** Inodes the kernel holds (lookup count above zero), the root included. */
  inodes: number;
  /** Open FUSE file handles. */
  openFiles: number;
  /** Requests being answered. */
  pendingRequests: number;
  /** Requests answered since the mount, by operation. */
  requests: ReadonlyMap<string, number>;
  /** Kernel invalidations sent: of inodes (attributes, pages) and of entries (names). */
  invalidations: { inode: number; entry: number };
  /** Read-only opens the binding answered without this process, since the mount. */
  fastOpens: number;
  /** Getattrs of directories the binding answered without this process, since the mount. */
  fastGetattrs: number;
}

/** Libfuse operations over a WorkspaceRouter, with kernel caches kept coherent; see the module documentation. */
export class FuseFs {
  private readonly caches: FuseCaches;
  /** The kernel's inodes. */
  readonly inodes = new InodeTable();
  /** The operations handed to libfuse. */
  readonly operations: FuseOperations;
  private readonly poller: FusePoller;
  private session: FuseSession | null = null;
  private readonly readOnly: boolean;
  private readonly handles: FuseHandles;
  private readonly invalidations = { inode: 0, entry: 0 };
  /** Kernel invalidations in progress, by inode. */
  private readonly invalPending = new Map<number, Promise<void>>();
  /** The latest kernel notification queued, settled ({@link kernelNotified}). */
  private lastNotification: Promise<void> = Promise.resolve();
  /** Inodes whose read-only opens the binding answers. */
  private readonly fastAllowed = new Set<number>();
  /**
   * Inodes the kernel was told to drop what it holds of them, and that it has not heard of from
   * this process since (no answer about them): a drop of a whole tree passes them by, there is
   * nothing new in the kernel to drop.
   */
  private readonly dropped = new Set<number>();
  /** Directories whose attributes the binding may answer the kernel's next getattr with: path -> inode. */
  private readonly fastAttrs = new Map<string, number>();

  constructor(
    private readonly router: WorkspaceRouter,
    options: FuseFsOptions = {},
  ) {
    const kernelTtl = options.kernelTtlMs ?? 60_000;
    const ttl = Math.max(options.cacheTtlMs ?? 60_000, kernelTtl);
    const chunk = options.chunkBytes ?? FUSE_MAX_IO;
    const readAhead = options.readAheadBytes ?? 4 * chunk;
    this.readOnly = options.readOnly ?? false;
    // Write-behind blocks: header room + one chunk.
    const blocks = new BufferPool(BINARY_HEADER_ROOM + chunk, 8);
    const pollMs = availableParallelism() > 1 ? (options.pollUs ?? 1000) / 1000 : 0;
    const caches = (this.caches = new FuseCaches(router, ttl, options.prefetchCacheBytes ?? DEFAULT_PREFETCH_CACHE_BYTES));
    this.poller = new FusePoller(pollMs, options.opTimeoutMs ?? 60_000);
    this.operations = new FuseOperations({
      router,
      caches,
      handles: (this.handles = new FuseHandles(router, caches, chunk)),
      prefetch: new PrefetchPolicy(router, caches, caches.contents, options.prefetch),
      listAhead: new ListAhead(caches, options.listAhead),
      reads: new ReadAhead(router, chunk, readAhead),
      writes: new WriteBehind(router, blocks, chunk),
      poller: this.poller,
      inodes: this.inodes,
      stIno: new FuseInodes(router),
      kernelTtlS: kernelTtl / 1000,
      kernelSettled: (ino) => this.kernelSettled(ino),
      invalAttr: (ino) => this.invalAttr(ino),
      readOnly: this.readOnly,
      fastOpens: {
        fh: FAST_FH,
        allow: (ino) => {
          if (options.fastOpen === false || !this.session || this.fastAllowed.has(ino)) return;
          if (this.session.fastOpen(ino, true)) this.fastAllowed.add(ino);
        },
        deny: (ino) => {
          if (this.fastAllowed.delete(ino)) this.session?.fastOpen(ino, false);
        },
        locks: (ino, on) => {
          this.session?.fastLocks(ino, on);
        },
        caps: (ino, none) => {
          if (options.fastOpen !== false) this.session?.noCaps(ino, none);
        },
      },
    });
    // Another client's mutation returns once this mount's kernel dropped what it held of it.
    router.setAckBarrier(() => this.kernelNotified());
    router.on('inval', (e: PathInval) => {
      if (this.ownHandled(e)) {
        // Only the times the node gave the change are new (a directory's mtime after an entry
        // was added here): the attributes are asked for again.
        for (const p of e.paths) {
          caches.forgetAttr(p);
          const entry = this.inodes.find(p);
          if (entry) void this.invalAttr(entry.ino);
        }
        return;
      }
      for (const p of this.pathsOf(e)) {
        // `all` of a directory: it may be another one now, or none, and so may everything below
        // it: what this mount and the kernel hold of the whole subtree goes (the kernel keeps a
        // directory's inode, and the names below it, when the node answers the same id again).
        if (e.what === 'all' && this.isDir(p)) {
          caches.forgetTree(p);
          this.invalTree(p);
          continue;
        }
        // `all`: the name may stand for another file now, or none; its directory's listing goes too.
        if (e.what === 'all') caches.forget(p);
        else caches.forgetFile(p);
        if (e.what !== 'attr') this.handles.changedElsewhere(p);
        this.invalPath(p, e.what === 'all', e.what !== 'data');
      }
    });
    router.on('inval_dir', (e: DirInval) => {
      if (this.ownHandled(e)) return;
      for (const p of e.paths) {
        caches.forgetDir(p);
        this.invalPath(p, false);
      }
    });
    // This mount changed a directory's entries and the reply told its attributes after that:
    // the kernel, which drops its copy when the mutation returns, is answered from them.
    router.on('dir_attr', (e: DirAttrEvent) => {
      if (e.attr) caches.rememberNewer(e.path, e.attr);
      else caches.forgetAttr(e.path);
      if (options.fastOpen !== false) this.keepDirAttr(e.path);
    });
    caches.onAttrs = (path, tree) => this.dropDirAttr(path, tree);
    // What was learnt through one endpoint goes with it; other mounts keep their caches.
    router.on('topology', (e: TopologyChange) => {
      if (e.added.length > 0 || e.removed.length > 0) {
        caches.forgetAll(); // the synthetic tree changed
        this.invalTree('/');
      } else
        for (const path of e.changed) {
          caches.forgetTree(path);
          this.invalTree(path);
        }
    });
    router.on('failover', (e: FailoverEvent) => {
      caches.forgetTree(e.mount_path);
      this.invalTree(e.mount_path);
    });
    router.on('unavailable', (e: UnavailableEvent) => {
      caches.forgetTree(e.mount_path);
      this.invalTree(e.mount_path);
    });
  }

  /**
   * Mounts on `mountpoint` (an existing empty directory).
   * @returns the session (its `unmounted` event says when the mount ended from outside)
   * @throws Error when the binding is missing (naming the packages) or the mount fails
   */
  async mount(mountpoint: string, options: FuseMountOptions = {}): Promise<FuseSession> {
    const opts: MountOptions = {
      fsname: 'svc',
      // The kernel checks permission bits against the owners the mount presents, as a local
      // filesystem does, for every user of an --allow-other mount.
      options: ['noatime', 'default_permissions'],
      subtype: 'svc',
      allowOther: options.allowOther === true,
      readOnly: this.readOnly,
      conn: {
        maxWrite: FUSE_MAX_IO,
        maxRead: FUSE_MAX_IO,
        maxReadahead: FUSE_MAX_IO,
        maxBackground: 64,
        congestionThreshold: 48,
        readdirplus: true,
        noOpendirSupport: true,
        writebackCache: false,
        // The kernel clears set-user-ID bits itself (through setattr) when a file is written or chowned.
        handleKillpriv: false,
        autoInvalData: true,
        parallelDirops: true,
        asyncRead: true,
        // Nodes keep times to the µs (what a time set through them keeps): the kernel truncates
        // the times it is given (utimensat, futimens) to that, as a local filesystem does to its own.
        timeGran: 1000,
      },
      spinUs: options.loopSpinUs ?? DEFAULT_LOOP_SPIN_US,
    };
    this.session = await fuseMount(mountpoint, this.operations, opts);
    this.session.onContact = (ino) => {
      if (this.dropped.size > 0) this.dropped.delete(ino);
    };
    return this.session;
  }

  /**
   * True when push `e` reports only this mount's own change (the router's `own`) of a file the
   * kernel knows by one inode at most: the operation that made it already updated this mount's
   * caches and the kernel's (the kernel updates what it holds after its own requests: pages
   * written, names added or removed), so neither the kernel's pages nor the names it holds
   * missing in a directory are dropped. A file with other names the kernel holds as other
   * inodes (hard links) is invalidated as for any push.
   */
  private ownHandled(e: { own: boolean; paths: string[] }): boolean {
    if (!e.own) return false;
    const path = e.paths[0];
    if (path === undefined) return true;
    const entry = this.inodes.find(path);
    return !entry || entry.fileId === 0 || this.inodes.sameFile(entry.fileId, entry.ino).length === 0;
  }

  /** Drops every cached attribute, listing, negative lookup and open proof, and what the kernel holds. */
  forgetAll(): void {
    this.caches.forgetAll();
    this.invalTree('/');
  }

  /**
   * The binding answers the kernel's next getattr of directory `path` (which follows the
   * kernel's own invalidation when a change of the directory's entries returns) with what
   * getattr would answer from the cache now, when that is fresh: one trip to JS less per create
   * or unlink in a directory.
   */
  private keepDirAttr(path: string): void {
    const session = this.session;
    const entry = this.inodes.find(path);
    if (!session || !entry) return;
    const reply = this.operations.cachedDirAttr(entry.ino);
    if (!reply) return;
    if (this.fastAttrs.size >= FAST_ATTRS_MAX) this.dropDirAttr(null);
    if (session.fastAttr(entry.ino, reply.attr, reply.attrTimeout)) this.fastAttrs.set(path, entry.ino);
  }

  /**
   * The cached attributes of `path` (with `tree`: of paths at or below it; null: of any paths)
   * were set or dropped: the binding no longer answers with its copy of them.
   */
  private dropDirAttr(path: string | null, tree = false): void {
    if (this.fastAttrs.size === 0) return;
    if (path === null || (tree && path === '/')) {
      this.fastAttrs.clear();
      this.session?.fastAttr(0, null);
      return;
    }
    if (tree) {
      const below = `${path}/`;
      for (const [p, ino] of this.fastAttrs)
        if (p === path || p.startsWith(below)) {
          this.fastAttrs.delete(p);
          this.session?.fastAttr(ino, null);
        }
      return;
    }
    const ino = this.fastAttrs.get(path);
    if (ino === undefined) return;
    this.fastAttrs.delete(path);
    this.session?.fastAttr(ino, null);
  }

  /** Drops what is cached about `path` and its parent's listing, here and in the kernel. */
  forget(path: string): void {
    this.caches.forget(path);
    this.invalPath(path, true);
  }

  /** Figures of the mount, for its metrics. */
  stats(): FuseFsStats {
    const fast = this.session?.fastOpenStats();
    return {
      inodes: this.inodes.size,
      openFiles: this.handles.size,
      pendingRequests: this.poller.pending,
      requests: this.poller.answered,
      invalidations: { ...this.invalidations },
      fastOpens: fast?.opens ?? 0,
      fastGetattrs: fast?.getattrs ?? 0,
    };
  }

  /**
   * The kernel drops what it holds of `path` (attributes, pages, a directory's entries); with
   * `entry`, also the name (its next use is a lookup: the file may be gone or replaced); with
   * `xattrs` false, what the mount knows of its extended attributes stays (a content change).
   */
  private invalPath(path: string, entry: boolean, xattrs = true): void {
    const e = this.inodes.find(path);
    if (!e) return;
    this.invalInode(e, xattrs);
    if (entry) this.invalEntry(e);
  }

  /**
   * The paths push `e` is about: those the router knows for the node, and those of the inodes
   * the kernel holds for it under the push's mount path (an inode's file id is the node id its
   * export gave): the router's cache may have let go of a name the kernel still holds (a push
   * of its directory's entries came first).
   */
  private pathsOf(e: PathInval): string[] {
    let paths: string[] | null = null;
    const below = e.mount_path === '/' ? '/' : `${e.mount_path}/`;
    for (const entry of this.inodes.sameFile(e.node, 0)) {
      const p = this.inodes.entryPath(entry);
      if (p === null || e.paths.includes(p) || !(p === e.mount_path || p.startsWith(below))) continue;
      (paths ??= [...e.paths]).push(p);
    }
    return paths ?? e.paths;
  }

  /** True when the kernel knows `path` as a directory (an inode of that type, or with names below it). */
  private isDir(path: string): boolean {
    const e = this.inodes.find(path);
    return e !== undefined && (e.type === FileType.S_IFDIR || (e.children?.size ?? 0) > 0);
  }

  /** Everything the kernel holds at or below `path`. */
  private invalTree(path: string): void {
    const top = this.inodes.find(path);
    if (!top) return;
    // The pushes of a tree removed on the node's disk come bottom up, each for a directory of
    // it: each drop of a tree would otherwise drop its subtrees again.
    for (const e of this.inodes.subtree(path)) if (!this.dropped.has(e.ino)) this.invalInode(e);
    if (top.ino !== ROOT_INO) this.invalEntry(top);
    else if (top.children) for (const c of top.children.values()) this.invalEntry(c);
  }

  /** The kernel drops what it holds of inode `e`; `xattrs` false: its extended attributes are known unchanged (a push of a content change). */
  private invalInode(e: InodeEntry, xattrs = true): void {
    this.operations.denyFast(e.ino);
    if (xattrs) this.operations.xattrsChanged(e.ino);
    const negatives = this.operations.negatives.take(e.ino);
    if (!this.session) return;
    this.invalidations.inode++;
    this.dropped.add(e.ino);
    if (this.dropped.size > this.inodes.size + DROPPED_SLACK) for (const ino of this.dropped) if (!this.inodes.get(ino)) this.dropped.delete(ino);
    this.track(e.ino, this.queued(this.session.notifyInvalInode(e.ino, 0, 0)));
    // Names the kernel holds as missing in this directory: one of them may exist now.
    for (const name of negatives) {
      this.invalidations.entry++;
      void this.queued(this.session.notifyInvalEntry(e.ino, name)).catch(() => undefined);
    }
  }

  /**
   * The kernel drops the attributes it holds of inode `ino`, not its pages, before this returns
   * ({@link FuseSession.invalAttrNow}: safe while the kernel waits for a reply that holds a
   * directory's lock).
   */
  private async invalAttr(ino: number): Promise<void> {
    if (!this.session) return;
    this.invalidations.inode++;
    this.session.invalAttrNow(ino);
  }

  /**
   * The kernel looks the name of `e` up again at its next use. Expired, not dropped: a process
   * whose working directory is at or below it keeps its path while the name still leads there.
   */
  private invalEntry(e: InodeEntry): void {
    if (!this.session || !e.parent) return;
    this.invalidations.entry++;
    // Not waited for by kernelSettled: an entry notification takes the directory's lock, which
    // the kernel may hold while it asks for attributes (a permission check in a create): a
    // getattr waiting for it would wait for itself.
    void this.queued(this.session.notifyExpireEntry(e.parent.ino, e.name)).catch(() => undefined);
  }

  /**
   * Notes kernel notification `p` as the latest queued: the binding's notification thread runs
   * them in order, so {@link kernelNotified} waits for this one.
   */
  private queued<T>(p: Promise<T>): Promise<T> {
    this.lastNotification = p.then(
      () => undefined,
      () => undefined,
    );
    return p;
  }

  /**
   * Settles once every kernel notification queued so far has run: what the router's sessions'
   * acknowledgements of pushes wait for ({@link WorkspaceRouter.setAckBarrier}).
   */
  kernelNotified(): Promise<void> {
    return this.lastNotification;
  }

  /**
   * Remembers a kernel invalidation of inode `ino` (its attributes and pages) in progress (it
   * runs on the binding's notify thread) until it is done, for {@link kernelSettled}.
   */
  private track(ino: number, done: Promise<boolean>): void {
    const p = done.then(
      () => undefined,
      () => undefined,
    );
    const before = this.invalPending.get(ino);
    const all = before ? Promise.all([before, p]).then(() => undefined) : p;
    this.invalPending.set(ino, all);
    void all.then(() => {
      if (this.invalPending.get(ino) === all) this.invalPending.delete(ino);
    });
  }

  /**
   * Resolves once the kernel invalidations of inode `ino` sent so far are done; undefined when
   * none is in progress. An open or getattr answered before would let the kernel go on using
   * the size and pages it held (a file replaced on the node read cut to its old size).
   */
  readonly kernelSettled = (ino: number): Promise<void> | undefined => this.invalPending.get(ino);
}
