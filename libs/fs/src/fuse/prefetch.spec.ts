/**
 * Unit tests of the FUSE layer's prefetching: the store of prefetched
 * contents (identity of attributes, one use, bounds, TTL, invalidation, batches in flight) and
 * the policy (only reads trigger, two files of a directory, listing order, bounds per batch,
 * growing batches, one batch per directory, a recursive reader's sibling directories, a node
 * without the extension).
 */
import { Attr, DirEntry } from '@svc/protocol/wire';
import type { PrefetchedFile } from '@svc/client';
import { FuseCaches } from './fuse-caches';
import { contentKey, PrefetchCache } from './prefetch-cache';
import { PrefetchPolicy } from './prefetch-policy';

function attr(id: number, sz: number, over: Partial<Attr> = {}): Attr {
  return { id, k: 1, m: 0o100644, n: 1, u: 0, g: 0, sz, at: 1, mt: 1000 + id, ct: 1000 + id, gen: 1, ...over };
}

describe('PrefetchCache', () => {
  afterEach(() => jest.useRealTimers());

  function stored(cache: PrefetchCache, dir: string, files: Array<[string, Attr, string]>): void {
    const b = cache.begin(
      dir,
      files.map(([n]) => n),
    );
    cache.complete(
      b,
      files.map(([name, a, text]) => ({ name, attr: a, data: Buffer.from(text) })),
    );
  }

  it('serves a content once, only for attributes of the same identity', () => {
    const c = new PrefetchCache(1 << 20, 60_000);
    stored(c, '/w', [
      ['a', attr(1, 3), 'AAA'],
      ['b', attr(2, 3), 'BBB'],
    ]);
    expect(c.has('/w/a', attr(1, 3))).toBe(true);
    expect(c.take('/w/a', attr(1, 3, { at: 99 }))?.toString()).toBe('AAA'); // atime is not identity
    expect(c.take('/w/a', attr(1, 3))).toBeUndefined();
    for (const other of [attr(1, 4), attr(1, 3, { mt: 5 }), attr(1, 3, { ct: 5 }), attr(1, 3, { gen: 2 }), attr(9, 3)]) {
      stored(c, '/w', [['a', attr(1, 3), 'AAA']]);
      expect(c.take('/w/a', other)).toBeUndefined();
      // a mismatch drops it
      expect(c.has('/w/a', attr(1, 3))).toBe(false);
    }
    expect(contentKey(attr(1, 3))).toBe('1:3:1001:1001:1');
    expect(c.size).toBe(1);
  });

  it('drops a content when newer attributes differ, keeps it when they have the same identity', () => {
    const c = new PrefetchCache(1 << 20, 60_000);
    stored(c, '/w', [['a', attr(1, 3), 'AAA']]);
    c.check('/w/a', attr(1, 3, { at: 7 }));
    expect(c.has('/w/a', attr(1, 3))).toBe(true);
    c.check('/w/a', attr(1, 3, { ct: 2000 }));
    expect(c.has('/w/a', attr(1, 3))).toBe(false);
    expect(c.bytes).toBe(0);
  });

  it('holds at most maxBytes, dropping the oldest first, and owns its bytes', () => {
    const c = new PrefetchCache(10, 60_000);
    const frame = Buffer.from('0123456789');
    const b = c.begin('/d', ['a', 'b', 'c']);
    c.complete(b, [
      { name: 'a', attr: attr(1, 4), data: frame.subarray(0, 4) },
      { name: 'b', attr: attr(2, 4), data: frame.subarray(4, 8) },
      { name: 'c', attr: attr(3, 4), data: frame.subarray(6, 10) },
    ]);
    expect(c.bytes).toBeLessThanOrEqual(10);
    expect(c.has('/d/a', attr(1, 4))).toBe(false);
    expect(c.has('/d/c', attr(3, 4))).toBe(true);
    frame.fill(0);
    expect(c.take('/d/c', attr(3, 4))?.toString()).toBe('6789');
    stored(c, '/d', [['big', attr(4, 11), '01234567890']]);
    expect(c.has('/d/big', attr(4, 11))).toBe(false);
  });

  it('forgets an entry after its lifetime', () => {
    jest.useFakeTimers({ now: 1_000_000 });
    const c = new PrefetchCache(1 << 20, 500);
    stored(c, '/w', [['a', attr(1, 1), 'A']]);
    jest.setSystemTime(1_000_400);
    expect(c.has('/w/a', attr(1, 1))).toBe(true);
    jest.setSystemTime(1_000_600);
    expect(c.has('/w/a', attr(1, 1))).toBe(false);
    expect(c.take('/w/a', attr(1, 1))).toBeUndefined();
  });

  it('does not store what was forgotten while its batch was in flight', async () => {
    const c = new PrefetchCache(1 << 20, 60_000);
    const b = c.begin('/w/d', ['a', 'b', 'c']);
    expect(c.pending('/w/d/b')).toBe(b);
    expect(c.pending('/w/d/x')).toBeUndefined();
    expect(c.pending('/w/b')).toBeUndefined();
    c.forget('/w/d/b');
    expect(c.pending('/w/d/b')).toBeUndefined();
    let ended = false;
    void b.done.then(() => (ended = true));
    c.complete(b, [
      { name: 'a', attr: attr(1, 1), data: Buffer.from('A') },
      { name: 'b', attr: attr(2, 1), data: Buffer.from('B') },
      { name: 'c', attr: attr(3, 1) },
      { name: 'zz', attr: attr(4, 1), data: Buffer.from('Z') },
    ]);
    await Promise.resolve();
    expect(ended).toBe(true);
    expect(c.pending('/w/d/a')).toBeUndefined();
    expect(c.has('/w/d/a', attr(1, 1))).toBe(true);
    expect(c.has('/w/d/b', attr(2, 1))).toBe(false);
    expect(c.has('/w/d/c', attr(3, 1))).toBe(false); // no data: not held
    expect(c.has('/w/d/zz', attr(4, 1))).toBe(false); // not asked for

    for (const drop of [(x: PrefetchCache) => x.forgetTree('/w'), (x: PrefetchCache) => x.forgetTree('/w/d'), (x: PrefetchCache) => x.forgetAll()]) {
      const b2 = c.begin('/w/d', ['e']);
      drop(c);
      c.complete(b2, [{ name: 'e', attr: attr(5, 1), data: Buffer.from('E') }]);
      expect(c.has('/w/d/e', attr(5, 1))).toBe(false);
    }
    expect(c.size).toBe(0);
  });
});

