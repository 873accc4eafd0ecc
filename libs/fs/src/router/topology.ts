/**
 * Mount topology as the router sees it: every mount path with its ordered
 * failover candidates, from the control plane's WorkspaceStatus (docs/protocol.md "Workspace status") or from a
 * static `--endpoint` list.
 */
import { Errno, FsError, MountState, MountView, rankMounts, TopologyDelta, WorkspaceStatus } from '@svc/protocol/wire';
import { normalizePath } from './paths';

/** One place a mount path can be served from: an FS endpoint and one of its exports. */
export interface MountCandidate {
  mount_path: string;
  export_name: string;
  /** FS endpoint URL (`ws://HOST:PORT/v2/fs`); null when the node is unknown (`missing`). */
  fs_url: string | null;
  /** FS session token for `acheron.t_fs_hello`, when the node has FS session auth on. */
  auth_token?: string;
  /** Control-plane node id (workspace mode) or null (endpoint mode). */
  node_id: string | null;
  /** Node name (workspace mode) or the `--endpoint` name (endpoint mode). */
  node_name: string | null;
  /** Availability per the control plane; null when unknown (endpoint mode). */
  state: MountState | null;
  lease_expires_at_ms: number | null;
  /** True for the control plane's selected mount of the path (the first candidate). */
  selected: boolean;
}

/** A whole topology: mount path -> candidates, preferred first. */
export interface Topology {
  source: 'workspace' | 'endpoints';
  project_id: string | null;
  agent_id: string | null;
  workspace_root: string | null;
  /**
   * The project's revision this topology reflects (docs/protocol.md "Workspace status"); deltas apply only on top of
   * it. Null when unknown: endpoint mode, a server that does not send one, or after the pin
   * ended.
   */
  revision: number | null;
  /** Mount paths in sorted order; each list is non-empty, the preferred candidate first. */
  mounts: Map<string, MountCandidate[]>;
  /** When it was read, ms since the epoch. */
  ts_ms: number;
}

/** Identity of a candidate within its mount path (node and export). */
export function candidateKey(c: Pick<MountCandidate, 'node_id' | 'node_name' | 'fs_url' | 'export_name'>): string {
  return `${c.node_id ?? c.node_name ?? ''}|${c.fs_url ?? ''}|${c.export_name}`;
}

function candidateOf(m: MountView, selected: boolean): MountCandidate {
  const c: MountCandidate = {
    mount_path: m.mount_path,
    export_name: m.export_name,
    fs_url: m.fs_url,
    node_id: m.node_id,
    node_name: m.node_name,
    state: m.state,
    lease_expires_at_ms: m.lease_expires_at_ms,
    selected,
  };
  if (typeof m.auth_token === 'string') c.auth_token = m.auth_token;
  return c;
}

/**
 * The candidates of one mount path: the selected mount first (when there is one), then the
 * other configured mounts of the path by the selection rule ({@link rankMounts}).
 */
function pathCandidates(sel: MountView | undefined, desired: MountView[]): MountCandidate[] {
  const list: MountCandidate[] = [];
  if (sel) list.push(candidateOf(sel, true));
  const selKey = sel ? candidateKey(list[0]) : null;
  for (const m of rankMounts(desired)) {
    const c = candidateOf(m, false);
    if (candidateKey(c) !== selKey) list.push(c);
  }
  return list;
}

/** Groups MountViews by `mount_path`, keeping their order within a path. */
function byPath(mounts: MountView[]): Map<string, MountView[]> {
  const groups = new Map<string, MountView[]>();
  for (const m of mounts) {
    const g = groups.get(m.mount_path);
    if (g) g.push(m);
    else groups.set(m.mount_path, [m]);
  }
  return groups;
}

/** The selected MountView of each path (the last one when a path repeats). */
function selectedByPath(mounts: MountView[]): Map<string, MountView> {
  const selected = new Map<string, MountView>();
  for (const m of mounts) selected.set(m.mount_path, m);
  return selected;
}

