/**
 * CatalogGateway: nodes (invites, joins, join requests, leases, listing, deletion; docs/protocol.md "Nodes")
 * and the node service catalog (upsert, get, watch).
 */
import { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { SubscribeMessage } from '@nestjs/websockets';
import { Subscription } from 'rxjs';
import {
  InviteCreateDto,
  LeaseRefreshDto,
  LeaseReleaseDto,
  NodeJoinApproveDto,
  NodeJoinDenyDto,
  NodeJoinDto,
  NodeJoinRequestDto,
  NodeJoinStatusDto,
  NodeRefDto,
  NodeServiceWatchDto,
  Frame as FrameT,
} from '@svc/protocol';
import { Frame, Payload, Session, SessionRegistry, WsSession } from '@svc/transport';
import { actorOf, controlLocals, heldProjectId } from '../common/actor';
import { Audited } from '../audit/audit.gates';
import { AdminOnly, ControlChannelGateway, Protected } from '../control/gates';
import { StateService } from '../persistence/state.service';
import { CatalogChange, CatalogService, eventFor } from './catalog.service';
import { NodesService } from './nodes.service';
import { NodePresenceService } from './node-presence.service';
import { Viewer } from './permissions';

@ControlChannelGateway()
export class CatalogGateway implements OnModuleInit, OnModuleDestroy {
  private sub: Subscription | null = null;

  constructor(
    private readonly nodes: NodesService,
    private readonly catalog: CatalogService,
    private readonly sessions: SessionRegistry,
    private readonly store: StateService,
    private readonly presence: NodePresenceService,
  ) {}

  onModuleInit(): void {
    this.sub = this.catalog.changes$.subscribe((change) => this.push(change));
  }

  onModuleDestroy(): void {
    this.sub?.unsubscribe();
  }

  /** The viewer of a session for permission filtering. */
  private viewerOf(session: WsSession): Viewer {
    const actor = actorOf(session);
    return { role: actor.role, holdsProjectToken: heldProjectId(this.store.state, actor, controlLocals(session).pin) !== null };
  }

  private push(change: CatalogChange): void {
    for (const session of this.sessions.all()) {
      const watch = controlLocals(session).watch;
      if (!watch || (watch.node_id !== null && watch.node_id !== change.node_id)) continue;
      session.push('control', 'control.node_service_event', eventFor(change, this.viewerOf(session)));
    }
  }

  /** `control.node_service_upsert` (node_secret): replaces the node's catalog record; returns it with defaults applied. */
  @SubscribeMessage('control.node_service_upsert')
  @Audited()
  upsert(@Frame() frame: FrameT) {
    return this.catalog.upsert(frame.payload);
  }

  /** `control.node_service_get` `{node_id}` -> `{node_id, node_name, platform, labels, services}` (filtered for non-admins). */
  @SubscribeMessage('control.node_service_get')
  serviceGet(@Session() session: WsSession, @Payload() body: NodeRefDto) {
    return this.catalog.view(body.node_id, this.viewerOf(session));
  }

  /** `control.node_service_watch` `{node_id?}` -> `{watching:true, node_id}`; then `control.node_service_event` pushes. */
  @SubscribeMessage('control.node_service_watch')
  watch(@Session() session: WsSession, @Payload() body: NodeServiceWatchDto) {
    if (body.node_id !== undefined) this.nodes.get(body.node_id);
    controlLocals(session).watch = { node_id: body.node_id ?? null };
    return { watching: true, node_id: body.node_id ?? null };
  }

  /** `control.node_service_unwatch` -> `{watching:false}`. */
  @SubscribeMessage('control.node_service_unwatch')
  unwatch(@Session() session: WsSession) {
    controlLocals(session).watch = null;
    return { watching: false };
  }

  @SubscribeMessage('control.node_invite_create')
  @AdminOnly()
  @Protected()
  @Audited()
  inviteCreate(@Payload() body: InviteCreateDto) {
    return this.nodes.createInvite(body.ttl_ms);
  }

  @SubscribeMessage('control.node_join')
  @Audited()
  join(@Payload() body: NodeJoinDto) {
    return this.nodes.join(body);
  }

  @SubscribeMessage('control.node_join_request')
  @Audited()
  joinRequest(@Payload() body: NodeJoinRequestDto) {
    return this.nodes.joinRequest(body);
  }

  @SubscribeMessage('control.node_join_status')
  joinStatus(@Payload() body: NodeJoinStatusDto) {
    return this.nodes.joinStatus(body.request_id, body.request_secret);
  }

  @SubscribeMessage('control.node_join_pending_list')
  @AdminOnly()
  pendingList() {
    return this.nodes.pendingList();
  }

  @SubscribeMessage('control.node_join_approve')
  @AdminOnly()
  @Protected()
  @Audited()
  approve(@Payload() body: NodeJoinApproveDto) {
    return this.nodes.approve(body.request_id, body.lease_ttl_ms);
  }

  @SubscribeMessage('control.node_join_deny')
  @AdminOnly()
  @Protected()
  @Audited()
  deny(@Payload() body: NodeJoinDenyDto) {
    return this.nodes.deny(body.request_id);
  }

  /**
   * `control.node_lease_refresh` (node_secret). From a node daemon's session (agent
   * `svc-fs-node`) it also opens or renews the node's daemon session (docs/protocol.md "Liveness from daemon sessions"), which
   * is then watched until it closes.
   */
  @SubscribeMessage('control.node_lease_refresh')
  async leaseRefresh(@Session() session: WsSession, @Payload() body: LeaseRefreshDto) {
    const daemon = this.presence.isDaemonSession(session);
    const r = await this.nodes.refreshLease(body, daemon ? { session_id: session.id, replica: this.presence.replica } : null);
    if (daemon) this.presence.track(session, body.node_id);
    return r;
  }

  @SubscribeMessage('control.node_lease_release')
  @Audited()
  leaseRelease(@Payload() body: LeaseReleaseDto) {
    return this.nodes.releaseLease(body.node_id, body.node_secret);
  }

  @SubscribeMessage('control.node_list')
  list() {
    return { nodes: this.nodes.list() };
  }

  @SubscribeMessage('control.node_get')
  get(@Payload() body: NodeRefDto) {
    return { node: this.nodes.get(body.node_id) };
  }

  @SubscribeMessage('control.node_delete')
  @AdminOnly()
  @Protected()
  @Audited()
  delete(@Payload() body: NodeRefDto) {
    return this.nodes.delete(body.node_id);
  }
}
