/**
 * Configuration of `svc-fs-node`, read once at start from the flags and the environment that
 * option-table.ts declares (docs/configuration.md; docs/protocol.md "Transport"). With
 * `--control-url` the node runs in control daemon mode (pairing, lease, catalog upsert).
 */
import { statSync } from 'node:fs';
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import {
  DEFAULT_BIND,
  DEFAULT_FS_NODE_PORT,
  DEFAULT_MAX_MESSAGE_BYTES,
  FORBIDDEN_KEYS,
  FsFeature,
  isIdentifierSafe,
  LEASE_TTL_DEFAULT_MS,
  LEASE_TTL_MAX_MS,
  LEASE_TTL_MIN_MS,
  parseFsFeatures,
} from '@svc/protocol/wire';
// The values module only, not `@svc/ops` (logging, metrics, health): `--help` and a configuration
// error load nothing else.
import { DEFAULT_SHUTDOWN_GRACE_MS, FlagValues, nonEmpty, parseFlags, parseIntValue, parseLogLevel, parsePortValue } from '../../../libs/ops/src/config-values';
import { optionList } from '../../../libs/ops/src/option-specs';
import { ClientTls, loadClientTls, TlsCaError } from '../../../libs/client/src/tls-options';
import { isLoopbackBind, resolveTransportSecurity } from '../../../libs/transport/src/tls-config';
import { LoadedServerTls, loadServerTls, TlsFileError } from '../../../libs/transport/src/tls-certificate';
import {
  DAEMON_SECTION,
  DEFAULT_EXPORT,
  DEFAULT_PAIR_MODE,
  DEFAULT_RECONNECT_BACKOFF_MAX_MS,
  DEFAULT_RECONNECT_BACKOFF_MS,
  DEFAULT_STATE_FILE,
  FS_NODE_OPTIONS,
  FS_NODE_USAGE,
  MIN_DEFAULT_REFRESH_INTERVAL_MS,
  MIN_MAX_MESSAGE_BYTES,
  MIN_RECONNECT_BACKOFF_MS,
  MIN_REFRESH_INTERVAL_MS,
} from './option-table';

export { FS_NODE_USAGE };
export { isLoopbackBind };

/** One `--export name=path[:ro|:rw]`. */
export interface ExportSpec {
  /** Identifier-safe export name. */
  name: string;
  /** Absolute path of the exported directory (as given, resolved against the working directory). */
  path: string;
  ro: boolean;
}

/** Validated configuration of `svc-fs-node`. */
export class FsNodeConfig {
  /** Listen address of the WebSocket and ops listeners. */
  bind: string;
  /** WebSocket port; 0 picks a free one. */
  port: number;
  /** TLS of the FS listener (`--tls-cert`/`--tls-key`, docs/operations.md "Transport security (TLS)"), loaded and checked; null: plain `ws://`. */
  tls: LoadedServerTls | null;
  /** `--insecure-transport` let a non-loopback `--bind` serve plain `ws://` (a warning at start). */
  insecureTransport: boolean;
  /** Exports in the order given (default {@link DEFAULT_EXPORT}). */
  exports: ExportSpec[];
  /** FS session token (`--auth-token`, else `SVC_FS_NODE_AUTH_TOKEN`); null: FS session auth off. */
  authToken: string | null;
  /** Node name in `acheron.r_fs_hello` (default: the host name). */
  nodeName: string;
  /** Ops HTTP port (`SVC_METRICS_PORT`); null: no ops listener. */
  metricsPort: number | null;
  /** Largest accepted frame, bytes (`SVC_MAX_MESSAGE_BYTES`, default {@link DEFAULT_MAX_MESSAGE_BYTES}). */
  maxMessageBytes: number;
  /** pino level (`SVC_LOG_LEVEL`). */
  logLevel: string;
  /** How long shutdown waits for requests in flight, ms (`SVC_SHUTDOWN_GRACE_MS`, default {@link DEFAULT_SHUTDOWN_GRACE_MS}). */
  shutdownGraceMs: number;
  /** `--terminal-id` values: one terminal export `terminal-<id>` each. */
  terminalIds: string[];
  /** Directory terminal requests run in (`--terminal-cwd`; default the first read-write export). */
  terminalCwd: string | null;
  /** FS extensions granted to sessions that ask (`--fs-features`, else `SVC_FS_NODE_FEATURES`; default all). */
  features: FsFeature[];
  /** Where the exports' metadata calls run (`--meta-io`, else `SVC_FS_NODE_META_IO`; default `auto`; see MetaIo). */
  metaIo: 'auto' | 'pool';
  /** Control daemon mode settings; null in standalone mode. */
  daemon: DaemonConfig | null;
  /** `--help` was given. */
  help: boolean;
}

