/**
 * File type bits of a full st_mode as carried in `Attr.m` (docs/protocol.md "FS sessions on
 * `svc-fs-node` (`/v2/fs`)"): the Linux values, whatever the platform of the node or the client.
 */
export const FileType = {
  /** Mask of the file type bits. */
  S_IFMT: 0o170000,
  S_IFSOCK: 0o140000,
  S_IFLNK: 0o120000,
  S_IFREG: 0o100000,
  S_IFBLK: 0o060000,
  S_IFDIR: 0o040000,
  S_IFCHR: 0o020000,
  S_IFIFO: 0o010000,
} as const;

/**
 * True when a full st_mode (type and permission bits, e.g. `Attr.m`) is that of a regular
 * file; false for a directory, symlink, fifo, socket or device.
 */
export function isRegularFileMode(mode: number): boolean {
  return (mode & FileType.S_IFMT) === FileType.S_IFREG;
}
