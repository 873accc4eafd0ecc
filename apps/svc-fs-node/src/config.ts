/**
 * Configuration of `svc-fs-node`, read once at start from flags and the environment
 * (docs/protocol.md "Transport"). With
 * `--control-url` the node runs in control daemon mode (pairing, lease, catalog upsert).
 */
import { statSync } from 'node:fs';
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
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
import { nonEmpty, parseIntValue, parseLogLevel, parsePortValue } from '../../../libs/ops/src/config-values';
import { ClientTls, loadClientTls, TlsCaError } from '../../../libs/client/src/tls-options';
import { isLoopbackBind, resolveTransportSecurity } from '../../../libs/transport/src/tls-config';
import { LoadedServerTls, loadServerTls, TlsFileError } from '../../../libs/transport/src/tls-certificate';

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
  /** Exports in the order given (default `work=.:rw`). */
  exports: ExportSpec[];
  /** FS session token (`--auth-token`, else `SVC_FS_NODE_AUTH_TOKEN`); null: FS session auth off. */
  authToken: string | null;
  /** Node name in `acheron.r_fs_hello` (default: the host name). */
  nodeName: string;
  /** Ops HTTP port (`SVC_METRICS_PORT`); null: no ops listener. */
  metricsPort: number | null;
  /** Largest accepted frame, bytes (`SVC_MAX_MESSAGE_BYTES`, default 8 MiB). */
  maxMessageBytes: number;
  /** pino level (`SVC_LOG_LEVEL`, default `info`). */
  logLevel: string;
  /** How long shutdown waits for requests in flight, ms (`SVC_SHUTDOWN_GRACE_MS`, default 5000). */
  shutdownGraceMs: number;
  /** `--terminal-id` values: one terminal export `terminal-<id>` each. */
  terminalIds: string[];
  /** Directory terminal requests run in (`--terminal-cwd`; default the first read-write export). */
  terminalCwd: string | null;
  /** FS extensions granted to sessions that ask (`--fs-features`, else `SVC_FS_NODE_FEATURES`; default all). */
  features: FsFeature[];
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
  /** Lease length asked for, ms (`--lease-ttl-ms`, default 30000, docs/protocol.md "Nodes"). */
  leaseTtlMs: number;
  /** Lease refresh period, ms (`--refresh-interval-ms`, default a third of the lease). */
  refreshIntervalMs: number;
  /** ms */
  reconnectBackoffMs: number;
  /** ms */
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

