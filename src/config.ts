/**
 * Configuration of the `svc` control-plane server, read once at start from flags and the
 * environment that src/option-table.ts declares (docs/configuration.md; docs/protocol.md "Transport").
 */
import { resolve } from 'node:path';
import { DEFAULT_BIND, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_STATE_DIR, DEFAULT_SVC_PORT } from '@svc/protocol';
import { DEFAULT_SHUTDOWN_GRACE_MS, nonEmpty, parseFlags, parseIntValue, parseLogLevel, parsePortValue } from '@svc/ops';
import { ClientTls, loadClientTls, TlsCaError } from '../libs/client/src/tls-options';
import { resolveTransportSecurity } from '../libs/transport/src/tls-config';
import { LoadedServerTls, loadServerTls, TlsFileError } from '../libs/transport/src/tls-certificate';
import {
  DEFAULT_AUDIT_MAX_ENTRIES,
  DEFAULT_AUDIT_RETENTION_DAYS,
  DEFAULT_FS_DEADLINES,
  DEFAULT_NODE_SESSION_TIMEOUT_MS,
  DEFAULT_STATE_SYNC,
  DEFAULT_SWEEP_INTERVAL_MS,
  FsDeadlines,
  MAX_AUDIT_RETENTION_DAYS,
  MAX_FS_DEADLINE_MS,
  MIN_NODE_SESSION_TIMEOUT_MS,
  MIN_SWEEP_INTERVAL_MS,
  SERVER_OPTIONS,
  SERVER_USAGE,
} from './option-table';

export { DEFAULT_FS_DEADLINES, SERVER_USAGE };
export type { FsDeadlines };
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
  /** pino level (`SVC_LOG_LEVEL`). */
  logLevel: string;
  /** Availability sweep period, ms (`SVC_SWEEP_INTERVAL_MS`, default {@link DEFAULT_SWEEP_INTERVAL_MS}). */
  sweepIntervalMs: number;
  /** How long shutdown waits for requests in flight, ms (`SVC_SHUTDOWN_GRACE_MS`, default {@link DEFAULT_SHUTDOWN_GRACE_MS}). */
  shutdownGraceMs: number;
  /**
   * A node daemon's control session that sends no frame and answers no ping for this long,
   * ms, is closed and the node marked `degraded` (`SVC_NODE_SESSION_TIMEOUT_MS`, default
   * {@link DEFAULT_NODE_SESSION_TIMEOUT_MS}; docs/protocol.md "Liveness from daemon sessions").
   */
  nodeSessionTimeoutMs: number;
  /**
   * Deadlines of the FS sessions svc opens for the runtime namespace (docs/namespace.md;
   * docs/protocol.md "Deadlines and hung nodes"), ms:
   * connect + hello (`SVC_FS_CONNECT_TIMEOUT_MS`), one request on a node that answers pings
   * (`SVC_FS_REQUEST_TIMEOUT_MS`), keepalive interval while requests wait
   * (`SVC_FS_KEEPALIVE_MS`; 0 off) and limit without any answer
   * (`SVC_FS_KEEPALIVE_TIMEOUT_MS`), budget of one routed operation (`SVC_FS_OP_DEADLINE_MS`).
   * Defaults: {@link DEFAULT_FS_DEADLINES}.
   */
  fsDeadlines: FsDeadlines;
  /** Audit entries are kept this long, days; fractions allowed (`SVC_AUDIT_RETENTION_DAYS`, default {@link DEFAULT_AUDIT_RETENTION_DAYS}). */
  auditRetentionDays: number;
  /** At most this many audit entries are kept, the newest (`SVC_AUDIT_MAX_ENTRIES`, default {@link DEFAULT_AUDIT_MAX_ENTRIES}). */
  auditMaxEntries: number;
  /** `--help` was given. */
  help: boolean;
}

/** A configuration error: printed as `svc: <message>` and exit code 2. */
export class ConfigError extends Error {}

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
  if (value === undefined || value === '') return DEFAULT_AUDIT_RETENTION_DAYS;
  const n = Number(value);
  if (!/^\d+(\.\d+)?$/.test(value) || !(n > 0) || n > MAX_AUDIT_RETENTION_DAYS)
    throw new ConfigError(`SVC_AUDIT_RETENTION_DAYS must be a number of days > 0 and <= ${MAX_AUDIT_RETENTION_DAYS} (got "${value}")`);
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
  const stateDir = resolve(flags.stateDir ?? nonEmpty(env.SVC_STATE_DIR) ?? DEFAULT_STATE_DIR);
  const stateKey = parseStateKey(env.SVC_CONTROL_STATE_KEY_HEX);
  const databaseUrl = nonEmpty(flags.databaseUrl) ?? nonEmpty(env.SVC_DATABASE_URL);
  if (databaseUrl !== null && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    throw new ConfigError('--database-url / SVC_DATABASE_URL must be a postgres:// URL');
  }
  const stateSync = nonEmpty(env.SVC_STATE_SYNC) ?? DEFAULT_STATE_SYNC;
  if (stateSync !== 'normal' && stateSync !== 'full') throw new ConfigError(`SVC_STATE_SYNC must be normal or full; got ${JSON.stringify(stateSync)}`);
  return { stateDir, stateKey, databaseUrl, stateSync };
}

/**
 * Builds the server configuration from argv and the environment.
 * @throws ConfigError on an unknown flag or an invalid value
 */
export function loadServerConfig(argv: string[], env: NodeJS.ProcessEnv): ServerConfig {
  const values = parseFlags(argv, SERVER_OPTIONS, SERVER_USAGE, ConfigError);
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
  config.sweepIntervalMs = parsePositiveInt(env.SVC_SWEEP_INTERVAL_MS, DEFAULT_SWEEP_INTERVAL_MS, 'SVC_SWEEP_INTERVAL_MS', MIN_SWEEP_INTERVAL_MS);
  config.shutdownGraceMs = parsePositiveInt(env.SVC_SHUTDOWN_GRACE_MS, DEFAULT_SHUTDOWN_GRACE_MS, 'SVC_SHUTDOWN_GRACE_MS', 0);
  config.nodeSessionTimeoutMs = parsePositiveInt(
    env.SVC_NODE_SESSION_TIMEOUT_MS,
    DEFAULT_NODE_SESSION_TIMEOUT_MS,
    'SVC_NODE_SESSION_TIMEOUT_MS',
    MIN_NODE_SESSION_TIMEOUT_MS,
  );
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
    if (v > MAX_FS_DEADLINE_MS)
      throw new ConfigError(
        `SVC_FS_${name
          .replace(/Ms$/, '')
          .replace(/[A-Z]/g, (c) => `_${c}`)
          .toUpperCase()}_MS must be at most ${MAX_FS_DEADLINE_MS} (one hour), got ${v}`,
      );
  }
  if (f.keepaliveMs > 0 && f.keepaliveTimeoutMs <= f.keepaliveMs) {
    throw new ConfigError(`SVC_FS_KEEPALIVE_TIMEOUT_MS (${f.keepaliveTimeoutMs}) must be larger than SVC_FS_KEEPALIVE_MS (${f.keepaliveMs})`);
  }
  config.auditRetentionDays = parseRetentionDays(env.SVC_AUDIT_RETENTION_DAYS);
  config.auditMaxEntries = parsePositiveInt(env.SVC_AUDIT_MAX_ENTRIES, DEFAULT_AUDIT_MAX_ENTRIES, 'SVC_AUDIT_MAX_ENTRIES', 1);
  return config;
}
