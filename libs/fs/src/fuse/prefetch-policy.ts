/**
 * When the FUSE layer prefetches a directory's small files (issue 11 item 1; the `prefetch`
 * extension, docs/protocol.md "FS extensions"), and which ones.
 *
 * Only reads (and a recursive reader's opens, below) trigger it, never getattr, readdir or
 * lookup: listing a tree (`ls -la`, `find`) fetches no content. Once a caller has read `minFiles` (2) distinct files of one directory
 * within `windowMs` (2 s), each further read of a file there looks at the next `lookahead`
 * entries of the directory's listing after the file read (or opened) last there: when
 * one of the small regular files among them is neither held nor on its way, one batch is
 * requested, starting there: the next small regular files (attributes say size <= `maxFile`)
 * not held yet, up to `maxNames` names and `maxTotal` bytes. The first batch of a directory
 * holds at most `firstBatch` names: the reader waits only for that small one, and reads it
 * while the next, larger one is on its way. A recursive reader (`grep -R`, `rg`) that had
 * batches in a directory and opens a file of a sibling directory for reading gets that
 * sibling's first batch at once, with the files after the one opened
 * ({@link PrefetchPolicy.opened}): it does not wait for two reads in each directory.
 * A directory has at most one batch in flight, the mount `maxInFlight`. The listing comes
 * from the FUSE listing cache (read once when the directory was not listed: metadata only). A node that did not grant `prefetch` is
 * not asked again for a minute; a failed batch is not retried for a second. What a batch
 * brings is held by the {@link PrefetchCache} (bounded, coherent). No read waits for a batch;
 * an open of a file whose batch is in flight does.
 */
import { Attr, NodeKind } from '@svc/protocol/wire';
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

const S_IFMT = 0o170000;
const S_IFREG = 0o100000;
/** Directories whose read history is kept (least recently read dropped first). */
const MAX_DIRS = 256;
/** A node that did not grant `prefetch` is asked again after this long, ms. */
const UNSUPPORTED_BACKOFF_MS = 60_000;
/** A batch that failed is not retried in its directory for this long, ms. */
const FAILURE_BACKOFF_MS = 1000;

/** Read history and batch state of one directory. */
interface DirState {
  /** Name -> time of its latest read (ms), oldest first. */
  recent: Map<string, number>;
  /** The file read last: a batch starts after it (the reader may have gone on while the listing was read). */
  last: string;
  /** A batch (or the listing it needs) is on its way. */
  busy: boolean;
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
    private readonly caches: Pick<FuseCaches, 'listing' | 'cachedAttr'>,
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
    return a !== undefined && a.k === NodeKind.FILE && (a.m & S_IFMT) === S_IFREG && a.sz <= this.maxFile;
  }

  /** True when the content of `path` (attributes `a`) is held or on its way. */
  private covered(path: string, a: Attr): boolean {
    return this.contents.has(path, a) || this.contents.pending(path) !== undefined;
  }

  /**
   * File `path` is being opened for reading (before its first read): a batch planned for its
   * directory from now on starts after it, so the file is not fetched twice. When nothing was
   * read in its directory yet and a sibling directory had a batch within `windowMs` (a
   * recursive reader going on to the next directory), that batch is requested now. Never throws.
   * @returns when the batch it started (if any) ended
   */
  async opened(path: string): Promise<void> {
    if (path === '/') return;
    const dir = parentPath(path);
    const known = this.dirs.get(dir);
    if (known) known.last = baseName(path);
    if (known && known.recent.size > 0) return;
    const now = Date.now();
    const walked = dir === '/' ? undefined : this.walking.get(parentPath(dir));
    if (walked === undefined || now - walked > this.windowMs) return;
    const st = known ?? this.state(dir);
    st.last = baseName(path);
    return this.batch(dir, st, now);
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
    return this.batch(dir, st, now);
  }

  /** Plans and requests the next batch of `dir` when none is on its way there and the mount has room. */
  private async batch(dir: string, st: DirState, now: number): Promise<void> {
    if (st.busy || st.quietUntil > now || this.inFlight >= this.maxInFlight) return;
    st.busy = true;
    this.inFlight++;
    try {
      const names = await this.plan(dir, st);
      if (names.length === 0) return;
      st.batchNames = this.maxNames;
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
      }
    } catch {
      st.quietUntil = Date.now() + FAILURE_BACKOFF_MS;
    } finally {
      st.busy = false;
      this.inFlight--;
    }
  }

  /**
   * The names of the next batch of `dir` for the reader there (after the file it read last,
   * once the listing is at hand): empty when the next small files after it are held or on
   * their way already.
   * @throws the listing's error
   */
  private async plan(dir: string, st: DirState): Promise<string[]> {
    const listing = await this.caches.listing(dir);
    if (st.index?.listing !== listing) st.index = { listing, at: new Map(listing.names.map((n, i) => [n, i])) };
    const i = st.index.at.get(st.last);
    if (i === undefined) return [];
    const names = listing.names;
    let start = -1;
    for (let j = i + 1; j < names.length && j <= i + this.lookahead; j++) {
      const p = joinPath(dir, names[j]);
      const a = this.caches.cachedAttr(p);
      if (this.candidate(a) && !this.covered(p, a)) {
        start = j;
        break;
      }
    }
    if (start < 0) return [];
    const picked: string[] = [];
    let bytes = 0;
    for (let j = start; j < names.length && j < start + 4 * st.batchNames && picked.length < st.batchNames; j++) {
      const p = joinPath(dir, names[j]);
      const a = this.caches.cachedAttr(p);
      if (!this.candidate(a) || this.covered(p, a)) continue;
      if (picked.length > 0 && bytes + a.sz > this.maxTotal) break;
      picked.push(names[j]);
      bytes += a.sz;
    }
    return picked;
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
      st = { recent: new Map(), last: '', busy: false, quietUntil: 0, index: null, batchNames: this.firstBatch };
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
