/**
 * Who is calling: the role and agent of a control session, and the per-session control state
 * (pinned project, debug subscription) kept in the session's locals.
 */
import { matchesDigest, Role } from '@svc/protocol';
import type { WsSession } from '@svc/transport';
import { bindingKey, StateView } from '../persistence/state.model';

/** The caller of a domain operation. */
export interface Actor {
  role: Role;
  agentId: string;
  sessionId: string;
}

/** How a session came to hold a project (docs/protocol.md "Workspace status"). */
export interface ProjectPin {
  project_id: string;
  via: 'token' | 'binding';
  /** Digest of the token that pinned it, so a rotation ends the pin. */
  token_sha256: string | null;
}

/** Control-channel state of one session. */
export interface ControlLocals {
  pin: ProjectPin | null;
  debug: boolean;
  /** `control.node_service_watch` subscription: null = none, `{node_id:null}` = all nodes. */
  watch: { node_id: string | null } | null;
}

const CONTROL_LOCALS = Symbol('control');

/** The control state of a session (created on first use). */
export function controlLocals(session: WsSession): ControlLocals {
  let locals = session.locals.get(CONTROL_LOCALS) as ControlLocals | undefined;
  if (!locals) {
    locals = { pin: null, debug: false, watch: null };
    session.locals.set(CONTROL_LOCALS, locals);
  }
  return locals;
}

/** The actor of a session. Only sessions of the control endpoint have a role. */
export function actorOf(session: WsSession): Actor {
  return { role: session.role ?? 'user', agentId: session.agentId, sessionId: session.id };
}

/**
 * Whether a pin still holds: the project exists and, for a token pin, its token has not been
 * rotated or revoked since; for a binding pin, the actor's binding still names the project.
 */
export function pinIsValid(state: StateView, actor: Actor, pin: ProjectPin | null): pin is ProjectPin {
  if (!pin) return false;
  const project = state.projects.get(pin.project_id);
  if (!project) return false;
  if (pin.via === 'token') return pin.token_sha256 !== null && pin.token_sha256 === project.token_sha256;
  return state.bindings.get(bindingKey(actor.role, actor.agentId))?.project_id === pin.project_id;
}

/**
 * The project whose token the session holds (`require_project_token`): a valid
 * pin, else the actor's binding when the project still has a token.
 */
export function heldProjectId(state: StateView, actor: Actor, pin: ProjectPin | null): string | null {
  if (pinIsValid(state, actor, pin)) return pin.project_id;
  const binding = state.bindings.get(bindingKey(actor.role, actor.agentId));
  return binding && state.projects.has(binding.project_id) ? binding.project_id : null;
}

/** Constant-time check of a presented project token against a project's stored digest. */
export function projectTokenMatches(state: StateView, projectId: string, token: string): boolean {
  return matchesDigest(token, state.projects.get(projectId)?.token_sha256);
}
