/**
 * The control-plane state as records (docs/operations.md "State"): one table
 * per kind of record, each record a row keyed by its id. Records are immutable values: a
 * change puts a new record (see {@link StateDraft}); readers may keep references.
 *
 * Secrets that only need checking (project tokens, node secrets, invite tokens, join-request
 * secrets) are kept as SHA-256 hex digests; `fs_auth_token` and generated role tokens are kept
 * because they are handed out (docs/operations.md "Encryption at rest"). Times are ms since the epoch.
 */
import type { AccessPolicy, AuditEntry, MountState, Platform, Role, ServiceEntry } from '@svc/protocol';

export type { ServiceEntry };

export interface ProjectRecord {
  readonly project_id: string;
  readonly name: string;
  readonly vision: string;
  readonly access_policy: AccessPolicy;
  /** SHA-256 hex of the project token; null after revoke. */
  readonly token_sha256: string | null;
  readonly token_updated_at_ms: number;
  readonly created_at_ms: number;
  readonly updated_at_ms: number;
  /** Increased with every change of the project's topology (docs/protocol.md "Workspace status"). */
  readonly revision: number;
}

/** One configured mount of a project (a row of its own: a project of 1,000 mounts is 1,000 rows). */
export interface MountRecord {
  readonly mount_id: string;
  readonly project_id: string;
  readonly mount_path: string;
  readonly node_id: string;
  readonly export_name: string;
  /** Order of configuration over the whole store (ties in selection go to the lower). */
  readonly seq: number;
  readonly added_at_ms: number;
}

export interface BindingRecord {
  readonly role: Role;
  readonly agent_id: string;
  readonly project_id: string;
  readonly bound_at_ms: number;
}

export interface NodeRecord {
  readonly node_id: string;
  readonly node_name: string;
  readonly fs_url: string;
  readonly platform: Platform;
  readonly labels: Record<string, string>;
  /** SHA-256 hex of the node secret. */
  readonly secret_sha256: string;
  /** The node's FS session token, handed out as a mount's `auth_token`. */
  readonly fs_auth_token: string;
  readonly lease_token: string;
  readonly lease_expires_at_ms: number;
  readonly joined_at_ms: number;
  readonly last_seen_ms: number;
  /**
   * The node daemon's control session as last stored (docs/protocol.md "Liveness from daemon sessions"); absent: none known (a
   * node without a daemon, or one that released its lease), judged by its lease alone.
   */
  readonly daemon_session?: DaemonSessionRecord;
}

/** A node daemon's control session, as written by the replica holding it (opening and closing only). */
export interface DaemonSessionRecord {
  /** The session's id (`control.connect_ack` `session`). */
  readonly session_id: string;
  /** The process holding it, for operators. */
  readonly replica: string;
  readonly opened_at_ms: number;
  /** When its holder saw it close without a lease release (after the reconnect grace); null while open. */
  readonly closed_at_ms: number | null;
}

/**
 * Whether a node is `online` at `now` (docs/protocol.md "Liveness from daemon sessions"): its lease has not expired and, for
 * a node with a daemon, the daemon's session is not stored as closed.
 * @param now epoch ms
 */
export function nodeIsOnline(node: NodeRecord, now: number): boolean {
  return node.lease_expires_at_ms > now && !(node.daemon_session && node.daemon_session.closed_at_ms !== null);
}

export interface InviteRecord {
  /** SHA-256 hex of the invite token. */
  readonly invite_sha256: string;
  readonly created_at_ms: number;
  readonly expires_at_ms: number;
  readonly redeemed_at_ms: number | null;
  readonly node_id: string | null;
}

export interface JoinRequestRecord {
  readonly request_id: string;
  readonly request_secret_sha256: string;
  /**
   * X25519 public key (base64) derived from the request secret: approval seals the node's
   * credentials to it, so only the holder of the request secret can open them
   * (see `sealed-credentials.ts`). Absent on requests imported from a snapshot.
   */
  readonly seal_public_key?: string;
  readonly node_name: string;
  readonly fs_url: string;
  readonly platform: Platform;
  readonly requested_at_ms: number;
  readonly state: 'pending' | 'approved' | 'denied';
  readonly decided_at_ms: number | null;
  /** Node created on approval. */
  readonly node_id: string | null;
  /** Whether the node has fetched its credentials through `node_join_status`. */
  readonly delivered: boolean;
}

export interface CatalogRecord {
  readonly node_id: string;
  readonly platform: Platform;
  readonly labels: Record<string, string>;
  readonly services: ServiceEntry[];
  readonly updated_at_ms: number;
}

