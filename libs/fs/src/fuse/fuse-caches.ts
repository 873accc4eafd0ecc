/**
 * The client-side caches of the FUSE layer, keyed by workspace path:
 * attributes (filled by getattr and by readdir, whose readdirp carries attributes), negative
 * lookups, directory listings (readdir is answered from them), open proofs (what a read-only
 * open on the node proved, for lazy opens) and prefetched contents ({@link PrefetchCache}). Entries live `ttl` ms and are bounded; the forget* methods
 * drop them on invalidation pushes, failovers and this mount's own mutations, and newer attributes of a path
 * drop its prefetched content unless it was read with the same identity. A listing that one
 * of those made stale while it was read is read again once, and not kept if that one is stale too.
 *
 * Attributes in bulk: once {@link LIST_AFTER_MISSES} distinct names of one directory missed
 * the attribute cache within {@link LIST_WINDOW_MS} (`git status`, `make` and editors stat every
 * file of a tree one by one), the directory is listed once (metadata only: `readdirp` carries
 * every entry's attributes) and the following misses there are answered from it, rather than
 * costing a lookup each; directories larger than {@link LIST_MAX_DIR_BYTES} are not.
 */
import { Attr, Errno, FsError, NAME_MAX } from '@svc/protocol/wire';
import { baseName, joinPath, parentPath } from '../router/paths';
import type { WorkspaceRouter } from '../router/workspace-router';
import { PrefetchCache } from './prefetch-cache';

/** Default bound of the prefetched contents of a mount, bytes. */
export const DEFAULT_PREFETCH_CACHE_BYTES = 32 * 1024 * 1024;

/**
 * Attribute misses in one directory within {@link LIST_WINDOW_MS} after which the directory is
 * listed (one `readdirp` brings every entry's attributes) instead of looking each name up.
 */
export const LIST_AFTER_MISSES = 3;
/** ms */
export const LIST_WINDOW_MS = 1000;
/** Only directories at most this large (their attribute size, bytes) are listed that way. */
export const LIST_MAX_DIR_BYTES = 256 * 1024;

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

/** A cached directory listing: names (in order), their set, and each entry's attributes (same order). */
export interface Listing {
  names: string[];
  has: Set<string>;
  attrs: Attr[];
}

/** Attribute, negative-lookup, listing and open-proof caches of one FUSE mount. */
export class FuseCaches {
  private readonly attrs = new Map<string, Expiring<Attr>>();
  /** Path -> time (ms since the epoch) until which it is known not to exist. */
  private readonly missing = new Map<string, number>();
  private readonly dirs = new Map<string, Expiring<Listing>>();
  /** Paths opened read-only on the node, with the {@link openProof} of their attributes then. */
  private readonly proofs = new Map<string, string>();

  /** Prefetched contents (held and served by the FUSE open; coherent with this cache). */
  readonly contents: PrefetchCache;
  /** Listings being read, shared by their callers; `stale` once a forget touched the directory. */
  private readonly listingsInFlight = new Map<string, { p: Promise<Listing>; stale: boolean }>();
  /** Attribute reads in flight per path; each is marked `stale` by a forget of its path (its answer is then not kept). */
  private readonly attrsInFlight = new Map<string, Set<{ stale: boolean }>>();
  /** Attribute misses per directory: the distinct names that missed since `since` (ms). */
  private readonly dirMisses = new Map<string, { names: Set<string>; since: number }>();
  /** Directory -> when (ms since the epoch) this mount last added or removed one of its entries. */
  private readonly ownChanges = new Map<string, number>();
  /**
   * Called whenever the cached attributes of `path` are set or dropped (with `tree`: of any
   * paths at or below it; null: of any paths), for whoever keeps copies of them.
   */
  onAttrs: ((path: string | null, tree?: boolean) => void) | null = null;

