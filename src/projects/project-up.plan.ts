/**
 * The rules of `control.project_up` (docs/protocol.md "Declarative workspaces"), as pure functions over a state view, so
 * that the service applies them to a draft that commits and a dry run to one that does not:
 *
 * - each mount's path is normalised; its node is named by exactly one of `node_id` and
 *   `node_name` (a name must match exactly one node: none `node_not_found`, several
 *   `invalid_payload` naming them); one mount path given twice for one node is refused;
 * - the project is the one named `name` (none: it is created; several: `invalid_payload`);
 * - the desired mounts missing from the project are added in the order given; with `prune`,
 *   the project's mounts not desired are removed; a mount is the triple (mount path, node,
 *   export); `unchanged` counts the configured mounts the call leaves in place.
 *
 * Every error message names the field (`mounts[2].node_name`), which `svc-control apply` maps
 * back to the line of the workspace file.
 */
import { fail, MountSpec, normalizeMountPath, ProtocolError } from '@svc/protocol';
import type { MountRecord, NodeRecord, ProjectRecord, StateView } from '../persistence/state.model';

/** One entry of `mounts` as given (after payload validation). */
export interface MountSpecInput {
  mount_path: string;
  node_id?: string;
  node_name?: string;
  export_name: string;
}

/** One desired mount, its node resolved. */
export interface DesiredMount {
  /** Position in the request's `mounts`. */
  index: number;
  mount_path: string;
  node: NodeRecord;
  export_name: string;
}

/** What `project_up` will do to a project's mounts. */
export interface MountPlan {
  added: DesiredMount[];
  removed: MountRecord[];
  /** Configured mounts the call leaves in place. */
  unchanged: number;
}

/** The key of a mount: (mount path, node, export). */
export function mountKey(mountPath: string, nodeId: string, exportName: string): string {
  return `${mountPath}\0${nodeId}\0${exportName}`;
}

/**
 * Resolves and checks the desired mounts, entry by entry in list order (the first invalid
 * entry is the one reported).
 * @throws ProtocolError `invalid_payload` (a path not absolute or with `.`/`..`, both node
 *   fields, a node name shared by several nodes, a path given twice for one node),
 *   `missing_field` (neither node field), `node_not_found` (no such node id or name)
 */
export function resolveMounts(state: StateView, mounts: readonly MountSpecInput[]): DesiredMount[] {
  let byName: Map<string, NodeRecord[]> | null = null;
  const seen = new Map<string, number>();
  const out: DesiredMount[] = [];
  mounts.forEach((m, index) => {
    const at = `mounts[${index}]`;
    const mountPath = normalizeMountPath(m.mount_path, `${at}.mount_path`);
    let node: NodeRecord | undefined;
    if (m.node_id !== undefined && m.node_name !== undefined) {
      fail('invalid_payload', `${at}.node_name: give node_id or node_name, not both`);
    } else if (m.node_id !== undefined) {
      node = state.nodes.get(m.node_id);
      if (!node) fail('node_not_found', `${at}.node_id: node ${m.node_id} not found`);
    } else if (m.node_name !== undefined) {
      if (!byName) {
        byName = new Map();
        for (const n of state.nodes.values()) {
          const list = byName.get(n.node_name);
          if (list) list.push(n);
          else byName.set(n.node_name, [n]);
        }
      }
      const named = byName.get(m.node_name) ?? [];
      if (named.length === 0) fail('node_not_found', `${at}.node_name: no node is named ${JSON.stringify(m.node_name)}`);
      if (named.length > 1) {
        const ids = named.map((n) => n.node_id).sort();
        fail(
          'invalid_payload',
          `${at}.node_name: ${named.length} nodes are named ${JSON.stringify(m.node_name)} (${ids.join(', ')}); name the node by node_id`,
        );
      }
      node = named[0];
    } else {
      throw new ProtocolError('missing_field', `missing field: ${at}.node_id or ${at}.node_name`);
    }
    const key = `${mountPath}\0${node.node_id}`;
    const first = seen.get(key);
    if (first !== undefined) {
      fail('invalid_payload', `${at}.mount_path: ${mountPath} is given twice for node ${node.node_name} (mounts[${first}] and ${at})`);
    }
    seen.set(key, index);
    out.push({ index, mount_path: mountPath, node, export_name: m.export_name });
  });
  return out;
}

/**
 * The project named `name`, or null when there is none.
 * @throws ProtocolError `invalid_payload` naming the projects when several have that name
 */
export function projectNamed(state: StateView, name: string): ProjectRecord | null {
  const named: ProjectRecord[] = [];
  for (const p of state.projects.values()) if (p.name === name) named.push(p);
  if (named.length > 1) {
    const ids = named.map((p) => p.project_id).sort();
    fail('invalid_payload', `name: ${named.length} projects are named ${JSON.stringify(name)} (${ids.join(', ')}); rename or delete all but one`);
  }
  return named[0] ?? null;
}

/**
 * The mounts to add and remove so that a project's mounts equal `desired` (only adding when
 * `prune` is off).
 * @param current the project's configured mounts (none for a new project)
 */
export function planMounts(current: readonly MountRecord[], desired: readonly DesiredMount[], prune: boolean): MountPlan {
  const have = new Set(current.map((m) => mountKey(m.mount_path, m.node_id, m.export_name)));
  const want = new Set(desired.map((d) => mountKey(d.mount_path, d.node.node_id, d.export_name)));
  const added = desired.filter((d) => !have.has(mountKey(d.mount_path, d.node.node_id, d.export_name)));
  const removed = prune ? current.filter((m) => !want.has(mountKey(m.mount_path, m.node_id, m.export_name))) : [];
  return { added, removed, unchanged: current.length - removed.length };
}

/** The MountSpec of a desired mount (docs/protocol.md "Declarative workspaces"). */
export function specOfDesired(d: DesiredMount): MountSpec {
  return { mount_path: d.mount_path, node_id: d.node.node_id, node_name: d.node.node_name, export_name: d.export_name };
}

/** The MountSpec of a configured mount; `node_name` null when its node no longer exists. */
export function specOfMount(state: StateView, m: MountRecord): MountSpec {
  return { mount_path: m.mount_path, node_id: m.node_id, node_name: state.nodes.get(m.node_id)?.node_name ?? null, export_name: m.export_name };
}
