import { Errno, FsError } from '@svc/protocol';
import { errnoOf, toFsError } from './errno';

describe('errno mapping', () => {
  it('maps Node error codes to Linux errno numbers', () => {
    const err = (code: string) => Object.assign(new Error(`${code}: something, lstat '/secret/path'`), { code });
    expect(errnoOf(err('ENOENT'))).toBe(Errno.ENOENT);
    expect(errnoOf(err('EACCES'))).toBe(Errno.EACCES);
    expect(errnoOf(err('ENOTEMPTY'))).toBe(Errno.ENOTEMPTY);
    expect(errnoOf(err('EOPNOTSUPP'))).toBe(Errno.ENOTSUP);
    expect(errnoOf(err('ELOOP'))).toBe(Errno.ELOOP);
    expect(errnoOf(err('EWHATEVER'))).toBe(Errno.EIO);
    const mapped = toFsError(err('ENOENT')) as FsError;
    expect(mapped).toBeInstanceOf(FsError);
    expect(mapped.message).toBe('No such file or directory');
    expect(mapped.message).not.toContain('/secret/path');
  });

  it('passes FsErrors through and leaves bugs alone (for the filter to log)', () => {
    const fsErr = new FsError(Errno.EXDEV);
    expect(toFsError(fsErr)).toBe(fsErr);
    const bug = new TypeError('x is undefined');
    expect(toFsError(bug)).toBe(bug);
  });
});