  /**
   * @param router where misses are read from
   * @param ttl lifetime of every entry, ms
   * @param contentBytes bound of the prefetched contents, bytes
   */
  constructor(
    private readonly router: Pick<WorkspaceRouter, 'getattr' | 'readdirAll'>,
    private readonly ttl: number,
    contentBytes = DEFAULT_PREFETCH_CACHE_BYTES,
  ) {
    this.contents = new PrefetchCache(contentBytes, ttl);
  }

  /** Drops every cached attribute, listing, negative lookup, open proof and prefetched content. */
  forgetAll(): void {
    this.attrs.clear();
    this.onAttrs?.(null);
    this.missing.clear();
    this.dirs.clear();
    this.proofs.clear();
    this.contents.forgetAll();
    for (const l of this.listingsInFlight.values()) l.stale = true;
    for (const reads of this.attrsInFlight.values()) for (const r of reads) r.stale = true;
  }

  /** A listing of `dir` being read is not kept (something in it changed meanwhile). */
  private staleListing(dir: string): void {
    const l = this.listingsInFlight.get(dir);
    if (l) l.stale = true;
  }

  /** Drops the cached attributes of `path` (a read of them in flight is not cached either). */
  forgetAttr(path: string): void {
    this.attrs.delete(path);
    this.onAttrs?.(path);
    const reads = this.attrsInFlight.get(path);
    if (reads) for (const r of reads) r.stale = true;
  }

  /** Drops what is cached about `path` (its prefetched content included) and its parent's listing. */
  forget(path: string): void {
    this.attrs.delete(path);
    this.onAttrs?.(path);
    this.missing.delete(path);
    this.dirs.delete(path);
    this.proofs.delete(path);
    this.dirs.delete(parentPath(path));
    this.contents.forget(path);
    this.staleListing(path);
    this.staleListing(parentPath(path));
    const reads = this.attrsInFlight.get(path);
    if (reads) for (const r of reads) r.stale = true;
  }

  /**
   * Drops what is cached about `path` after a change of its content or attributes, not of its
   * name (a write, a chmod, a push of `attr` or `data`): as {@link forget}, except that the
   * parent's listing and a negative lookup of `path` stay, since no name changed (readdirplus
   * gives the kernel an entry's attributes only while they are cached, see {@link cachedAttr}).
   */
  forgetFile(path: string): void {
    // A name known missing stays so: the file changed, its name did not (a push of a write to
    // a file this mount removed meanwhile, such as a journal, names its old path).
    this.attrs.delete(path);
    this.onAttrs?.(path);
    this.dirs.delete(path);
    this.proofs.delete(path);
    this.contents.forget(path);
    this.staleListing(path);
    // A listing of the parent being read may carry the old attributes: it is read again.
    this.staleListing(parentPath(path));
    const reads = this.attrsInFlight.get(path);
    if (reads) for (const r of reads) r.stale = true;
  }

  /** Drops everything cached at or below `path` (a renamed or removed directory). */
  forgetTree(path: string): void {
    if (path === '/') return this.forgetAll();
    this.forget(path);
    this.contents.forgetTree(path);
    for (const [dir, l] of this.listingsInFlight) if (dir.startsWith(`${path}/`)) l.stale = true;
    const prefix = `${path}/`;
    this.onAttrs?.(path, true);
    for (const map of [this.attrs, this.missing, this.dirs, this.proofs] as Array<Map<string, unknown>>) {
      for (const p of map.keys()) if (p.startsWith(prefix)) map.delete(p);
    }
    for (const [p, reads] of this.attrsInFlight) if (p.startsWith(prefix)) for (const r of reads) r.stale = true;
  }

  /** Drops the listing and attributes of `dir` and the negative lookups below it. */
  forgetDir(dir: string): void {
    this.staleListing(dir);
    this.dirs.delete(dir);
    this.attrs.delete(dir);
    this.onAttrs?.(dir);
    const prefix = dir === '/' ? '/' : `${dir}/`;
    for (const p of this.missing.keys()) if (p.startsWith(prefix)) this.missing.delete(p);
  }

