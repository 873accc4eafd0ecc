/**
 * The client-side caches of the FUSE layer (issue 4 item 4), keyed by workspace path:
 * attributes (filled by getattr and by readdir, whose readdirp carries attributes), negative
 * lookups, directory listings (readdir is answered from them) and open proofs (what a
 * read-only open on the node proved, for lazy opens). Entries live `ttl` ms and are bounded;
 * the forget* methods drop them on invalidation pushes, failovers and this mount's own
 * mutations.
 */
import { Attr, Errno, FsError } from '@svc/protocol/wire';
import { baseName, joinPath, parentPath } from '../router/paths';
import type { WorkspaceRouter } from '../router/workspace-router';
import type { FuseInodes } from './fuse-inodes';
import { FuseStat, toFuseStat } from './fuse-stat';

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
export function openProof(a: Attr): string {
  return `${a.id}:${a.ct}:${a.m}:${a.u}:${a.g}`;
}

interface Expiring<T> {
  value: T;
  /** ms since the epoch. */
  expires: number;
}

/** A cached directory listing: names (in order), their set, and the stats handed to readdir. */
export interface Listing {
  names: string[];
  has: Set<string>;
  stats: FuseStat[];
}

/** Attribute, negative-lookup, listing and open-proof caches of one FUSE mount. */
export class FuseCaches {
  private readonly attrs = new Map<string, Expiring<Attr>>();
  /** Path -> time (ms since the epoch) until which it is known not to exist. */
  private readonly missing = new Map<string, number>();
  private readonly dirs = new Map<string, Expiring<Listing>>();
  /** Paths opened read-only on the node, with the {@link openProof} of their attributes then. */
  private readonly proofs = new Map<string, string>();

  /**
   * @param router where misses are read from
   * @param ttl lifetime of every entry, ms
   */
  constructor(
    private readonly router: Pick<WorkspaceRouter, 'getattr' | 'readdirAll'>,
    private readonly ttl: number,
    /** Inode numbers for the stats of listings (default: the node ids). */
    private readonly inodes: Pick<FuseInodes, 'of'> = { of: (_path, id) => id },
  ) {}

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
    this.dirs.delete(parentPath(path));
  }

  /** Drops everything cached at or below `path` (a renamed or removed directory). */
  forgetTree(path: string): void {
    if (path === '/') return this.forgetAll();
    this.forget(path);
    const prefix = `${path}/`;
    for (const map of [this.attrs, this.missing, this.dirs, this.proofs] as Array<Map<string, unknown>>) {
      for (const p of map.keys()) if (p.startsWith(prefix)) map.delete(p);
    }
  }

  /** Drops the listing and attributes of `dir` and the negative lookups below it. */
  forgetDir(dir: string): void {
    this.dirs.delete(dir);
    this.attrs.delete(dir);
    const prefix = dir === '/' ? '/' : `${dir}/`;
    for (const p of this.missing.keys()) if (p.startsWith(prefix)) this.missing.delete(p);
  }

  /** Caches the attributes of `path` (fresh from `now`, ms) and clears its negative lookup. */
  remember(path: string, attr: Attr, now = Date.now()): void {
    cacheSet(this.attrs, path, { value: attr, expires: now + this.ttl });
    this.missing.delete(path);
  }

  /** Records that `path` does not exist (this mount removed it). */
  markMissing(path: string): void {
    cacheSet(this.missing, path, Date.now() + this.ttl);
  }

  /** The cached attributes of `path` while fresh. */
  cachedAttr(path: string): Attr | undefined {
    const hit = this.attrs.get(path);
    return hit && hit.expires > Date.now() ? hit.value : undefined;
  }

  /**
   * The attributes of `path`: cached while fresh, else `getattr` on the router (cached). A
   * fresh negative lookup, or a fresh listing of the parent without the name, is ENOENT
   * without a round trip.
   * @throws FsError ENOENT (cached as a negative lookup), or the router's error
   */
  async attrOf(path: string): Promise<Attr> {
    const now = Date.now();
    const hit = this.attrs.get(path);
    if (hit && hit.expires > now) return hit.value;
    const miss = this.missing.get(path);
    if (miss !== undefined && miss > now) throw new FsError(Errno.ENOENT);
    // A fresh listing of the parent that lacks the name is as good as a failed lookup.
    const parent = this.dirs.get(parentPath(path));
    if (parent && parent.expires > now && path !== '/' && !parent.value.has.has(baseName(path))) {
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
   * @throws the router's error (ENOENT, ENOTDIR, EACCES, ...)
   */
  async listing(path: string): Promise<Listing> {
    const now = Date.now();
    const hit = this.dirs.get(path);
    if (hit && hit.expires > now) return hit.value;
    const entries = await this.router.readdirAll(path);
    const done = Date.now();
    const names = entries.map((e) => e.name);
    for (const e of entries) this.remember(joinPath(path, e.name), e.attr, done);
    const value: Listing = { names, has: new Set(names), stats: entries.map((e) => toFuseStat(e.attr, this.inodes.of(joinPath(path, e.name), e.attr.id))) };
    cacheSet(this.dirs, path, { value, expires: done + this.ttl });
    return value;
  }

  /** The {@link openProof} recorded for `path`, if any. */
  proofOf(path: string): string | undefined {
    return this.proofs.get(path);
  }

  /** Records that a read-only open of `path` succeeded with attributes of proof `proof`. */
  recordProof(path: string, proof: string): void {
    cacheSet(this.proofs, path, proof);
  }

  /** Forgets the open proof of `path` (the next open goes to the node). */
  dropProof(path: string): void {
    this.proofs.delete(path);
  }
}
