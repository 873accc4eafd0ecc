/**
 * Workspace status (docs/protocol.md "Workspace status"): project selection and
 * pinning, per-path mount selection, drift, the availability rollup, `auth_token` per mount,
 * and invoke gating for non-admin callers.
 */
import { Injectable } from '@nestjs/common';
import { availabilityOf, DriftItem, groupAndRank, MountView, WorkspaceStatus, WorkspaceStatusDto } from '@svc/protocol';
import { EncodedJson } from '@svc/transport';
import { Actor, ControlLocals } from '../common/actor';
import { Clock } from '../common/clock';
import { bindingKey, ProjectRecord, StateView } from '../persistence/state.model';
import { StateService } from '../persistence/state.service';
import { AvailabilityService } from './availability.service';
import { mountView, ProjectsService, workspaceRootOf } from './projects.service';
import { gated } from './topology.rules';

/**
 * Selected mounts and rollups of one project as one caller sees them. Instances may be
 * shared between callers (see {@link WorkspaceService.topology}): read them, never mutate.
 */
export interface Topology {
  desired: MountView[];
  selected: MountView[];
  drift: DriftItem[];
}

/** How many (project, caller class) topologies are kept encoded; least recently used go first. */
export const TOPOLOGY_CACHE_ENTRIES = 64;

/** One computed topology and when it stops being true. */
interface CachedTopology {
  /** {@link AvailabilityService.projectVersion} it was computed from. */
  version: number;
  /** Clock time (ms) it was computed at. */
  computedAt: number;
  /** First lease expiry (ms) after `computedAt` among its online mounts: states change then. */
  validUntil: number;
  topology: Topology;
  /** The parts of a WorkspaceStatus that depend on the topology only, as JSON text; built on first use. */
  encoded: { mounts: string; desired: string; tail: string } | null;
}

@Injectable()
export class WorkspaceService {
  /**
   * Topologies by `project_id` and caller class (admin, or any other role: gating does not
   * depend on who the non-admin caller is). An entry holds while the state version is the
   * same for its project and no lease of an online mount has expired since; a project with 1,000 mounts is
   * then neither recomputed nor re-encoded per request or per pinned session.
   */
  private readonly cache = new Map<string, CachedTopology>();

  constructor(
    private readonly store: StateService,
    private readonly projects: ProjectsService,
    private readonly clock: Clock,
    private readonly availability: AvailabilityService,
  ) {}

  /**
   * `control.workspace_status`. Without `project_id`: the actor's binding (none: an empty
   * status). With it: a matching token or the actor's binding is required (admins too), and
   * the session is pinned to the project (topology deltas follow).
   * @throws ProtocolError `project_not_found`, `project_auth_failed`
   */
  status(actor: Actor, locals: ControlLocals, input: WorkspaceStatusDto): WorkspaceStatus {
    return this.statusOf(actor, this.selectProject(actor, locals, input));
  }

  /** The project a `workspace_status` request is about (pinning the session to it), or null. */
  private selectProject(actor: Actor, locals: ControlLocals, input: WorkspaceStatusDto): string | null {
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
    return projectId;
  }

  /**
   * {@link status} as JSON text, for the `control.workspace_status` reply: the encoded
   * mount lists are reused while the topology holds.
   * @throws ProtocolError as {@link status}
   */
  statusJson(actor: Actor, locals: ControlLocals, input: WorkspaceStatusDto): EncodedJson {
    const projectId = this.selectProject(actor, locals, input);
    const project = projectId ? this.store.state.projects.get(projectId) : undefined;
    if (!project) return new EncodedJson(JSON.stringify(this.statusOf(actor, null)));
    const entry = this.cached(actor, project);
    entry.encoded ??= {
      mounts: JSON.stringify(entry.topology.selected),
      desired: JSON.stringify(entry.topology.desired),
      tail: `"drift":${JSON.stringify({ count: entry.topology.drift.length, items: entry.topology.drift })},"availability":${JSON.stringify(availabilityOf(entry.topology.selected))}`,
    };
    const e = entry.encoded;
    const head = `{"agent_id":${JSON.stringify(actor.agentId)},"project_id":${JSON.stringify(project.project_id)},"revision":${project.revision},"workspace_root":${JSON.stringify(workspaceRootOf(project.project_id))}`;
    return new EncodedJson(`${head},"mounts":${e.mounts},"desired_mounts":${e.desired},"actual_mounts":${e.mounts},${e.tail}}`);
  }

  /** The status of a project the actor already passed the check for (or the empty status for null). */
  statusOf(actor: Actor, projectId: string | null): WorkspaceStatus {
    const project = projectId ? this.store.state.projects.get(projectId) : undefined;
    if (!project) {
      return {
        agent_id: actor.agentId,
        project_id: null,
        revision: 0,
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
      revision: project.revision,
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
  topology(actor: Actor, project: ProjectRecord, state: StateView = this.store.state): Topology {
    if (state !== this.store.state) return this.compute(actor, project, state, this.clock.now());
    return this.cached(actor, project).topology;
  }

  /** The cache entry of (project, caller class), recomputed when the state or a lease moved on. */
  private cached(actor: Actor, project: ProjectRecord): CachedTopology {
    const now = this.clock.now();
    const key = `${project.project_id}\0${actor.role === 'admin' ? 'admin' : 'other'}`;
    const hit = this.cache.get(key);
    this.cache.delete(key);
    const version = this.availability.projectVersion(project.project_id);
    if (hit && hit.version === version && now >= hit.computedAt && now < hit.validUntil) {
      this.cache.set(key, hit);
      return hit;
    }
    const topology = this.compute(actor, project, this.store.state, now);
    let validUntil = Infinity;
    for (const v of topology.desired) if (v.state === 'online' && v.lease_expires_at_ms! < validUntil) validUntil = v.lease_expires_at_ms!;
    const entry: CachedTopology = { version, computedAt: now, validUntil, topology, encoded: null };
    this.cache.set(key, entry);
    if (this.cache.size > TOPOLOGY_CACHE_ENTRIES) this.cache.delete(this.cache.keys().next().value!);
    return entry;
  }

  private compute(actor: Actor, project: ProjectRecord, state: StateView, now: number): Topology {
    let desired = state.mountsOf(project.project_id).map((m) => mountView(state, m, now, true));
    if (actor.role !== 'admin') desired = desired.filter((v) => !gated(state, project, v));
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
      return {
        ...base,
        kind: 'failover_active',
        severity: 'warning',
        message: `${path} is served by ${chosen.node_id} because primary ${primary.node_id} is ${primary.state}`,
      };
    }
    return null;
  }
}
