import { FileType, isRegularFileMode } from './file-mode';

describe('isRegularFileMode', () => {
  it('is true for a regular file whatever its permission bits', () => {
    expect(isRegularFileMode(FileType.S_IFREG | 0o644)).toBe(true);
    expect(isRegularFileMode(FileType.S_IFREG | 0o7777)).toBe(true);
  });

  it('is false for every other file type', () => {
    for (const type of [FileType.S_IFDIR, FileType.S_IFLNK, FileType.S_IFCHR, FileType.S_IFBLK, FileType.S_IFIFO, FileType.S_IFSOCK]) {
      expect(isRegularFileMode(type | 0o644)).toBe(false);
    }
    expect(isRegularFileMode(0o644)).toBe(false);
  });
});