  /**
   * Caches the attributes of `path` (fresh from `now`, ms) and clears its negative lookup; a
   * prefetched content read with other attributes goes.
   */
  remember(path: string, attr: Attr, now = Date.now()): void {
    cacheSet(this.attrs, path, { value: attr, expires: now + this.ttl });
    this.onAttrs?.(path);
    this.missing.delete(path);
    this.contents.check(path, attr);
  }

  /**
   * {@link remember}, unless what is cached for `path` is the same node with a later ctime: the
   * replies to two mutations in one directory, each with the directory's attributes after it,
   * may be read in another order than the node read those attributes in.
   */
  rememberNewer(path: string, attr: Attr, now = Date.now()): void {
    const hit = this.attrs.get(path);
    if (hit && hit.expires > now && hit.value.id === attr.id && hit.value.ct > attr.ct) return;
    this.remember(path, attr, now);
  }

  /**
   * This mount added, removed or renamed the entry `path`: what is cached about it and its
   * parent's listing goes ({@link forget}), and for {@link LIST_WINDOW_MS} the parent is not
   * listed on attribute misses. A program that fills or empties a directory (`tar -x`, `rm -rf`,
   * a build) would otherwise have it listed again after each of its changes, each listing as
   * long as the directory: quadratic in its size. Its misses are looked up one by one instead.
   */
  entryChanged(path: string, now = Date.now()): void {
    this.forget(path);
    if (path !== '/') cacheSet(this.ownChanges, parentPath(path), now);
  }

  /**
   * This mount made the entry `path`, whose attributes are now `attr` (create, mkdir, symlink,
   * mknod, link): as {@link entryChanged}, except that a fresh listing of the parent stays, with
   * the name in it, so the lookups of names the directory lacks still need no round trip (a
   * program filling a directory looks each new name up before it makes it). The listing kept is
   * a new object: a readdir going on from an offset in the old one is not disturbed. A change of
   * the directory by anyone else drops it, as it drops any listing (the node's push).
   */
  entryAdded(path: string, attr: Attr, now = Date.now()): void {
    const kept = this.freshHit(parentPath(path), now);
    this.entryChanged(path, now);
    this.remember(path, attr, now);
    if (kept && path !== '/') this.keep(parentPath(path), kept, null, [baseName(path), attr]);
  }

  /**
   * This mount removed the entry `path` (unlink, rmdir): as {@link entryChanged}, and `path` is
   * known missing; a fresh listing of the parent stays without the name (a new object, as in
   * {@link entryAdded}).
   * @param tree a directory: everything cached below it goes too ({@link forgetTree})
   */
  entryRemoved(path: string, tree = false, now = Date.now()): void {
    const kept = this.freshHit(parentPath(path), now);
    if (tree) this.forgetTree(path);
    this.entryChanged(path, now);
    this.markMissing(path);
    if (kept && path !== '/') this.keep(parentPath(path), kept, baseName(path), null);
  }

  /**
   * This mount renamed `src` to `dest` (not an exchange): as {@link entryChanged} and
   * {@link forgetTree} of both, and `src` is known missing; `after`, when the node told it, is
   * cached for `dest`. Fresh listings of their directories stay, without `src` and with `dest`,
   * whose entry (node id and type) is `after`, else the one `src` had in its listing, else
   * `before`. When none is known, or `dest` was another name of the same file (rename then
   * changes nothing), the listings go.
   * @param after the attributes of `dest` after the rename, from the node's reply
   * @param before the attributes of `src` before the rename, if cached
   */
  entryRenamed(src: string, dest: string, after: Attr | undefined, before: Attr | undefined, now = Date.now()): void {
    const [srcDir, destDir] = [parentPath(src), parentPath(dest)];
    const [srcName, destName] = [baseName(src), baseName(dest)];
    const srcKept = this.freshHit(srcDir, now);
    const destKept = destDir === srcDir ? srcKept : this.freshHit(destDir, now);
    const at = srcKept?.value.has.has(srcName) ? srcKept.value.names.indexOf(srcName) : -1;
    const entry = after ?? (at >= 0 ? srcKept!.value.attrs[at] : before);
    const replaced = destKept?.value.has.has(destName) ? destKept.value.attrs[destKept.value.names.indexOf(destName)] : undefined;
    this.forgetTree(src);
    this.forgetTree(dest);
    this.entryChanged(src, now);
    this.entryChanged(dest, now);
    if (src === dest || src === '/' || dest === '/' || !entry || replaced?.id === entry.id) return;
    this.markMissing(src);
    if (after) this.remember(dest, after, now);
    if (srcDir === destDir) {
      if (srcKept) this.keep(srcDir, srcKept, srcName, [destName, entry]);
      return;
    }
    if (srcKept) this.keep(srcDir, srcKept, srcName, null);
    if (destKept) this.keep(destDir, destKept, null, [destName, entry]);
  }