/** Control daemon mode settings. */
export interface DaemonConfig {
  controlUrl: string;
  /** CAs a `wss://` control plane is verified against: system CAs plus `--tls-ca` / `SVC_TLS_CA`. */
  tls: ClientTls;
  /** Role token for the control plane (`--control-auth-token`, else `SVC_AUTH_TOKEN`). */
  controlAuthToken: string;
  pairMode: 'invite' | 'request';
  inviteToken: string | null;
  /** Advertised FS URL (`--fs-url`); null: derived from the listen address once bound. */
  fsUrl: string | null;
  stateFile: string;
  /** Lease length asked for, ms (`--lease-ttl-ms`, default {@link LEASE_TTL_DEFAULT_MS}, docs/protocol.md "Nodes"). */
  leaseTtlMs: number;
  /** Lease refresh period, ms (`--refresh-interval-ms`, default a third of the lease). */
  refreshIntervalMs: number;
  /** First retry delay while svc is unreachable, ms (`--reconnect-backoff-ms`, default {@link DEFAULT_RECONNECT_BACKOFF_MS}). */
  reconnectBackoffMs: number;
  /** Largest retry delay, ms (`--reconnect-backoff-max-ms`, default {@link DEFAULT_RECONNECT_BACKOFF_MAX_MS}). */
  reconnectBackoffMaxMs: number;
  operatorToken: string | null;
  fsService: boolean;
  terminalAllowUser: boolean;
  manifestFiles: string[];
  servicesDir: string | null;
  labels: Record<string, string>;
}

/** A configuration error: printed as `svc-fs-node: <message>`, exit code 2. */
export class ConfigError extends Error {}

function parsePort(value: string, what: string): number {
  return parsePortValue(value, what, ConfigError);
}

function parseInt(value: string | undefined, fallback: number, what: string, min: number): number {
  return parseIntValue(value, fallback, what, min, ConfigError);
}

/**
 * Parses one `--export NAME=PATH[:ro|:rw]`: the name is identifier-safe; a trailing `:ro` or
 * `:rw` is the mode (default rw), so a path may itself contain `:`.
 * @throws ConfigError when malformed, or when PATH does not exist or is not a directory
 */
export function parseExport(spec: string, cwd = process.cwd()): ExportSpec {
  const eq = spec.indexOf('=');
  if (eq <= 0) throw new ConfigError(`--export must be NAME=PATH[:ro|:rw] (got "${spec}")`);
  const name = spec.slice(0, eq);
  let path = spec.slice(eq + 1);
  if (!isIdentifierSafe(name)) {
    throw new ConfigError(`--export name "${name}" must be identifier-safe: 1 to 128 characters of A-Z a-z 0-9 . _ -, not starting with "."`);
  }
  let ro = false;
  const mode = /:(ro|rw)$/.exec(path);
  if (mode) {
    ro = mode[1] === 'ro';
    path = path.slice(0, -3);
  }
  if (path === '') throw new ConfigError(`--export ${name}: the path is empty`);
  const abs = resolve(cwd, path);
  let isDir: boolean;
  try {
    isDir = statSync(abs).isDirectory();
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new ConfigError(`--export ${name}: ${abs} ${code === 'ENOENT' ? 'does not exist' : `cannot be read (${code})`}`);
  }
  if (!isDir) throw new ConfigError(`--export ${name}: ${abs} is not a directory`);
  return { name, path: abs, ro };
}

/**
 * Builds the configuration from argv and the environment.
 * @throws ConfigError on an unknown flag, an invalid value, a duplicate export name or an
 *   export path that is not a directory
 */