/** A directory `/w/d` as the router lists it, and what the policy asked the router for. */
class Dir {
  readonly entries: DirEntry[] = [];
  readonly asked: string[][] = [];
  readonly listed: string[] = [];
  granted = true;

  constructor(files: Array<[string, Attr]>) {
    for (const [name, a] of files) this.entries.push({ name, attr: a });
  }

  readonly router = {
    getattr: async (): Promise<Attr> => {
      throw new Error('no getattr expected');
    },
    readdirAll: async (path: string): Promise<DirEntry[]> => {
      this.listed.push(path);
      return path === '/w/d' ? this.entries : [];
    },
    prefetch: async (_dir: string, names: readonly string[]): Promise<PrefetchedFile[] | null> => {
      this.asked.push([...names]);
      if (!this.granted) return null;
      await new Promise((r) => setImmediate(r));
      return names.map((name) => {
        const e = this.entries.find((x) => x.name === name)!;
        return { name, attr: e.attr, data: Buffer.alloc(e.attr.sz, name) };
      });
    },
  };
}

function policyOver(dir: Dir, options = {}) {
  const caches = new FuseCaches(dir.router, 60_000);
  const policy = new PrefetchPolicy(dir.router, caches, caches.contents, { maxFile: 1000, maxTotal: 5000, maxNames: 10, lookahead: 4, ...options });
  return { caches, policy };
}

