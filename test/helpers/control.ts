/**
 * Control-session helpers for e2e tests, on the shipped ControlClient.
 */
import { ControlClient, ControlError } from '../../libs/client/src';
import type { NodeCredentials } from '../../libs/protocol/src';
import { ADMIN_TOKEN, USER_TOKEN, waitFor } from '../support/processes';

export type Client = ControlClient;

const open: ControlClient[] = [];

/** Opens a negotiated control session as admin (default) or user. */
export async function session(url: string, role: 'admin' | 'user' = 'admin', agentId?: string): Promise<ControlClient> {
  const c = await ControlClient.connect({ url, token: role === 'admin' ? ADMIN_TOKEN : USER_TOKEN, agentId });
  open.push(c);
  return c;
}

/** Closes every session opened by {@link session}. */
export function closeSessions(): void {
  for (const c of open.splice(0)) c.close();
}

/** Runs a request expected to fail; returns the error code and message. */
export async function failure(p: Promise<unknown>): Promise<{ code: string; message: string }> {
  try {
    const v = await p;
    throw new Error(`expected an error, got ${JSON.stringify(v)}`);
  } catch (e) {
    if (e instanceof ControlError) return { code: e.code, message: e.message };
    throw e;
  }
}

/**
 * Polls every 20 ms until `c.request(type, payload)` is answered (a reply, not an error): what
 * was done on another replica has reached the one `c` is on.
 * @param timeoutMs how long to try, ms
 * @throws Error when it is still refused after `timeoutMs`
 */
export function untilAnswered(c: ControlClient, type: string, payload: Record<string, unknown>, timeoutMs = 1000): Promise<void> {
  return untilOutcome(c, type, payload, true, timeoutMs);
}

/**
 * Polls every 20 ms until `c.request(type, payload)` is refused (an error): what was revoked on
 * another replica has reached the one `c` is on.
 * @param timeoutMs how long to try, ms
 * @throws Error when it is still answered after `timeoutMs`
 */
export function untilRefused(c: ControlClient, type: string, payload: Record<string, unknown>, timeoutMs = 1000): Promise<void> {
  return untilOutcome(c, type, payload, false, timeoutMs);
}

/** Polls every 20 ms until `c.request(type, payload)` is answered (`answered` true) or refused (false). */
async function untilOutcome(c: ControlClient, type: string, payload: Record<string, unknown>, answered: boolean, timeoutMs: number): Promise<void> {
  await waitFor(
    () =>
      c.request(type, payload).then(
        () => answered || undefined,
        () => !answered || undefined,
      ),
    timeoutMs,
    20,
  );
}

/**
 * Who is offered the invoke path of an invocable service mounted in a project, as a table of
 * cases: [the project's `access_policy.invoke`, the service's permission (`allow`: its
 * `allow_roles` name both roles; `deny`: deny-by-default), the role, whether that role is offered
 * the path]. An admin always is; a user only when both allow.
 */
export const INVOKE_GATING = [
  ['allow', 'allow', 'user', true],
  ['allow', 'deny', 'user', false],
  ['deny', 'allow', 'user', false],
  ['deny', 'deny', 'user', false],
  ['allow', 'allow', 'admin', true],
  ['allow', 'deny', 'admin', true],
  ['deny', 'allow', 'admin', true],
  ['deny', 'deny', 'admin', true],
] as const;

/**
 * An online terminal service `serviceId` at `endpoint` that can be invoked, with the permission
 * `perm` of an {@link INVOKE_GATING} case, as `control.node_service_upsert` takes it.
 */
export function gatedTerminalService(serviceId: string, endpoint: string, perm: 'allow' | 'deny'): Record<string, unknown> {
  return {
    service_id: serviceId,
    kind: 'terminal',
    state: 'online',
    endpoints: [endpoint],
    capabilities: { invoke: true },
    permissions: perm === 'allow' ? { allow_roles: ['admin', 'user'] } : { default: 'deny-by-default' },
  };
}

/** Node credentials as returned by `node_join` (docs/protocol.md "Nodes"). */
export type Credentials = NodeCredentials;

/** Creates an invite and joins a node with it. */
export async function joinNode(admin: ControlClient, name: string, leaseTtlMs?: number, fsUrl = 'ws://127.0.0.1:1/v2/fs'): Promise<Credentials> {
  const { invite_token } = await admin.request<{ invite_token: string }>('node_invite_create', {});
  return admin.request<Credentials>('node_join', { invite_token, node_name: name, fs_url: fsUrl, lease_ttl_ms: leaseTtlMs });
}

export interface ProjectDetail {
  project_id: string;
  project_token?: string;
  token_locked: boolean;
  mounts: Array<Record<string, unknown>>;
  [k: string]: unknown;
}
