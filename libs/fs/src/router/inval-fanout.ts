/**
 * Invalidation fan-out of the workspace router (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)" `acheron.e_fs_inval*`): a node's
 * push on one FS session becomes, for every mount that session serves, a `inval` /
 * `inval_dir` event naming the workspace paths the mount's {@link LookupCache} knows for the
 * node (marking them unverified on the way).
 *
 * A push the node marks `own` (the `inval_own` extension: every change it reports was made
 * through this client's own requests, which updated the caches already) changes nothing here
 * and reaches the mount with `own` set when the session's mounts know the node under one path
 * at most; a node known under several paths (two mounts of one export, a hard link) is
 * handled as any push, since the request went through one of them only.
 */
import type { EndpointSession } from './endpoint-pool';
import type { MountRoutes } from './failover';
import { InvalDirEvent, InvalEvent } from './fs-types';
import { workspacePath } from './paths';
import { RouterEmit } from './router-events';

/** Turns node invalidation pushes into router `inval` / `inval_dir` events. */
export class InvalFanout {
  constructor(
    private readonly routes: Pick<MountRoutes, 'values'>,
    private readonly emit: RouterEmit,
  ) {}

  /**
   * `acheron.e_fs_inval` on session `s`: one `inval` event per mount served by `s`. `what`
   * `all` (the node may have changed kind or existence) marks its cached paths unverified.
   */
  inval(s: EndpointSession, ev: InvalEvent): void {
    const own = ev.own === true && this.knownOnce(s, ev.node);
    for (const route of this.routes.values()) {
      const a = route.active;
      if (!a || a.session !== s) continue;
      const rels = ev.what === 'all' && !own ? a.cache.nodeChanged(ev.node) : a.cache.pathsOf(ev.node);
      this.emit('inval', { mount_path: route.mountPath, paths: rels.map((r) => workspacePath(route.mountPath, r)), node: ev.node, what: ev.what, own });
    }
  }

  /**
   * `acheron.e_fs_inval_dir` on session `s`: one `inval_dir` event per mount served by `s`;
   * the directory's cached children become unverified.
   */
  invalDir(s: EndpointSession, ev: InvalDirEvent): void {
    const own = ev.own === true && this.knownOnce(s, ev.dir);
    for (const route of this.routes.values()) {
      const a = route.active;
      if (!a || a.session !== s) continue;
      const rels = own ? a.cache.pathsOf(ev.dir) : a.cache.childrenChanged(ev.dir);
      this.emit('inval_dir', { mount_path: route.mountPath, paths: rels.map((r) => workspacePath(route.mountPath, r)), dir: ev.dir, own });
    }
  }

  /** True when the mounts served by session `s` know node `id` under one path at most. */
  knownOnce(s: EndpointSession, id: number): boolean {
    let n = 0;
    for (const route of this.routes.values()) {
      const a = route.active;
      if (a && a.session === s) n += a.cache.pathsOf(id).length;
    }
    return n <= 1;
  }
}