const name = (i: number) => `f${String(i).padStart(3, '0')}`;

describe('PrefetchPolicy', () => {
  afterEach(() => jest.useRealTimers());

  it('starts after two distinct files of a directory are read, with the next small regular files in listing order', async () => {
    const files: Array<[string, Attr]> = [];
    for (let i = 0; i < 30; i++) files.push([name(i), attr(10 + i, 100)]);
    files[4] = [name(4), attr(14, 5000)]; // too large
    files[5] = [name(5), attr(15, 10, { k: 3, m: 0o120777 })]; // symlink
    files[6] = [name(6), attr(16, 10, { k: 2, m: 0o40755 })]; // directory
    files[7] = [name(7), attr(17, 10, { m: 0o10644 })]; // fifo
    const dir = new Dir(files);
    const { caches, policy } = policyOver(dir);
    await policy.onRead('/w/d/f001');
    await policy.onRead('/w/d/f001');
    expect(dir.asked).toEqual([]);
    expect(dir.listed).toEqual([]);
    await policy.onRead('/w/d/f002');
    expect(dir.listed).toEqual(['/w/d']);
    expect(dir.asked).toEqual([[name(3), name(8), name(9), name(10), name(11), name(12), name(13), name(14), name(15), name(16)]]);
    const a3 = caches.cachedAttr('/w/d/f003')!;
    expect(caches.contents.take('/w/d/f003', a3)?.toString()).toBe('f003'.repeat(25));
    // Reads inside the batch ask nothing while the next files are held; near its end the next batch starts.
    await policy.onRead('/w/d/f003');
    await policy.onRead('/w/d/f008');
    expect(dir.asked.length).toBe(1);
    await policy.onRead('/w/d/f013');
    expect(dir.asked.length).toBe(2);
    expect(dir.asked[1][0]).toBe(name(17));
  });

  it('never fetches for listings, lookups or a single file; bounds names and bytes per batch', async () => {
    const files: Array<[string, Attr]> = [];
    for (let i = 0; i < 50; i++) files.push([name(i), attr(10 + i, 900)]);
    const dir = new Dir(files);
    const { caches, policy } = policyOver(dir);
    await caches.listing('/w/d');
    for (let i = 0; i < 50; i++) caches.cachedAttr(`/w/d/${name(i)}`);
    await policy.onRead('/w/d/f000');
    expect(dir.asked).toEqual([]);
    await policy.onRead('/w/d/f010');
    // 5000 bytes at 900 bytes a file: 5 files, though 10 names are allowed
    expect(dir.asked).toEqual([[name(11), name(12), name(13), name(14), name(15)]]);
  });

  it('counts only reads within the window', async () => {
    jest.useFakeTimers({ now: 5_000_000, doNotFake: ['setImmediate', 'nextTick'] });
    const dir = new Dir([0, 1, 2, 3, 4].map((i) => [name(i), attr(10 + i, 10)]));
    const { policy } = policyOver(dir, { windowMs: 1000 });
    await policy.onRead('/w/d/f000');
    jest.setSystemTime(5_001_500);
    await policy.onRead('/w/d/f001');
    expect(dir.asked).toEqual([]);
    jest.setSystemTime(5_001_900);
    await policy.onRead('/w/d/f002');
    expect(dir.asked).toEqual([[name(3), name(4)]]);
  });

  it('keeps one batch in flight per directory, and stops asking a node that did not grant prefetch', async () => {
    const dir = new Dir(Array.from({ length: 40 }, (_, i) => [name(i), attr(10 + i, 10)] as [string, Attr]));
    const { policy } = policyOver(dir, { maxNames: 2, lookahead: 10 });
    await policy.onRead('/w/d/f000');
    const p1 = policy.onRead('/w/d/f001');
    const p2 = policy.onRead('/w/d/f020');
    await Promise.all([p1, p2]);
    expect(dir.asked.length).toBe(1);
    dir.granted = false;
    await policy.onRead('/w/d/f030');
    await policy.onRead('/w/d/f033');
    expect(dir.asked.length).toBe(2);
  });

  it('starts after the file read last: the reader may go on while the listing is read', async () => {
    const dir = new Dir(Array.from({ length: 30 }, (_, i) => [name(i), attr(10 + i, 10)] as [string, Attr]));
    let release!: () => void;
    const listed = new Promise<void>((r) => (release = r));
    const readdirAll = dir.router.readdirAll;
    dir.router.readdirAll = async (path: string) => {
      await listed;
      return readdirAll(path);
    };
    const { policy } = policyOver(dir, { lookahead: 4 });
    await policy.onRead('/w/d/f000');
    const first = policy.onRead('/w/d/f001');
    for (const i of [2, 3, 4]) await policy.onRead(`/w/d/${name(i)}`);
    // opened, not read yet: a batch starts after it too
    void policy.opened('/w/d/f005');
    release();
    await first;
    expect(dir.asked).toEqual([[name(6), name(7), name(8), name(9), name(10), name(11), name(12), name(13), name(14), name(15)]]);
  });

  it('a failing batch stores nothing and throws nothing', async () => {
    const dir = new Dir([0, 1, 2, 3].map((i) => [name(i), attr(10 + i, 10)]));
    dir.router.prefetch = async () => {
      throw new Error('node gone');
    };
    const { caches, policy } = policyOver(dir);
    await policy.onRead('/w/d/f000');
    await expect(policy.onRead('/w/d/f001')).resolves.toBeUndefined();
    expect(caches.contents.size).toBe(0);
    expect(caches.contents.pending('/w/d/f002')).toBeUndefined();
  });
});

