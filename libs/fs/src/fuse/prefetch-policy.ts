/**
 * When the FUSE layer prefetches a directory's small files (the `prefetch`
 * extension, docs/protocol.md "FS extensions"), and which ones.
 *
 * Only reads (and a recursive reader's opens, below) trigger it, never getattr, readdir or
 * lookup: listing a tree (`ls -la`, `find`) fetches no content. Once a caller has read
 * `minFiles` (2) distinct files of one directory within `windowMs` (2 s), each further read
 * of a file there looks at the next `lookahead`
 * entries of the directory's listing after the file read (or opened) last there: when
 * one of the small regular files among them is neither held nor on its way, one batch is
 * requested, starting there: the next small regular files (attributes say size <= `maxFile`)
 * not held yet, up to `maxNames` names and `maxTotal` bytes. The first batch of a directory
 * holds at most `firstBatch` names: the reader waits only for that small one, and reads it
 * while the next, larger one is on its way. A recursive reader (`grep -R`, `rg`) that had
 * batches in a directory and opens a file of a sibling directory for reading gets that
 * sibling's files at once, in a small batch starting with the file opened and a second one
 * with the rest right after it, then the small files of the next directory it will get to,
 * one directory ahead ({@link PrefetchPolicy.opened}): it does not wait for two reads in each
 * directory, nor ask the node for the first file on its own.
 * A directory has at most one batch in flight, the mount `maxInFlight`. The listing comes
 * from the FUSE listing cache (read once when the directory was not listed: metadata only).
 * A node that did not grant `prefetch` is not asked again for a minute; a failed batch is not retried for a second. What a batch
 * brings is held by the {@link PrefetchCache} (bounded, coherent). No read waits for a batch;
 * an open of a file whose batch is in flight does.
 */
import { Attr, isRegularFileMode, NodeKind } from '@svc/protocol/wire';
import { baseName, joinPath, parentPath } from '../router/paths';
import type { WorkspaceRouter } from '../router/workspace-router';
import type { FuseCaches, Listing } from './fuse-caches';
import { PrefetchCache } from './prefetch-cache';

/** Tuning of {@link PrefetchPolicy}; sizes in bytes, times in ms. */
export interface PrefetchOptions {
  /** Largest file fetched (default 64 KiB). */
  maxFile?: number;
  /** Most bytes of data per batch (default 1 MiB). */
  maxTotal?: number;
  /** Most names per batch (default 256). */
  maxNames?: number;
  /** Most names of a directory's first batch (default 16). */
  firstBatch?: number;
  /** Distinct files of a directory read within {@link windowMs} before batches start (default 2). */
  minFiles?: number;
  /** (default 2000) */
  windowMs?: number;
  /** Entries after the file read that a batch keeps ahead of the reader (default 32). */
  lookahead?: number;
  /** Batches in flight per mount (default 4). */
  maxInFlight?: number;
}

/** Directories whose read history is kept (least recently read dropped first). */
const MAX_DIRS = 256;
/** A node that did not grant `prefetch` is asked again after this long, ms. */
const UNSUPPORTED_BACKOFF_MS = 60_000;
/** A batch that failed is not retried in its directory for this long, ms. */
const FAILURE_BACKOFF_MS = 1000;

/**
 * Resolves in the event loop's next check phase: the FUSE operation that called the policy is
 * answered first (planning a batch scans listing entries). The history (`last`, `recent`) is
 * updated before, in the order of the operations.
 */
