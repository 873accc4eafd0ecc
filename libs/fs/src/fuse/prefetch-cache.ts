/**
 * Prefetched file contents of the FUSE layer (the `prefetch` extension,
 * docs/protocol.md "FS extensions"): whole small files a batched request brought before anyone
 * opened them, keyed by workspace path and by the identity of the attributes they were read
 * with ({@link contentKey}: node id, size, mtime, ctime, gen).
 *
 * Coherence: an entry is served only to an open whose current attributes (the FUSE attribute
 * cache, kept coherent by the node's pushes) have the same identity, and once: the kernel's page
 * cache keeps it from there. Entries are dropped on the forget* calls (the node's
 * `e_fs_inval*`, failovers and topology changes, this mount's own mutations), when newer
 * attributes of the path differ ({@link PrefetchCache.check}), after `ttl` ms, and oldest first
 * past `maxBytes`. A batch still in flight when one of its paths is forgotten does not store
 * that path.
 */
import { Attr } from '@svc/protocol/wire';
import { joinPath, parentPath } from '../router/paths';

/** Identity of a file's content as far as attributes tell: node id, size, mtime, ctime, gen. */
export function contentKey(a: Attr): string {
  return `${a.id}:${a.sz}:${a.mt}:${a.ct}:${a.gen}`;
}

interface Entry {
  key: string;
  data: Buffer;
  /** ms since the epoch. */
  expires: number;
}

/** One file of a batch reply: its attributes and data when it was read. */
export interface BatchFile {
  name: string;
  attr?: Attr;
  data?: Buffer;
}

/** A batched request in flight for names of directory `dir`; see {@link PrefetchCache.begin}. */
export class PrefetchBatch {
  /** Names forgotten while the batch was in flight (not stored). */
  readonly dropped = new Set<string>();
  /** The whole batch was forgotten (a tree above it, or everything). */
  droppedAll = false;
  /** Resolves when the batch ended (stored or failed). */
  readonly done: Promise<void>;
  private resolve!: () => void;

  constructor(
    readonly dir: string,
    readonly names: ReadonlySet<string>,
  ) {
    this.done = new Promise((r) => (this.resolve = r));
  }

  /** @internal marks the batch ended */
  finish(): void {
    this.resolve();
  }
}

/** Bounded store of prefetched contents; see module documentation. */
export class PrefetchCache {
  /** Path -> entry; insertion order is age (oldest first). */
  private readonly entries = new Map<string, Entry>();
  private readonly batches = new Set<PrefetchBatch>();
  private total = 0;

  /**
   * @param maxBytes most bytes of content held (oldest dropped first)
   * @param ttl lifetime of an entry, ms
   */
  constructor(
    readonly maxBytes: number,
    private readonly ttl: number,
  ) {}

  /** Bytes of content held. */
  get bytes(): number {
    return this.total;
  }

  /** Entries held. */
  get size(): number {
    return this.entries.size;
  }

  /** True when the content of `path` is held for attributes `attr` (and fresh). */
  has(path: string, attr: Attr): boolean {
    const e = this.entries.get(path);
    return e !== undefined && e.key === contentKey(attr) && e.expires > Date.now();
  }

  /**
   * The content of `path` if it is held for exactly the identity of `attr`, taken out of the
   * store (it is served once); an entry held for other attributes is dropped.
   */
  take(path: string, attr: Attr): Buffer | undefined {
    const e = this.entries.get(path);
    if (!e) return undefined;
    this.drop(path);
    return e.key === contentKey(attr) && e.expires > Date.now() ? e.data : undefined;
  }

  /** The batch in flight that will bring `path`, if any (its `done` resolves when it ended). */
  pending(path: string): PrefetchBatch | undefined {
    const dir = parentPath(path);
    const name = path.slice(dir === '/' ? 1 : dir.length + 1);
    for (const b of this.batches) if (b.dir === dir && b.names.has(name) && !b.droppedAll && !b.dropped.has(name)) return b;
    return undefined;
  }

  /** Starts a batch for `names` of directory `dir`; call {@link complete} or {@link end}. */
  begin(dir: string, names: readonly string[]): PrefetchBatch {
    const b = new PrefetchBatch(dir, new Set(names));
    this.batches.add(b);
    return b;
  }

  /** Stores what batch `b` brought (except what was forgotten meanwhile) and ends it. */
  complete(b: PrefetchBatch, files: readonly BatchFile[]): void {
    if (this.batches.has(b) && !b.droppedAll) {
      for (const f of files) {
        if (!f.data || !f.attr || !b.names.has(f.name) || b.dropped.has(f.name)) continue;
        this.put(joinPath(b.dir, f.name), f.attr, f.data);
      }
    }
    this.end(b);
  }

  /** Ends batch `b` without storing anything (it failed). */
  end(b: PrefetchBatch): void {
    this.batches.delete(b);
    b.finish();
  }

  /** Newer attributes of `path` are known: its entry goes unless it was read with the same identity. */
  check(path: string, attr: Attr): void {
    const e = this.entries.get(path);
    if (e && e.key !== contentKey(attr)) this.drop(path);
  }

  /** Drops the entry of `path`; a batch in flight will not store it. */
  forget(path: string): void {
    this.drop(path);
    const dir = parentPath(path);
    const name = path.slice(dir === '/' ? 1 : dir.length + 1);
    for (const b of this.batches) if (b.dir === dir) b.dropped.add(name);
  }

  /** Drops every entry at or below `path`, and the batches in flight there. */
  forgetTree(path: string): void {
    if (path === '/') return this.forgetAll();
    this.forget(path);
    const prefix = `${path}/`;
    for (const p of [...this.entries.keys()]) if (p.startsWith(prefix)) this.drop(p);
    for (const b of this.batches) if (b.dir === path || b.dir.startsWith(prefix)) b.droppedAll = true;
  }

  /** Drops everything, and every batch in flight. */
  forgetAll(): void {
    this.entries.clear();
    this.total = 0;
    for (const b of this.batches) b.droppedAll = true;
  }

  private put(path: string, attr: Attr, data: Buffer): void {
    this.drop(path);
    if (data.length > this.maxBytes) return;
    // Own the bytes: `data` may be a view of a whole reply frame.
    const copy = Buffer.from(data);
    const now = Date.now();
    for (const [p, e] of this.entries) {
      if (this.total + copy.length <= this.maxBytes && e.expires > now) break;
      this.drop(p);
    }
    this.entries.set(path, { key: contentKey(attr), data: copy, expires: now + this.ttl });
    this.total += copy.length;
  }

  private drop(path: string): void {
    const e = this.entries.get(path);
    if (!e) return;
    this.entries.delete(path);
    this.total -= e.data.length;
  }
}
