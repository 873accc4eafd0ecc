/**
 * Projects: records, mounts (failover groups), agent bindings and project tokens
 * (docs/protocol.md "Projects and tokens"). Project tokens are returned once and stored as SHA-256
 * digests; rotation and revocation end the old token at once and every user-role binding.
 */
import { Injectable } from '@nestjs/common';
import {
  AccessPolicy,
  fail,
  matchesDigest,
  MountRemoveDto,
  MountSetDto,
  MountView,
  newId,
  newSecret,
  normalizeMountPath,
  ProtocolError,
  ProjectCreateDto,
  ProjectDetail,
  ProjectSummary,
  ProjectUpdateDto,
  sha256Hex,
} from '@svc/protocol';
import { Actor } from '../common/actor';
import { Clock } from '../common/clock';
import { bindingKey, MountRecord, nodeIsOnline, ProjectRecord, StateView } from '../persistence/state.model';
import { StateDraft } from '../persistence/state.draft';
import { StateService } from '../persistence/state.service';

/** How a caller passed the project check (docs/protocol.md "Projects and tokens"). */
export type ProjectAccess = 'admin' | 'token' | 'binding';

/** The runtime namespace path of a project's workspace (docs/namespace.md). */
export function workspaceRootOf(projectId: string): string {
  return `/projects/${projectId}/fs`;
}

/**
 * MountView of a configured mount (docs/protocol.md "Workspace status"): state from the node's lease at `now` and
 * its daemon's session ({@link nodeIsOnline});
 * `auth_token` only when `withToken` (the caller passed the project check) and the node has one.
 */
export function mountView(state: StateView, mount: MountRecord, now: number, withToken: boolean): MountView {
  const node = state.nodes.get(mount.node_id);
  if (!node) {
    return {
      mount_path: mount.mount_path,
      node_id: mount.node_id,
      export_name: mount.export_name,
      node_name: null,
      fs_url: null,
      online: false,
      state: 'missing',
      lease_expires_at_ms: null,
    };
  }
  const online = nodeIsOnline(node, now);
  const view: MountView = {
    mount_path: mount.mount_path,
    node_id: mount.node_id,
    export_name: mount.export_name,
    node_name: node.node_name,
    fs_url: node.fs_url,
    online,
    state: online ? 'online' : 'degraded',
    lease_expires_at_ms: node.lease_expires_at_ms,
  };
  if (withToken && node.fs_auth_token) view.auth_token = node.fs_auth_token;
  return view;
}

/**
 * The record of a new project (docs/protocol.md "Projects and tokens" `project_create`): a fresh id, `vision` default
 * `""`, `access_policy.invoke` default `"deny"`, the token kept as its SHA-256 digest.
 * @param now creation time, ms since the epoch
 */
export function newProjectRecord(
  input: { name: string; vision?: string; access_policy?: { invoke?: AccessPolicy['invoke'] } },
  token: string,
  now: number,
): ProjectRecord {
  return {
    project_id: newId('proj'),
    name: input.name,
    vision: input.vision ?? '',
    access_policy: { invoke: input.access_policy?.invoke ?? 'deny' },
    token_sha256: sha256Hex(token),
    token_updated_at_ms: now,
    created_at_ms: now,
    updated_at_ms: now,
    revision: 0,
  };
}

/** A project's limit of configured mounts. */
export const MAX_MOUNTS_PER_PROJECT = 10_000;

@Injectable()
export class ProjectsService {
  constructor(
    private readonly store: StateService,
    private readonly clock: Clock,
  ) {}

  /** ProjectSummary (docs/protocol.md "Projects and tokens"). */
  summary(p: ProjectRecord, state: StateView = this.store.state): ProjectSummary {
    return {
      project_id: p.project_id,
      name: p.name,
      vision: p.vision,
      mount_count: state.mountsOf(p.project_id).length,
      token_locked: p.token_sha256 !== null,
      created_at_ms: p.created_at_ms,
      updated_at_ms: p.updated_at_ms,
    };
  }

  /** ProjectDetail (docs/protocol.md "Projects and tokens"): every configured mount, without FS tokens. */
  detail(p: ProjectRecord, state: StateView = this.store.state): ProjectDetail {
    const now = this.clock.now();
    return {
      ...this.summary(p, state),
      access_policy: { ...p.access_policy },
      mounts: state.mountsOf(p.project_id).map((m) => mountView(state, m, now, false)),
    };
  }

  /**
   * @throws ProtocolError `project_not_found`
   */
  record(projectId: string, state: StateView = this.store.state): ProjectRecord {
    const p = state.projects.get(projectId);
    if (!p) fail('project_not_found', `project ${projectId} not found`);
    return p;
  }

