import { Attr } from '@svc/protocol/wire';
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
});
