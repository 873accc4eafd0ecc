/**
 * Protocol constants of unified v2 (docs/protocol.md "Envelope and errors").
 */

/** Control protocol name sent in `control.version`. */
export const CONTROL_PROTOCOL = 'unified-v2';
/** Runtime protocol version sent in `acheron.t_version`. */
export const ACHERON_VERSION = 'acheron-1';
/** FS session protocol name sent in `acheron.t_fs_hello`. */
export const FS_PROTOCOL = 'unified-v2-fs';
/** FS session protocol revision (`proto`). */
export const FS_PROTO = 2;

/** The two envelope channels. */
export const CHANNELS = ['control', 'acheron'] as const;
export type Channel = (typeof CHANNELS)[number];

/** Default WebSocket ports (docs/protocol.md "Transport"). */
export const DEFAULT_SVC_PORT = 18790;
export const DEFAULT_FS_NODE_PORT = 18891;
export const DEFAULT_BIND = '127.0.0.1';

/**
 * State directory of `svc` without `--state-dir` or `SVC_STATE_DIR` (relative to the working
 * directory); clients look for `auth_tokens.json` there too.
 */
export const DEFAULT_STATE_DIR = './.svc';

/** Largest accepted frame, bytes, unless `SVC_MAX_MESSAGE_BYTES` says otherwise (docs/protocol.md "Transport"). */
export const DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024;

/** WebSocket close codes used by the servers (RFC 6455 7.4.1). */
export const CloseCode = {
  NORMAL: 1000,
  GOING_AWAY: 1001,
  POLICY_VIOLATION: 1008,
  MESSAGE_TOO_BIG: 1009,
  INTERNAL_ERROR: 1011,
} as const;

/**
 * Lease limits, ms (docs/protocol.md "Nodes", `lease_ttl_ms`). The default is 30 s; a daemon refreshes
 * every third of its lease (as Kubernetes node leases do with 40 s / 10 s).
 */
export const LEASE_TTL_DEFAULT_MS = 30_000;
export const LEASE_TTL_MIN_MS = 1_000;
export const LEASE_TTL_MAX_MS = 86_400_000;

/** Default node invite lifetime, ms (docs/protocol.md "Nodes"). */
export const INVITE_TTL_DEFAULT_MS = 3_600_000;

/** Agent used when `control.connect` names none (docs/protocol.md "Envelope and errors"). */
export const DEFAULT_AGENT_ID = 'default';

/**
 * Agent of a node daemon's control session (`svc-fs-node --control-url`). A session of this
 * agent that refreshes a node's lease with its node secret is that node's daemon session,
 * whose liveness the node's state follows (docs/protocol.md "Liveness from daemon sessions").
 */
export const NODE_DAEMON_AGENT_ID = 'svc-fs-node';

/** Largest `tag` value: tags are unsigned 32-bit integers (docs/protocol.md "Envelope and errors"). */
export const MAX_TAG = 0xffff_ffff;

/**
 * Protected control mutations (docs/protocol.md "Gates", column "op-token"): they need
 * `payload.operator_token` when `SVC_CONTROL_OPERATOR_TOKEN` is set.
 */
export const PROTECTED_OPERATIONS: readonly string[] = [
  'control.auth_rotate',
  'control.project_create',
  'control.project_update',
  'control.project_delete',
  'control.project_mount_set',
  'control.project_mount_remove',
  'control.project_activate',
  'control.project_up',
  'control.project_token_rotate',
  'control.project_token_revoke',
  'control.node_invite_create',
  'control.node_join_approve',
  'control.node_join_deny',
  'control.node_delete',
];

/**
 * Control mutations recorded in the audit log with every outcome (docs/protocol.md "Audit log"
 * `control.audit_list`). Lease refreshes (a heartbeat every few seconds per node) and join
 * status polls are left out unless refused; a `project_up` dry run changes nothing and is left
 * out too. Refused authentications ({@link AUTH_REFUSAL_CODES}) are recorded for every type.
 */
export const AUDITED_OPERATIONS: readonly string[] = [
  ...PROTECTED_OPERATIONS,
  'control.node_join',
  'control.node_join_request',
  'control.node_lease_release',
  'control.node_service_upsert',
];

/** Error codes of a refused authentication (operator token, project token, node secret): always audited. */
export const AUTH_REFUSAL_CODES: readonly string[] = ['operator_auth_failed', 'project_auth_failed', 'node_auth_failed'];

/** `control.audit_list` page size: default and largest (docs/protocol.md "Audit log"). */
export const AUDIT_LIST_DEFAULT_LIMIT = 100;
export const AUDIT_LIST_MAX_LIMIT = 1000;
