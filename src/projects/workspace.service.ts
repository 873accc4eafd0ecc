/**
 * Workspace status (PROTOCOL.md 6; SPEC.md "Workspace status"): project selection and
 * pinning, per-path mount selection, drift, the availability rollup, `auth_token` per mount,
 * and invoke gating for non-admin callers.
 */
import { Injectable } from '@nestjs/common';
import {
  availabilityOf,
  DriftItem,
  groupAndRank,
  MountView,
  WorkspaceStatus,
  WorkspaceStatusDto,
} from '@svc/protocol';
import { Actor, ControlLocals } from '../common/actor';
import { Clock } from '../common/clock';
import { invokeCapable, serviceOfExport, serviceVisible } from '../catalog/permissions';
import { bindingKey, ControlState, ProjectRecord } from '../persistence/state.model';
import { StateService } from '../persistence/state.service';
import { mountView, ProjectsService, workspaceRootOf } from './projects.service';

/** Selected mounts and rollups of one project as one caller sees them. */
export interface Topology {
  desired: MountView[];
  selected: MountView[];
  drift: DriftItem[];
}

@Injectable()
export class WorkspaceService {
  constructor(
    private readonly store: StateService,
    private readonly projects: ProjectsService,
    private readonly clock: Clock,
  ) {}

  /**
   * `control.workspace_status`. Without `project_id`: the actor's binding (none: an empty
   * status). With it: a matching token or the actor's binding is required (admins too), and
   * the session is pinned to the project (topology deltas follow).
   * @throws ProtocolError `project_not_found`, `project_auth_failed`
   */
  status(actor: Actor, locals: ControlLocals, input: WorkspaceStatusDto): WorkspaceStatus {
    const state = this.store.state;
    let projectId: string | null = null;
    if (input.project_id !== undefined) {
      const access = this.projects.authorize(actor, input.project_id, input.project_token, false);
      projectId = input.project_id;
      const project = state.projects.get(projectId)!;
      locals.pin = { project_id: projectId, via: access === 'token' ? 'token' : 'binding', token_sha256: access === 'token' ? project.token_sha256 : null };
    } else {
      const bound = state.bindings.get(bindingKey(actor.role, actor.agentId))?.project_id;
      if (bound && state.projects.has(bound)) projectId = bound;
    }
    return this.statusOf(actor, projectId);
  }

  /** The status of a project the actor already passed the check for (or the empty status for null). */
  statusOf(actor: Actor, projectId: string | null): WorkspaceStatus {
    const project = projectId ? this.store.state.projects.get(projectId) : undefined;
    if (!project) {
      return {
        agent_id: actor.agentId,
        project_id: null,
        workspace_root: null,
        mounts: [],
        desired_mounts: [],
        actual_mounts: [],
        drift: { count: 0, items: [] },
        availability: availabilityOf([]),
      };
    }
    const t = this.topology(actor, project);
    return {
      agent_id: actor.agentId,
      project_id: project.project_id,
      workspace_root: workspaceRootOf(project.project_id),
      mounts: t.selected,
      desired_mounts: t.desired,
      actual_mounts: t.selected,
      drift: { count: t.drift.length, items: t.drift },
      availability: availabilityOf(t.selected),
    };
  }

  /**
   * Mount topology of a project for an actor that passed the project check: every configured
   * mount (gated ones removed for non-admins), the selected one per path, and drift.
   */
  topology(actor: Actor, project: ProjectRecord, state: ControlState = this.store.state): Topology {
    const now = this.clock.now();
    let desired = project.mounts.map((m) => mountView(state, m, now, true));
    if (actor.role !== 'admin') desired = desired.filter((v) => !this.gated(state, project, v));
    const selected: MountView[] = [];
    const drift: DriftItem[] = [];
    const primaries = new Map<string, MountView>();
    for (const v of desired) if (!primaries.has(v.mount_path)) primaries.set(v.mount_path, v);
    for (const [path, ranked] of groupAndRank(desired)) {
      const chosen = ranked[0];
      selected.push(chosen);
      const item = this.driftOf(path, chosen, primaries.get(path)!);
      if (item) drift.push(item);
    }
    return { desired, selected, drift };
  }

  /**
   * Invoke gating (PROTOCOL.md 6): a mount mapping to an invoke-capable service is left out
   * unless the project allows invoke and the service's permissions allow the caller.
   */
  private gated(state: ControlState, project: ProjectRecord, view: MountView): boolean {
    const services = state.catalog.get(view.node_id)?.services;
    if (!services) return false;
    const service = serviceOfExport(services, view.export_name);
    if (!service || !invokeCapable(service)) return false;
    if (project.access_policy.invoke !== 'allow') return true;
    return !serviceVisible(service, { role: 'user', holdsProjectToken: true });
  }

  private driftOf(path: string, chosen: MountView, primary: MountView): DriftItem | null {
    const base = { mount_path: path, selected_node_id: chosen.node_id, desired_node_id: primary.node_id };
    if (chosen.state === 'missing') {
      return { ...base, kind: 'missing_node', severity: 'critical', message: `no node of ${path} exists (node ${chosen.node_id} not found)` };
    }
    if (chosen.state === 'degraded') {
      return { ...base, kind: 'node_offline', severity: 'critical', message: `every node of ${path} is offline (lease expired)` };
    }
    // Two online nodes may alternate by lease expiry (the selection rule); that is not drift.
    if (primary.state !== 'online' && (chosen.node_id !== primary.node_id || chosen.export_name !== primary.export_name)) {
      return { ...base, kind: 'failover_active', severity: 'warning', message: `${path} is served by ${chosen.node_id} because primary ${primary.node_id} is ${primary.state}` };
    }
    return null;
  }
}
