/**
 * Export-relative path -> node id resolution on one endpoint: `lookup` walks
 * from the deepest usable prefix of the endpoint's {@link LookupCache}, and the recovery when a
 * cached node id turned out stale (ENOENT/ESTALE after starting from it).
 */
import { Errno, FsError } from '@svc/protocol/wire';
import type { ActiveEndpoint } from './failover';
import { Attr } from './fs-types';
import { relJoin } from './paths';

/** True for the errors that say a node id or name is gone: FsError ENOENT or ESTALE. */
export function isStale(e: unknown): boolean {
  return e instanceof FsError && (e.errno === Errno.ENOENT || e.errno === Errno.ESTALE);
}

/** Where {@link walk} ended: the node id, its attr when the last step was a `lookup`, and whether the walk started from the cache. */
export interface Walked {
  id: number;
  attr?: Attr;
  cached: boolean;
}

/**
 * Resolves `rel` to a node id: the longest cached prefix (with `useCache`), then one `lookup`
 * per remaining name (each result cached).
 * @param rel export-relative path (`''` = the export root)
 * @returns the id, the attr when the last step was looked up, and whether the cache was used
 * @throws FsError from `lookup` (ENOENT, ENOTDIR, EACCES, ...), ConnectionError
 */
export async function walk(a: ActiveEndpoint, rel: string, useCache: boolean): Promise<Walked> {
  if (rel === '') return { id: a.root, cached: false };
  if (useCache && a.cache.isVerified(rel)) return { id: a.cache.get(rel)!, cached: true };
  const names = rel.split('/');
  let id = a.root;
  let prefix = '';
  let start = 0;
  if (useCache) {
    const hit = a.cache.usablePrefix(names);
    if (hit.depth > 0) {
      id = hit.id!;
      start = hit.depth;
      prefix = names.slice(0, start).join('/');
    }
  }
  const cached = start > 0;
  let attr: Attr | undefined;
  for (let j = start; j < names.length; j++) {
    const r = await a.session.client.request('lookup', { node: id }, { name: names[j] });
    attr = r.attr;
    id = attr.id;
    prefix = relJoin(prefix, names[j]);
    a.cache.set(prefix, id);
  }
  return { id, attr, cached };
}

/**
 * Runs `fn`, which walks `rel` from its deepest usable cached prefix. When it fails with
 * ENOENT/ESTALE after starting from a cached node id, one `getattr` checks that id: still
 * known to the node, the error stands (what is missing is below it, and the cache stays as
 * it is: a negative lookup costs one more request, not a walk from the root); forgotten (the
 * node removed or renamed it for another session), its cached subtree is dropped and `fn`
 * runs again from the next cached ancestor, or from the export root. With the `dir_estale`
 * extension the node says itself which it is: ENOENT below a cached directory stands without
 * that `getattr` (the directory is there; a program creating files asks about each new name
 * first), and ESTALE drops the cached subtree at once.
 * @throws what `fn` throws when the retry does not apply; the `getattr` error when it is not ENOENT/ESTALE
 */
export async function retryStale<T>(a: ActiveEndpoint, rel: string, fn: () => Promise<T>): Promise<T> {
  for (let attempts = rel.split('/').length + 1; ; attempts--) {
    const start = cachedStart(a, rel);
    try {
      return await fn();
    } catch (e) {
      if (!start || !isStale(e) || attempts <= 0) throw e;
      const told = a.session.client.has('dir_estale') && start.rel !== rel;
      if (told ? (e as FsError).errno === Errno.ENOENT : await stillKnown(a, start.id)) throw e;
      a.cache.dropTree(start.rel);
    }
  }
}

/**
 * Runs `fn` on the node at `rel`: walked from the cache ({@link walk}), and walked again when
 * it fails because a cached id was stale ({@link retryStale}; `fn` then runs again).
 * @param rel export-relative path (`''` = the export root)
 * @returns what `fn` returns
 * @throws as {@link walk} and {@link retryStale}, and what `fn` throws
 */
export function withNode<T>(a: ActiveEndpoint, rel: string, fn: (node: Walked) => Promise<T>): Promise<T> {
  return retryStale(a, rel, async () => fn(await walk(a, rel, true)));
}

/** Where {@link walk} with the cache starts for `rel`: the cached prefix and its id, or null (the export root). */
function cachedStart(a: ActiveEndpoint, rel: string): { rel: string; id: number } | null {
  if (rel === '') return null;
  if (a.cache.isVerified(rel)) return { rel, id: a.cache.get(rel)! };
  const names = rel.split('/');
  const hit = a.cache.usablePrefix(names);
  return hit.depth > 0 ? { rel: names.slice(0, hit.depth).join('/'), id: hit.id! } : null;
}

/**
 * Whether the node still knows node id `id` (its path exists).
 * @throws the `getattr` error when it is not ENOENT/ESTALE
 */
async function stillKnown(a: ActiveEndpoint, id: number): Promise<boolean> {
  try {
    await a.session.client.request('getattr', { node: id });
    return true;
  } catch (e) {
    if (isStale(e)) return false;
    throw e;
  }
}
