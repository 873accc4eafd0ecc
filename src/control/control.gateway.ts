/**
 * ControlGateway: negotiation (`control.version`, `control.connect`), liveness and metrics,
 * role tokens, and debug subscriptions. Pushes
 * `control.workspace_availability` to debug subscribers.
 */
import { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { SubscribeMessage } from '@nestjs/websockets';
import { Subscription } from 'rxjs';
import {
  ACHERON_VERSION,
  AuthRotateDto,
  CONTROL_PROTOCOL,
  ConnectDto,
  DEFAULT_AGENT_ID,
  FS_PROTO,
  FS_PROTOCOL,
  ProtocolError,
  VersionDto,
} from '@svc/protocol';
import { MetricsJsonService } from '@svc/ops';
import { Payload, Session, SessionRegistry, WsSession } from '@svc/transport';
import { actorOf, controlLocals } from '../common/actor';
import { AvailabilityService } from '../projects/availability.service';
import { WorkspaceService } from '../projects/workspace.service';
import { bindingKey } from '../persistence/state.model';
import { StateService } from '../persistence/state.service';
import { AuthTokensService } from './auth-tokens.service';
import { Audited } from '../audit/audit.gates';
import { AdminOnly, ControlChannelGateway, Protected } from './gates';

/**
 * Refuses an operation that returns a role token to a dashboard (cookie) session.
 * @throws ProtocolError `forbidden`
 */
function refuseBrowser(session: WsSession, type: string): void {
  if (session.browser) throw new ProtocolError('forbidden', `${type} is not available to a dashboard session: it would hand a role token to a web page`);
}

@ControlChannelGateway()
export class ControlGateway implements OnModuleInit, OnModuleDestroy {
  private sub: Subscription | null = null;

  constructor(
    private readonly sessions: SessionRegistry,
    private readonly tokens: AuthTokensService,
    private readonly metrics: MetricsJsonService,
    private readonly workspace: WorkspaceService,
    private readonly availability: AvailabilityService,
    private readonly store: StateService,
  ) {}

  onModuleInit(): void {
    this.sub = this.availability.transitions$.subscribe((event) => {
      for (const s of this.sessions.all()) {
        if (s.role === 'admin' && controlLocals(s).debug) s.push('control', 'control.workspace_availability', event);
      }
    });
  }

  onModuleDestroy(): void {
    this.sub?.unsubscribe();
  }

  /**
   * `control.version` `{protocol:"unified-v2"}`: the mandatory first message.
   * @throws ProtocolError `protocol_mismatch` for another protocol (the session is closed)
   */
  @SubscribeMessage('control.version')
  version(@Session() session: WsSession, @Payload() body: VersionDto) {
    if (session.control !== 'start') throw new ProtocolError('protocol_mismatch', 'control.version was already negotiated');
    if (body.protocol !== CONTROL_PROTOCOL) {
      throw new ProtocolError('protocol_mismatch', `control.version protocol must be "${CONTROL_PROTOCOL}" (got ${JSON.stringify(body.protocol)})`);
    }
    session.control = 'versioned';
    return { protocol: CONTROL_PROTOCOL, acheron_runtime: ACHERON_VERSION, acheron_node: FS_PROTOCOL, acheron_node_proto: FS_PROTO };
  }

  /** `control.connect` `{agent_id?}` -> `{agent_id, role, protocol, session, project_id, workspace:{mounts}}`. */
  @SubscribeMessage('control.connect')
  connect(@Session() session: WsSession, @Payload() body: ConnectDto) {
    if (session.control !== 'versioned') throw new ProtocolError('protocol_mismatch', 'control.connect was already negotiated');
    session.agentId = body.agent_id ?? DEFAULT_AGENT_ID;
    session.control = 'connected';
    const actor = actorOf(session);
    const bound = this.store.state.bindings.get(bindingKey(actor.role, actor.agentId))?.project_id ?? null;
    const status = this.workspace.statusOf(actor, bound);
    return {
      agent_id: actor.agentId,
      role: actor.role,
      protocol: CONTROL_PROTOCOL,
      session: session.id,
      project_id: status.project_id,
      workspace: { mounts: status.mounts },
    };
  }

  /** `control.ping` -> `control.pong` `{}` (liveness only). */
  @SubscribeMessage('control.ping')
  ping() {
    return {};
  }

  /** `control.metrics` -> the same JSON as `/metrics.json`. */
  @SubscribeMessage('control.metrics')
  metricsJson() {
    return this.metrics.json();
  }

  /** `control.auth_status` (admin) -> `{admin_token, user_token, path}`. */
  @SubscribeMessage('control.auth_status')
  @AdminOnly()
  authStatus(@Session() session: WsSession) {
    refuseBrowser(session, 'control.auth_status');
    return this.tokens.status();
  }

  /** `control.auth_rotate` `{role}` (admin, op-token) -> `{role, token}`. */
  @SubscribeMessage('control.auth_rotate')
  @AdminOnly()
  @Protected()
  @Audited()
  authRotate(@Payload() body: AuthRotateDto, @Session() session: WsSession) {
    refuseBrowser(session, 'control.auth_rotate');
    return this.tokens.rotate(body.role);
  }

  /** `control.debug_subscribe` (admin) -> `{subscribed:true}`; then `control.workspace_availability` pushes. */
  @SubscribeMessage('control.debug_subscribe')
  @AdminOnly()
  debugSubscribe(@Session() session: WsSession) {
    controlLocals(session).debug = true;
    return { subscribed: true };
  }

  /** `control.debug_unsubscribe` (admin) -> `{subscribed:false}`. */
  @SubscribeMessage('control.debug_unsubscribe')
  @AdminOnly()
  debugUnsubscribe(@Session() session: WsSession) {
    controlLocals(session).debug = false;
    return { subscribed: false };
  }
}
