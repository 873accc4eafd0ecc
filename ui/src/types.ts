/**
 * The records the dashboard reads, as the control protocol defines them (the server's own
 * definitions are in libs/protocol/src/records.ts; only the fields shown here are used).
 */

export type MountState = 'online' | 'degraded' | 'missing';

/** NodeInfo (docs/protocol.md "Nodes"). Times in ms since the epoch. */
export interface NodeInfo {
  node_id: string;
  node_name: string;
  fs_url: string;
  platform: { os?: string; arch?: string; runtime_kind?: string };
  labels: Record<string, string>;
  joined_at_ms: number;
  last_seen_ms: number;
  lease_expires_at_ms: number;
  state: 'online' | 'degraded';
}

/** MountView (docs/protocol.md "Projects and tokens"); `auth_token` is dropped on receipt and never shown. */
export interface MountView {
  mount_path: string;
  node_id: string;
  export_name: string;
  node_name: string | null;
  state: MountState;
  lease_expires_at_ms: number | null;
}

export interface Availability {
  mounts_total: number;
  online: number;
  degraded: number;
  missing: number;
}

export interface DriftItem {
  mount_path: string;
  kind: 'missing_node' | 'node_offline' | 'failover_active';
  severity: 'warning' | 'critical';
  selected_node_id: string;
  desired_node_id: string;
  message: string;
}

/** WorkspaceStatus (docs/protocol.md "Workspace status"), as `/projects/<id>/STATUS.json` gives it to an admin. */
export interface WorkspaceStatus {
  project_id: string;
  revision: number;
  mounts: MountView[];
  desired_mounts: MountView[];
  drift: { count: number; items: DriftItem[] };
  availability: Availability;
}

export interface ProjectSummary {
  project_id: string;
  name: string;
  vision: string;
  mount_count: number;
}

export interface ServiceEntry {
  service_id: string;
  kind: string;
  state: string;
}

export interface PendingJoin {
  request_id: string;
  node_name: string;
  fs_url: string;
  platform: { os?: string; arch?: string };
  requested_at_ms: number;
}

/** `control.workspace_availability` push (docs/protocol.md "Workspace status"). */
export interface AvailabilityEvent {
  project_id: string;
  mount_path: string;
  node_id: string;
  previous_state: MountState | null;
  state: MountState;
  availability: Availability;
  ts_ms: number;
}

/** `control.node_service_event` push. */
export interface CatalogEvent {
  event: 'upsert' | 'delete';
  node_id: string;
  added?: string[];
  removed?: string[];
  changed?: string[];
  ts_ms: number;
}

/** One `control.audit_list` entry (docs/protocol.md "Audit log"). */
export interface AuditEntry {
  ts_ms: number;
  role: string;
  agent_id: string;
  type: string;
  target: Record<string, string>;
  result: string;
}
