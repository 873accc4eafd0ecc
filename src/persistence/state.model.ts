/**
 * The control-plane state: every record the control plane keeps, in memory, and its snapshot
 * form (PROTOCOL.md 5-7). Secrets that only need checking (project tokens, node secrets,
 * invite tokens, join-request secrets) are kept as SHA-256 hex digests; `fs_auth_token` is kept
 * because it is handed out (PROTOCOL.md 5 "At rest"). Times are ms since the epoch.
 */
import type { AccessPolicy, Platform, Role, ServiceEntry } from '@svc/protocol';

export type { ServiceEntry };

export interface MountRecord {
  mount_path: string;
  node_id: string;
  export_name: string;
  added_at_ms: number;
}

export interface ProjectRecord {
  project_id: string;
  name: string;
  vision: string;
  access_policy: AccessPolicy;
  /** SHA-256 hex of the project token; null after revoke. */
  token_sha256: string | null;
  token_updated_at_ms: number;
  /** Configured mounts in the order they were set (ties in selection go to the earlier). */
  mounts: MountRecord[];
  created_at_ms: number;
  updated_at_ms: number;
}

export interface BindingRecord {
  role: Role;
  agent_id: string;
  project_id: string;
  bound_at_ms: number;
}

export interface NodeRecord {
  node_id: string;
  node_name: string;
  fs_url: string;
  platform: Platform;
  labels: Record<string, string>;
  /** SHA-256 hex of the node secret. */
  secret_sha256: string;
  /** The node's FS session token, handed out as a mount's `auth_token`. */
  fs_auth_token: string;
  lease_token: string;
  lease_expires_at_ms: number;
  joined_at_ms: number;
  last_seen_ms: number;
}

export interface InviteRecord {
  /** SHA-256 hex of the invite token. */
  invite_sha256: string;
  created_at_ms: number;
  expires_at_ms: number;
  redeemed_at_ms: number | null;
  node_id: string | null;
}

export interface JoinRequestRecord {
  request_id: string;
  request_secret_sha256: string;
  node_name: string;
  fs_url: string;
  platform: Platform;
  requested_at_ms: number;
  state: 'pending' | 'approved' | 'denied';
  decided_at_ms: number | null;
  /** Node created on approval. */
  node_id: string | null;
  /** Whether the node has fetched its credentials through `node_join_status`. */
  delivered: boolean;
}

export interface CatalogRecord {
  node_id: string;
  platform: Platform;
  labels: Record<string, string>;
  services: ServiceEntry[];
  updated_at_ms: number;
}

/** Snapshot format version written by this code. */
export const SNAPSHOT_VERSION = 1;

/** The JSON form of the state inside a snapshot file. */
export interface StateSnapshot {
  version: number;
  projects: ProjectRecord[];
  bindings: BindingRecord[];
  nodes: NodeRecord[];
  invites: InviteRecord[];
  join_requests: JoinRequestRecord[];
  catalog: CatalogRecord[];
}

/** Key of a binding: bindings are per (role, agent) (PROTOCOL.md 6). */
export function bindingKey(role: Role, agentId: string): string {
  return `${role}:${agentId}`;
}

/** The in-memory state. Mutate it only inside `StateService.mutate`. */
export class ControlState {
  readonly projects = new Map<string, ProjectRecord>();
  readonly bindings = new Map<string, BindingRecord>();
  readonly nodes = new Map<string, NodeRecord>();
  readonly invites = new Map<string, InviteRecord>();
  readonly joinRequests = new Map<string, JoinRequestRecord>();
  readonly catalog = new Map<string, CatalogRecord>();

  /** The snapshot form (plain JSON). */
  toSnapshot(): StateSnapshot {
    return {
      version: SNAPSHOT_VERSION,
      projects: [...this.projects.values()],
      bindings: [...this.bindings.values()],
      nodes: [...this.nodes.values()],
      invites: [...this.invites.values()],
      join_requests: [...this.joinRequests.values()],
      catalog: [...this.catalog.values()],
    };
  }

  /**
   * Rebuilds the state from a snapshot.
   * @throws Error naming what is wrong when the snapshot does not have the expected shape
   */
  static fromSnapshot(raw: unknown): ControlState {
    const s = raw as Partial<StateSnapshot> | null;
    if (typeof s !== 'object' || s === null) throw new Error('snapshot state is not an object');
    if (s.version !== SNAPSHOT_VERSION) throw new Error(`snapshot state version ${String(s.version)} is not supported (expected ${SNAPSHOT_VERSION})`);
    const arr = <T>(name: keyof StateSnapshot): T[] => {
      const v = s[name];
      if (v === undefined) return [];
      if (!Array.isArray(v)) throw new Error(`snapshot field ${name} is not an array`);
      return v as T[];
    };
    const state = new ControlState();
    for (const p of arr<ProjectRecord>('projects')) {
      if (typeof p?.project_id !== 'string' || !Array.isArray(p.mounts)) throw new Error('snapshot has a malformed project');
      state.projects.set(p.project_id, p);
    }
    for (const b of arr<BindingRecord>('bindings')) state.bindings.set(bindingKey(b.role, b.agent_id), b);
    for (const n of arr<NodeRecord>('nodes')) {
      if (typeof n?.node_id !== 'string' || typeof n.secret_sha256 !== 'string') throw new Error('snapshot has a malformed node');
      state.nodes.set(n.node_id, n);
    }
    for (const i of arr<InviteRecord>('invites')) state.invites.set(i.invite_sha256, i);
    for (const r of arr<JoinRequestRecord>('join_requests')) state.joinRequests.set(r.request_id, r);
    for (const c of arr<CatalogRecord>('catalog')) state.catalog.set(c.node_id, c);
    return state;
  }
}
