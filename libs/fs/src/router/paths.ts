/**
 * Path helpers of the workspace router and the FUSE layer, in one place.
 *
 * Two kinds of path:
 * - *workspace paths*: absolute, normalised (`/`, `/docs/a`); what callers of the router and
 *   the FUSE layer use;
 * - *export-relative paths* (`rel`): relative to an export root, `''` for the root itself,
 *   `a/b` below it; what the router walks with `lookup` and caches per endpoint.
 */
import { Errno, FsError } from '@svc/protocol/wire';

/**
 * Normalises an absolute workspace path: repeated and trailing `/` removed, `.` segments
 * dropped. `..` segments, NUL and relative paths are refused.
 * @param path e.g. `//docs/./a/` -> `/docs/a`; `/` stays `/`
 * @throws FsError EINVAL for a relative path, a `..` segment or a NUL character
 */
export function normalizePath(path: string): string {
  if (typeof path !== 'string' || !path.startsWith('/')) throw new FsError(Errno.EINVAL, `workspace paths are absolute: ${JSON.stringify(path)}`);
  if (path.includes('\0')) throw new FsError(Errno.EINVAL, 'workspace paths cannot contain NUL');
  const parts: string[] = [];
  for (const seg of path.split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') throw new FsError(Errno.EINVAL, `workspace paths cannot contain "..": ${path}`);
    parts.push(seg);
  }
  return `/${parts.join('/')}`;
}

/** The segments of a normalised workspace path (`/` has none). */
export function segmentsOf(path: string): string[] {
  return path === '/' ? [] : path.slice(1).split('/');
}

/**
 * Parent path and last name of a normalised workspace path: `/a/b` -> `/a` + `b`, `/a` -> `/`
 * + `a`; `/` -> `/` + `''`.
 */
export function splitParent(path: string): { parent: string; name: string } {
  const i = path.lastIndexOf('/');
  return { parent: i <= 0 ? '/' : path.slice(0, i), name: path.slice(i + 1) };
}

/** The parent of a normalised workspace path (`/` for `/` and for top-level names). */
export function parentPath(path: string): string {
  return splitParent(path).parent;
}

/** The last name of a normalised workspace path (`''` for `/`). */
export function baseName(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

/** Joins a normalised workspace directory path and a name: (`/`, `a`) -> `/a`, (`/d`, `a`) -> `/d/a`. */
export function joinPath(dir: string, name: string): string {
  return dir === '/' ? `/${name}` : `${dir}/${name}`;
}

/** The workspace path of export-relative path `rel` in the mount at `mountPath` (`''` is the mount path itself). */
export function workspacePath(mountPath: string, rel: string): string {
  return rel === '' ? mountPath : joinPath(mountPath, rel);
}

/** Joins an export-relative directory path and a name: (``, `a`) -> `a`, (`d`, `a`) -> `d/a`. */
export function relJoin(rel: string, name: string): string {
  return rel === '' ? name : `${rel}/${name}`;
}

/** Parent and last name of an export-relative path: `d/a` -> `d` + `a`, `a` -> `` + `a`. */
export function relSplit(rel: string): { parent: string; name: string } {
  const i = rel.lastIndexOf('/');
  return i < 0 ? { parent: '', name: rel } : { parent: rel.slice(0, i), name: rel.slice(i + 1) };
}

/** The parent of an export-relative path (`''`, the export root, for top-level names). */
export function relParent(rel: string): string {
  return relSplit(rel).parent;
}
