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

  it('answers names missing in a directory it made or listed, with its own entry changes applied, until a push of a change from elsewhere', async () => {
    const asked: string[] = [];
    const router = {
      getattr: (path: string): Promise<Attr> => {
        asked.push(path);
        return Promise.reject(Object.assign(new Error('ENOENT'), { errno: 2 }));
      },
      readdirAll: () => Promise.resolve([{ name: 'listed', attr: attr(1) }]),
    };
    const caches = new FuseCaches(router, 60_000);
    const missing = async (path: string) =>
      expect(
        await caches.attrOf(path).then(
          () => 'found',
          (e: { errno?: number }) => e.errno,
        ),
      ).toBe(2);

    caches.madeDir('/w/new');
    await missing('/w/new/a');
    // A name longer than NAME_MAX goes to the node, which answers ENAMETOOLONG (here: the fake's ENOENT).
    await caches.attrOf(`/w/new/${'n'.repeat(256)}`).catch(() => undefined);
    expect(asked).toEqual([`/w/new/${'n'.repeat(256)}`]);
    asked.length = 0;
    caches.entryChanged('/w/new/a', 'added');
    caches.remember('/w/new/a', attr(3));
    expect((await caches.attrOf('/w/new/a')).sz).toBe(3);
    caches.entryChanged('/w/new/a', 'removed');
    await missing('/w/new/a');
    caches.entryChanged('/w/new/b', 'added');
    // Added, attributes not known: asked for, not answered missing.
    await caches.attrOf('/w/new/b').catch(() => undefined);
    expect(asked).toEqual(['/w/new/b']);
    // A change from elsewhere (a push for the directory): names are asked for again.
    caches.forgetDir('/w/new');
    await caches.attrOf('/w/new/c').catch(() => undefined);
    expect(asked).toEqual(['/w/new/b', '/w/new/c']);

    // A directory listed: its names, kept with this mount's changes; a change it cannot apply
    // (no `change`: a rename exchanging two names) drops them.
    await caches.listing('/w/old');
    caches.forget('/w/old/listed');
    expect(asked).toEqual(['/w/new/b', '/w/new/c']);
    await missing('/w/old/other');
    caches.entryChanged('/w/old/x');
    await caches.attrOf('/w/old/other').catch(() => undefined);
    expect(asked).toEqual(['/w/new/b', '/w/new/c', '/w/old/other']);
  });
});
