import { Errno, FsError } from './errors';
import { randomBytes } from 'node:crypto';
import { base64Length, decodeBase64Bytes, decodeBase64Strict, FS_FEATURES, OpenFlags, parseFsFeatures, wantsWrite, writeBase64 } from './fs';
import { thrown } from '../../../test/helpers/thrown';

describe('parseFsFeatures', () => {
  it.each([
    [undefined, [...FS_FEATURES]],
    ['', [...FS_FEATURES]],
    [' all ', [...FS_FEATURES]],
    ['none', []],
    ['prefetch, open_read', ['open_read', 'prefetch']],
    ['prefetch,prefetch,', ['prefetch']],
  ])('parses %j', (text, expected) => {
    expect(parseFsFeatures(text, 'X')).toEqual(expected);
  });

  it.each([
    ['turbo', /X: unknown FS extension "turbo" \(known: open_read, prefetch, dir_estale, inval_ack, posix, inval_own, dir_attr, write_then; or all, none\)/],
    ['none,open_read', /X: "none" cannot be combined/],
    ['all,prefetch', /X: "all" cannot be combined/],
  ])('refuses %j naming the setting', (text, message) => {
    expect(() => parseFsFeatures(text, 'X')).toThrow(message);
  });
});

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

  it.each(['abc', '!!!!', 'QQ=A', 'Q===', '====', 'QUJD\n', 'QU JD', 'QUJ-', 'QUJ_', 'QUJD====', 'A', '=QUJ', 'Q=Q=', 'QUJé'])(
    'refuses %j with EINVAL',
    (text) => {
      const err = thrown(() => decodeBase64Strict(text));
      expect(err).toBeInstanceOf(FsError);
      expect((err as FsError).errno).toBe(Errno.EINVAL);
    },
  );

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

describe('writeBase64 / decodeBase64Bytes (pieces, no whole-text string)', () => {
  it.each([0, 1, 2, 3, 4, 5, 48 * 1024 - 1, 48 * 1024, 48 * 1024 + 1, 64 * 1024 + 7, (1 << 20) + 1])(
    'gives the text of toString("base64") and back for %d bytes',
    (n) => {
      const data = randomBytes(n);
      const out = Buffer.alloc(base64Length(n) + 10, 0x2a);
      expect(writeBase64(data, out, 5)).toBe(base64Length(n));
      expect(out.toString('latin1', 5, 5 + base64Length(n))).toBe(data.toString('base64'));
      expect(out[4]).toBe(0x2a);
      expect(out[5 + base64Length(n)]).toBe(0x2a);
      expect(decodeBase64Bytes(out, 5, 5 + base64Length(n)).equals(data)).toBe(true);
    },
  );

  it('refuses an output buffer that is too short', () => {
    expect(() => writeBase64(Buffer.alloc(3), Buffer.alloc(3), 0)).toThrow(RangeError);
  });
});
