/**
 * Topology rules shared by workspace status and topology deltas (docs/protocol.md "Workspace status"): invoke
 * gating of non-admin callers, and the view of one mount path (selected mount, every
 * configured mount, and a signature of what a change of it means for clients).
 */
import { groupAndRank, MountView } from '@svc/protocol';
import { invokeCapable, serviceOfExport, serviceVisible } from '../catalog/permissions';
import { ProjectRecord, StateView } from '../persistence/state.model';

/** Callers see a project's topology as one of two classes: gating depends only on this. */
export type ViewerClass = 'admin' | 'other';

/** One mount path as a class of caller sees it. */
export interface PathView {
  /** The selected mount (selection rule of docs/protocol.md "Workspace status"). */
  selected: MountView;
  /** Every configured mount of the path, in configuration order. */
  desired: MountView[];
  /** Changes exactly when the selected mount, a state, an endpoint or an `auth_token` does (not with lease times). */
  sig: string;
}

/**
 * Invoke gating (docs/protocol.md "Workspace status"): a mount mapping to an invoke-capable service is left out for
 * non-admin callers unless the project allows invoke and the service's permissions allow them.
 */
export function gated(state: StateView, project: ProjectRecord, view: MountView): boolean {
  const services = state.catalog.get(view.node_id)?.services;
  if (!services) return false;
  const service = serviceOfExport(services, view.export_name);
  if (!service || !invokeCapable(service)) return false;
  if (project.access_policy.invoke !== 'allow') return true;
  return !serviceVisible(service, { role: 'user', holdsProjectToken: true });
}

const part = (v: MountView) => [v.node_id, v.export_name, v.state, v.fs_url, v.node_name, v.auth_token ?? null];

/**
 * The view of one mount path from its configured mounts' views (all of one path, in
 * configuration order); null when there are none.
 */
export function pathViewOf(views: MountView[]): PathView | null {
  if (views.length === 0) return null;
  const selected = groupAndRank(views).values().next().value![0];
  return { selected, desired: views, sig: JSON.stringify([part(selected), views.map(part)]) };
}