  /**
   * Caches, for directory `dir`, a copy of the listing `kept` without the name `remove` and with
   * the entry `add` (replacing one of that name), until the listing's own expiry. The arrays are
   * copied (a readdir going on reads the old ones by offset); the set of names moves to the copy
   * as it is, changed in place: only the cached listing's set is ever asked.
   */
  private keep(dir: string, kept: Expiring<Listing>, remove: string | null, add: [string, Attr] | null): void {
    const { has } = kept.value;
    const names = kept.value.names.slice();
    const attrs = kept.value.attrs.slice();
    for (const name of [remove, add?.[0]]) {
      const i = name !== null && name !== undefined && has.has(name) ? names.indexOf(name) : -1;
      if (i >= 0) {
        names.splice(i, 1);
        attrs.splice(i, 1);
        has.delete(name!);
      }
    }
    if (add) {
      names.push(add[0]);
      attrs.push(add[1]);
      has.add(add[0]);
    }
    cacheSet(this.dirs, dir, { value: { names, has, attrs }, expires: kept.expires });
  }

  /**
   * Directory `path` was just made by this mount, and the node serving it watches it from before
   * its reply (the `dir_attr` extension): it is known empty, so the lookups of the names a
   * program is about to make in it need no round trip. Call after {@link entryAdded}.
   */
  madeEmptyDir(path: string, now = Date.now()): void {
    if (this.listingsInFlight.has(path)) return;
    cacheSet(this.dirs, path, { value: { names: [], has: new Set<string>(), attrs: [] }, expires: now + this.ttl });
  }

