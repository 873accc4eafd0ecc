/**
 * The flags and environment variables of `svc` and of `svc state`, with their defaults: read by
 * the parser (src/config.ts), rendered into `svc --help` and into docs/configuration.md
 * (`npm run docs:config`).
 */
import { DEFAULT_STATE_DIR, DEFAULT_SVC_PORT, FS_FEATURES } from '@svc/protocol';
import { helpLines, OptionSpec, sectionEntries, SERVER_COMMON_OPTIONS } from '@svc/ops';

/** Availability sweep period, ms, unless `SVC_SWEEP_INTERVAL_MS` says otherwise; and the shortest it accepts. */
export const DEFAULT_SWEEP_INTERVAL_MS = 1000;
export const MIN_SWEEP_INTERVAL_MS = 50;

/** A node daemon's control session silent this long is closed, ms, unless `SVC_NODE_SESSION_TIMEOUT_MS` says otherwise. */
export const DEFAULT_NODE_SESSION_TIMEOUT_MS = 5000;
/** Shortest `SVC_NODE_SESSION_TIMEOUT_MS`, ms. */
export const MIN_NODE_SESSION_TIMEOUT_MS = 500;

/** Audit entries are kept this many days, unless `SVC_AUDIT_RETENTION_DAYS` says otherwise. */
export const DEFAULT_AUDIT_RETENTION_DAYS = 30;
/** Longest `SVC_AUDIT_RETENTION_DAYS`, days (a hundred years). */
export const MAX_AUDIT_RETENTION_DAYS = 36_500;

/** At most this many audit entries are kept, unless `SVC_AUDIT_MAX_ENTRIES` says otherwise. */
export const DEFAULT_AUDIT_MAX_ENTRIES = 100_000;

/** Commit durability when `SVC_STATE_SYNC` is unset. */
export const DEFAULT_STATE_SYNC = 'normal';

/** FS session deadlines of svc, ms (see `ServerConfig.fsDeadlines`). */
export interface FsDeadlines {
  /** Connect + hello, per node. */
  connectTimeoutMs: number;
  /** One request on a node that still answers pings. */
  requestTimeoutMs: number;
  /** Keepalive ping interval while requests wait; 0: no pings. */
  keepaliveMs: number;
  /** A node that answered nothing for this long while requests wait is hung. */
  keepaliveTimeoutMs: number;
  /** Budget of one routed operation, from its start. */
  opDeadlineMs: number;
}

/** Defaults of {@link FsDeadlines}: svc proxies for remote callers, so a request gets 30 s. */
export const DEFAULT_FS_DEADLINES: FsDeadlines = {
  connectTimeoutMs: 3000,
  requestTimeoutMs: 30_000,
  keepaliveMs: 1000,
  keepaliveTimeoutMs: 2500,
  opDeadlineMs: 4000,
};

/** Largest value of an `SVC_FS_*` deadline, ms (one hour). */
export const MAX_FS_DEADLINE_MS = 3_600_000;

/** What the `SVC_FS_*` deadlines have in common, for their descriptions. */
function fsDeadline(what: string, mountFlag: string): string {
  return `${what}, for the FS sessions of the runtime namespace (as \`svc-fs-mount ${mountFlag}\`); at most ${MAX_FS_DEADLINE_MS}`;
}