function comparePaths(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * Builds the candidate lists of a WorkspaceStatus (docs/protocol.md "Workspace status"): for each mount path the
 * selected mount (`mounts`) first, then the other `desired_mounts` of that path ordered by the
 * selection rule ({@link rankMounts}: online, degraded, missing; later lease first; then
 * configured order). `revision` is the status's `revision`, or null when the server sent none.
 */
export function topologyFromStatus(status: WorkspaceStatus, ts_ms = Date.now()): Topology {
  const desired = byPath(status.desired_mounts ?? []);
  const selected = selectedByPath(status.mounts ?? []);
  const paths = [...new Set([...desired.keys(), ...selected.keys()])].sort(comparePaths);
  const mounts = new Map<string, MountCandidate[]>();
  for (const path of paths) mounts.set(path, pathCandidates(selected.get(path), desired.get(path) ?? []));
  const revision = typeof status.revision === 'number' ? status.revision : null;
  return { source: 'workspace', project_id: status.project_id, agent_id: status.agent_id, workspace_root: status.workspace_root, revision, mounts, ts_ms };
}

/**
 * Applies a `control.workspace_topology_delta` (docs/protocol.md "Workspace status") to a workspace topology. Pure:
 * `current` is never modified; unchanged paths keep their candidate lists (same arrays).
 *
 * - `reason: "access_ended"` for `current`'s project: the pin ended; returns a topology with
 *   no mounts and `revision` null (the last one must not be used any more).
 * - Returns null when the caller must re-read the whole `control.workspace_status`: `current`
 *   is not a workspace topology, is of another project (or none), has no known revision, the
 *   delta has no revision, or a revision gap (`delta.revision !== current.revision + 1`).
 * - A stale delta (`delta.revision <= current.revision`) returns `current` itself.
 * - Otherwise: the paths of `removed` are dropped, then each path of `changed` (and of
 *   `desired`) gets its candidates rebuilt as {@link topologyFromStatus} does: the selected
 *   mount from `changed` first, then the path's other `desired` mounts by {@link rankMounts}.
 *   Mounts stay sorted by path; `revision` becomes `delta.revision`.
 * @param ts_ms time of the new topology (default now)
 * @returns the new topology, `current` (stale delta) or null (re-read needed)
 */
export function applyTopologyDelta(current: Topology, delta: TopologyDelta, ts_ms = Date.now()): Topology | null {
  if (current.source !== 'workspace' || current.project_id === null || delta.project_id !== current.project_id) return null;
  if (delta.reason === 'access_ended') return { ...current, revision: null, mounts: new Map(), ts_ms };
  if (delta.reason !== undefined) return null; // a reason this client does not know: re-read
  if (current.revision === null || typeof delta.revision !== 'number') return null;
  if (delta.revision <= current.revision) return current;
  if (delta.revision !== current.revision + 1) return null;
  const mounts = new Map(current.mounts);
  for (const path of delta.removed ?? []) mounts.delete(path);
  const desired = byPath(delta.desired ?? []);
  const selected = selectedByPath(delta.changed ?? []);
  for (const path of new Set([...selected.keys(), ...desired.keys()])) {
    mounts.set(path, pathCandidates(selected.get(path), desired.get(path) ?? []));
  }
  const sorted = new Map([...mounts.entries()].sort(([a], [b]) => comparePaths(a, b)));
  return { ...current, revision: delta.revision, mounts: sorted, ts_ms };
}

/** One parsed `--endpoint name=ws-url[#export][@/mount]`. */
export interface EndpointSpec {
  name: string;
  url: string;
  export_name: string;
  mount_path: string;
}

/** Default export of an `--endpoint` without `#export`. */
export const DEFAULT_ENDPOINT_EXPORT = 'work';

/**
 * Parses `name=ws-url[#export][@/mount]`. Defaults: export `work`, mount
 * `/<name>`. Example: `a=ws://127.0.0.1:18891/v2/fs#docs@/docs`.
 * @throws FsError EINVAL naming what is wrong
 */
export function parseEndpointSpec(spec: string): EndpointSpec {
  const eq = spec.indexOf('=');
  if (eq <= 0) throw new FsError(Errno.EINVAL, `--endpoint ${JSON.stringify(spec)}: expected name=ws-url[#export][@/mount]`);
  const name = spec.slice(0, eq);
  let rest = spec.slice(eq + 1);
  let mount = `/${name}`;
  const at = rest.lastIndexOf('@/');
  if (at >= 0) {
    mount = rest.slice(at + 1);
    rest = rest.slice(0, at);
  }
  let exportName = DEFAULT_ENDPOINT_EXPORT;
  const hash = rest.lastIndexOf('#');
  if (hash >= 0) {
    exportName = rest.slice(hash + 1);
    rest = rest.slice(0, hash);
  }
  if (!/^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/.test(name)) throw new FsError(Errno.EINVAL, `--endpoint ${JSON.stringify(spec)}: name must be identifier-safe`);
  if (!/^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/.test(exportName))
    throw new FsError(Errno.EINVAL, `--endpoint ${JSON.stringify(spec)}: export must be identifier-safe`);
  let url: URL;
  try {
    url = new URL(rest);
  } catch {
    throw new FsError(Errno.EINVAL, `--endpoint ${JSON.stringify(spec)}: ${JSON.stringify(rest)} is not a URL`);
  }
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:') throw new FsError(Errno.EINVAL, `--endpoint ${JSON.stringify(spec)}: the URL must be ws:// or wss://`);
  let mountPath: string;
  try {
    mountPath = normalizePath(mount);
  } catch (e) {
    throw new FsError(Errno.EINVAL, `--endpoint ${JSON.stringify(spec)}: mount ${(e as Error).message}`);
  }
  return { name, url: rest, export_name: exportName, mount_path: mountPath };
}

/**
 * The topology of a static endpoint list: a mount path repeated over several endpoints is a
 * failover group in the order given (endpoint mode).
 * @param authToken FS session token used for every endpoint (`--auth-token` in endpoint mode)
 */
export function topologyFromEndpoints(specs: EndpointSpec[], authToken?: string, ts_ms = Date.now()): Topology {
  const mounts = new Map<string, MountCandidate[]>();
  for (const s of specs) {
    const c: MountCandidate = {
      mount_path: s.mount_path,
      export_name: s.export_name,
      fs_url: s.url,
      node_id: null,
      node_name: s.name,
      state: null,
      lease_expires_at_ms: null,
      selected: false,
    };
    if (authToken !== undefined) c.auth_token = authToken;
    const list = mounts.get(s.mount_path);
    if (list) {
      if (!list.some((x) => candidateKey(x) === candidateKey(c))) list.push(c);
    } else mounts.set(s.mount_path, [{ ...c, selected: true }]);
  }
  const sorted = new Map([...mounts.entries()].sort(([a], [b]) => comparePaths(a, b)));
  return { source: 'endpoints', project_id: null, agent_id: null, workspace_root: null, revision: null, mounts: sorted, ts_ms };
}

/**
 * A stable fingerprint of everything routing depends on in one mount path's candidates
 * (order, URLs, exports, tokens), to tell whether a topology update changes the path.
 */
export function candidatesFingerprint(list: MountCandidate[]): string {
  return JSON.stringify(list.map((c) => [c.node_id, c.fs_url, c.export_name, c.auth_token ?? null]));
}