export function loadFsNodeConfig(argv: string[], env: NodeJS.ProcessEnv, cwd = process.cwd()): FsNodeConfig {
  const values = parseFlags(argv, FS_NODE_OPTIONS, FS_NODE_USAGE, ConfigError);
  const config = new FsNodeConfig();
  config.help = Boolean(values.help);
  if (config.help) return config;
  const str = (k: string) => values[k] as string | undefined;
  const list = (k: string) => (values[k] as string[] | undefined) ?? [];
  config.bind = str('bind') ?? DEFAULT_BIND;
  if (config.bind === '') throw new ConfigError('--bind must not be empty');
  config.port = str('port') !== undefined ? parsePort(str('port')!, '--port') : DEFAULT_FS_NODE_PORT;
  config.exports = (values.export ? list('export') : [DEFAULT_EXPORT]).map((s) => parseExport(s, cwd));
  const seen = new Set<string>();
  for (const e of config.exports) {
    if (seen.has(e.name)) throw new ConfigError(`--export name "${e.name}" is given twice`);
    seen.add(e.name);
  }
  const token = str('auth-token') ?? nonEmpty(env.SVC_FS_NODE_AUTH_TOKEN);
  if (token === '') throw new ConfigError('--auth-token must not be empty');
  config.authToken = token ?? null;
  config.nodeName = str('node-name') ?? hostname();
  if (config.nodeName === '' || config.nodeName.length > 256) throw new ConfigError('--node-name must be 1 to 256 characters');
  config.metricsPort = nonEmpty(env.SVC_METRICS_PORT) !== null ? parsePort(env.SVC_METRICS_PORT as string, 'SVC_METRICS_PORT') : null;
  config.maxMessageBytes = parseInt(env.SVC_MAX_MESSAGE_BYTES, DEFAULT_MAX_MESSAGE_BYTES, 'SVC_MAX_MESSAGE_BYTES', MIN_MAX_MESSAGE_BYTES);
  config.logLevel = parseLogLevel(env.SVC_LOG_LEVEL, ConfigError);
  config.shutdownGraceMs = parseInt(env.SVC_SHUTDOWN_GRACE_MS, DEFAULT_SHUTDOWN_GRACE_MS, 'SVC_SHUTDOWN_GRACE_MS', 0);
  config.terminalIds = list('terminal-id');
  for (const id of config.terminalIds) {
    if (!isIdentifierSafe(`terminal-${id}`) || !isIdentifierSafe(id)) throw new ConfigError(`--terminal-id "${id}" must be identifier-safe`);
    if (config.exports.some((e) => e.name === `terminal-${id}`)) throw new ConfigError(`--terminal-id ${id} clashes with --export terminal-${id}`);
  }
  if (new Set(config.terminalIds).size !== config.terminalIds.length) throw new ConfigError('--terminal-id values must differ');
  config.terminalCwd = str('terminal-cwd') !== undefined ? resolve(cwd, str('terminal-cwd')!) : null;
  if (config.terminalIds.length > 0 && config.terminalCwd === null && !config.exports.some((e) => !e.ro)) {
    throw new ConfigError('--terminal-id needs a read-write export or --terminal-cwd DIR for requests to run in');
  }
  const featuresFlag = str('fs-features');
  try {
    config.features = parseFsFeatures(featuresFlag ?? env.SVC_FS_NODE_FEATURES, featuresFlag !== undefined ? '--fs-features' : 'SVC_FS_NODE_FEATURES');
  } catch (e) {
    throw new ConfigError((e as Error).message);
  }
  const metaIoFlag = str('meta-io');
  const metaIo = metaIoFlag ?? env.SVC_FS_NODE_META_IO ?? 'auto';
  if (metaIo !== 'auto' && metaIo !== 'pool') {
    throw new ConfigError(`${metaIoFlag !== undefined ? '--meta-io' : 'SVC_FS_NODE_META_IO'} must be auto or pool (got "${metaIo}")`);
  }
  config.metaIo = metaIo;
  const security = resolveTransportSecurity(
    { bind: config.bind, tlsCert: str('tls-cert'), tlsKey: str('tls-key'), insecureTransport: values['insecure-transport'] === true },
    env,
    ConfigError,
  );
  config.insecureTransport = security.insecure;
  try {
    config.tls = security.tls ? loadServerTls({ certFile: resolve(cwd, security.tls.certFile), keyFile: resolve(cwd, security.tls.keyFile) }) : null;
  } catch (e) {
    if (e instanceof TlsFileError) throw new ConfigError(e.message);
    throw e;
  }
  config.daemon = loadDaemonConfig(values, env, cwd);
  if (config.tls && config.daemon?.fsUrl?.startsWith('ws:')) {
    throw new ConfigError(`--fs-url ${config.daemon.fsUrl}: this node serves TLS (--tls-cert), so the URL it advertises must be wss://`);
  }
  if (config.terminalIds.length > 0 && config.authToken === null && config.daemon === null) {
    // Least privilege: a terminal runs programs for whoever opens an FS session.
    throw new ConfigError(
      '--terminal-id runs programs for every FS session: it needs FS session auth (--auth-token T or SVC_FS_NODE_AUTH_TOKEN) or control daemon mode (--control-url)',
    );
  }
  return config;
}

function parseMs(value: string | undefined, fallback: number, what: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > max)
    throw new ConfigError(`${what} must be an integer from ${min} to ${max} (ms; got "${value}")`);
  return Number(value);
}

/**
 * Parses one `--label KEY=VALUE`: KEY identifier-safe and not `__proto__`, `constructor` or
 * `prototype` (the control plane refuses those keys in every payload), VALUE any text.
 * @throws ConfigError naming the label when malformed
 */