/** The flags and variables of `svc` (the server), in the order `--help` lists them. */
export const SERVER_OPTIONS = {
  bind: SERVER_COMMON_OPTIONS.bind,
  port: { ...SERVER_COMMON_OPTIONS.port, default: String(DEFAULT_SVC_PORT) },
  stateDir: {
    flag: 'state-dir',
    value: 'DIR',
    env: 'SVC_STATE_DIR',
    default: DEFAULT_STATE_DIR,
    description: 'state directory: `state.db` (and its `-wal`, `-shm`), `state.keycheck.json`, `auth_tokens.json`, `state.lock`',
  },
  databaseUrl: {
    flag: 'database-url',
    value: 'URL',
    env: 'SVC_DATABASE_URL',
    description:
      'keep the state in PostgreSQL (`postgres://...`, 13 or later), shared by any number of `svc` replicas, instead of SQLite in the state directory',
  },
  tlsCert: SERVER_COMMON_OPTIONS.tlsCert,
  tlsKey: SERVER_COMMON_OPTIONS.tlsKey,
  insecureTransport: SERVER_COMMON_OPTIONS.insecureTransport,
  tlsCa: {
    flag: 'tls-ca',
    value: 'FILE',
    env: 'SVC_TLS_CA',
    description: 'PEM CA certificates trusted for `wss://` FS nodes besides the system CAs; verification cannot be turned off',
  },
  help: SERVER_COMMON_OPTIONS.help,
  metricsPort: SERVER_COMMON_OPTIONS.metricsPort,
  stateKey: {
    env: 'SVC_CONTROL_STATE_KEY_HEX',
    description:
      '64 hexadecimal characters: AES-256-GCM encrypt every stored record body (ids and times stay clear); anything else refuses to start. Make one with `openssl rand -hex 32`',
  },
  stateSync: {
    env: 'SVC_STATE_SYNC',
    default: DEFAULT_STATE_SYNC,
    description: '`normal`: an acknowledged change survives a killed process; `full`: also power loss (an fsync per commit)',
  },
  operatorToken: {
    env: 'SVC_CONTROL_OPERATOR_TOKEN',
    description: 'protected mutations need `payload.operator_token` equal to it; unset: the gate is off',
  },
  adminToken: { env: 'SVC_ADMIN_TOKEN', description: 'the admin role token; unset: generated once into the store (and `auth_tokens.json`)' },
  userToken: { env: 'SVC_USER_TOKEN', description: 'the user role token (must differ from the admin token); unset: generated like the admin token' },
  maxMessageBytes: SERVER_COMMON_OPTIONS.maxMessageBytes,
  logLevel: SERVER_COMMON_OPTIONS.logLevel,
  sweepInterval: {
    env: 'SVC_SWEEP_INTERVAL_MS',
    default: String(DEFAULT_SWEEP_INTERVAL_MS),
    unit: 'ms',
    description: `availability sweep period; at least ${MIN_SWEEP_INTERVAL_MS}`,
  },
  shutdownGrace: SERVER_COMMON_OPTIONS.shutdownGrace,
  nodeSessionTimeout: {
    env: 'SVC_NODE_SESSION_TIMEOUT_MS',
    default: String(DEFAULT_NODE_SESSION_TIMEOUT_MS),
    unit: 'ms',
    description:
      "a node daemon's control session that sends nothing and answers no ping for this long is closed and its node marked `degraded`; at least " +
      String(MIN_NODE_SESSION_TIMEOUT_MS),
  },
  fsConnectTimeout: {
    env: 'SVC_FS_CONNECT_TIMEOUT_MS',
    default: String(DEFAULT_FS_DEADLINES.connectTimeoutMs),
    unit: 'ms',
    description: fsDeadline('connect + hello limit per node', '--connect-timeout-ms'),
  },
  fsRequestTimeout: {
    env: 'SVC_FS_REQUEST_TIMEOUT_MS',
    default: String(DEFAULT_FS_DEADLINES.requestTimeoutMs),
    unit: 'ms',
    description: fsDeadline('limit of one request on a node that still answers pings', '--request-timeout-ms'),
  },
  fsKeepalive: {
    env: 'SVC_FS_KEEPALIVE_MS',
    default: String(DEFAULT_FS_DEADLINES.keepaliveMs),
    unit: 'ms',
    description: fsDeadline('while requests wait, ping a node after this long without an answer (0: no pings)', '--keepalive-ms'),
  },
  fsKeepaliveTimeout: {
    env: 'SVC_FS_KEEPALIVE_TIMEOUT_MS',
    default: String(DEFAULT_FS_DEADLINES.keepaliveTimeoutMs),
    unit: 'ms',
    description: fsDeadline(
      'a node that answered nothing for this long while requests wait is hung; more than `SVC_FS_KEEPALIVE_MS`',
      '--keepalive-timeout-ms',
    ),
  },
  fsOpDeadline: {
    env: 'SVC_FS_OP_DEADLINE_MS',
    default: String(DEFAULT_FS_DEADLINES.opDeadlineMs),
    unit: 'ms',
    description: fsDeadline('budget of one routed operation from its start, for connects and retries on other candidates', '--op-deadline-ms'),
  },
  fsClientFeatures: {
    env: 'SVC_FS_CLIENT_FEATURES',
    default: 'all',
    description: `FS extensions the runtime namespace asks nodes for: comma-separated names (${FS_FEATURES.map((f) => `\`${f}\``).join(', ')}), \`all\` or \`none\``,
  },
  auditRetentionDays: {
    env: 'SVC_AUDIT_RETENTION_DAYS',
    default: String(DEFAULT_AUDIT_RETENTION_DAYS),
    unit: 'days',
    description: `audit entries older than this are deleted; fractions allowed, at most ${MAX_AUDIT_RETENTION_DAYS}`,
  },
  auditMaxEntries: {
    env: 'SVC_AUDIT_MAX_ENTRIES',
    default: String(DEFAULT_AUDIT_MAX_ENTRIES),
    description: 'at most this many audit entries are kept, the newest',
  },
} satisfies Record<string, OptionSpec>;

/**
 * The flags and variables of `svc state export` and `svc state import` (src/state-cli), which find
 * the store as the server does.
 */
export const STATE_COMMAND_OPTIONS = {
  stateDir: { ...SERVER_OPTIONS.stateDir, description: 'the state directory of the SQLite store' },
  databaseUrl: { ...SERVER_OPTIONS.databaseUrl, description: 'the PostgreSQL store instead of the state directory' },
  out: { flag: 'out', value: 'FILE', section: 'export', description: '`svc state export` writes the snapshot to FILE (mode 0600) instead of standard output' },
  stateKey: { env: 'SVC_CONTROL_STATE_KEY_HEX', description: "the store's key, as for the server; the export is encrypted with it" },
  importKey: {
    env: 'SVC_CONTROL_STATE_IMPORT_KEY_HEX',
    description: "`svc state import`: the key of the file when it differs from the store's (a key rotation); default the store's key",
  },
} satisfies Record<string, OptionSpec>;

/** `svc --help`, and the text after a usage error. */
export const SERVER_USAGE = [
  'usage: svc [--bind ADDR] [--port PORT] [--state-dir DIR] [--database-url postgres://...]',
  '       svc state export [--out FILE] [--state-dir DIR | --database-url URL]',
  '       svc state import FILE [--state-dir DIR | --database-url URL]',
  '',
  ...helpLines(sectionEntries(SERVER_OPTIONS, undefined, 'flags')),
  '',
  'environment:',
  ...helpLines(sectionEntries(SERVER_OPTIONS, undefined, 'variables')),
  '',
].join('\n');