describe('PrefetchPolicy: first batch and recursive readers', () => {
  afterEach(() => jest.useRealTimers());

  it('holds firstBatch names in the first batch of a directory, maxNames in the next ones', async () => {
    const dir = new Dir(Array.from({ length: 100 }, (_, i) => [name(i), attr(10 + i, 10)] as [string, Attr]));
    const { policy } = policyOver(dir, { maxNames: 12, firstBatch: 3, lookahead: 4, maxTotal: 1 << 20 });
    await policy.onRead('/w/d/f000');
    await policy.onRead('/w/d/f001');
    await policy.onRead('/w/d/f002');
    await policy.onRead('/w/d/f014');
    expect(dir.asked.map((b) => b.length)).toEqual([3, 12, 12]);
    expect(dir.asked[0]).toEqual([name(2), name(3), name(4)]);
    expect(dir.asked[1][0]).toBe(name(5));
  });

  /** `/w` holding directories a, b, c of 40 small files each, served as Dir serves `/w/d`. */
  function siblings() {
    const files = (base: number) => Array.from({ length: 40 }, (_, i) => ({ name: name(i), attr: attr(base + i, 10) }));
    const dirs: Record<string, DirEntry[]> = { '/w/a': files(100), '/w/b': files(200), '/w/c': files(300) };
    const asked: Array<[string, string[]]> = [];
    const router = {
      getattr: async (): Promise<Attr> => {
        throw new Error('no getattr expected');
      },
      readdirAll: async (path: string): Promise<DirEntry[]> =>
        path === '/w' ? ['a', 'b', 'c'].map((n, i) => ({ name: n, attr: attr(10 + i, 4096, { k: 2, m: 0o40755 }) })) : (dirs[path] ?? []),
      prefetch: async (dir: string, names: readonly string[]): Promise<PrefetchedFile[] | null> => {
        asked.push([dir, [...names]]);
        return names.map((n) => ({ name: n, attr: dirs[dir].find((e) => e.name === n)!.attr, data: Buffer.alloc(10) }));
      },
    };
    const caches = new FuseCaches(router, 60_000);
    const policy = new PrefetchPolicy(router, caches, caches.contents, {
      maxFile: 1000,
      maxTotal: 1 << 20,
      maxNames: 64,
      firstBatch: 4,
      lookahead: 8,
      windowMs: 1000,
    });
    return { policy, asked, caches };
  }

  it('gives a reader that had batches in a directory the files of a sibling at its first open there: a small batch from that file, then the rest', async () => {
    const { policy, asked, caches } = siblings();
    await policy.onRead('/w/a/f000');
    await policy.onRead('/w/a/f001');
    expect(asked).toEqual([['/w/a', [name(2), name(3), name(4), name(5)]]]);
    // the walker lists b, then opens its first file: that file's batch is on its way when opened() returns
    await caches.listing('/w/b');
    const both = policy.opened('/w/b/f000');
    expect(caches.contents.pending('/w/b/f000')).toBeDefined();
    await both;
    expect(asked[1]).toEqual(['/w/b', [name(0), name(1), name(2), name(3)]]);
    expect(asked[2]).toEqual(['/w/b', Array.from({ length: 36 }, (_, i) => name(4 + i))]);
    // the walk goes on to the next sibling; opens in a directory being read start nothing more
    await caches.listing('/w/c');
    await policy.opened('/w/c/f000');
    expect(asked[3][0]).toBe('/w/c');
    await policy.opened('/w/a/f030');
    expect(asked.length).toBe(5);
  });

  it('gets the next directory of the parent listing ready, one directory ahead, once the reader is in a sibling', async () => {
    const { policy, asked, caches } = siblings();
    for (const d of ['/w', '/w/a', '/w/b', '/w/c']) await caches.listing(d);
    await policy.onRead('/w/a/f000');
    await policy.onRead('/w/a/f001');
    await policy.opened('/w/b/f000');
    // b: its first small batch and the rest; then c, ahead of the reader: first batch and rest
    expect(asked.map(([d, names]) => `${d}:${names[0]}:${names.length}`)).toEqual([
      '/w/a:f002:4',
      '/w/b:f000:4',
      '/w/b:f004:36',
      '/w/c:f000:4',
      '/w/c:f004:36',
    ]);
    // the reader gets to c: everything is held, nothing more is asked there, and nothing lies beyond c
    const held = caches.cachedAttr('/w/c/f000')!;
    expect(caches.contents.has('/w/c/f000', held)).toBe(true);
    await policy.opened('/w/c/f000');
    expect(asked.length).toBe(5);
  });

  it('fetches nothing on the first open of a directory without a reader going through a sibling, nor after the window', async () => {
    jest.useFakeTimers({ now: 2_000_000, doNotFake: ['setImmediate', 'nextTick'] });
    const { policy, asked, caches } = siblings();
    for (const d of ['/w/a', '/w/b', '/w/c']) await caches.listing(d);
    await policy.opened('/w/a/f000');
    await policy.opened('/w/b/f000');
    expect(asked).toEqual([]);
    await policy.onRead('/w/a/f000');
    await policy.onRead('/w/a/f001');
    expect(asked.length).toBe(1);
    jest.setSystemTime(2_001_500);
    await policy.opened('/w/c/f000');
    expect(asked.length).toBe(1);
  });
});