export function parseLabel(spec: string): [string, string] {
  const eq = spec.indexOf('=');
  const key = eq > 0 ? spec.slice(0, eq) : '';
  if (!isIdentifierSafe(key)) throw new ConfigError(`--label must be KEY=VALUE with an identifier-safe KEY (got "${spec}")`);
  if (FORBIDDEN_KEYS.has(key)) throw new ConfigError(`--label KEY must not be ${key} (got "${spec}"): the control plane refuses this key in a payload`);
  return [key, spec.slice(eq + 1)];
}

/** The daemon settings, or null without `--control-url`; daemon-only flags without it are an error. */
function loadDaemonConfig(values: FlagValues, env: NodeJS.ProcessEnv, cwd: string): DaemonConfig | null {
  const str = (k: string) => values[k] as string | undefined;
  const controlUrl = str('control-url');
  const labels = ((values.label as string[] | undefined) ?? []).map(parseLabel);
  if (controlUrl === undefined) {
    // In table order: the first of them given is the one the error names.
    const daemonOnly = optionList(FS_NODE_OPTIONS).flatMap((o) =>
      o.section === DAEMON_SECTION && o.flag !== undefined && o.flag !== 'control-url' ? [o.flag] : [],
    );
    const given = daemonOnly.filter((k) => values[k] !== undefined);
    if (given.length > 0) throw new ConfigError(`--${given[0]} needs --control-url (control daemon mode)`);
    return null;
  }
  if (!/^wss?:\/\/\S+$/.test(controlUrl)) throw new ConfigError(`--control-url must be a ws:// or wss:// URL (got "${controlUrl}")`);
  const controlAuthToken = str('control-auth-token') ?? nonEmpty(env.SVC_AUTH_TOKEN);
  if (!controlAuthToken) throw new ConfigError('control daemon mode needs a role token: --control-auth-token T or SVC_AUTH_TOKEN');
  const pairMode = str('pair-mode') ?? DEFAULT_PAIR_MODE;
  if (pairMode !== 'invite' && pairMode !== 'request') throw new ConfigError(`--pair-mode must be invite or request (got "${pairMode}")`);
  const fsUrl = str('fs-url') ?? null;
  if (fsUrl !== null && !/^wss?:\/\/\S+$/.test(fsUrl)) throw new ConfigError(`--fs-url must be a ws:// or wss:// URL (got "${fsUrl}")`);
  const leaseTtlMs = parseMs(str('lease-ttl-ms'), LEASE_TTL_DEFAULT_MS, '--lease-ttl-ms', LEASE_TTL_MIN_MS, LEASE_TTL_MAX_MS);
  const reconnectBackoffMs = parseMs(str('reconnect-backoff-ms'), DEFAULT_RECONNECT_BACKOFF_MS, '--reconnect-backoff-ms', MIN_RECONNECT_BACKOFF_MS);
  const servicesDir = str('services-dir') !== undefined ? resolve(cwd, str('services-dir')!) : null;
  let tls: ClientTls;
  try {
    const caFile = nonEmpty(str('tls-ca')) ?? nonEmpty(env.SVC_TLS_CA);
    tls = loadClientTls(caFile === null ? null : resolve(cwd, caFile));
  } catch (e) {
    if (e instanceof TlsCaError) throw new ConfigError(e.message);
    throw e;
  }
  return {
    controlUrl,
    tls,
    controlAuthToken,
    pairMode,
    inviteToken: str('invite-token') ?? null,
    fsUrl,
    stateFile: resolve(cwd, str('state-file') ?? DEFAULT_STATE_FILE),
    leaseTtlMs,
    refreshIntervalMs: parseMs(
      str('refresh-interval-ms'),
      Math.max(MIN_DEFAULT_REFRESH_INTERVAL_MS, Math.floor(leaseTtlMs / 3)),
      '--refresh-interval-ms',
      MIN_REFRESH_INTERVAL_MS,
    ),
    reconnectBackoffMs,
    reconnectBackoffMaxMs: parseMs(
      str('reconnect-backoff-max-ms'),
      Math.max(DEFAULT_RECONNECT_BACKOFF_MAX_MS, reconnectBackoffMs),
      '--reconnect-backoff-max-ms',
      reconnectBackoffMs,
    ),
    operatorToken: str('operator-token') ?? null,
    fsService: values['no-fs-service'] !== true,
    terminalAllowUser: values['terminal-allow-user'] === true,
    manifestFiles: ((values['service-manifest'] as string[] | undefined) ?? []).map((f) => resolve(cwd, f)),
    servicesDir,
    labels: Object.fromEntries(labels),
  };
}
