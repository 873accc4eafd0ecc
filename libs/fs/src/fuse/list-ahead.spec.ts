/**
 * Unit tests of listing ahead of a recursive walk (list-ahead.ts): a descent
 * lists the next subdirectories, a plain listing lists nothing, files are skipped, the bounds
 * hold, and the walker's own listing is then served from the cache.
 */
import { Attr, DirEntry } from '@svc/protocol/wire';
import { FuseCaches } from './fuse-caches';
import { ListAhead } from './list-ahead';

function dirAttr(id: number): Attr {
  return { id, k: 2, m: 0o40755, n: 2, u: 0, g: 0, sz: 4096, at: 1, mt: 1, ct: 1, gen: 1 };
}
function fileAttr(id: number): Attr {
  return { id, k: 1, m: 0o100644, n: 1, u: 0, g: 0, sz: 10, at: 1, mt: 1, ct: 1, gen: 1 };
}

/** `/w` holding directories d0..d9 and a file `f` between d2 and d3; each directory one file. */
function tree() {
  const listed: string[] = [];
  let gate: Promise<void> = Promise.resolve();
  const top: DirEntry[] = [];
  for (let i = 0; i < 10; i++) {
    top.push({ name: `d${i}`, attr: dirAttr(100 + i) });
    if (i === 2) top.push({ name: 'f', attr: fileAttr(99) });
  }
  const router = {
    getattr: async (): Promise<Attr> => {
      throw new Error('no getattr expected');
    },
    readdirAll: async (path: string): Promise<DirEntry[]> => {
      listed.push(path);
      await gate;
      return path === '/w' ? top : [{ name: 'x', attr: fileAttr(1000 + listed.length) }];
    },
  };
  const caches = new FuseCaches(router, 60_000);
  const hold = (p: Promise<void>) => {
    gate = p;
  };
  return { caches, listed, hold };
}

const settle = () => new Promise((r) => setImmediate(r));

describe('ListAhead', () => {
  afterEach(() => jest.useRealTimers());

  it('lists the next subdirectories after a descent, skipping files, and serves the walker from the cache', async () => {
    const { caches, listed } = tree();
    const ahead = new ListAhead(caches, { ahead: 3 });
    ahead.onList('/w');
    await caches.listing('/w');
    // as the FUSE readdir does: the walker's own listing first
    const own = caches.listing('/w/d0');
    ahead.onList('/w/d0');
    await own;
    await settle();
    expect(listed).toEqual(['/w', '/w/d0', '/w/d1', '/w/d2', '/w/d3']);
    // the walker's next listings: no round trip for those listed ahead, and the window moves on
    await caches.listing('/w/d1');
    ahead.onList('/w/d1');
    await settle();
    expect(listed).toEqual(['/w', '/w/d0', '/w/d1', '/w/d2', '/w/d3', '/w/d4']);
  });

  it('lists nothing ahead for a listing without a descent, or a descent after the window', async () => {
    jest.useFakeTimers({ now: 1_000_000, doNotFake: ['setImmediate', 'nextTick'] });
    const { caches, listed } = tree();
    const ahead = new ListAhead(caches, { ahead: 3, windowMs: 500 });
    ahead.onList('/w');
    await caches.listing('/w');
    await settle();
    expect(listed).toEqual(['/w']);
    jest.setSystemTime(1_000_600);
    ahead.onList('/w/d5');
    await settle();
    expect(listed).toEqual(['/w']);
    // ahead: 0 turns it off
    const off = tree();
    const none = new ListAhead(off.caches, { ahead: 0 });
    none.onList('/w');
    await off.caches.listing('/w');
    none.onList('/w/d0');
    await settle();
    expect(off.listed).toEqual(['/w']);
  });

  it('keeps at most maxInFlight listings ahead on their way', async () => {
    const { caches, listed, hold } = tree();
    const ahead = new ListAhead(caches, { ahead: 8, maxInFlight: 2 });
    ahead.onList('/w');
    await caches.listing('/w');
    let release!: () => void;
    hold(new Promise((r) => (release = r)));
    ahead.onList('/w/d0');
    await settle();
    expect(listed).toEqual(['/w', '/w/d1', '/w/d2']);
    release();
    await settle();
    await settle();
    // room again: the next descent goes on where the listings are missing
    ahead.onList('/w/d1');
    await settle();
    expect(listed.slice(3)).toEqual(['/w/d3', '/w/d4']);
  });
});
