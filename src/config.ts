/**
 * Configuration of the `svc` control-plane server, read once at start from flags and the
 * environment (docs/protocol.md "Transport", README "Configuration").
 */
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_BIND, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_SVC_PORT } from '@svc/protocol';
import { nonEmpty, parseIntValue, parseLogLevel, parsePortValue } from '@svc/ops';
import { ClientTls, loadClientTls, TlsCaError } from '../libs/client/src/tls-options';
import { resolveTransportSecurity } from '../libs/transport/src/tls-config';
import { LoadedServerTls, loadServerTls, TlsFileError } from '../libs/transport/src/tls-certificate';
import type { StateStoreConfig } from './persistence/state-store.factory';

/** Validated server configuration. */
export class ServerConfig {
  /** Listen address of the WebSocket and ops listeners. */
  bind: string;
  /** WebSocket port; 0 picks a free one. */
  port: number;
  /** TLS of the WebSocket listener (`--tls-cert`/`--tls-key`, docs/operations.md "Transport security (TLS)"), loaded and checked; null: plain `ws://`. */
  tls: LoadedServerTls | null;
  /** `--insecure-transport` let a non-loopback `--bind` serve plain `ws://` (a warning at start). */
  insecureTransport: boolean;
  /** CAs the FS routing verifies `wss://` nodes against: system CAs plus `--tls-ca` / `SVC_TLS_CA`. */
  clientTls: ClientTls;
  /** Absolute path of the state directory (`state.db`, role tokens, lock). */
  stateDir: string;
  /** Ops HTTP port (`SVC_METRICS_PORT`); null: no ops listener. */
  metricsPort: number | null;
  /** Largest accepted frame, bytes (`SVC_MAX_MESSAGE_BYTES`). */
  maxMessageBytes: number;
  /** AES-256 key of the snapshot (`SVC_CONTROL_STATE_KEY_HEX`), or null: plaintext snapshot. */
  stateKey: Buffer | null;
  /** PostgreSQL URL (`--database-url` / `SVC_DATABASE_URL`); null: the embedded SQLite store in `stateDir`. */
  databaseUrl: string | null;
  /** Commit durability (`SVC_STATE_SYNC`): `normal` survives a killed process, `full` also power loss. */
  stateSync: 'normal' | 'full';
  /** Operator token (`SVC_CONTROL_OPERATOR_TOKEN`), or null: gate off. */
  operatorToken: string | null;
  /** Role tokens from the environment (`SVC_ADMIN_TOKEN`, `SVC_USER_TOKEN`); null: generated. */
  adminToken: string | null;
  userToken: string | null;
  /** pino level (`SVC_LOG_LEVEL`, default `info`). */
  logLevel: string;
  /** Availability sweep period, ms (`SVC_SWEEP_INTERVAL_MS`, default 1000). */
  sweepIntervalMs: number;
  /** How long shutdown waits for requests in flight, ms (`SVC_SHUTDOWN_GRACE_MS`, default 5000). */
  shutdownGraceMs: number;
  /**
   * A node daemon's control session that sends no frame and answers no ping for this long,
   * ms, is closed and the node marked `degraded` (`SVC_NODE_SESSION_TIMEOUT_MS`, default 5000;
   * docs/protocol.md "Liveness from daemon sessions").
   */
  nodeSessionTimeoutMs: number;
  /**
   * Deadlines of the FS sessions svc opens for the runtime namespace (docs/namespace.md;
   * docs/protocol.md "Workspace router and `svc-fs-mount` (client side)", its deadlines), ms: connect + hello
   * (`SVC_FS_CONNECT_TIMEOUT_MS`, 3000), one request on a node that answers pings
   * (`SVC_FS_REQUEST_TIMEOUT_MS`, 30000), keepalive interval while requests wait
   * (`SVC_FS_KEEPALIVE_MS`, 1000; 0 off) and limit without any answer
   * (`SVC_FS_KEEPALIVE_TIMEOUT_MS`, 2500), budget of one routed operation
   * (`SVC_FS_OP_DEADLINE_MS`, 4000).
   */
  fsDeadlines: FsDeadlines;
  /** Audit entries are kept this long, days; fractions allowed (`SVC_AUDIT_RETENTION_DAYS`, default 30). */
  auditRetentionDays: number;
  /** At most this many audit entries are kept, the newest (`SVC_AUDIT_MAX_ENTRIES`, default 100000). */
  auditMaxEntries: number;
  /** `--help` was given. */
  help: boolean;
}