/** A generated role token (docs/operations.md "State"); tokens from the environment are never stored. */
export interface RoleTokenRecord {
  readonly role: Role;
  readonly token: string;
  readonly updated_at_ms: number;
}

/** Credentials of an approved join request not yet fetched, sealed to the request's key. */
export interface UndeliveredRecord {
  readonly request_id: string;
  /** `sealCredentials` output (base64). */
  readonly sealed: string;
}

/** Last known availability state of one configured mount (docs/protocol.md "Workspace status"). */
export interface MountStateRecord {
  readonly mount_id: string;
  readonly project_id: string;
  readonly state: MountState;
  readonly ts_ms: number;
}

/** Key of a binding: bindings are per (role, agent) (docs/protocol.md "Workspace status"). */
export function bindingKey(role: Role, agentId: string): string {
  return `${role}:${agentId}`;
}

/**
 * The tables: name -> how a record is keyed and which of its fields are kept in the clear
 * beside the (optionally encrypted) body, for indexing (ids and times only; docs/operations.md "State").
 */
export const TABLES = {
  projects: { key: (r: ProjectRecord) => r.project_id, clear: (r: ProjectRecord) => ({ revision: r.revision, updated_at_ms: r.updated_at_ms }) },
  mounts: { key: (r: MountRecord) => r.mount_id, clear: (r: MountRecord) => ({ project_id: r.project_id, node_id: r.node_id, seq: r.seq }) },
  nodes: { key: (r: NodeRecord) => r.node_id, clear: (r: NodeRecord) => ({ lease_expires_at_ms: r.lease_expires_at_ms }) },
  invites: { key: (r: InviteRecord) => r.invite_sha256, clear: (r: InviteRecord) => ({ expires_at_ms: r.expires_at_ms }) },
  join_requests: { key: (r: JoinRequestRecord) => r.request_id, clear: (r: JoinRequestRecord) => ({ requested_at_ms: r.requested_at_ms }) },
  bindings: { key: (r: BindingRecord) => bindingKey(r.role, r.agent_id), clear: (r: BindingRecord) => ({ project_id: r.project_id }) },
  catalog: { key: (r: CatalogRecord) => r.node_id, clear: (r: CatalogRecord) => ({ updated_at_ms: r.updated_at_ms }) },
  role_tokens: { key: (r: RoleTokenRecord) => r.role, clear: (r: RoleTokenRecord) => ({ updated_at_ms: r.updated_at_ms }) },
  undelivered: { key: (r: UndeliveredRecord) => r.request_id, clear: () => ({}) },
  mount_states: { key: (r: MountStateRecord) => r.mount_id, clear: (r: MountStateRecord) => ({ project_id: r.project_id, ts_ms: r.ts_ms }) },
} as const;

export type TableName = keyof typeof TABLES;
export const TABLE_NAMES = Object.keys(TABLES) as TableName[];

/** Record type of each table. */
export interface RecordOf {
  projects: ProjectRecord;
  mounts: MountRecord;
  nodes: NodeRecord;
  invites: InviteRecord;
  join_requests: JoinRequestRecord;
  bindings: BindingRecord;
  catalog: CatalogRecord;
  role_tokens: RoleTokenRecord;
  undelivered: UndeliveredRecord;
  mount_states: MountStateRecord;
}

/** Key of a record in its table. */
export function keyOf<T extends TableName>(table: T, record: RecordOf[T]): string {
  return (TABLES[table].key as (r: RecordOf[T]) => string)(record);
}

/**
 * What one commit changes: per table, id -> new record, or null for a deletion; and the audit
 * entries it appends (insert-only rows outside the read model, see `audit-log.ts`).
 */
export type ChangeSet = { [T in TableName]?: Map<string, RecordOf[T] | null> } & { audit?: AuditEntry[] };

/** Read access to one table. A `Map` is one. */
export interface ReadTable<R> {
  get(id: string): R | undefined;
  has(id: string): boolean;
  values(): IterableIterator<R>;
  readonly size: number;
}

/** Read access to the whole state: the committed read model or a draft over it. */
export interface StateView {
  readonly projects: ReadTable<ProjectRecord>;
  readonly mounts: ReadTable<MountRecord>;
  readonly nodes: ReadTable<NodeRecord>;
  readonly invites: ReadTable<InviteRecord>;
  readonly joinRequests: ReadTable<JoinRequestRecord>;
  readonly bindings: ReadTable<BindingRecord>;
  readonly catalog: ReadTable<CatalogRecord>;
  readonly roleTokens: ReadTable<RoleTokenRecord>;
  readonly undelivered: ReadTable<UndeliveredRecord>;
  readonly mountStates: ReadTable<MountStateRecord>;
  /** A project's mounts in configuration order. */
  mountsOf(projectId: string): readonly MountRecord[];
  /** Ids of the mounts that name a node. */
  mountIdsOfNode(nodeId: string): Iterable<string>;
  /** The next free mount `seq`. */
  nextMountSeq(): number;
}

