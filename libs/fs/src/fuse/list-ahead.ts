/**
 * Listing ahead of a recursive walk: `grep -R`, `find`, `rg`, `du` and build
 * tools list a directory, then each of its subdirectories in turn, and each listing is a round
 * trip the walker waits for. Once a caller has listed directory P and then one of its
 * subdirectories P/x (a descent) within {@link ListAheadOptions.windowMs} of P's listing or of
 * the last descent into P, the next {@link ListAheadOptions.ahead} subdirectories of P after x
 * (in listing order) are listed in the background into the FUSE listing cache, at most
 * {@link ListAheadOptions.maxInFlight} at once per mount. The walker then finds their listings
 * at hand when it gets there.
 *
 * Metadata only (`readdirp`, which the listing cache reads anyway): no file content is fetched,
 * and a plain `ls` of a directory (no descent) lists nothing ahead. What is listed ahead is
 * cached, kept coherent and forgotten like any listing ({@link FuseCaches}).
 */
import { NodeKind } from '@svc/protocol/wire';
import { baseName, joinPath, parentPath } from '../router/paths';
import type { FuseCaches, Listing } from './fuse-caches';

/** Tuning of {@link ListAhead}; times in ms. */
export interface ListAheadOptions {
  /** Subdirectories after the one descended into that are listed ahead (default 4; 0 turns listing ahead off). */
  ahead?: number;
  /** A descent counts when the parent was listed, or last descended into, this recently (default 2000). */
  windowMs?: number;
  /** Listings ahead in flight per mount (default 4). */
  maxInFlight?: number;
}

/** Directories whose last listing time is kept (the oldest dropped first). */
const MAX_DIRS = 1024;

/** Starts listings ahead of a walker; see module documentation. */
export class ListAhead {
  /** Directory -> time (ms) a caller listed it or last descended from it; oldest first. */
  private readonly walked = new Map<string, number>();
  private inFlight = 0;
  /** Position of each name in a listing (built on a listing's first descent). */
  private readonly positions = new WeakMap<Listing, Map<string, number>>();
  private readonly ahead: number;
  private readonly windowMs: number;
  private readonly maxInFlight: number;

  constructor(
    private readonly caches: Pick<FuseCaches, 'listing' | 'freshListing' | 'listingPending' | 'cachedAttr'>,
    options: ListAheadOptions = {},
  ) {
    this.ahead = options.ahead ?? 4;
    this.windowMs = options.windowMs ?? 2000;
    this.maxInFlight = options.maxInFlight ?? 4;
  }

  /** A caller lists directory `dir` (a FUSE readdir): may list some of its siblings ahead. Never throws. */
  onList(dir: string): void {
    if (this.ahead <= 0) return;
    const now = Date.now();
    this.touch(dir, now);
    if (dir === '/') return;
    const parent = parentPath(dir);
    const seen = this.walked.get(parent);
    if (seen === undefined || now - seen > this.windowMs) return;
    this.touch(parent, now);
    const listing = this.caches.freshListing(parent);
    if (!listing) return;
    let positions = this.positions.get(listing);
    if (!positions) this.positions.set(listing, (positions = new Map(listing.names.map((n, i) => [n, i]))));
    const at = positions.get(baseName(dir));
    if (at === undefined) return;
    let dirs = 0;
    for (let j = at + 1; j < listing.names.length && dirs < this.ahead && this.inFlight < this.maxInFlight; j++) {
      const path = joinPath(parent, listing.names[j]);
      if (this.caches.cachedAttr(path)?.k !== NodeKind.DIR) continue;
      dirs++;
      if (this.caches.freshListing(path) || this.caches.listingPending(path)) continue;
      this.inFlight++;
      this.caches
        .listing(path)
        .catch(() => undefined) // the walker's own readdir answers for it
        .finally(() => this.inFlight--);
    }
  }

  private touch(dir: string, now: number): void {
    this.walked.delete(dir);
    if (this.walked.size >= MAX_DIRS) this.walked.delete(this.walked.keys().next().value as string);
    this.walked.set(dir, now);
  }
}
