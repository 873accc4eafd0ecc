import { Attr, Errno, FsError } from '@svc/protocol/wire';
import { FuseCaches } from './fuse-caches';

function attr(size: number): Attr {
  return { id: 7, k: 1, m: 0o100644, n: 1, u: 0, g: 0, sz: size, at: 0, mt: 1, ct: 1, gen: 1 };
}

describe('FuseCaches', () => {
  it('returns but does not keep attributes whose read was overtaken by a forget of the path', async () => {
    let size = 10;
    const answers: Array<() => void> = [];
    let getattrs = 0;
    const router = {
      getattr: (): Promise<Attr> => {
        getattrs++;
        const sz = size;
        return new Promise((resolve) => answers.push(() => resolve(attr(sz))));
      },
      readdirAll: () => Promise.resolve([]),
    };
    const caches = new FuseCaches(router, 60_000);
    const first = caches.attrOf('/w/f');
    // This mount wrote the file while the node answered with its size before.
    size = 20;
    caches.forget('/w/f');
    answers.shift()!();
    expect((await first).sz).toBe(10);
    expect(caches.cachedAttr('/w/f')).toBeUndefined();
    const second = caches.attrOf('/w/f');
    answers.shift()!();
    expect((await second).sz).toBe(20);
    expect(caches.cachedAttr('/w/f')?.sz).toBe(20);
    expect(getattrs).toBe(2);
    // A forget of a directory above makes reads below it stale too.
    const third = caches.attrOf('/w/g');
    caches.forgetTree('/w');
    answers.shift()!();
    await third;
    expect(caches.cachedAttr('/w/g')).toBeUndefined();
  });

  it('tells onAttrs of every change of the cached attributes: the path, a tree, or all', () => {
    const router = { getattr: () => Promise.resolve(attr(1)), readdirAll: () => Promise.resolve([]) };
    const caches = new FuseCaches(router, 60_000);
    const told: Array<[string | null, boolean]> = [];
    caches.onAttrs = (path, tree) => told.push([path, tree === true]);
    caches.remember('/w/d', attr(1));
    caches.rememberNewer('/w/d', { ...attr(1), ct: 2 });
    caches.forgetAttr('/w/d');
    caches.forget('/w/a');
    caches.forgetFile('/w/b');
    caches.forgetDir('/w/c');
    caches.entryChanged('/w/e');
    caches.forgetTree('/w/t');
    caches.forgetAll();
    expect(told).toEqual([
      ['/w/d', false],
      ['/w/d', false],
      ['/w/d', false],
      ['/w/a', false],
      ['/w/b', false],
      ['/w/c', false],
      ['/w/e', false],
      ['/w/t', false],
      ['/w/t', true],
      [null, false],
    ]);
  });

  describe("this mount's own entry changes", () => {
    /** A cache over a router whose directories hold `entries` (name -> size; the node id is 100 + the size), counting its requests. */
    function setup(entries: Record<string, Record<string, number>>) {
      const calls = { getattr: 0, readdirAll: 0 };
      const router = {
        getattr: (path: string): Promise<Attr> => {
          calls.getattr++;
          const dir = path.slice(0, path.lastIndexOf('/')) || '/';
          const size = entries[dir]?.[path.slice(path.lastIndexOf('/') + 1)];
          return size === undefined ? Promise.reject(new FsError(Errno.ENOENT)) : Promise.resolve({ ...attr(size), id: 100 + size });
        },
        readdirAll: (path: string) => {
          calls.readdirAll++;
          return Promise.resolve(Object.entries(entries[path] ?? {}).map(([name, size]) => ({ name, attr: { ...attr(size), id: 100 + size } })));
        },
      };
      return { caches: new FuseCaches(router, 60_000), calls };
    }

    it('keeps a fresh listing of the directory, as a new object, with a name it made or removed', async () => {
      const { caches, calls } = setup({ '/w/d': { a: 1, b: 2 } });
      const before = await caches.listing('/w/d');
      caches.entryAdded('/w/d/c', attr(3));
      caches.entryRemoved('/w/d/a');
      const after = await caches.listing('/w/d');
      expect(after.names).toEqual(['b', 'c']);
      expect(after.attrs.map((a) => a.sz)).toEqual([2, 3]);
      // A readdir going on from an offset in the old listing sees it unchanged.
      expect(before.names).toEqual(['a', 'b']);
      await expect(caches.attrOf('/w/d/x')).rejects.toMatchObject({ errno: Errno.ENOENT });
      await expect(caches.attrOf('/w/d/a')).rejects.toMatchObject({ errno: Errno.ENOENT });
      expect((await caches.attrOf('/w/d/c')).sz).toBe(3);
      expect(calls).toEqual({ getattr: 0, readdirAll: 1 });
      // A directory removed: what was cached below it goes, the listing above stays.
      caches.entryAdded('/w/d/sub', { ...attr(4096), k: 2 });
      caches.remember('/w/d/sub/x', attr(9));
      caches.entryRemoved('/w/d/sub', true);
      expect(caches.cachedAttr('/w/d/sub/x')).toBeUndefined();
      expect(caches.freshListing('/w/d')?.names).toEqual(['b', 'c']);
    });

    it('keeps the listings of a rename: the old name out, the new one in with the entry it had', async () => {
      const { caches, calls } = setup({ '/w/d': { f: 1, tmp: 2 }, '/w/e': { g: 3 } });
      await caches.listing('/w/d');
      await caches.listing('/w/e');
      // An editor's save: the temporary file replaces the file.
      caches.entryRenamed('/w/d/tmp', '/w/d/f', undefined, undefined);
      const d = caches.freshListing('/w/d')!;
      expect(d.names).toEqual(['f']);
      expect(d.attrs[0].sz).toBe(2);
      await expect(caches.attrOf('/w/d/tmp')).rejects.toMatchObject({ errno: Errno.ENOENT });
      expect(caches.cachedAttr('/w/d/f')).toBeUndefined();
      // To another directory.
      caches.entryRenamed('/w/d/f', '/w/e/f', undefined, undefined);
      expect(caches.freshListing('/w/d')!.names).toEqual([]);
      expect(caches.freshListing('/w/e')!.names).toEqual(['g', 'f']);
      // The node told the attributes under the new name: they answer the kernel's lookup of it.
      caches.entryRenamed('/w/e/g', '/w/e/h', { ...attr(3), id: 103, ct: 9 }, undefined);
      expect(caches.freshListing('/w/e')!.names).toEqual(['f', 'h']);
      expect((await caches.attrOf('/w/e/h')).ct).toBe(9);
      expect(calls).toEqual({ getattr: 0, readdirAll: 2 });
      // The entry not known: the listing it would go to is dropped.
      caches.entryRenamed('/w/x/unknown', '/w/e/u', undefined, undefined);
      expect(caches.freshListing('/w/e')).toBeUndefined();
    });

    it('drops the listing when the new name was another name of the same file (the rename changes nothing)', async () => {
      const { caches } = setup({ '/w/d': { a: 1, b: 1 } });
      await caches.listing('/w/d');
      caches.entryRenamed('/w/d/a', '/w/d/b', undefined, undefined);
      expect(caches.freshListing('/w/d')).toBeUndefined();
      await expect(caches.attrOf('/w/d/a')).resolves.toMatchObject({ sz: 1 });
    });

    it('knows a directory it made empty, until a push drops its listing', async () => {
      const { caches, calls } = setup({ '/w/new': { pushed: 5 } });
      caches.entryAdded('/w/new', { ...attr(4096), k: 2 });
      caches.madeEmptyDir('/w/new');
      await expect(caches.attrOf('/w/new/f')).rejects.toMatchObject({ errno: Errno.ENOENT });
      // A name too long for a directory entry goes to the node, which refuses it.
      await expect(caches.attrOf(`/w/new/${'n'.repeat(256)}`)).rejects.toMatchObject({ errno: Errno.ENOENT });
      expect(calls.getattr).toBe(1);
      calls.getattr = 0;
      caches.entryAdded('/w/new/f', attr(0));
      expect((await caches.listing('/w/new')).names).toEqual(['f']);
      expect(calls.getattr + calls.readdirAll).toBe(0);
      // Another client's entry: the node's push of the directory.
      caches.forgetDir('/w/new');
      expect((await caches.attrOf('/w/new/pushed')).sz).toBe(5);
      expect(calls.getattr).toBe(1);
    });

    it("drops the directory's listing when an entry is renamed or replaced, not when a file's content or attributes change", async () => {
      const { caches, calls } = setup({ '/w/d': { a: 1 } });
      await caches.listing('/w/d');
      caches.forgetFile('/w/d/a');
      expect(caches.cachedAttr('/w/d/a')).toBeUndefined();
      await expect(caches.attrOf('/w/d/zz')).rejects.toMatchObject({ errno: Errno.ENOENT });
      expect(calls.readdirAll).toBe(1);
      // A push of a write to a file this mount removed meanwhile: still missing.
      caches.entryRemoved('/w/unlisted/gone');
      caches.forgetFile('/w/unlisted/gone');
      await expect(caches.attrOf('/w/unlisted/gone')).rejects.toMatchObject({ errno: Errno.ENOENT });
      expect(calls.getattr).toBe(0);
      await caches.listing('/w/d');
      caches.forget('/w/d/a');
      expect(caches.freshListing('/w/d')).toBeUndefined();
      caches.entryChanged('/w/d/b');
      await caches.listing('/w/d');
      caches.entryChanged('/w/d/b');
      expect(caches.freshListing('/w/d')).toBeUndefined();
    });

    it('reads a fresh listing again when names in it missed their attributes (changed files, as after a checkout on the node)', async () => {
      const files: Record<string, number> = {};
      for (let i = 0; i < 10; i++) files[`f${i}`] = i;
      const { caches, calls } = setup({ '/w/d': files });
      await caches.listing('/w/d');
      // Pushes of changes to every file: their attributes go, the names stay listed.
      for (let i = 0; i < 10; i++) caches.forgetFile(`/w/d/f${i}`);
      expect(caches.freshListing('/w/d')).toBeDefined();
      for (let i = 0; i < 10; i++) expect((await caches.attrOf(`/w/d/f${i}`)).sz).toBe(i);
      // The first misses ask for each file; the third lists the directory again, which answers the rest.
      expect(calls).toEqual({ getattr: 2, readdirAll: 2 });
    });

    it('does not edit a listing being read: the read is made again', async () => {
      let answer: (() => void) | null = null;
      let reads = 0;
      const router = {
        getattr: (): Promise<Attr> => Promise.reject(new FsError(Errno.ENOENT)),
        readdirAll: () => {
          reads++;
          const names = reads === 1 ? ['a'] : ['a', 'c'];
          return new Promise<Array<{ name: string; attr: Attr }>>((resolve) => {
            answer = () => resolve(names.map((name) => ({ name, attr: attr(1) })));
          });
        },
      };
      const caches = new FuseCaches(router, 60_000);
      const first = caches.listing('/w/d');
      caches.entryAdded('/w/d/c', attr(1));
      answer!();
      await new Promise((r) => setImmediate(r));
      answer!();
      expect((await first).names).toEqual(['a', 'c']);
      expect(reads).toBe(2);
    });
  });
});