  /**
   * The project check (docs/protocol.md "Projects and tokens"): a presented token must match (bound or not); without
   * a token, the actor's (role, agent) binding must name the project. Admins pass without
   * either when `adminBypass` (project operations), not for workspace selection.
   * @returns how the check was passed
   * @throws ProtocolError `project_not_found`, `project_auth_failed`
   */
  authorize(actor: Actor, projectId: string, token: string | undefined, adminBypass: boolean): ProjectAccess {
    const state = this.store.state;
    const project = this.record(projectId, state);
    if (token !== undefined) {
      if (!matchesDigest(token, project.token_sha256)) {
        fail(
          'project_auth_failed',
          project.token_sha256 === null ? `project ${projectId} has no token (it was revoked)` : `project_token does not match project ${projectId}`,
        );
      }
      return 'token';
    }
    if (adminBypass && actor.role === 'admin') return 'admin';
    if (state.bindings.get(bindingKey(actor.role, actor.agentId))?.project_id === projectId) return 'binding';
    return fail('project_auth_failed', `project ${projectId} needs a matching project_token or an active binding of agent ${actor.agentId}`);
  }

  /**
   * {@link authorize}, looking again after catching up with other replicas when it fails
   * here (a project created, or a token rotated, through another replica a moment ago).
   * @throws ProtocolError `project_not_found`, `project_auth_failed`
   */
  async authorizeFresh(actor: Actor, projectId: string, token: string | undefined, adminBypass: boolean): Promise<ProjectAccess> {
    try {
      return this.authorize(actor, projectId, token, adminBypass);
    } catch (e) {
      if (!(e instanceof ProtocolError)) throw e;
      await this.store.refresh();
      return this.authorize(actor, projectId, token, adminBypass);
    }
  }

  /** Creates a project with a fresh token, returned once in `project_token`. */
  async create(input: ProjectCreateDto): Promise<ProjectDetail> {
    const token = newSecret();
    return this.store.mutate((s) => {
      const p = newProjectRecord(input, token, this.clock.now());
      if (s.projects.has(p.project_id)) fail('internal_error', 'project id collision; retry');
      s.projects.put(p);
      return { ...this.detail(p, s), project_token: token };
    });
  }

  /** Admin: every project; user: the projects bound to its agent (docs/protocol.md "Projects and tokens"). */
  list(actor: Actor): { projects: ProjectSummary[] } {
    const s = this.store.state;
    let projects = [...s.projects.values()];
    if (actor.role !== 'admin') {
      const bound = s.bindings.get(bindingKey(actor.role, actor.agentId))?.project_id;
      projects = projects.filter((p) => p.project_id === bound);
    }
    projects.sort((a, b) => a.created_at_ms - b.created_at_ms || a.project_id.localeCompare(b.project_id));
    return { projects: projects.map((p) => this.summary(p, s)) };
  }

  /** @throws ProtocolError `project_not_found` */
  get(projectId: string): ProjectDetail {
    return this.detail(this.record(projectId));
  }

  /** Updates name, vision and/or access policy. @throws ProtocolError `project_not_found` */
  async update(input: ProjectUpdateDto): Promise<ProjectDetail> {
    return this.store.mutate((s) => {
      const old = this.record(input.project_id, s);
      const p = s.projects.put({
        ...old,
        name: input.name ?? old.name,
        vision: input.vision ?? old.vision,
        access_policy: input.access_policy?.invoke !== undefined ? { invoke: input.access_policy.invoke } : old.access_policy,
        updated_at_ms: this.clock.now(),
      });
      return this.detail(p, s);
    });
  }

  /** Deletes a project, its mounts and every binding to it. @throws ProtocolError `project_not_found` */
  async delete(projectId: string): Promise<{ deleted: true; project_id: string }> {
    return this.store.mutate((s) => {
      this.record(projectId, s);
      s.projects.delete(projectId);
      for (const m of s.mountsOf(projectId)) s.mounts.delete(m.mount_id);
      for (const b of [...s.bindings.values()]) if (b.project_id === projectId) s.bindings.delete(bindingKey(b.role, b.agent_id));
      return { deleted: true as const, project_id: projectId };
    });
  }

