/**
 * Wire records of the control protocol. Times are ms since the epoch.
 */

/** Session role, from the bearer token of the WebSocket upgrade (docs/protocol.md "Transport"). */
export type Role = 'admin' | 'user';

/** Mount availability state. */
export type MountState = 'online' | 'degraded' | 'missing';

/** A node's platform; each member optional. */
export interface Platform {
  os?: string;
  arch?: string;
  runtime_kind?: string;
}

/** `access_policy` of a project (docs/protocol.md "Workspace status"). */
export interface AccessPolicy {
  invoke: 'allow' | 'deny';
}

/** NodeInfo (docs/protocol.md "Nodes"): no secrets. */
export interface NodeInfo {
  node_id: string;
  node_name: string;
  fs_url: string;
  platform: Platform;
  labels: Record<string, string>;
  joined_at_ms: number;
  last_seen_ms: number;
  lease_expires_at_ms: number;
  state: 'online' | 'degraded';
  online: boolean;
}

/** One pending join request of `control.node_join_pending_list` `pending` (no secrets); `requested_at_ms` ms since the epoch. */
export interface PendingJoin {
  request_id: string;
  node_name: string;
  fs_url: string;
  platform: Platform;
  requested_at_ms: number;
}

/** NodeCredentials (docs/protocol.md "Nodes"), returned once at join/approval. */
export interface NodeCredentials {
  node_id: string;
  node_name: string;
  node_secret: string;
  fs_auth_token: string;
  lease_token: string;
  lease_expires_at_ms: number;
}

/** MountView (docs/protocol.md "Workspace status"): one configured or selected mount of a project. */
export interface MountView {
  mount_path: string;
  node_id: string;
  export_name: string;
  node_name: string | null;
  fs_url: string | null;
  online: boolean;
  state: MountState;
  auth_token?: string;
  lease_expires_at_ms: number | null;
}

/** ProjectSummary (docs/protocol.md "Projects and tokens"). */
export interface ProjectSummary {
  project_id: string;
  name: string;
  vision: string;
  mount_count: number;
  token_locked: boolean;
  created_at_ms: number;
  updated_at_ms: number;
}

/** ProjectDetail (docs/protocol.md "Projects and tokens"); `project_token` only on create. */
export interface ProjectDetail extends ProjectSummary {
  access_policy: AccessPolicy;
  mounts: MountView[];
  project_token?: string;
}

/** Availability rollup of the selected mounts. */
export interface Availability {
  mounts_total: number;
  online: number;
  degraded: number;
  missing: number;
}

/** One drift item of WorkspaceStatus (docs/protocol.md "Workspace status"). */
export interface DriftItem {
  mount_path: string;
  kind: 'missing_node' | 'node_offline' | 'failover_active';
  severity: 'warning' | 'critical';
  selected_node_id: string;
  desired_node_id: string;
  message: string;
}

/** WorkspaceStatus (docs/protocol.md "Workspace status"). */
export interface WorkspaceStatus {
  agent_id: string;
  project_id: string | null;
  workspace_root: string | null;
  mounts: MountView[];
  desired_mounts: MountView[];
  actual_mounts: MountView[];
  drift: { count: number; items: DriftItem[] };
  availability: Availability;
  /**
   * The project's revision (docs/protocol.md "Workspace status"): increased with every change of its selected
   * mounts or their states; 0 when `project_id` is null. Topology deltas continue from it.
   */
  revision: number;
}

/** `control.workspace_availability` event payload (docs/protocol.md "Workspace status"). */
export interface AvailabilityEvent {
  project_id: string;
  mount_path: string;
  node_id: string;
  previous_state: MountState | null;
  state: MountState;
  availability: Availability;
  ts_ms: number;
}

