/** Human-readable formatting of attributes, listings and tables for `svc-fs-mount`. */
import { FileType } from '@svc/protocol/wire';
import { Attr, DirEntry, NodeKind } from '../../../libs/fs/src/router';

/** `ls -l` type character of each file type ({@link FileType}). */
const TYPE_CHARS: Record<number, string> = {
  [FileType.S_IFDIR]: 'd',
  [FileType.S_IFLNK]: 'l',
  [FileType.S_IFREG]: '-',
  [FileType.S_IFCHR]: 'c',
  [FileType.S_IFBLK]: 'b',
  [FileType.S_IFIFO]: 'p',
  [FileType.S_IFSOCK]: 's',
};

/** `ls -l` mode string of a full st_mode, e.g. `drwxr-xr-x`. */
export function modeString(m: number): string {
  const type = TYPE_CHARS[m & FileType.S_IFMT] ?? '?';
  let s = type;
  const rwx = 'rwxrwxrwx';
  for (let i = 0; i < 9; i++) s += m & (1 << (8 - i)) ? rwx[i] : '-';
  return s;
}

/** Kind name of {@link Attr.k}. */
export function kindName(k: number): string {
  return k === NodeKind.DIR ? 'directory' : k === NodeKind.SYMLINK ? 'symbolic link' : k === NodeKind.FILE ? 'regular file' : `kind ${k}`;
}

/** ISO time of a ns-since-epoch value. */
export function isoOfNs(ns: number): string {
  const ms = Math.floor(ns / 1e6);
  return Number.isFinite(ms) ? new Date(ms).toISOString() : String(ns);
}

/** `stat`-like lines for one path. */
export function formatAttr(path: string, a: Attr): string {
  return [
    `  File: ${path}`,
    `  Type: ${kindName(a.k)}`,
    `  Mode: ${(a.m & 0o7777).toString(8).padStart(4, '0')} (${modeString(a.m)})`,
    `  Size: ${a.sz}`,
    ` Links: ${a.n}`,
    `   Uid: ${a.u}  Gid: ${a.g}`,
    `    Id: ${a.id}  Gen: ${a.gen}`,
    `Access: ${isoOfNs(a.at)}`,
    `Modify: ${isoOfNs(a.mt)}`,
    `Change: ${isoOfNs(a.ct)}`,
  ].join('\n');
}

/** `ls -l`-like lines, one per entry. */
export function formatEntries(entries: DirEntry[]): string[] {
  const sizeWidth = Math.max(1, ...entries.map((e) => String(e.attr.sz).length));
  return entries.map(
    (e) =>
      `${modeString(e.attr.m)} ${String(e.attr.n).padStart(3)} ${String(e.attr.sz).padStart(sizeWidth)} ${isoOfNs(e.attr.mt).slice(0, 19).replace('T', ' ')} ${e.name}`,
  );
}

/** A plain-text table: header row, then rows, columns padded to their widest cell. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const fmt = (r: string[]) =>
    r
      .map((c, i) => (i === r.length - 1 ? c : (c ?? '').padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  return [fmt(header), ...rows.map(fmt)].join('\n');
}
