/**
 * ProjectsGateway: project, mount, binding and token operations and `control.workspace_status`
 * (docs/protocol.md "Workspace status"). Pushes `control.workspace_topology_delta` to sessions pinned to a
 * project whose topology changed, carrying only the changed paths; a session whose pin no
 * longer holds (token rotated or revoked, project deleted) gets a last, empty delta with
 * `reason:"access_ended"` and is unpinned.
 */
import { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { SubscribeMessage } from '@nestjs/websockets';
import { Subscription } from 'rxjs';
import {
  availabilityOf,
  ProtocolError,
  MountRemoveDto,
  MountSetDto,
  ProjectCreateDto,
  ProjectRefDto,
  ProjectUpdateDto,
  ProjectUpDto,
  TopologyDelta,
  WorkspaceStatusDto,
} from '@svc/protocol';
import { Payload, Session, SessionRegistry, WsSession } from '@svc/transport';
import { actorOf, controlLocals, pinIsValid } from '../common/actor';
import { Clock } from '../common/clock';
import { Audited } from '../audit/audit.gates';
import { AdminOnly, ControlChannelGateway, ProjectScoped, ProjectTokenGuard, Protected } from '../control/gates';
import { StateService } from '../persistence/state.service';
import { AvailabilityService, TopologyChange } from './availability.service';
import { ProjectUpService } from './project-up.service';
import { ProjectsService } from './projects.service';
import { WorkspaceService } from './workspace.service';

@ControlChannelGateway(ProjectTokenGuard)
export class ProjectsGateway implements OnModuleInit, OnModuleDestroy {
  private sub: Subscription | null = null;

  constructor(
    private readonly projects: ProjectsService,
    private readonly projectUp: ProjectUpService,
    private readonly workspace: WorkspaceService,
    private readonly availability: AvailabilityService,
    private readonly sessions: SessionRegistry,
    private readonly store: StateService,
    private readonly clock: Clock,
  ) {}

  onModuleInit(): void {
    this.sub = this.availability.topologyChanged$.subscribe((change) => this.pushDeltas(change));
  }

  onModuleDestroy(): void {
    this.sub?.unsubscribe();
  }

  @SubscribeMessage('control.project_create')
  @AdminOnly()
  @Protected()
  @Audited()
  create(@Payload() body: ProjectCreateDto) {
    return this.projects.create(body);
  }

  @SubscribeMessage('control.project_list')
  list(@Session() session: WsSession) {
    return this.projects.list(actorOf(session));
  }

  @SubscribeMessage('control.project_get')
  @ProjectScoped()
  get(@Payload() body: ProjectRefDto) {
    return this.projects.get(body.project_id);
  }

  @SubscribeMessage('control.project_update')
  @AdminOnly()
  @Protected()
  @Audited()
  update(@Payload() body: ProjectUpdateDto) {
    return this.projects.update(body);
  }

  @SubscribeMessage('control.project_delete')
  @AdminOnly()
  @Protected()
  @Audited()
  delete(@Payload() body: ProjectRefDto) {
    return this.projects.delete(body.project_id);
  }

  @SubscribeMessage('control.project_mount_set')
  @AdminOnly()
  @Protected()
  @Audited()
  mountSet(@Payload() body: MountSetDto) {
    return this.projects.mountSet(body);
  }

  @SubscribeMessage('control.project_mount_remove')
  @AdminOnly()
  @Protected()
  @Audited()
  mountRemove(@Payload() body: MountRemoveDto) {
    return this.projects.mountRemove(body);
  }

  @SubscribeMessage('control.project_mount_list')
  @ProjectScoped()
  mountList(@Payload() body: ProjectRefDto) {
    return this.projects.mountList(body.project_id);
  }

  @SubscribeMessage('control.project_activate')
  @Protected()
  @Audited()
  @ProjectScoped()
  activate(@Session() session: WsSession, @Payload() body: ProjectRefDto) {
    return this.projects.activate(actorOf(session), body.project_id);
  }

  /** `control.project_up` (docs/protocol.md "Declarative workspaces"): a declarative project and its mounts; a dry run is not audited. */
  @SubscribeMessage('control.project_up')
  @AdminOnly()
  @Protected()
  @Audited({ unless: (payload) => payload.dry_run === true })
  up(@Session() session: WsSession, @Payload() body: ProjectUpDto) {
    return this.projectUp.up(actorOf(session), body);
  }

  @SubscribeMessage('control.project_token_rotate')
  @Protected()
  @Audited()
  @ProjectScoped()
  rotate(@Payload() body: ProjectRefDto) {
    return this.projects.rotateToken(body.project_id);
  }

  @SubscribeMessage('control.project_token_revoke')
  @Protected()
  @Audited()
  @ProjectScoped()
  revoke(@Payload() body: ProjectRefDto) {
    return this.projects.revokeToken(body.project_id);
  }

  @SubscribeMessage('control.workspace_status')
  async status(@Session() session: WsSession, @Payload() body: WorkspaceStatusDto) {
    try {
      return this.workspace.statusJson(actorOf(session), controlLocals(session), body);
    } catch (e) {
      if (!(e instanceof ProtocolError) || body.project_id === undefined) throw e;
      // a project or token made through another replica a moment ago
      await this.store.refresh();
      return this.workspace.statusJson(actorOf(session), controlLocals(session), body);
    }
  }

  private pushDeltas(change: TopologyChange): void {
    const state = this.store.state;
    const projectId = change.project_id;
    const deltas: Partial<Record<'admin' | 'other', TopologyDelta>> = {};
    for (const session of this.sessions.all()) {
      const locals = controlLocals(session);
      if (locals.pin?.project_id !== projectId) continue;
      const actor = actorOf(session);
      if (change.pinCheck && !pinIsValid(state, actor, locals.pin)) {
        locals.pin = null;
        const ended: TopologyDelta = {
          project_id: projectId,
          revision: state.projects.get(projectId)?.revision ?? change.revision,
          changed: [],
          desired: [],
          removed: [],
          availability: availabilityOf([]),
          ts_ms: this.clock.now(),
          reason: 'access_ended',
        };
        session.push('control', 'control.workspace_topology_delta', ended);
        continue;
      }
      if (change.paths.length === 0) continue;
      const cls = actor.role === 'admin' ? 'admin' : 'other';
      deltas[cls] ??= this.availability.deltaFor(change, cls);
      session.push('control', 'control.workspace_topology_delta', deltas[cls]);
    }
  }
}