function afterAnswer(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Read history and batch state of one directory. */
interface DirState {
  /** Name -> time of its latest read (ms), oldest first. */
  recent: Map<string, number>;
  /** The file read last: a batch starts after it (the reader may have gone on while the listing was read). */
  last: string;
  /** A batch (or the listing it needs) is on its way. */
  busy: boolean;
  /** The batches requested ahead of a recursive reader, while on their way. */
  ahead: Promise<void> | null;
  /** No batch before this time (ms). */
  quietUntil: number;
  /** Listing position of each name, for the listing it was built from. */
  index: { listing: Listing; at: Map<string, number> } | null;
  /** Most names of the next batch here. */
  batchNames: number;
}

/** Decides and starts prefetch batches for one FUSE mount; see module documentation. */
export class PrefetchPolicy {
  private readonly dirs = new Map<string, DirState>();
  /** Directory -> when a batch last started in one of its subdirectories (ms); oldest first. */
  private readonly walking = new Map<string, number>();
  private inFlight = 0;
  private readonly maxFile: number;
  private readonly maxTotal: number;
  private readonly maxNames: number;
  private readonly firstBatch: number;
  private readonly minFiles: number;
  private readonly windowMs: number;
  private readonly lookahead: number;
  private readonly maxInFlight: number;

  constructor(
    private readonly router: Pick<WorkspaceRouter, 'prefetch'>,
    private readonly caches: Pick<FuseCaches, 'listing' | 'freshListing' | 'cachedAttr'>,
    private readonly contents: PrefetchCache,
    options: PrefetchOptions = {},
  ) {
    this.maxFile = options.maxFile ?? 64 * 1024;
    this.maxTotal = options.maxTotal ?? 1024 * 1024;
    this.maxNames = options.maxNames ?? 256;
    this.firstBatch = Math.min(options.firstBatch ?? 16, this.maxNames);
    this.minFiles = options.minFiles ?? 2;
    this.windowMs = options.windowMs ?? 2000;
    this.lookahead = options.lookahead ?? 32;
    this.maxInFlight = options.maxInFlight ?? 4;
  }

  /** True for attributes of a file a batch may bring: a regular file of at most `maxFile` bytes. */
  private candidate(a: Attr | undefined): a is Attr {
    return a !== undefined && a.k === NodeKind.FILE && isRegularFileMode(a.m) && a.sz <= this.maxFile;
  }

  /** True when the content of `path` (attributes `a`) is held or on its way. */
  private covered(path: string, a: Attr): boolean {
    return this.contents.has(path, a) || this.contents.pending(path) !== undefined;
  }

  /**
   * File `path` is being opened for reading (before its first read): a batch planned for its
   * directory from now on starts after it, so the file is not fetched twice. When nothing was
   * read in its directory yet and a sibling directory had a batch within `windowMs` (a
   * recursive reader going on to the next directory): unless the file is held already (a
   * batch ahead of the reader brought it), a small batch starting with it is requested at once (the open waits for it
   * instead of asking the node on its own); then one with the files after those, and last the
   * small files of the next directory of the parent's listing (listed already, by
   * {@link ListAhead}), so they are held when the reader gets there. Never throws.
   * @returns when the batches it started (if any) ended
   */
  async opened(path: string): Promise<void> {
    if (path === '/') return;
    const dir = parentPath(path);
    const name = baseName(path);
    const known = this.dirs.get(dir);
    if (known) known.last = name;
    if (known && known.recent.size > 0) return;
    const now = Date.now();
    const walked = dir === '/' ? undefined : this.walking.get(parentPath(dir));
    if (walked === undefined || now - walked > this.windowMs) return;
    const st = known ?? this.state(dir);
    st.last = name;
    // Held, or on its way (in a batch requested ahead of this reader): the open takes it.
    const a = this.caches.cachedAttr(path);
    const held = a !== undefined && this.covered(path, a);
    if (st.ahead) await st.ahead;
    const listing = this.caches.freshListing(dir);
    if (!listing || st.busy || st.quietUntil > Date.now() || this.inFlight >= this.maxInFlight) return;
    const i = this.indexOf(st, listing).get(name);
    if (i === undefined) return;
    // Pending before this returns its promise when the file is not held: the open waits for that batch.
    await this.fetchDir(dir, st, listing, held ? i + 1 : i, held);
    await this.aheadOfReader(dir);
  }

  /**
   * Requests the small files of `dir` from listing position `start` on: a batch of at most
   * `firstBatch` names (unless `restOnly`), pending before the first await, then, once it is
   * back (alone on the node it comes back sooner), one with the rest up to `maxNames` and
   * `maxTotal`. The directory is busy meanwhile. Never throws.
   */
  private async fetchDir(dir: string, st: DirState, listing: Listing, start: number, restOnly: boolean): Promise<void> {
    st.batchNames = this.maxNames;
    st.busy = true;
    try {
      const first = restOnly ? { names: [], next: start } : this.pick(dir, listing, start, this.firstBatch);
      if (first.names.length > 0) await this.send(dir, st, first.names, Date.now());
      const rest = this.pick(dir, listing, first.next, this.maxNames);
      if (rest.names.length > 0 && st.quietUntil <= Date.now()) await this.send(dir, st, rest.names, Date.now());
    } finally {
      st.busy = false;
    }
  }

  /**
   * Requests the small files of the directory after `dir` in its parent's listing (within
   * `lookahead` entries), for a recursive reader done with `dir`'s batches: a first small
   * batch, then one with the rest (up to `maxNames` and `maxTotal`), only when that directory is
   * listed already and nothing of it was read or requested. One directory ahead at most: the
   * reader is still reading `dir`'s files meanwhile. Never throws.
   */
  private async aheadOfReader(dir: string): Promise<void> {
    const parent = parentPath(dir);
    const up = this.caches.freshListing(parent);
    if (!up) return;
    const at = this.indexOf(this.state(parent), up).get(baseName(dir));
    if (at === undefined) return;
    for (let j = at + 1; j < up.names.length && j <= at + this.lookahead; j++) {
      const next = joinPath(parent, up.names[j]);
      if (this.caches.cachedAttr(next)?.k !== NodeKind.DIR) continue;
      const listing = this.caches.freshListing(next);
      const st = this.state(next);
      const now = Date.now();
      if (!listing || st.busy || st.recent.size > 0 || st.last !== '' || st.quietUntil > now || this.inFlight >= this.maxInFlight) return;
      st.ahead = this.fetchDir(next, st, listing, 0, false).finally(() => (st.ahead = null));
      return st.ahead;
    }
  }

  /**
   * A read of file `path` began (the first read of an open file): may start a batch for its
   * directory. Never throws.
   * @returns when the batch it started (if any) ended
   */
  async onRead(path: string): Promise<void> {
    if (path === '/') return;
    const dir = parentPath(path);
    const name = baseName(path);
    const now = Date.now();
    const st = this.state(dir);
    st.recent.delete(name);
    st.recent.set(name, now);
    st.last = name;
    for (const [n, t] of st.recent) {
      if (t > now - this.windowMs && st.recent.size <= 4 * this.minFiles) break;
      st.recent.delete(n);
    }
    if (st.recent.size < this.minFiles) return;
    await afterAnswer();
    return this.batch(dir, st, Date.now());
  }

  /** Plans and requests the next batch of `dir` when none is on its way there and the mount has room. */
  private async batch(dir: string, st: DirState, now: number): Promise<void> {
    if (st.busy || st.quietUntil > now || this.inFlight >= this.maxInFlight) return;
    st.busy = true;
    try {
      const names = await this.plan(dir, st);
      if (names.length === 0) return;
      st.batchNames = this.maxNames;
      await this.send(dir, st, names, now);
    } catch {
      st.quietUntil = Date.now() + FAILURE_BACKOFF_MS;
    } finally {
      st.busy = false;
    }
  }

  /**
   * Requests `names` of `dir` as one batch: they are pending (opens wait for them) before the
   * first await. Never throws: a failed batch stores nothing and quiets the directory.
   */
  private async send(dir: string, st: DirState, names: string[], now: number): Promise<void> {
    this.inFlight++;
    this.walked(dir, now);
    const batch = this.contents.begin(dir, names);
    try {
      const files = await this.router.prefetch(dir, names, this.maxFile, this.maxTotal);
      if (files === null) st.quietUntil = Date.now() + UNSUPPORTED_BACKOFF_MS;
      this.contents.complete(batch, files ?? []);
    } catch {
      // The reads go to the node as usual.
      this.contents.end(batch);
      st.quietUntil = Date.now() + FAILURE_BACKOFF_MS;
    } finally {
      this.inFlight--;
    }
  }

  /** Listing position of each name of `listing` (kept for the listing it was built from). */
  private indexOf(st: DirState, listing: Listing): Map<string, number> {
    if (st.index?.listing !== listing) st.index = { listing, at: new Map(listing.names.map((n, i) => [n, i])) };
    return st.index.at;
  }

  /**
   * The names of the next batch of `dir` for the reader there (after the file it read last,
   * once the listing is at hand): empty when the next small files after it are held or on
   * their way already.
   * @throws the listing's error
   */
  private async plan(dir: string, st: DirState): Promise<string[]> {
    const listing = await this.caches.listing(dir);
    const i = this.indexOf(st, listing).get(st.last);
    if (i === undefined) return [];
    const names = listing.names;
    for (let j = i + 1; j < names.length && j <= i + this.lookahead; j++) {
      const p = joinPath(dir, names[j]);
      const a = this.caches.cachedAttr(p);
      if (this.candidate(a) && !this.covered(p, a)) return this.pick(dir, listing, j, st.batchNames).names;
    }
    return [];
  }

  /**
   * From listing position `start` on: the small regular files not held or on their way, at
   * most `limit` names and `maxTotal` bytes (looking at most 4 x `limit` entries), and the
   * position after the last entry looked at.
   */
  private pick(dir: string, listing: Listing, start: number, limit: number): { names: string[]; next: number } {
    const names = listing.names;
    const picked: string[] = [];
    let bytes = 0;
    let j = start;
    for (; j < names.length && j < start + 4 * limit && picked.length < limit; j++) {
      const p = joinPath(dir, names[j]);
      const a = this.caches.cachedAttr(p);
      if (!this.candidate(a) || this.covered(p, a)) continue;
      if (picked.length > 0 && bytes + a.sz > this.maxTotal) break;
      picked.push(names[j]);
      bytes += a.sz;
    }
    return { names: picked, next: j };
  }

  /** Records that `dir` had a batch at `now`: opens in its siblings may start theirs ({@link opened}). */
  private walked(dir: string, now: number): void {
    if (dir === '/') return;
    const parent = parentPath(dir);
    this.walking.delete(parent);
    if (this.walking.size >= MAX_DIRS) this.walking.delete(this.walking.keys().next().value as string);
    this.walking.set(parent, now);
  }

  private state(dir: string): DirState {
    let st = this.dirs.get(dir);
    if (st) {
      this.dirs.delete(dir);
    } else {
      st = { recent: new Map(), last: '', busy: false, ahead: null, quietUntil: 0, index: null, batchNames: this.firstBatch };
      if (this.dirs.size >= MAX_DIRS) {
        for (const [d, s] of this.dirs) {
          if (s.busy) continue;
          this.dirs.delete(d);
          break;
        }
      }
    }
    this.dirs.set(dir, st);
    return st;
  }
}
