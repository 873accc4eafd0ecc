/**
 * Unit tests of the FUSE handle numbers (fuse-handles.ts): unique positive numbers below 2^31,
 * kept unique when the counter wraps, each finding its open state.
 */
import { FuseCaches } from './fuse-caches';
import { FuseHandles, MAX_FH } from './fuse-handles';

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
  it('hands out distinct positive 32-bit numbers that find their state', () => {
    const h = handles();
    const ro = h.add(h.state('/w/a', false, 0));
    const rw = h.add(h.state('/w/b', true, 2));
    expect(ro).not.toBe(rw);
    expect(h.get(ro)?.path).toBe('/w/a');
    expect(h.get(rw)?.path).toBe('/w/b');
    for (const fh of [ro, rw]) expect(fh).toBe(fh | 0);
    h.delete(ro);
    expect(h.get(ro)).toBeUndefined();
  });

  it('wraps after MAX_FH and skips numbers in use', () => {
    const h = handles();
    const first = h.add(h.state('/w/keep', true, 2));
    (h as unknown as { nextFh: number }).nextFh = MAX_FH;
    const last = h.add(h.state('/w/last', true, 2));
    expect(last).toBe(MAX_FH);
    // 1 is taken by the first handle: the next one after the wrap is 2
    expect(h.add(h.state('/w/next', true, 2))).toBe(first + 1);
  });
});