export const FS_NODE_USAGE = `usage: svc-fs-node [--bind ADDR] [--port PORT] [--export NAME=PATH[:ro|:rw]]... [--auth-token T] [--node-name NAME]

Serves directories as FS exports on ws://ADDR:PORT/v2/fs (standalone mode).

  --bind ADDR          listen address (default ${DEFAULT_BIND})
  --port PORT          WebSocket port, 0 picks a free one (default ${DEFAULT_FS_NODE_PORT})
  --export SPEC        NAME=PATH[:ro|:rw], repeatable (default work=.:rw); NAME is identifier-safe
  --auth-token T       require auth_token T in acheron.t_fs_hello (or SVC_FS_NODE_AUTH_TOKEN)
  --node-name NAME     node name reported in the hello and to the control plane (default: the host name)
  --terminal-id ID     serve a terminal export terminal-ID (repeatable); requests run in --terminal-cwd;
                       needs --auth-token (or control daemon mode): it runs programs for its sessions
  --terminal-cwd DIR   directory terminal requests run in (default: the first read-write export)
  --fs-features LIST   FS extensions granted to sessions that ask for them: comma-separated names
                       (open_read, prefetch, dir_estale), all (default) or none (or SVC_FS_NODE_FEATURES)
  --tls-cert FILE      serve wss:// with this PEM certificate chain (or $SVC_TLS_CERT); re-read when it
                       changes and on SIGHUP
  --tls-key FILE       its PEM private key (or $SVC_TLS_KEY)
  --insecure-transport allow a --bind beyond loopback without TLS (tokens and file data in clear; warns)
  -h, --help           this text

control daemon mode (pairs with svc, keeps a lease, publishes the node's service catalog):
  --control-url URL             svc WebSocket URL, e.g. ws://127.0.0.1:18790/
  --control-auth-token T        role token for svc (default $SVC_AUTH_TOKEN)
  --pair-mode invite|request    pair with an invite (default) or by a join request an admin approves
  --invite-token T              the invite (from svc-control node_invite_create)
  --fs-url URL                  FS URL advertised to svc (default the listening URL: ws://BIND:PORT/v2/fs,
                                wss:// with --tls-cert)
  --tls-ca FILE                 CA certificates (PEM) trusted for a wss:// --control-url, besides the
                                system CAs (default $SVC_TLS_CA)
  --state-file PATH             credentials file, mode 0600 (default ./.svc-fs-node-state.json)
  --lease-ttl-ms MS             lease length asked for (default ${LEASE_TTL_DEFAULT_MS}); a node that stops
                                without releasing it (killed, host lost) is degraded after this long
  --refresh-interval-ms MS      lease refresh period (default a third of the lease)
  --reconnect-backoff-ms MS     first retry delay when svc is unreachable (default 1000)
  --reconnect-backoff-max-ms MS largest retry delay (default 30000)
  --operator-token T            added to the node's control payloads
  --no-fs-service               do not advertise the fs service
  --terminal-allow-user         terminals visible to users holding a project token (default admin only)
  --service-manifest PATH       publish the services in a manifest file (repeatable)
  --services-dir DIR            publish every *.json manifest in DIR (re-read on change)
  --label KEY=VALUE             node label (repeatable)

environment:
  SVC_FS_NODE_AUTH_TOKEN   FS session token when --auth-token is not given
  SVC_FS_NODE_FEATURES     FS extensions granted when --fs-features is not given (all, none, or names)
  SVC_METRICS_PORT         serve /livez /readyz /metrics /metrics.json on this port
  SVC_MAX_MESSAGE_BYTES    largest frame in bytes (default 8 MiB, at least 2 MiB)
  SVC_LOG_LEVEL            trace|debug|info|warn|error|fatal|silent (default info)
  SVC_SHUTDOWN_GRACE_MS    how long SIGTERM waits for requests in flight (default 5000)

SIGTERM or SIGINT: in control daemon mode the node first releases its lease
(control.node_lease_release, giving up after 2 s), so its mounts fail over at once; then
it drains FS requests in flight and exits 0.
`;

