import { NodeTable } from './node-table';
import type { FsStat } from './fs-backend';

function stat(over: Partial<FsStat> = {}): FsStat {
  return { kind: 1, mode: 0o100644, nlink: 1, uid: 0, gid: 0, size: 0, atimeNs: 1, mtimeNs: 1, ctimeNs: 1, ...over };
}

describe('NodeTable', () => {
  it('gives each path one stable id, below 2^53, unique across exports', () => {
    const t = new NodeTable();
    const a = t.addRoot('a');
    const b = t.addRoot('b');
    const x = t.child(a, 'x');
    expect(t.child(a, 'x')).toBe(x);
    expect(t.child(b, 'x').id).not.toBe(x.id);
    expect(new Set([a.id, b.id, x.id]).size).toBe(3);
    expect(x.id).toBeLessThan(2 ** 53);
    expect(t.get(x.id)).toBe(x);
    expect(x.path()).toEqual(['x']);
    expect(a.path()).toEqual([]);
  });

  it('hands out every name of a file with several (hard links) under the oldest live id, and lists the other names', () => {
    const t = new NodeTable();
    const root = t.addRoot('w');
    const a = t.child(root, 'a');
    const b = t.child(root, 'b');
    const c = t.child(root, 'c');
    // One name: itself.
    expect(t.linkPrimary(a, stat({ fileKey: '1:7' }))).toBe(a);
    // Two names of inode 7: b comes under a's id, whichever is seen first.
    const linked = stat({ nlink: 2, fileKey: '1:7' });
    expect(t.linkPrimary(b, linked)).toBe(b);
    expect(t.linkPrimary(a, linked)).toBe(a);
    expect(t.linkPrimary(b, linked)).toBe(a);
    expect(t.otherNames(a)).toEqual([b]);
    expect(t.otherNames(c)).toEqual([]);
    // A directory, or a file without a key, is never paired.
    expect(t.linkPrimary(c, stat({ kind: 2, nlink: 3, fileKey: '1:7' }))).toBe(c);
    // The name whose id is shown removed: the id stays with the file (as its inode number
    // does), at the remaining name; that name's own id goes.
    const aId = a.id;
    expect(t.forget(a)).toEqual([b]);
    expect(a.live).toBe(true);
    expect(a.path()).toEqual(['b']);
    expect(t.peek(root, 'a')).toBeUndefined();
    expect(t.peek(root, 'b')).toBe(a);
    expect(t.get(aId)).toBe(a);
    expect(t.get(b.id)).toBeUndefined();
    expect(t.linkPrimary(a, linked)).toBe(a);
    expect(t.otherNames(a)).toEqual([]);
    // Back to one link: no longer paired; then it is forgotten like any name.
    expect(t.linkPrimary(a, stat({ fileKey: '1:7' }))).toBe(a);
    expect(t.forget(a)).toEqual([a]);
    expect(t.get(aId)).toBeUndefined();
  });

  it('keeps the id shown for a file with three names whichever names go, and ignores a rename between two of them', () => {
    const t = new NodeTable();
    const root = t.addRoot('w');
    const dir = t.child(root, 'd');
    const [x, y, z] = [t.child(root, 'x'), t.child(dir, 'y'), t.child(root, 'z')];
    const linked = stat({ nlink: 3, fileKey: '1:9' });
    for (const n of [x, y, z]) t.linkPrimary(n, linked);
    // rename(2) from one name of a file onto another does nothing.
    expect(t.move(z, root, 'x')).toEqual([]);
    expect(t.peek(root, 'z')).toBe(z);
    // A name that is not the shown one goes on its own.
    expect(t.forget(z)).toEqual([z]);
    expect(t.linkPrimary(y, stat({ nlink: 2, fileKey: '1:9' }))).toBe(x);
    // The shown one replaced by a rename: x's id moves to d/y.
    const other = t.child(root, 'other');
    expect(t.move(other, root, 'x')).toEqual([y]);
    expect(x.path()).toEqual(['d', 'y']);
    expect(t.peek(root, 'x')).toBe(other);
    expect(t.get(x.id)).toBe(x);
  });

  it('moves a directory with its subtree: descendants keep their ids under the new path', () => {
    const t = new NodeTable();
    const root = t.addRoot('w');
    const dir = t.child(root, 'dir');
    const deep = t.child(t.child(dir, 'sub'), 'f.txt');
    const other = t.child(root, 'other');
    expect(t.move(dir, other, 'renamed')).toEqual([]);
    expect(deep.path()).toEqual(['other', 'renamed', 'sub', 'f.txt']);
    expect(t.peek(root, 'dir')).toBeUndefined();
    expect(t.peek(other, 'renamed')).toBe(dir);
    expect(t.get(deep.id)).toBe(deep);
    expect(other.contains(deep)).toBe(true);
  });

  it('forgets a replaced destination and its subtree', () => {
    const t = new NodeTable();
    const root = t.addRoot('w');
    const src = t.child(root, 'src');
    const dst = t.child(root, 'dst');
    const below = t.child(dst, 'below');
    const gone = t.move(src, root, 'dst');
    expect(gone.map((n) => n.id).sort()).toEqual([dst.id, below.id].sort());
    expect(t.get(dst.id)).toBeUndefined();
    expect(t.get(below.id)).toBeUndefined();
    expect(dst.live).toBe(false);
    expect(t.peek(root, 'dst')).toBe(src);
    // a path created again gets a new id
    expect(t.child(dst, 'x')).toBeDefined();
    const again = t.child(root, 'src');
    expect(again.id).not.toBe(src.id);
  });

  it('observe bumps gen when ctime moves and dirGen when a directory mtime moves', () => {
    const t = new NodeTable();
    const root = t.addRoot('w');
    const f = t.child(root, 'f');
    expect(t.observe(f, stat({ ctimeNs: 10 }))).toBe(false);
    expect(f.gen).toBe(1);
    expect(t.observe(f, stat({ ctimeNs: 10 }))).toBe(false);
    expect(t.observe(f, stat({ ctimeNs: 11 }))).toBe(true);
    expect(f.gen).toBe(2);
    t.observe(root, stat({ kind: 2, mtimeNs: 5 }));
    t.observe(root, stat({ kind: 2, mtimeNs: 6 }));
    expect(root.dirGen).toBe(2);
  });
});
