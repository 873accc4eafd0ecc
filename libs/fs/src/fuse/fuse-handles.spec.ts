/**
 * Unit tests of the FUSE handle numbers (fuse-handles.ts): read-only handles carry
 * FH_NOTHING_TO_FLUSH (their flush is answered in fuse-native's FUSE thread), writable ones
 * never do, and numbers stay unique below 2^31 when the counter wraps.
 */
import { FuseCaches } from './fuse-caches';
import { FH_NOTHING_TO_FLUSH, FuseHandles } from './fuse-handles';

function handles(): FuseHandles {
  const router = {
    open: async () => {
      throw new Error('not expected');
    },
    release: async () => undefined,
    getattr: async () => {
      throw new Error('not expected');
    },
    readdirAll: async () => [],
  };
  return new FuseHandles(router as never, new FuseCaches(router, 60_000));
}

describe('FuseHandles numbers', () => {
  it('marks read-only handles as having nothing to flush, never writable ones', () => {
    const h = handles();
    const ro = h.add(h.state('/w/a', false, 0));
    const rw = h.add(h.state('/w/b', true, 2));
    expect(ro & FH_NOTHING_TO_FLUSH).toBe(FH_NOTHING_TO_FLUSH);
    expect(rw & FH_NOTHING_TO_FLUSH).toBe(0);
    expect(h.get(ro)?.path).toBe('/w/a');
    expect(h.get(rw)?.path).toBe('/w/b');
    // positive 32-bit integers, as fuse-native's open answer takes them
    for (const fh of [ro, rw]) expect(fh).toBe(fh | 0);
  });

  it('wraps below 2^30 and skips numbers in use', () => {
    const h = handles();
    const first = h.add(h.state('/w/keep', true, 2));
    (h as unknown as { nextFh: number }).nextFh = FH_NOTHING_TO_FLUSH - 1;
    const last = h.add(h.state('/w/last', true, 2));
    expect(last).toBe(FH_NOTHING_TO_FLUSH - 1);
    // 1 is taken by the first handle: the next one after the wrap is 2
    expect(h.add(h.state('/w/next', true, 2))).toBe(first + 1);
  });
});