/** Smallest frame limit that still carries a 1 MiB write as base64 JSON. */
const MIN_MAX_MESSAGE_BYTES = 2 * 1024 * 1024;

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
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        bind: { type: 'string' },
        port: { type: 'string' },
        export: { type: 'string', multiple: true },
        'auth-token': { type: 'string' },
        'node-name': { type: 'string' },
        'terminal-id': { type: 'string', multiple: true },
        'terminal-cwd': { type: 'string' },
        'fs-features': { type: 'string' },
        'tls-cert': { type: 'string' },
        'tls-key': { type: 'string' },
        'insecure-transport': { type: 'boolean' },
        'tls-ca': { type: 'string' },
        'control-url': { type: 'string' },
        'control-auth-token': { type: 'string' },
        'pair-mode': { type: 'string' },
        'invite-token': { type: 'string' },
        'fs-url': { type: 'string' },
        'state-file': { type: 'string' },
        'lease-ttl-ms': { type: 'string' },
        'refresh-interval-ms': { type: 'string' },
        'reconnect-backoff-ms': { type: 'string' },
        'reconnect-backoff-max-ms': { type: 'string' },
        'operator-token': { type: 'string' },
        'no-fs-service': { type: 'boolean' },
        'terminal-allow-user': { type: 'boolean' },
        'service-manifest': { type: 'string', multiple: true },
        'services-dir': { type: 'string' },
        label: { type: 'string', multiple: true },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (e) {
    throw new ConfigError(`${(e as Error).message}\n\n${FS_NODE_USAGE}`);
  }
  const config = new FsNodeConfig();
  config.help = Boolean(values.help);
  if (config.help) return config;
  const str = (k: string) => values[k] as string | undefined;
  const list = (k: string) => (values[k] as string[] | undefined) ?? [];
  config.bind = str('bind') ?? DEFAULT_BIND;
  if (config.bind === '') throw new ConfigError('--bind must not be empty');
  config.port = str('port') !== undefined ? parsePort(str('port')!, '--port') : DEFAULT_FS_NODE_PORT;
  config.exports = (values.export ? list('export') : ['work=.:rw']).map((s) => parseExport(s, cwd));
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
  config.shutdownGraceMs = parseInt(env.SVC_SHUTDOWN_GRACE_MS, 5000, 'SVC_SHUTDOWN_GRACE_MS', 0);
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
function loadDaemonConfig(values: Record<string, unknown>, env: NodeJS.ProcessEnv, cwd: string): DaemonConfig | null {
  const str = (k: string) => values[k] as string | undefined;
  const controlUrl = str('control-url');
  const labels = ((values.label as string[] | undefined) ?? []).map(parseLabel);
  if (controlUrl === undefined) {
    const daemonOnly = [
      'tls-ca',
      'control-auth-token',
      'pair-mode',
      'invite-token',
      'fs-url',
      'state-file',
      'lease-ttl-ms',
      'refresh-interval-ms',
      'reconnect-backoff-ms',
      'reconnect-backoff-max-ms',
      'operator-token',
      'no-fs-service',
      'terminal-allow-user',
      'service-manifest',
      'services-dir',
      'label',
    ];
    const given = daemonOnly.filter((k) => values[k] !== undefined);
    if (given.length > 0) throw new ConfigError(`--${given[0]} needs --control-url (control daemon mode)`);
    return null;
  }
  if (!/^wss?:\/\/\S+$/.test(controlUrl)) throw new ConfigError(`--control-url must be a ws:// or wss:// URL (got "${controlUrl}")`);
  const controlAuthToken = str('control-auth-token') ?? nonEmpty(env.SVC_AUTH_TOKEN);
  if (!controlAuthToken) throw new ConfigError('control daemon mode needs a role token: --control-auth-token T or SVC_AUTH_TOKEN');
  const pairMode = str('pair-mode') ?? 'invite';
  if (pairMode !== 'invite' && pairMode !== 'request') throw new ConfigError(`--pair-mode must be invite or request (got "${pairMode}")`);
  const fsUrl = str('fs-url') ?? null;
  if (fsUrl !== null && !/^wss?:\/\/\S+$/.test(fsUrl)) throw new ConfigError(`--fs-url must be a ws:// or wss:// URL (got "${fsUrl}")`);
  const leaseTtlMs = parseMs(str('lease-ttl-ms'), LEASE_TTL_DEFAULT_MS, '--lease-ttl-ms', LEASE_TTL_MIN_MS, LEASE_TTL_MAX_MS);
  const reconnectBackoffMs = parseMs(str('reconnect-backoff-ms'), 1000, '--reconnect-backoff-ms', 10);
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
    stateFile: resolve(cwd, str('state-file') ?? './.svc-fs-node-state.json'),
    leaseTtlMs,
    refreshIntervalMs: parseMs(str('refresh-interval-ms'), Math.max(500, Math.floor(leaseTtlMs / 3)), '--refresh-interval-ms', 100),
    reconnectBackoffMs,
    reconnectBackoffMaxMs: parseMs(str('reconnect-backoff-max-ms'), Math.max(30_000, reconnectBackoffMs), '--reconnect-backoff-max-ms', reconnectBackoffMs),
    operatorToken: str('operator-token') ?? null,
    fsService: values['no-fs-service'] !== true,
    terminalAllowUser: values['terminal-allow-user'] === true,
    manifestFiles: ((values['service-manifest'] as string[] | undefined) ?? []).map((f) => resolve(cwd, f)),
    servicesDir,
    labels: Object.fromEntries(labels),
  };
}