  /**
   * Adds a mount; the same `(mount_path, node_id, export_name)` twice is a no-op; several
   * nodes on one path form a failover group.
   * @throws ProtocolError `project_not_found`, `node_not_found`, `invalid_payload` (mount path)
   */
  async mountSet(input: MountSetDto): Promise<ProjectDetail> {
    const mountPath = normalizeMountPath(input.mount_path);
    return this.store.mutate((s) => {
      let p = this.record(input.project_id, s);
      if (!s.nodes.has(input.node_id)) fail('node_not_found', `node ${input.node_id} not found`);
      const mounts = s.mountsOf(p.project_id);
      const exists = mounts.some((m) => m.mount_path === mountPath && m.node_id === input.node_id && m.export_name === input.export_name);
      if (!exists) {
        if (mounts.length >= MAX_MOUNTS_PER_PROJECT) fail('invalid_payload', `a project holds at most ${MAX_MOUNTS_PER_PROJECT} mounts`);
        const now = this.clock.now();
        s.mounts.put({
          mount_id: newId('mnt'),
          project_id: p.project_id,
          mount_path: mountPath,
          node_id: input.node_id,
          export_name: input.export_name,
          seq: s.takeMountSeq(),
          added_at_ms: now,
        });
        p = s.projects.put({ ...p, updated_at_ms: now });
      }
      return this.detail(p, s);
    });
  }

  /**
   * Removes the mounts on `mount_path` (only those of `node_id` / `export_name` when given).
   * @throws ProtocolError `project_not_found`, `mount_not_found`, `invalid_payload`
   */
  async mountRemove(input: MountRemoveDto): Promise<ProjectDetail> {
    const mountPath = normalizeMountPath(input.mount_path);
    return this.store.mutate((s) => {
      const p = this.record(input.project_id, s);
      const drop = s
        .mountsOf(p.project_id)
        .filter(
          (m) =>
            m.mount_path === mountPath &&
            (input.node_id === undefined || m.node_id === input.node_id) &&
            (input.export_name === undefined || m.export_name === input.export_name),
        );
      if (drop.length === 0)
        fail(
          'mount_not_found',
          `no mount of project ${p.project_id} matches ${mountPath}${input.node_id ? ` on ${input.node_id}` : ''}${input.export_name ? ` export ${input.export_name}` : ''}`,
        );
      for (const m of drop) s.mounts.delete(m.mount_id);
      return this.detail(s.projects.put({ ...p, updated_at_ms: this.clock.now() }), s);
    });
  }

  /** Every configured mount, with FS tokens (the caller passed the project check). */
  mountList(projectId: string): { project_id: string; mounts: MountView[] } {
    const s = this.store.state;
    const p = this.record(projectId, s);
    const now = this.clock.now();
    return { project_id: p.project_id, mounts: s.mountsOf(p.project_id).map((m) => mountView(s, m, now, true)) };
  }

  /** Binds the actor's (role, agent) to the project, replacing an earlier binding (persisted). */
  async activate(actor: Actor, projectId: string): Promise<{ agent_id: string; project_id: string; workspace_root: string }> {
    return this.store.mutate((s) => {
      this.record(projectId, s);
      s.bindings.put({ role: actor.role, agent_id: actor.agentId, project_id: projectId, bound_at_ms: this.clock.now() });
      return { agent_id: actor.agentId, project_id: projectId, workspace_root: workspaceRootOf(projectId) };
    });
  }

  /** New token; the old one stops working at once and user-role bindings to the project end. */
  async rotateToken(projectId: string): Promise<{ project_id: string; project_token: string; rotated: true; updated_at_ms: number }> {
    const token = newSecret();
    return this.store.mutate((s) => {
      const p = this.record(projectId, s);
      this.endUserBindings(s, projectId);
      const now = this.clock.now();
      s.projects.put({ ...p, token_sha256: sha256Hex(token), token_updated_at_ms: now, updated_at_ms: now });
      return { project_id: projectId, project_token: token, rotated: true as const, updated_at_ms: now };
    });
  }

  /** No token any more: non-admin access ends until an admin rotates a new one. */
  async revokeToken(projectId: string): Promise<{ project_id: string; project_token: null; revoked: true; updated_at_ms: number }> {
    return this.store.mutate((s) => {
      const p = this.record(projectId, s);
      this.endUserBindings(s, projectId);
      const now = this.clock.now();
      s.projects.put({ ...p, token_sha256: null, token_updated_at_ms: now, updated_at_ms: now });
      return { project_id: projectId, project_token: null, revoked: true as const, updated_at_ms: now };
    });
  }

  private endUserBindings(s: StateDraft, projectId: string): void {
    for (const b of [...s.bindings.values()]) if (b.role === 'user' && b.project_id === projectId) s.bindings.delete(bindingKey(b.role, b.agent_id));
  }
}
