/**
 * Node.js system error codes to Linux errno numbers for `acheron.err_fs` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)").
 * Messages never carry the server's paths: a Node error message names the local path, so only
 * `strerror(errno)` reaches the client.
 */
import { Errno, FsError } from '@svc/protocol';

/** Node `err.code` -> Linux errno. Codes not listed map to EIO. */
const CODE_TO_ERRNO: Record<string, number> = {
  EPERM: Errno.EPERM,
  ENOENT: Errno.ENOENT,
  EIO: Errno.EIO,
  ENXIO: Errno.ENXIO,
  EBADF: Errno.EBADF,
  EAGAIN: Errno.EAGAIN,
  EWOULDBLOCK: Errno.EAGAIN,
  ENOMEM: Errno.ENOMEM,
  EACCES: Errno.EACCES,
  EBUSY: Errno.EBUSY,
  EEXIST: Errno.EEXIST,
  EXDEV: Errno.EXDEV,
  ENODEV: Errno.ENODEV,
  ENOTDIR: Errno.ENOTDIR,
  EISDIR: Errno.EISDIR,
  EINVAL: Errno.EINVAL,
  ENFILE: Errno.ENFILE,
  EMFILE: Errno.EMFILE,
  ETXTBSY: Errno.ETXTBSY,
  EFBIG: Errno.EFBIG,
  ENOSPC: Errno.ENOSPC,
  EROFS: Errno.EROFS,
  EMLINK: Errno.EMLINK,
  ERANGE: Errno.ERANGE,
  ENAMETOOLONG: Errno.ENAMETOOLONG,
  ENOSYS: Errno.ENOSYS,
  ENOTEMPTY: Errno.ENOTEMPTY,
  ELOOP: Errno.ELOOP,
  ENODATA: Errno.ENODATA,
  EOVERFLOW: Errno.EOVERFLOW,
  ENOTSUP: Errno.ENOTSUP,
  EOPNOTSUPP: Errno.ENOTSUP,
  ETIMEDOUT: Errno.ETIMEDOUT,
  ESTALE: Errno.ESTALE,
  EDQUOT: Errno.EDQUOT,
};

/** The Linux errno of a Node.js error (`err.code`), EIO when unknown. */
export function errnoOf(err: unknown): number {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return (typeof code === 'string' && CODE_TO_ERRNO[code]) || Errno.EIO;
}

/**
 * Converts what a filesystem call threw into an {@link FsError}: FsErrors pass through, Node
 * system errors (with a string `code`) become their errno with `strerror` as the message (no
 * local paths). Anything else (a bug) is returned unchanged, so the exception filter logs it
 * and answers EIO with a reference.
 */
export function toFsError(err: unknown): unknown {
  if (err instanceof FsError) return err;
  if (typeof (err as NodeJS.ErrnoException | null)?.code === 'string') return new FsError(errnoOf(err));
  return err;
}