/** Property name of each table on a {@link StateView}. */
export const VIEW_PROPERTY: { [T in TableName]: keyof StateView } = {
  projects: 'projects',
  mounts: 'mounts',
  nodes: 'nodes',
  invites: 'invites',
  join_requests: 'joinRequests',
  bindings: 'bindings',
  catalog: 'catalog',
  role_tokens: 'roleTokens',
  undelivered: 'undelivered',
  mount_states: 'mountStates',
};

const bySeq = (a: MountRecord, b: MountRecord) => a.seq - b.seq;

/**
 * The committed read model: every record in memory, with the indexes reads need (mounts by
 * project and by node). Changed only by {@link apply}, after the store has committed.
 */
export class ControlState implements StateView {
  readonly projects = new Map<string, ProjectRecord>();
  readonly mounts = new Map<string, MountRecord>();
  readonly nodes = new Map<string, NodeRecord>();
  readonly invites = new Map<string, InviteRecord>();
  readonly joinRequests = new Map<string, JoinRequestRecord>();
  readonly bindings = new Map<string, BindingRecord>();
  readonly catalog = new Map<string, CatalogRecord>();
  readonly roleTokens = new Map<string, RoleTokenRecord>();
  readonly undelivered = new Map<string, UndeliveredRecord>();
  readonly mountStates = new Map<string, MountStateRecord>();
  private readonly byProject = new Map<string, Map<string, MountRecord>>();
  private readonly sortedByProject = new Map<string, readonly MountRecord[]>();
  private readonly byNode = new Map<string, Set<string>>();
  private maxSeq = 0;

  /** The map of a table. */
  table<T extends TableName>(table: T): Map<string, RecordOf[T]> {
    return this[VIEW_PROPERTY[table]] as unknown as Map<string, RecordOf[T]>;
  }

  mountsOf(projectId: string): readonly MountRecord[] {
    let sorted = this.sortedByProject.get(projectId);
    if (!sorted) {
      const m = this.byProject.get(projectId);
      sorted = m ? [...m.values()].sort(bySeq) : [];
      this.sortedByProject.set(projectId, sorted);
    }
    return sorted;
  }

  mountIdsOfNode(nodeId: string): Iterable<string> {
    return this.byNode.get(nodeId) ?? [];
  }

  nextMountSeq(): number {
    return this.maxSeq + 1;
  }

  /**
   * Applies committed changes (and keeps the indexes).
   * @returns what each changed record was before (null: it did not exist)
   */
  apply(changes: ChangeSet): ChangeSet {
    const prior: ChangeSet = {};
    for (const table of TABLE_NAMES) {
      const writes = changes[table];
      if (!writes) continue;
      const map = this.table(table);
      const before = new Map<string, RecordOf[typeof table] | null>();
      (prior as Record<string, unknown>)[table] = before;
      for (const [id, record] of writes as Map<string, RecordOf[typeof table] | null>) {
        before.set(id, map.get(id) ?? null);
        if (table === 'mounts') this.unindexMount(id);
        if (record === null) map.delete(id);
        else {
          map.set(id, record);
          if (table === 'mounts') this.indexMount(record as MountRecord);
        }
      }
    }
    return prior;
  }

  private indexMount(m: MountRecord): void {
    let p = this.byProject.get(m.project_id);
    if (!p) this.byProject.set(m.project_id, (p = new Map<string, MountRecord>()));
    p.set(m.mount_id, m);
    this.sortedByProject.delete(m.project_id);
    let n = this.byNode.get(m.node_id);
    if (!n) this.byNode.set(m.node_id, (n = new Set()));
    n.add(m.mount_id);
    if (m.seq > this.maxSeq) this.maxSeq = m.seq;
  }

  private unindexMount(id: string): void {
    const old = this.mounts.get(id);
    if (!old) return;
    const p = this.byProject.get(old.project_id);
    if (p) {
      p.delete(id);
      if (p.size === 0) this.byProject.delete(old.project_id);
    }
    this.sortedByProject.delete(old.project_id);
    const n = this.byNode.get(old.node_id);
    if (n) {
      n.delete(id);
      if (n.size === 0) this.byNode.delete(old.node_id);
    }
  }
}
