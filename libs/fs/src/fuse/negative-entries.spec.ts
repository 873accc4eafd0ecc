import { NegativeEntries } from './negative-entries';

describe('NegativeEntries', () => {
  it('keeps names by directory, takes them all at once, and forgets a name that now exists', () => {
    const n = new NegativeEntries();
    expect(n.add(2, '.gitignore')).toBe(true);
    expect(n.add(2, '.gitignore')).toBe(true);
    expect(n.add(2, 'a')).toBe(true);
    expect(n.add(3, 'b')).toBe(true);
    expect(n.size).toBe(3);
    n.delete(2, 'a');
    n.delete(2, 'not-there');
    expect(n.take(2)).toEqual(['.gitignore']);
    expect(n.take(2)).toEqual([]);
    expect(n.size).toBe(1);
  });

  it('refuses past its bound, so the kernel is not told of a name it could not drop again', () => {
    const n = new NegativeEntries(2);
    expect(n.add(2, 'a')).toBe(true);
    expect(n.add(2, 'b')).toBe(true);
    expect(n.add(2, 'c')).toBe(false);
    expect(n.add(2, 'a')).toBe(true);
    n.take(2);
    expect(n.add(2, 'c')).toBe(true);
  });
});