/** FS session deadlines of svc, ms (see {@link ServerConfig.fsDeadlines}). */
export interface FsDeadlines {
  connectTimeoutMs: number;
  requestTimeoutMs: number;
  keepaliveMs: number;
  keepaliveTimeoutMs: number;
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

/** A configuration error: printed as `svc: <message>` and exit code 2. */
export class ConfigError extends Error {}

export const SERVER_USAGE = `usage: svc [--bind ADDR] [--port PORT] [--state-dir DIR] [--database-url postgres://...]
       svc state export [--out FILE] [--state-dir DIR]
       svc state import FILE [--state-dir DIR]

  --bind ADDR        listen address (default ${DEFAULT_BIND})
  --port PORT        WebSocket port, 0 picks a free one (default ${DEFAULT_SVC_PORT})
  --state-dir DIR    state directory (default $SVC_STATE_DIR, else ./.svc)
  --database-url URL keep the state in PostgreSQL (default $SVC_DATABASE_URL; else SQLite in the state directory)
  --tls-cert FILE    serve wss:// with this PEM certificate chain (or $SVC_TLS_CERT); re-read when it changes and on SIGHUP
  --tls-key FILE     its PEM private key (or $SVC_TLS_KEY)
  --insecure-transport  allow a --bind beyond loopback without TLS (tokens and data in clear; warns)
  --tls-ca FILE      CA certificates (PEM) trusted for wss:// FS nodes, besides the system CAs (or $SVC_TLS_CA)

environment:
  SVC_METRICS_PORT             serve /livez /readyz /metrics /metrics.json on this port
  SVC_CONTROL_STATE_KEY_HEX    64 hex characters: encrypt stored records (AES-256-GCM)
  SVC_STATE_SYNC               normal (default: survives a killed process) or full (also power loss; an fsync per commit)
  SVC_CONTROL_OPERATOR_TOKEN   require payload.operator_token on protected mutations
  SVC_ADMIN_TOKEN, SVC_USER_TOKEN  role tokens (generated into <state-dir>/auth_tokens.json if unset)
  SVC_MAX_MESSAGE_BYTES        largest frame in bytes (default 8 MiB)
  SVC_LOG_LEVEL                trace|debug|info|warn|error|fatal (default info)
  SVC_FS_CONNECT_TIMEOUT_MS, SVC_FS_REQUEST_TIMEOUT_MS, SVC_FS_KEEPALIVE_MS,
  SVC_FS_KEEPALIVE_TIMEOUT_MS, SVC_FS_OP_DEADLINE_MS
                               deadlines of the FS sessions of the runtime namespace, ms
                               (defaults 3000, 30000, 1000 (0: no pings), 2500, 4000)
  SVC_NODE_SESSION_TIMEOUT_MS  a node daemon's session silent this long (pinged every 1.5 s) is
                               closed and its node marked degraded, ms (default 5000)
  SVC_AUDIT_RETENTION_DAYS     keep audit entries this many days (default 30)
  SVC_AUDIT_MAX_ENTRIES        keep at most this many audit entries, the newest (default 100000)
`;

/**
 * Parses a TCP port.
 * @throws ConfigError unless an integer 0..65535
 */
export function parsePort(value: string, what: string): number {
  return parsePortValue(value, what, ConfigError);
}

function parsePositiveInt(value: string | undefined, fallback: number, what: string, min = 1): number {
  return parseIntValue(value, fallback, what, min, ConfigError);
}

/**
 * Parses `SVC_AUDIT_RETENTION_DAYS`: a positive number of days (fractions allowed, e.g. `0.5`).
 * @throws ConfigError otherwise
 */
export function parseRetentionDays(value: string | undefined): number {
  if (value === undefined || value === '') return 30;
  const n = Number(value);
  if (!/^\d+(\.\d+)?$/.test(value) || !(n > 0) || n > 36_500)
    throw new ConfigError(`SVC_AUDIT_RETENTION_DAYS must be a number of days > 0 and <= 36500 (got "${value}")`);
  return n;
}

/**
 * Parses the AES-256 state key.
 * @returns the 32-byte key, or null when unset
 * @throws ConfigError unless exactly 64 hexadecimal characters
 */
export function parseStateKey(value: string | undefined): Buffer | null {
  if (value === undefined || value === '') return null;
  if (!/^[0-9a-fA-F]{64}$/.test(value)) {
    throw new ConfigError(
      `SVC_CONTROL_STATE_KEY_HEX must be exactly 64 hexadecimal characters (an AES-256 key); got ${value.length} characters. ` +
        'Generate one with: openssl rand -hex 32',
    );
  }
  return Buffer.from(value, 'hex');
}

/**
 * The state part of the configuration (of the server and of `svc state`): the state directory
 * (`--state-dir`, else `SVC_STATE_DIR`, else `./.svc`, made absolute against the working
 * directory), the state key (`SVC_CONTROL_STATE_KEY_HEX`), the PostgreSQL URL
 * (`--database-url`, else `SVC_DATABASE_URL`; empty counts as unset) and the commit
 * durability (`SVC_STATE_SYNC`, default `normal`).
 * @param flags the values of `--state-dir` and `--database-url`, when given
 * @throws ConfigError on a malformed key, a URL that is not `postgres://` or
 *   `postgresql://`, or an `SVC_STATE_SYNC` other than `normal` or `full`
 */
export function parseStateConfig(flags: { stateDir?: string; databaseUrl?: string }, env: NodeJS.ProcessEnv): StateStoreConfig {
  const stateDir = resolve(flags.stateDir ?? nonEmpty(env.SVC_STATE_DIR) ?? './.svc');
  const stateKey = parseStateKey(env.SVC_CONTROL_STATE_KEY_HEX);
  const databaseUrl = nonEmpty(flags.databaseUrl) ?? nonEmpty(env.SVC_DATABASE_URL);
  if (databaseUrl !== null && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    throw new ConfigError('--database-url / SVC_DATABASE_URL must be a postgres:// URL');
  }
  const stateSync = nonEmpty(env.SVC_STATE_SYNC) ?? 'normal';
  if (stateSync !== 'normal' && stateSync !== 'full') throw new ConfigError(`SVC_STATE_SYNC must be normal or full; got ${JSON.stringify(stateSync)}`);
  return { stateDir, stateKey, databaseUrl, stateSync };
}

/**
 * Builds the server configuration from argv and the environment.
 * @throws ConfigError on an unknown flag or an invalid value
 */
export function loadServerConfig(argv: string[], env: NodeJS.ProcessEnv): ServerConfig {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        bind: { type: 'string' },
        port: { type: 'string' },
        'state-dir': { type: 'string' },
        'database-url': { type: 'string' },
        'tls-cert': { type: 'string' },
        'tls-key': { type: 'string' },
        'insecure-transport': { type: 'boolean' },
        'tls-ca': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (e) {
    throw new ConfigError(`${(e as Error).message}\n\n${SERVER_USAGE}`);
  }
  const config = new ServerConfig();
  config.help = Boolean(values.help);
  config.bind = (values.bind as string | undefined) ?? DEFAULT_BIND;
  config.port = values.port !== undefined ? parsePort(values.port as string, '--port') : DEFAULT_SVC_PORT;
  if (config.bind === '') throw new ConfigError('--bind must not be empty');
  if (config.help) return config;
  const security = resolveTransportSecurity(
    {
      bind: config.bind,
      tlsCert: values['tls-cert'] as string | undefined,
      tlsKey: values['tls-key'] as string | undefined,
      insecureTransport: values['insecure-transport'] === true,
    },
    env,
    ConfigError,
  );
  config.insecureTransport = security.insecure;
  try {
    config.tls = security.tls ? loadServerTls(security.tls) : null;
    config.clientTls = loadClientTls((values['tls-ca'] as string | undefined) ?? nonEmpty(env.SVC_TLS_CA));
  } catch (e) {
    if (e instanceof TlsFileError || e instanceof TlsCaError) throw new ConfigError(e.message);
    throw e;
  }
  config.metricsPort = nonEmpty(env.SVC_METRICS_PORT) !== null ? parsePort(env.SVC_METRICS_PORT as string, 'SVC_METRICS_PORT') : null;
  config.maxMessageBytes = parsePositiveInt(env.SVC_MAX_MESSAGE_BYTES, DEFAULT_MAX_MESSAGE_BYTES, 'SVC_MAX_MESSAGE_BYTES', 1024);
  Object.assign(
    config,
    parseStateConfig({ stateDir: values['state-dir'] as string | undefined, databaseUrl: values['database-url'] as string | undefined }, env),
  );
  config.operatorToken = nonEmpty(env.SVC_CONTROL_OPERATOR_TOKEN);
  config.adminToken = nonEmpty(env.SVC_ADMIN_TOKEN);
  config.userToken = nonEmpty(env.SVC_USER_TOKEN);
  if (config.adminToken !== null && config.adminToken === config.userToken) {
    throw new ConfigError('SVC_ADMIN_TOKEN and SVC_USER_TOKEN must differ');
  }
  config.logLevel = parseLogLevel(env.SVC_LOG_LEVEL, ConfigError);
  config.sweepIntervalMs = parsePositiveInt(env.SVC_SWEEP_INTERVAL_MS, 1000, 'SVC_SWEEP_INTERVAL_MS', 50);
  config.shutdownGraceMs = parsePositiveInt(env.SVC_SHUTDOWN_GRACE_MS, 5000, 'SVC_SHUTDOWN_GRACE_MS', 0);
  config.nodeSessionTimeoutMs = parsePositiveInt(env.SVC_NODE_SESSION_TIMEOUT_MS, 5000, 'SVC_NODE_SESSION_TIMEOUT_MS', 500);
  const d = DEFAULT_FS_DEADLINES;
  config.fsDeadlines = {
    connectTimeoutMs: parsePositiveInt(env.SVC_FS_CONNECT_TIMEOUT_MS, d.connectTimeoutMs, 'SVC_FS_CONNECT_TIMEOUT_MS'),
    requestTimeoutMs: parsePositiveInt(env.SVC_FS_REQUEST_TIMEOUT_MS, d.requestTimeoutMs, 'SVC_FS_REQUEST_TIMEOUT_MS'),
    keepaliveMs: parsePositiveInt(env.SVC_FS_KEEPALIVE_MS, d.keepaliveMs, 'SVC_FS_KEEPALIVE_MS', 0),
    keepaliveTimeoutMs: parsePositiveInt(env.SVC_FS_KEEPALIVE_TIMEOUT_MS, d.keepaliveTimeoutMs, 'SVC_FS_KEEPALIVE_TIMEOUT_MS'),
    opDeadlineMs: parsePositiveInt(env.SVC_FS_OP_DEADLINE_MS, d.opDeadlineMs, 'SVC_FS_OP_DEADLINE_MS'),
  };
  const f = config.fsDeadlines;
  for (const [name, v] of Object.entries(f)) {
    if (v > 3_600_000)
      throw new ConfigError(
        `SVC_FS_${name
          .replace(/Ms$/, '')
          .replace(/[A-Z]/g, (c) => `_${c}`)
          .toUpperCase()}_MS must be at most 3600000 (one hour), got ${v}`,
      );
  }
  if (f.keepaliveMs > 0 && f.keepaliveTimeoutMs <= f.keepaliveMs) {
    throw new ConfigError(`SVC_FS_KEEPALIVE_TIMEOUT_MS (${f.keepaliveTimeoutMs}) must be larger than SVC_FS_KEEPALIVE_MS (${f.keepaliveMs})`);
  }
  config.auditRetentionDays = parseRetentionDays(env.SVC_AUDIT_RETENTION_DAYS);
  config.auditMaxEntries = parsePositiveInt(env.SVC_AUDIT_MAX_ENTRIES, 100_000, 'SVC_AUDIT_MAX_ENTRIES', 1);
  return config;
}
