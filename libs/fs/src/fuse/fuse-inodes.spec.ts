import { EventEmitter } from 'node:events';
import { FuseInodes, mountSlots } from './fuse-inodes';

describe('mountSlots', () => {
  it('gives every mount path its own slot in 1..255, independent of the order given', () => {
    const paths = Array.from({ length: 200 }, (_, i) => `/m${i}`);
    const a = mountSlots(paths);
    const b = mountSlots([...paths].reverse());
    expect([...a.entries()].sort()).toEqual([...b.entries()].sort());
    const slots = [...a.values()];
    expect(new Set(slots).size).toBe(200);
    for (const s of slots) expect(s >= 1 && s <= 255).toBe(true);
  });

  it('keeps the slot of a path when an unrelated path is added (unless it takes the same hash slot)', () => {
    const before = mountSlots(['/a', '/b']);
    const after = mountSlots(['/a', '/b', '/zzz-new']);
    if (after.get('/zzz-new') !== before.get('/a') && after.get('/zzz-new') !== before.get('/b')) {
      expect(after.get('/a')).toBe(before.get('/a'));
      expect(after.get('/b')).toBe(before.get('/b'));
    }
  });
});

describe('FuseInodes', () => {
  function router(mountPaths: string[]) {
    const r = new EventEmitter() as EventEmitter & { mountPaths: string[]; resolve: (p: string) => { kind: string; mountPath?: string } };
    r.mountPaths = mountPaths;
    r.resolve = (p: string) => {
      const m = [...r.mountPaths].sort((x, y) => y.length - x.length).find((mp) => p === mp || p.startsWith(`${mp}/`));
      return m ? { kind: 'mount', mountPath: m } : { kind: 'synthetic' };
    };
    return r;
  }

  it('numbers equal node ids of two mounts apart, and the synthetic tree below 2^24', () => {
    const r = router(['/a', '/b']);
    const inodes = new FuseInodes(r as never);
    const x = inodes.of('/a/f', 7);
    const y = inodes.of('/b/f', 7);
    expect(x).not.toBe(y);
    expect(x % 2 ** 24).toBe(7);
    expect(inodes.of('/', 0)).toBe(1);
    expect(inodes.of('/', 0)).toBeLessThan(2 ** 24);
    for (const n of [x, y, inodes.of('/', 0)]) expect(n > 0 && n < 2 ** 32).toBe(true);
  });

  it('follows topology changes', () => {
    const r = router(['/a']);
    const inodes = new FuseInodes(r as never);
    const before = inodes.of('/b/f', 3);
    r.mountPaths = ['/a', '/b'];
    r.emit('topology');
    expect(inodes.of('/b/f', 3)).not.toBe(before);
    expect(Math.floor(inodes.of('/b/f', 3) / 2 ** 24)).toBe(mountSlots(['/a', '/b']).get('/b'));
  });
});
