/**
 * Path -> node id cache of one mount on one endpoint. Filled by `lookup`
 * walks and `readdirp` listings; invalidation pushes (`acheron.e_fs_inval*`, docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)")
 * mark entries *unverified* (still used to translate later pushes into paths, but looked up
 * again before a walk goes through them); the router's own removals and renames drop
 * subtrees; failover or a topology change drops everything (node ids belong to one node
 * process).
 */
import { relParent } from './paths';

/** Largest number of paths kept per mount before the oldest are dropped. */
export const DEFAULT_LOOKUP_CACHE_ENTRIES = 65_536;

/**
 * Keys are paths relative to the export root (`''` = root, `a/b` = below it). Bounded: the
 * least recently inserted entries are dropped first once `maxEntries` is reached. Every
 * operation is O(1) except the tree drops, which are O(size of the dropped subtree).
 */
export class LookupCache {
  private readonly byPath = new Map<string, number>();
  private readonly byId = new Map<number, Set<string>>();
  /** parent rel -> cached child rels (kept even while the parent itself is not cached). */
  private readonly children = new Map<string, Set<string>>();
  /** Entries whose name -> id mapping may have changed (their directory changed). */
  private readonly unverified = new Set<string>();

  constructor(private readonly maxEntries = DEFAULT_LOOKUP_CACHE_ENTRIES) {}

  /** Number of cached paths. */
  get size(): number {
    return this.byPath.size;
  }

  /** The cached node id of `rel`, or undefined. */
  get(rel: string): number | undefined {
    return this.byPath.get(rel);
  }

  /**
   * Records `rel` -> `id` as verified. When `rel` mapped to another id, what was cached below
   * it belonged to the other node and is dropped.
   */
  set(rel: string, id: number): void {
    const old = this.byPath.get(rel);
    this.unverified.delete(rel);
    if (old === id) return;
    if (old !== undefined) {
      this.dropTree(rel);
      this.set(rel, id);
      return;
    } else {
      if (this.byPath.size >= this.maxEntries) this.remove(this.byPath.keys().next().value as string);
      if (rel !== '') {
        const parent = relParent(rel);
        let set = this.children.get(parent);
        if (!set) this.children.set(parent, (set = new Set()));
        set.add(rel);
      }
    }
    this.byPath.set(rel, id);
    let paths = this.byId.get(id);
    if (!paths) this.byId.set(id, (paths = new Set()));
    paths.add(rel);
  }

  /**
   * The deepest usable cached prefix of a path: the longest `names[0..depth)` that is cached,
   * with no unverified entry on the way.
   * @returns depth 0 (nothing usable) or the depth and node id of that prefix
   */
  usablePrefix(names: readonly string[]): { depth: number; id: number | undefined } {
    let best = 0;
    let bestId: number | undefined;
    let p = '';
    for (let i = 0; i < names.length; i++) {
      p = i === 0 ? names[0] : `${p}/${names[i]}`;
      if (this.unverified.has(p)) break;
      const id = this.byPath.get(p);
      if (id !== undefined) {
        best = i + 1;
        bestId = id;
      }
    }
    return { depth: best, id: bestId };
  }

  /** Whether `rel` is cached and verified. */
  isVerified(rel: string): boolean {
    return this.byPath.has(rel) && !this.unverified.has(rel);
  }

  /** The cached paths of node `id` (hard links may give several). */
  pathsOf(id: number): string[] {
    return [...(this.byId.get(id) ?? [])];
  }

  /**
   * Forgets `rel` and everything below it (a rename or removal changes every path under it).
   * @returns the number of entries dropped
   */
  dropTree(rel: string): number {
    if (rel === '') {
      const n = this.byPath.size;
      this.clear();
      return n;
    }
    let n = 0;
    const stack = [rel];
    while (stack.length > 0) {
      const p = stack.pop()!;
      const kids = this.children.get(p);
      if (kids) {
        stack.push(...kids);
        this.children.delete(p);
      }
      if (this.remove(p)) n++;
    }
    return n;
  }

  /**
   * The entries of directory `dirId` changed (`acheron.e_fs_inval_dir`): its cached children
   * become unverified. The directory's own mapping stays.
   * @returns the directory's cached paths
   */
  childrenChanged(dirId: number): string[] {
    const dirs = this.pathsOf(dirId);
    for (const dir of dirs) for (const child of this.children.get(dir) ?? []) this.unverified.add(child);
    return dirs;
  }

  /**
   * Node `id` may have changed kind or existence (`acheron.e_fs_inval` `all`): its paths
   * become unverified.
   * @returns its cached paths
   */
  nodeChanged(id: number): string[] {
    const rels = this.pathsOf(id);
    for (const rel of rels) if (rel !== '') this.unverified.add(rel);
    return rels;
  }

  /** Forgets everything. */
  clear(): void {
    this.byPath.clear();
    this.byId.clear();
    this.children.clear();
    this.unverified.clear();
  }

  private remove(rel: string): boolean {
    const id = this.byPath.get(rel);
    if (id === undefined) return false;
    this.byPath.delete(rel);
    this.unverified.delete(rel);
    this.unindexId(rel, id);
    if (rel !== '') {
      const parent = relParent(rel);
      const set = this.children.get(parent);
      if (set) {
        set.delete(rel);
        if (set.size === 0) this.children.delete(parent);
      }
    }
    return true;
  }

  private unindexId(rel: string, id: number): void {
    const paths = this.byId.get(id);
    if (!paths) return;
    paths.delete(rel);
    if (paths.size === 0) this.byId.delete(id);
  }
}
