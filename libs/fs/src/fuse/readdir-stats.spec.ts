import { ReaddirStats } from './fuse-caches';
import type { FuseStat } from './fuse-stat';

const stat = (ino: number) => ({ ino, mode: 0o100644 }) as unknown as FuseStat;

describe('ReaddirStats (the stats of a cached listing handed to fuse-native readdir)', () => {
  it('converts each entry once per function: a second map with the same function returns the first result', () => {
    const stats = ReaddirStats.wrap([stat(1), stat(2), stat(3)]);
    let calls = 0;
    const toArray = (s: FuseStat) => {
      calls++;
      return new Uint32Array([(s as unknown as { ino: number }).ino]);
    };
    const first = stats.map(toArray);
    const second = stats.map(toArray);
    expect(calls).toBe(3);
    expect(second).toBe(first);
    expect(first.map((a) => a[0])).toEqual([1, 2, 3]);
    expect(Array.isArray(first)).toBe(true);
    expect(first).not.toBeInstanceOf(ReaddirStats);
  });

  it('maps afresh for another function or a thisArg, and behaves as an array otherwise', () => {
    const stats = ReaddirStats.wrap([stat(7), stat(8)]);
    const ino = (s: FuseStat) => (s as unknown as { ino: number }).ino;
    expect(stats.map(ino)).toEqual([7, 8]);
    expect(stats.map((s) => ino(s) * 2)).toEqual([14, 16]);
    const ctx = { k: 10 };
    expect(
      stats.map(function (this: typeof ctx, s) {
        return ino(s) + this.k;
      }, ctx),
    ).toEqual([17, 18]);
    expect(stats.length).toBe(2);
    expect([...stats].map(ino)).toEqual([7, 8]);
    expect(ReaddirStats.wrap([]).map(ino)).toEqual([]);
  });
});
