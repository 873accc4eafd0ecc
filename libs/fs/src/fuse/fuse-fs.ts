/**
 * The FUSE layer of `svc-fs-mount mount`: fuse-native operations on top of
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
 *   kept while mtime and size are unchanged) a warm `grep -R` then needs no round trip at all;
 * - small files in few round trips (the FS extensions of docs/protocol.md): a
 *   read-only open brings the file's first bytes along (`open_read`: a small file is one round
 *   trip, no close), and a reader going through a directory's files gets the next small ones
 *   in batches (`prefetch`, {@link PrefetchPolicy}), held coherent and bounded by
 *   {@link PrefetchCache} and served to opens whose attributes match;
 * - listing ahead of a recursive walk (`grep -R`, `find`): once a caller descends from a
 *   directory into a subdirectory, the next few subdirectories are listed in the background
 *   (metadata only, {@link ListAhead}).
 *
 * These client-side caches live `cacheTtlMs` (default 60 s) and are invalidated by the node's
 * `acheron.e_fs_inval*` pushes (router `inval`/`inval_dir` events, sent for changes made on
 * the node by anyone), by topology changes, failovers and lost sessions (for the mount path
 * concerned only: a reorder of candidates that keeps the serving endpoint drops nothing), and
 * by this mount's own mutations. The kernel's own attribute and entry caches cannot be
 * invalidated from here, so they keep the short `attrTtlMs` (the mount's
 * `attr_timeout`/`entry_timeout`).
 *
 * This module composes the parts, each in its own module: `./fuse-caches`
 * (attributes, negative lookups, listings, open proofs), `./prefetch-cache` (prefetched
 * contents), `./prefetch-policy` (when to prefetch what), `./list-ahead`, `./fuse-handles` (open-file table,
 * lazy opens), `./read-ahead`, `./write-behind`, `./fuse-poller` (answering, watchdog,
 * polling), `./fuse-ops` (the operations table), `./fuse-stat` (stats and errno for fuse-native).
 */
import { availableParallelism } from 'node:os';
import { BINARY_HEADER_ROOM } from '@svc/protocol/wire';
import { BufferPool } from '../buffer-pool';
import type { FailoverEvent, TopologyChange, UnavailableEvent, WorkspaceRouter } from '../router/workspace-router';
import { DEFAULT_PREFETCH_CACHE_BYTES, FuseCaches } from './fuse-caches';
import { FuseHandles } from './fuse-handles';
import { FuseInodes } from './fuse-inodes';
import { FuseOperations } from './fuse-ops';
import { FusePoller } from './fuse-poller';
import { ListAhead, ListAheadOptions } from './list-ahead';
import { PrefetchOptions, PrefetchPolicy } from './prefetch-policy';
import { ReadAhead } from './read-ahead';
import { WriteBehind } from './write-behind';

export { fuseErrno, setFuseTimeUnitNs, toFuseStat } from './fuse-stat';
export type { FuseStat } from './fuse-stat';

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
}

/**
 * fuse-native operations over a WorkspaceRouter; see module documentation. Create it, then
 * pass {@link FuseFs.ops} to `new Fuse(mountpoint, ops, options)`.
 */
export class FuseFs {
  private readonly caches: FuseCaches;
  private readonly operations: FuseOperations;

  constructor(router: WorkspaceRouter, options: FuseFsOptions = {}) {
    const ttl = Math.max(options.cacheTtlMs ?? 60_000, options.attrTtlMs ?? 1000);
    const chunk = options.chunkBytes ?? 1024 * 1024;
    const readAhead = options.readAheadBytes ?? 4 * chunk;
    // Write-behind blocks: header room + one chunk.
    const blocks = new BufferPool(BINARY_HEADER_ROOM + chunk, 8);
    const pollMs = availableParallelism() > 1 ? (options.pollUs ?? 1000) / 1000 : 0;
    // Stable inode numbers (the mount runs with libfuse's use_ino): see fuse-inodes.ts.
    const inodes = new FuseInodes(router);
    const caches = (this.caches = new FuseCaches(router, ttl, inodes, options.prefetchCacheBytes ?? DEFAULT_PREFETCH_CACHE_BYTES));
    this.operations = new FuseOperations({
      router,
      caches,
      handles: new FuseHandles(router, caches, chunk),
      prefetch: new PrefetchPolicy(router, caches, caches.contents, options.prefetch),
      listAhead: new ListAhead(caches, options.listAhead),
      reads: new ReadAhead(router, chunk, readAhead),
      writes: new WriteBehind(router, blocks, chunk),
      poller: new FusePoller(pollMs, options.opTimeoutMs ?? 60_000),
      inodes,
      readOnly: options.readOnly ?? false,
    });
    router.on('inval', (e: { paths: string[] }) => e.paths.forEach((p) => caches.forget(p)));
    router.on('inval_dir', (e: { paths: string[] }) => e.paths.forEach((p) => caches.forgetDir(p)));
    // What was learnt through one endpoint goes with it; other mounts keep their caches.
    router.on('topology', (e: TopologyChange) => {
      if (e.added.length > 0 || e.removed.length > 0)
        caches.forgetAll(); // the synthetic tree changed
      else for (const path of e.changed) caches.forgetTree(path);
    });
    router.on('failover', (e: FailoverEvent) => caches.forgetTree(e.mount_path));
    router.on('unavailable', (e: UnavailableEvent) => caches.forgetTree(e.mount_path));
  }

  /** Drops every cached attribute, listing, negative lookup and open proof. */
  forgetAll(): void {
    this.caches.forgetAll();
  }

  /** Drops what is cached about `path` and its parent's listing. */
  forget(path: string): void {
    this.caches.forget(path);
  }

  /** The operations object for fuse-native. */
  get ops(): Record<string, (...args: never[]) => void> {
    return this.operations.table();
  }
}
