/**
 * Service permission and invoke rules (docs/protocol.md "Workspace status"), as pure functions so the
 * catalog, workspace status and the runtime namespace apply the same rule.
 */
import type { Role } from '@svc/protocol';
import type { ServiceEntry } from '../persistence/state.model';

/** Who asks: role, and whether the session holds a valid project token (pinned or bound project). */
export interface Viewer {
  role: Role;
  holdsProjectToken: boolean;
}

/**
 * Visibility of a service to a viewer: admin sees everything; otherwise, when
 * `allow_roles` is present it must contain `user`, `all` or `*` (then `default` is not
 * consulted); when absent, `default` of `deny`/`deny-by-default` hides it; on top of either,
 * `require_project_token`/`project_token_required` true requires a held project token.
 */
export function serviceVisible(service: Pick<ServiceEntry, 'permissions'>, viewer: Viewer): boolean {
  if (viewer.role === 'admin') return true;
  const p = service.permissions ?? {};
  const allowRoles = p.allow_roles;
  if (Array.isArray(allowRoles)) {
    if (!allowRoles.some((r) => r === 'user' || r === 'all' || r === '*')) return false;
  } else if (p.default === 'deny' || p.default === 'deny-by-default') {
    return false;
  }
  const requireToken = p.require_project_token === true || p.project_token_required === true;
  return !requireToken || viewer.holdsProjectToken;
}

/** Invoke-capable (docs/protocol.md "Workspace status"): `capabilities.invoke == true`, or `ops.invoke` or `ops.paths.invoke` present. */
export function invokeCapable(service: Pick<ServiceEntry, 'capabilities' | 'ops'>): boolean {
  if (service.capabilities?.invoke === true) return true;
  const ops = service.ops ?? {};
  if (ops.invoke !== undefined) return true;
  const paths = ops.paths;
  return typeof paths === 'object' && paths !== null && (paths as Record<string, unknown>).invoke !== undefined;
}

/**
 * The catalog service a project mount maps to (docs/protocol.md "Workspace status"): `export_name` equals its `service_id` or one of
 * its `mounts[].mount_id`.
 */
export function serviceOfExport(services: ServiceEntry[], exportName: string): ServiceEntry | undefined {
  return services.find((s) => s.service_id === exportName) ?? services.find((s) => s.mounts?.some((m) => m.mount_id === exportName));
}