describe('FuseCaches: attributes in bulk', () => {
  /** A router over directory `/w/d` of `n` files, counting its requests. */
  function routerOf(n: number, dirSize = 4096) {
    const entries: DirEntry[] = Array.from({ length: n }, (_, i) => ({ name: name(i), attr: attr(10 + i, 5) }));
    const calls = { getattr: [] as string[], readdirAll: 0 };
    let gate: Promise<void> = Promise.resolve();
    const router = {
      getattr: async (path: string): Promise<Attr> => {
        calls.getattr.push(path);
        if (path === '/w/d') return attr(2, dirSize, { k: 2, m: 0o40755 });
        const e = entries.find((x) => `/w/d/${x.name}` === path);
        if (!e) throw Object.assign(new Error('ENOENT'), { errno: 2 });
        return e.attr;
      },
      readdirAll: async (): Promise<DirEntry[]> => {
        calls.readdirAll++;
        await gate;
        return entries;
      },
    };
    const hold = (p: Promise<void>) => {
      gate = p;
    };
    return { router, calls, hold };
  }

  it('lists a directory once after three misses there; later names come from the listing, missing ones are ENOENT', async () => {
    const { router, calls } = routerOf(50);
    const caches = new FuseCaches(router, 60_000);
    await caches.attrOf('/w/d');
    for (const i of [0, 1]) await caches.attrOf(`/w/d/${name(i)}`);
    expect(calls.readdirAll).toBe(0);
    expect((await caches.attrOf(`/w/d/${name(2)}`)).id).toBe(12);
    expect(calls.readdirAll).toBe(1);
    for (let i = 3; i < 50; i++) expect((await caches.attrOf(`/w/d/${name(i)}`)).id).toBe(10 + i);
    await expect(caches.attrOf('/w/d/nothing')).rejects.toMatchObject({ errno: 2 });
    expect(calls.readdirAll).toBe(1);
    expect(calls.getattr).toEqual(['/w/d', `/w/d/${name(0)}`, `/w/d/${name(1)}`]);
  });

  it('does not list a directory again after each entry this mount adds or removes there (tar -x, rm -rf)', async () => {
    const { router, calls } = routerOf(50);
    const caches = new FuseCaches(router, 60_000);
    await caches.attrOf('/w/d');
    for (const i of [0, 1, 2]) await caches.attrOf(`/w/d/${name(i)}`);
    expect(calls.readdirAll).toBe(1);
    // A program creating new names one after the other: each a miss, then this mount's create.
    for (let i = 0; i < 20; i++) {
      await expect(caches.attrOf(`/w/d/new${i}`)).rejects.toMatchObject({ errno: 2 });
      caches.entryChanged(`/w/d/new${i}`);
    }
    expect(calls.readdirAll).toBe(1);
  });

  it('shares one listing among concurrent misses; one a push made stale is read again, then not kept', async () => {
    const { router, calls, hold } = routerOf(20);
    const caches = new FuseCaches(router, 60_000);
    await caches.attrOf('/w/d');
    for (const i of [0, 1]) await caches.attrOf(`/w/d/${name(i)}`);
    let release!: () => void;
    hold(new Promise((r) => (release = r)));
    const waiting = [2, 3, 4, 5].map((i) => caches.attrOf(`/w/d/${name(i)}`));
    caches.forgetDir('/w/d');
    release();
    expect((await Promise.all(waiting)).map((a) => a.id)).toEqual([12, 13, 14, 15]);
    // the listing made stale was read again, and that one answered all four
    expect(calls.readdirAll).toBe(2);
    expect(calls.getattr.length).toBe(3);
    expect(caches.cachedAttr(`/w/d/${name(9)}`)?.id).toBe(19);
    // stale twice: not kept, the names go to getattr
    caches.forgetDir('/w/d');
    for (const k of [...Array(20).keys()]) caches.forget(`/w/d/${name(k)}`);
    hold(new Promise((r) => (release = r)));
    const again = [6, 7, 8].map((i) => caches.attrOf(`/w/d/${name(i)}`));
    await new Promise((r) => setImmediate(r));
    caches.forgetDir('/w/d');
    const releaseFirst = release;
    hold(new Promise((r) => (release = r)));
    releaseFirst();
    await new Promise((r) => setImmediate(r));
    caches.forgetDir('/w/d');
    release();
    expect((await Promise.all(again)).map((a) => a.id)).toEqual([16, 17, 18]);
    expect(calls.readdirAll).toBe(4);
    expect(caches.cachedAttr(`/w/d/${name(12)}`)).toBeUndefined();
  });

  it('does not list a directory larger than the bound', async () => {
    const { router, calls } = routerOf(10, 10 * 1024 * 1024);
    const caches = new FuseCaches(router, 60_000);
    await caches.attrOf('/w/d');
    for (let i = 0; i < 10; i++) await caches.attrOf(`/w/d/${name(i)}`);
    expect(calls.readdirAll).toBe(0);
    expect(calls.getattr.length).toBe(11);
  });
});