  /** The cached listing entry of `dir` while fresh and no read of it is in flight. */
  private freshHit(dir: string, now: number): Expiring<Listing> | undefined {
    const hit = this.dirs.get(dir);
    return hit && hit.expires > now && !this.listingsInFlight.has(dir) ? hit : undefined;
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
   * The attributes of `path`: cached while fresh, else from a listing of its directory (after
   * several misses there, see the module documentation), else `getattr` on the router
   * (cached). A fresh negative lookup, or a fresh listing of the parent without the name, is
   * ENOENT without a round trip.
   * @throws FsError ENOENT (cached as a negative lookup), or the router's error
   */
  async attrOf(path: string): Promise<Attr> {
    const now = Date.now();
    const hit = this.attrs.get(path);
    if (hit && hit.expires > now) return hit.value;
    const miss = this.missing.get(path);
    if (miss !== undefined && miss > now) throw new FsError(Errno.ENOENT);
    // A fresh listing of the parent that lacks the name is as good as a failed lookup (a name
    // longer than a directory entry can be is the node's to refuse: ENAMETOOLONG).
    const dir = parentPath(path);
    const parent = this.dirs.get(dir);
    const listable = path !== '/' && Buffer.byteLength(baseName(path)) <= NAME_MAX;
    if (parent && parent.expires > now && listable && !parent.value.has.has(baseName(path))) {
      throw new FsError(Errno.ENOENT);
    }
    if (path !== '/' && (this.listingsInFlight.has(dir) || this.listWanted(dir, baseName(path), now))) {
      let listed: Listing | null = null;
      try {
        // A fresh listing here has the name but not its attributes any more (pushes of changes
        // to its files, such as a checkout on the node, drop them): it is read again.
        listed = await this.listing(dir, true);
      } catch {
        // getattr below answers
      }
      const a = this.cachedAttr(path);
      if (a) return a;
      if (listed && listable && !listed.has.has(baseName(path)) && this.dirs.get(dir)?.value === listed) {
        cacheSet(this.missing, path, Date.now() + this.ttl);
        throw new FsError(Errno.ENOENT);
      }
    }
    // A forget of `path` while its attributes are read (this mount wrote it, a push named it)
    // means the answer may predate the change: it is returned, not kept.
    const read = { stale: false };
    let reads = this.attrsInFlight.get(path);
    if (!reads) this.attrsInFlight.set(path, (reads = new Set()));
    reads.add(read);
    try {
      const attr = await this.router.getattr(path);
      if (!read.stale) this.remember(path, attr);
      return attr;
    } catch (e) {
      if (!read.stale && e instanceof FsError && e.errno === Errno.ENOENT) cacheSet(this.missing, path, Date.now() + this.ttl);
      throw e;
    } finally {
      reads.delete(read);
      if (reads.size === 0 && this.attrsInFlight.get(path) === reads) this.attrsInFlight.delete(path);
    }
  }

  /** The cached listing of directory `path` while fresh. */
  freshListing(path: string): Listing | undefined {
    const hit = this.dirs.get(path);
    return hit && hit.expires > Date.now() ? hit.value : undefined;
  }

  /** True while a listing of directory `path` is being read. */
  listingPending(path: string): boolean {
    return this.listingsInFlight.has(path);
  }

  /**
   * The entries of directory `path` as names and attributes for readdir: the cached listing while
   * fresh (unless `reread`), else read from the node (every entry's attributes are cached on the
   * way); a read in flight is shared.
   * @throws the router's error (ENOENT, ENOTDIR, EACCES, ...)
   */
  async listing(path: string, reread = false): Promise<Listing> {
    const now = Date.now();
    const hit = this.dirs.get(path);
    if (!reread && hit && hit.expires > now) return hit.value;
    const pending = this.listingsInFlight.get(path);
    if (pending) return pending.p;
    const entry = { p: null as unknown as Promise<Listing>, stale: false };
    entry.p = (async () => {
      try {
        let entries = await this.router.readdirAll(path);
        // Made stale while read (e.g. the push for a directory just created): read once more.
        if (entry.stale) {
          entry.stale = false;
          entries = await this.router.readdirAll(path);
        }
        const done = Date.now();
        const names = entries.map((e) => e.name);
        const value: Listing = { names, has: new Set(names), attrs: entries.map((e) => e.attr) };
        if (!entry.stale) {
          for (const e of entries) this.remember(joinPath(path, e.name), e.attr, done);
          cacheSet(this.dirs, path, { value, expires: done + this.ttl });
        }
        return value;
      } finally {
        if (this.listingsInFlight.get(path) === entry) this.listingsInFlight.delete(path);
      }
    })();
    this.listingsInFlight.set(path, entry);
    return entry.p;
  }

  /**
   * Counts an attribute miss of `name` in directory `dir` at `now` (ms); true when the
   * directory should be listed: {@link LIST_AFTER_MISSES} distinct names missed within
   * {@link LIST_WINDOW_MS}, and it is not known to be larger than {@link LIST_MAX_DIR_BYTES}.
   */
  private listWanted(dir: string, name: string, now: number): boolean {
    let m = this.dirMisses.get(dir);
    if (!m || now - m.since > LIST_WINDOW_MS) {
      m = { names: new Set(), since: now };
      cacheSet(this.dirMisses, dir, m);
    }
    if (m.names.size < LIST_AFTER_MISSES) m.names.add(name);
    if (m.names.size < LIST_AFTER_MISSES) return false;
    const changed = this.ownChanges.get(dir);
    if (changed !== undefined && now - changed < LIST_WINDOW_MS) return false;
    const size = this.cachedAttr(dir)?.sz;
    return size === undefined || size <= LIST_MAX_DIR_BYTES;
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
