/**
 * Error codes and typed protocol errors (docs/protocol.md "Envelope and errors", "Control operations",
 * "FS sessions on `svc-fs-node` (`/v2/fs`)"; docs/namespace.md).
 *
 * Every rejection a server sends is a {@link ProtocolError}; the envelope layer maps it to
 * `control.error` / `acheron.error` (`{code, message}`) or `acheron.err_fs` (`{errno, message}`).
 */

/** Control and runtime error codes. */
export const ERROR_CODES = [
  // envelope and negotiation (docs/protocol.md "Envelope and errors")
  'invalid_envelope',
  'legacy_type_rejected',
  'unknown_type',
  'protocol_mismatch',
  'message_too_big',
  // payloads and gates (docs/protocol.md "Gates")
  'invalid_payload',
  'missing_field',
  'forbidden',
  'operator_auth_failed',
  'project_not_found',
  'project_auth_failed',
  'node_not_found',
  'node_auth_failed',
  'invite_not_found',
  'invite_expired',
  'invite_redeemed',
  'pending_join_not_found',
  'mount_not_found',
  'internal_error',
  'unavailable',
  // runtime namespace (docs/namespace.md)
  'enoent',
  'eperm',
  'eisdir',
  'enotdir',
  'invalid',
  'eio',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

/** Linux errno numbers used on FS sessions (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). */
export const Errno = {
  EPERM: 1,
  ENOENT: 2,
  EINTR: 4,
  EIO: 5,
  ENXIO: 6,
  EBADF: 9,
  EAGAIN: 11,
  ENOMEM: 12,
  EACCES: 13,
  EBUSY: 16,
  EEXIST: 17,
  EXDEV: 18,
  ENODEV: 19,
  ENOTDIR: 20,
  EISDIR: 21,
  EINVAL: 22,
  ENFILE: 23,
  EMFILE: 24,
  ETXTBSY: 26,
  EFBIG: 27,
  ENOSPC: 28,
  EROFS: 30,
  EMLINK: 31,
  ERANGE: 34,
  EDEADLK: 35,
  ENAMETOOLONG: 36,
  ENOLCK: 37,
  ENOSYS: 38,
  ENOTEMPTY: 39,
  ELOOP: 40,
  ENODATA: 61,
  EPROTO: 71,
  EOVERFLOW: 75,
  ENOTSUP: 95,
  ETIMEDOUT: 110,
  ESTALE: 116,
  EDQUOT: 122,
} as const;

const STRERROR: Record<number, string> = {
  1: 'Operation not permitted',
  2: 'No such file or directory',
  4: 'Interrupted system call',
  5: 'Input/output error',
  6: 'No such device or address',
  9: 'Bad file descriptor',
  11: 'Resource temporarily unavailable',
  12: 'Cannot allocate memory',
  13: 'Permission denied',
  16: 'Device or resource busy',
  17: 'File exists',
  18: 'Invalid cross-device link',
  19: 'No such device',
  20: 'Not a directory',
  21: 'Is a directory',
  22: 'Invalid argument',
  23: 'Too many open files in system',
  24: 'Too many open files',
  26: 'Text file busy',
  27: 'File too large',
  28: 'No space left on device',
  30: 'Read-only file system',
  31: 'Too many links',
  34: 'Numerical result out of range',
  35: 'Resource deadlock avoided',
  36: 'File name too long',
  37: 'No locks available',
  38: 'Function not implemented',
  39: 'Directory not empty',
  40: 'Too many levels of symbolic links',
  61: 'No data available',
  71: 'Protocol error',
  75: 'Value too large for defined data type',
  95: 'Operation not supported',
  110: 'Connection timed out',
  116: 'Stale file handle',
  122: 'Disk quota exceeded',
};

/** The symbolic name of a Linux errno number, e.g. `errnoName(2)` = `ENOENT` (`E<n>` when unknown). */
export function errnoName(errno: number): string {
  for (const [name, n] of Object.entries(Errno)) if (n === errno) return name;
  return `E${errno}`;
}

/** The C library's message for a Linux errno number, e.g. `strerror(2)` = `No such file or directory`. */
export function strerror(errno: number): string {
  return STRERROR[errno] ?? `Unknown error ${errno}`;
}

/** errno used when an envelope or negotiation error is sent on an FS session. */
const CODE_TO_ERRNO: Partial<Record<ErrorCode, number>> = {
  invalid_envelope: Errno.EINVAL,
  legacy_type_rejected: Errno.EINVAL,
  unknown_type: Errno.ENOSYS,
  protocol_mismatch: Errno.EPROTO,
  message_too_big: Errno.EFBIG,
  invalid_payload: Errno.EINVAL,
  missing_field: Errno.EINVAL,
  forbidden: Errno.EACCES,
  internal_error: Errno.EIO,
  enoent: Errno.ENOENT,
  eperm: Errno.EPERM,
  eisdir: Errno.EISDIR,
  enotdir: Errno.ENOTDIR,
  invalid: Errno.EINVAL,
  eio: Errno.EIO,
};

/**
 * A rejection with a protocol error code and a human-readable message.
 *
 * `errno` is set for FS errors (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"); for control/runtime codes it is derived when
 * the error has to be sent on an FS session.
 */
export class ProtocolError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly errno?: number,
  ) {
    // A protocol error is an expected answer to bad input, not a bug: capturing a stack
    // trace would only cost time (several µs per rejected frame under fuzzing or abuse).
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(message);
    Error.stackTraceLimit = limit;
    this.name = 'ProtocolError';
  }

  /** The Linux errno for this error on an FS session (EIO when there is no closer one). */
  toErrno(): number {
    return this.errno ?? CODE_TO_ERRNO[this.code] ?? Errno.EIO;
  }
}

/**
 * An FS error (`acheron.err_fs` `{errno, message}`, docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)").
 * @param errno Linux errno number; `message` defaults to `strerror(errno)`.
 */
export class FsError extends ProtocolError {
  constructor(errno: number, message?: string) {
    super('eio', message ?? strerror(errno), errno);
    this.name = 'FsError';
  }
}

/** Shorthand for `new ProtocolError(code, message)`. */
export function fail(code: ErrorCode, message: string): never {
  throw new ProtocolError(code, message);
}
