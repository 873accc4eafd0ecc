/**
 * CatalogGateway, node part: invites, joins, join requests, leases, node listing and deletion
 * (PROTOCOL.md 5).
 */
import { SubscribeMessage } from '@nestjs/websockets';
import {
  InviteCreateDto,
  LeaseRefreshDto,
  NodeJoinApproveDto,
  NodeJoinDenyDto,
  NodeJoinDto,
  NodeJoinRequestDto,
  NodeJoinStatusDto,
  NodeRefDto,
} from '@svc/protocol';
import { Payload } from '@svc/transport';
import { AdminOnly, ControlChannelGateway, Protected } from '../control/gates';
import { NodesService } from './nodes.service';

@ControlChannelGateway()
export class CatalogGateway {
  constructor(private readonly nodes: NodesService) {}

  @SubscribeMessage('control.node_invite_create')
  @AdminOnly()
  @Protected()
  inviteCreate(@Payload() body: InviteCreateDto) {
    return this.nodes.createInvite(body.ttl_ms);
  }

  @SubscribeMessage('control.node_join')
  join(@Payload() body: NodeJoinDto) {
    return this.nodes.join(body);
  }

  @SubscribeMessage('control.node_join_request')
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
  approve(@Payload() body: NodeJoinApproveDto) {
    return this.nodes.approve(body.request_id, body.lease_ttl_ms);
  }

  @SubscribeMessage('control.node_join_deny')
  @AdminOnly()
  @Protected()
  deny(@Payload() body: NodeJoinDenyDto) {
    return this.nodes.deny(body.request_id);
  }

  @SubscribeMessage('control.node_lease_refresh')
  leaseRefresh(@Payload() body: LeaseRefreshDto) {
    return this.nodes.refreshLease(body);
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
  delete(@Payload() body: NodeRefDto) {
    return this.nodes.delete(body.node_id);
  }
}