/**
 * A `control.workspace_topology_delta` that changes the topology (docs/protocol.md "Workspace status"), pushed to
 * sessions pinned to `project_id`. It carries only the mount paths whose topology changed:
 *  - `changed`: the new selected MountView of each such path (one per path);
 *  - `desired`: every configured mount of exactly those paths (MountView, as in
 *    WorkspaceStatus `desired_mounts`, filtered for the caller);
 *  - `removed`: mount paths that no longer exist for the caller;
 *  - `availability`: the rollup of the whole project's selected mounts.
 * `revision` is the project's revision after the change; a session sees it increase by
 * exactly 1 per delta unless it missed one (then it re-reads `control.workspace_status`).
 */
export interface TopologyChangeDelta {
  project_id: string;
  revision: number;
  changed: MountView[];
  desired: MountView[];
  removed: string[];
  availability: Availability;
  ts_ms: number;
  reason?: undefined;
}

/**
 * The last `control.workspace_topology_delta` of a pin (docs/protocol.md "Workspace status"): the session's pin on
 * `project_id` ended (project token rotated or revoked, project deleted), so its topology is
 * now empty. `changed`, `desired` and `removed` are empty; `revision` may be present.
 */
export interface TopologyEndDelta {
  project_id: string;
  revision?: number;
  changed: MountView[];
  desired: MountView[];
  removed: string[];
  availability: Availability;
  ts_ms: number;
  reason: 'access_ended';
}

/**
 * `control.workspace_topology_delta` event payload (docs/protocol.md "Workspace status"): a change
 * ({@link TopologyChangeDelta}, no `reason`) or the end of the pin ({@link TopologyEndDelta},
 * `reason: "access_ended"`).
 */
export type TopologyDelta = TopologyChangeDelta | TopologyEndDelta;

/**
 * `control.node_service_event` push payload, as one session receives it: on `upsert`, the ids of the
 * node's services that became visible to it (`added`), stopped being visible (`removed`) or changed
 * while visible (`changed`); on `delete`, the node is gone. `ts_ms` ms since the epoch.
 */
export type CatalogEvent =
  | { event: 'upsert'; node_id: string; added: string[]; removed: string[]; changed: string[]; ts_ms: number }
  | { event: 'delete'; node_id: string; ts_ms: number };

/** A mount of a declarative workspace, as `control.project_up` reports it (docs/protocol.md "Declarative workspaces"). */
export interface MountSpec {
  mount_path: string;
  node_id: string;
  /** The node's name; null when the node no longer exists (a removed mount of a deleted node). */
  node_name: string | null;
  export_name: string;
}

/** `control.project_up` reply payload (docs/protocol.md "Declarative workspaces"). */
export interface ProjectUpResult {
  /** null only on a dry run for a project that does not exist yet. */
  project_id: string | null;
  created: boolean;
  /** Only when the project was created by this call (returned once). */
  project_token?: string;
  changes: { added: MountSpec[]; removed: MountSpec[]; unchanged: number };
  /** Every configured mount of the project after the call (as ProjectDetail `mounts`). */
  mounts: MountView[];
  /** With `activate`: the caller's workspace root. */
  workspace_root?: string;
}

/** What an audit entry is about (docs/protocol.md "Audit log" `control.audit_list`); ids only, never a secret. */
export interface AuditTarget {
  project_id?: string;
  node_id?: string;
  mount_path?: string;
  request_id?: string;
}

/**
 * One entry of the audit log (docs/protocol.md "Audit log" `control.audit_list`): a control mutation or a
 * refused authentication, by whom (`role`, `agent_id` of the session), of which `type`, on what
 * `target`, with what `result` (`"ok"` or the error code). Never holds a token or secret.
 */
export interface AuditEntry {
  /** When it was recorded, ms since the epoch. */
  ts_ms: number;
  role: Role;
  agent_id: string;
  /** The request type, e.g. `control.project_up`. */
  type: string;
  target: AuditTarget;
  /** `"ok"` or the error code of the reply, e.g. `operator_auth_failed`. */
  result: string;
}

/** `control.audit_list` reply payload: newest first; `next_cursor` null on the last page. */
export interface AuditListResult {
  entries: AuditEntry[];
  next_cursor: string | null;
}
