import { InodeTable, ROOT_INO } from './inode-table';

describe('InodeTable', () => {
  it('gives a new number to each new name and the same one to a name looked up again', () => {
    const t = new InodeTable();
    const a = t.lookup(ROOT_INO, 'a');
    const b = t.lookup(ROOT_INO, 'b');
    expect(a.ino).not.toBe(b.ino);
    expect(a.ino).not.toBe(ROOT_INO);
    expect(t.lookup(ROOT_INO, 'a')).toBe(a);
    expect(a.nlookup).toBe(2);
    expect(t.pathOf(a.ino)).toBe('/a');
    expect(t.pathOf(ROOT_INO)).toBe('/');
  });

  it('builds paths through parents and finds entries by path', () => {
    const t = new InodeTable();
    const d = t.lookup(ROOT_INO, 'd');
    const f = t.lookup(d.ino, 'f');
    expect(t.pathOf(f.ino)).toBe('/d/f');
    expect(t.find('/d/f')).toBe(f);
    expect(t.find('/d/g')).toBeUndefined();
    expect(t.find('/')).toBe(t.root);
    expect(t.child(d.ino, 'f')).toBe(f);
  });

  it('drops an entry when the kernel forgets every lookup, and never reuses its number', () => {
    const t = new InodeTable();
    const a = t.lookup(ROOT_INO, 'a');
    t.lookup(ROOT_INO, 'a');
    t.forget(a.ino, 1);
    expect(t.get(a.ino)).toBe(a);
    t.forget(a.ino, 1);
    expect(t.get(a.ino)).toBeUndefined();
    expect(t.size).toBe(1);
    const again = t.lookup(ROOT_INO, 'a');
    expect(again.ino).not.toBe(a.ino);
  });

  it('ignores forgets of the root and of unknown numbers', () => {
    const t = new InodeTable();
    t.forget(ROOT_INO, 5);
    t.forget(999, 1);
    expect(t.get(ROOT_INO)).toBe(t.root);
  });

  it('moves a subtree on rename and detaches the replaced target', () => {
    const t = new InodeTable();
    const d = t.lookup(ROOT_INO, 'd');
    const f = t.lookup(d.ino, 'f');
    const e = t.lookup(ROOT_INO, 'e');
    const old = t.lookup(e.ino, 'x');
    const replaced = t.rename(ROOT_INO, 'd', e.ino, 'x');
    expect(replaced).toBe(old);
    expect(old.attached).toBe(false);
    expect(t.pathOf(old.ino)).toBeNull();
    expect(t.pathOf(f.ino)).toBe('/e/x/f');
    expect(t.find('/d')).toBeUndefined();
    expect(t.find('/e/x')).toBe(d);
    // The detached inode stays known until the kernel forgets it.
    expect(t.get(old.ino)).toBe(old);
    t.forget(old.ino, 1);
    expect(t.get(old.ino)).toBeUndefined();
    expect(t.find('/e/x')).toBe(d);
  });

  it('detaches an unlinked entry, and a new file of that name gets a new number', () => {
    const t = new InodeTable();
    const a = t.lookup(ROOT_INO, 'a');
    expect(t.remove(ROOT_INO, 'a')).toBe(a);
    expect(t.pathOf(a.ino)).toBeNull();
    const b = t.lookup(ROOT_INO, 'a');
    expect(b.ino).not.toBe(a.ino);
    t.forget(a.ino, 1);
    expect(t.find('/a')).toBe(b);
  });

  it('renames onto itself as a no-op', () => {
    const t = new InodeTable();
    const a = t.lookup(ROOT_INO, 'a');
    expect(t.rename(ROOT_INO, 'a', ROOT_INO, 'a')).toBeUndefined();
    expect(t.find('/a')).toBe(a);
    expect(a.attached).toBe(true);
  });

  it('exchanges two names', () => {
    const t = new InodeTable();
    const a = t.lookup(ROOT_INO, 'a');
    const d = t.lookup(ROOT_INO, 'd');
    const b = t.lookup(d.ino, 'b');
    t.exchange(ROOT_INO, 'a', d.ino, 'b');
    expect(t.pathOf(a.ino)).toBe('/d/b');
    expect(t.pathOf(b.ino)).toBe('/a');
  });

  it('lists a subtree, the top first', () => {
    const t = new InodeTable();
    const d = t.lookup(ROOT_INO, 'd');
    const f = t.lookup(d.ino, 'f');
    const s = t.lookup(d.ino, 's');
    const g = t.lookup(s.ino, 'g');
    const seen = [...t.subtree('/d')];
    expect(seen[0]).toBe(d);
    expect(new Set(seen)).toEqual(new Set([d, f, s, g]));
    expect([...t.subtree('/nope')]).toEqual([]);
  });

  it('holds 100,000 inodes and shrinks back to the root once all are forgotten', () => {
    const t = new InodeTable();
    const dirs = Array.from({ length: 100 }, (_, i) => t.lookup(ROOT_INO, `d${i}`));
    const files = dirs.flatMap((d) => Array.from({ length: 1000 }, (_, i) => t.lookup(d.ino, `f${i}`)));
    expect(t.size).toBe(1 + 100 + 100_000);
    for (const f of files) t.forget(f.ino, 1);
    for (const d of dirs) t.forget(d.ino, 1);
    expect(t.size).toBe(1);
    expect(t.root.children?.size ?? 0).toBe(0);
  });

  it('finds the other inodes of a file (hard links) by its node id, and forgets them with the kernel', () => {
    const t = new InodeTable();
    const a = t.lookup(ROOT_INO, 'a');
    const b = t.lookup(ROOT_INO, 'b');
    const c = t.lookup(ROOT_INO, 'c');
    t.setFileId(a, 7);
    t.setFileId(b, 7);
    t.setFileId(c, 8);
    expect(t.sameFile(7, a.ino)).toEqual([b]);
    expect(t.sameFile(8, c.ino)).toEqual([]);
    t.setFileId(b, 9);
    expect(t.sameFile(7, a.ino)).toEqual([]);
    expect(t.sameFile(9, a.ino)).toEqual([b]);
    t.forget(b.ino, 1);
    expect(t.sameFile(9, 0)).toEqual([]);
    expect(t.sameFile(0, 0)).toEqual([]);
  });

  it('throws on a lookup below an unknown inode', () => {
    expect(() => new InodeTable().lookup(42, 'x')).toThrow(/not known/);
  });
});
