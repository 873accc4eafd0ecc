/**
 * `control.project_up` (docs/protocol.md "Declarative workspaces"): makes a project and its mounts
 * equal to a declaration, in one mutation (all or nothing), idempotently: the same payload a
 * second time writes nothing, so no topology delta follows. A dry run runs the same code on a
 * draft that is never committed. The rules are in `project-up.plan.ts`.
 */
import { Injectable } from '@nestjs/common';
import { fail, newId, newSecret, ProjectUpDto, ProjectUpResult } from '@svc/protocol';
import { Actor } from '../common/actor';
import { Clock } from '../common/clock';
import { bindingKey } from '../persistence/state.model';
import { StateDraft } from '../persistence/state.draft';
import { StateService } from '../persistence/state.service';
import { MAX_MOUNTS_PER_PROJECT, mountView, newProjectRecord, workspaceRootOf } from './projects.service';
import { planMounts, projectNamed, resolveMounts, specOfDesired, specOfMount } from './project-up.plan';

@Injectable()
export class ProjectUpService {
  constructor(
    private readonly store: StateService,
    private readonly clock: Clock,
  ) {}

  /**
   * Applies (or, with `dry_run`, plans) a declarative workspace.
   * @param actor the caller; with `activate` (default true) its agent is bound to the project
   * @returns `{project_id, created, project_token? (created only), changes:{added, removed,
   *   unchanged}, mounts, workspace_root? (with activate)}`; on a dry run for a new name
   *   `project_id` is null and there is no token or workspace root
   * @throws ProtocolError `invalid_payload`, `missing_field` (naming `mounts[i].field` or `name`),
   *   `node_not_found`; nothing is changed when it throws
   */
  async up(actor: Actor, input: ProjectUpDto): Promise<ProjectUpResult> {
    const token = newSecret();
    if (input.dry_run) {
      // catch up with other replicas, as the write path does before it builds its draft
      await this.store.refresh();
      const result = this.apply(new StateDraft(this.store.state), actor, input, token);
      if (result.created) {
        result.project_id = null;
        delete result.project_token;
        delete result.workspace_root;
      }
      return result;
    }
    return this.store.mutate((s) => this.apply(s, actor, input, token));
  }

  /** The change on a draft (committed or thrown away by the caller). */
  private apply(s: StateDraft, actor: Actor, input: ProjectUpDto, token: string): ProjectUpResult {
    const prune = input.prune ?? true;
    const activate = input.activate ?? true;
    const desired = resolveMounts(s, input.mounts);
    const existing = projectNamed(s, input.name);
    const now = this.clock.now();
    let project = existing ?? newProjectRecord(input, token, now);
    const plan = planMounts(existing ? s.mountsOf(project.project_id) : [], desired, prune);
    const total = plan.unchanged + plan.added.length;
    if (total > MAX_MOUNTS_PER_PROJECT) fail('invalid_payload', `mounts: a project holds at most ${MAX_MOUNTS_PER_PROJECT} mounts (this would make ${total})`);

    const vision = input.vision ?? project.vision;
    const invoke = input.access_policy?.invoke ?? project.access_policy.invoke;
    const fieldsChanged = vision !== project.vision || invoke !== project.access_policy.invoke;
    if (!existing || fieldsChanged || plan.added.length > 0 || plan.removed.length > 0) {
      if (!existing && s.projects.has(project.project_id)) fail('internal_error', 'project id collision; retry');
      project = s.projects.put({ ...project, vision, access_policy: { invoke }, updated_at_ms: existing ? now : project.updated_at_ms });
    }
    for (const m of plan.removed) s.mounts.delete(m.mount_id);
    for (const d of plan.added) {
      s.mounts.put({
        mount_id: newId('mnt'),
        project_id: project.project_id,
        mount_path: d.mount_path,
        node_id: d.node.node_id,
        export_name: d.export_name,
        seq: s.takeMountSeq(),
        added_at_ms: now,
      });
    }
    if (activate && s.bindings.get(bindingKey(actor.role, actor.agentId))?.project_id !== project.project_id) {
      s.bindings.put({ role: actor.role, agent_id: actor.agentId, project_id: project.project_id, bound_at_ms: now });
    }

    const result: ProjectUpResult = {
      project_id: project.project_id,
      created: !existing,
      changes: { added: plan.added.map(specOfDesired), removed: plan.removed.map((m) => specOfMount(s, m)), unchanged: plan.unchanged },
      mounts: s.mountsOf(project.project_id).map((m) => mountView(s, m, now, false)),
    };
    if (!existing) result.project_token = token;
    if (activate) result.workspace_root = workspaceRootOf(project.project_id);
    return result;
  }
}
