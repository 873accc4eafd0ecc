/**
 * Wire records of the control protocol (PROTOCOL.md 5-6). Times are ms since the epoch.
 */

/** Session role, from the bearer token of the WebSocket upgrade (PROTOCOL.md 1). */
export type Role = 'admin' | 'user';

/** Mount availability state (SPEC.md "Mount availability states"). */
export type MountState = 'online' | 'degraded' | 'missing';

/** A node's platform; each member optional. */
export interface Platform {
  os?: string;
  arch?: string;
  runtime_kind?: string;
}

/** `access_policy` of a project (PROTOCOL.md 6). */
export interface AccessPolicy {
  invoke: 'allow' | 'deny';
}

/** NodeInfo (PROTOCOL.md 5): no secrets. */
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

/** NodeCredentials (PROTOCOL.md 5), returned once at join/approval. */
export interface NodeCredentials {
  node_id: string;
  node_name: string;
  node_secret: string;
  fs_auth_token: string;
  lease_token: string;
  lease_expires_at_ms: number;
}

/** MountView (PROTOCOL.md 5): one configured or selected mount of a project. */
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

/** ProjectSummary (PROTOCOL.md 5). */
export interface ProjectSummary {
  project_id: string;
  name: string;
  vision: string;
  mount_count: number;
  token_locked: boolean;
  created_at_ms: number;
  updated_at_ms: number;
}

/** ProjectDetail (PROTOCOL.md 5); `project_token` only on create. */
export interface ProjectDetail extends ProjectSummary {
  access_policy: AccessPolicy;
  mounts: MountView[];
  project_token?: string;
}

/** Availability rollup of the selected mounts (SPEC.md "Workspace status"). */
export interface Availability {
  mounts_total: number;
  online: number;
  degraded: number;
  missing: number;
}

/** One drift item of WorkspaceStatus (PROTOCOL.md 6). */
export interface DriftItem {
  mount_path: string;
  kind: 'missing_node' | 'node_offline' | 'failover_active';
  severity: 'warning' | 'critical';
  selected_node_id: string;
  desired_node_id: string;
  message: string;
}

/** WorkspaceStatus (PROTOCOL.md 6). */
export interface WorkspaceStatus {
  agent_id: string;
  project_id: string | null;
  /** The project's revision (PROTOCOL.md 6); 0 without a project. */
  revision: number;
  workspace_root: string | null;
  mounts: MountView[];
  desired_mounts: MountView[];
  actual_mounts: MountView[];
  drift: { count: number; items: DriftItem[] };
  availability: Availability;
}

/** `control.workspace_availability` event payload (PROTOCOL.md 6). */
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
 * `control.workspace_topology_delta` event payload (PROTOCOL.md 6): only the mount paths
 * whose topology changed. `changed` holds each changed path's selected mount, `desired` every
 * configured mount of those paths (as `desired_mounts` in WorkspaceStatus), `removed` the
 * paths gone; `revision` is the project's revision after the change (a client that sees a gap
 * re-reads `workspace_status`). A session whose pin ended gets one last delta with
 * `reason:"access_ended"` and no mounts.
 */
export interface TopologyDelta {
  project_id: string;
  revision: number;
  changed: MountView[];
  desired: MountView[];
  removed: string[];
  availability: Availability;
  ts_ms: number;
  reason?: 'access_ended';
}
