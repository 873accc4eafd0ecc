import { Errno, FsError } from './errors';
import { decodeBase64Strict, OpenFlags, wantsWrite } from './fs';

describe('decodeBase64Strict', () => {
  it.each([
    ['', ''],
    ['QQ==', 'A'],
    ['QUI=', 'AB'],
    ['QUJD', 'ABC'],
    ['/+/+', Buffer.from([0xff, 0xef, 0xfe]).toString('latin1')],
  ])('decodes %j', (text, plain) => {
    expect(decodeBase64Strict(text).toString('latin1')).toBe(plain);
  });

  it.each(['abc', '!!!!', 'QQ=A', 'Q===', '====', 'QUJD\n', 'QU JD', 'QUJ-', 'QUJ_', 'QUJD====', 'A', '=QUJ', 'Q=Q=', 'QUJé'])('refuses %j with EINVAL', (text) => {
    let err: unknown;
    try {
      decodeBase64Strict(text);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(FsError);
    expect((err as FsError).errno).toBe(Errno.EINVAL);
  });

  it('round-trips 1 MiB of random bytes', () => {
    const data = Buffer.from(Array.from({ length: 1 << 20 }, (_, i) => (i * 7919) & 0xff));
    expect(decodeBase64Strict(data.toString('base64')).equals(data)).toBe(true);
  });
});

describe('wantsWrite', () => {
  it('is true for write access, truncation, appending and creation', () => {
    expect(wantsWrite(OpenFlags.O_RDONLY)).toBe(false);
    expect(wantsWrite(OpenFlags.O_RDONLY | OpenFlags.O_DIRECTORY | OpenFlags.O_NOFOLLOW)).toBe(false);
    expect(wantsWrite(OpenFlags.O_WRONLY)).toBe(true);
    expect(wantsWrite(OpenFlags.O_RDWR)).toBe(true);
    expect(wantsWrite(OpenFlags.O_RDONLY | OpenFlags.O_TRUNC)).toBe(true);
    expect(wantsWrite(OpenFlags.O_RDONLY | OpenFlags.O_APPEND)).toBe(true);
    expect(wantsWrite(OpenFlags.O_RDONLY | OpenFlags.O_CREAT)).toBe(true);
  });
});
