/**
 * Configuration of `svc-fs-node`, read once at start from flags and the environment
 * (PROTOCOL.md 1, SPEC.md "Command-line programs", issue 3 item 5). Standalone mode only; the
 * control daemon flags (`--control-url`, ...) belong to a later change and are refused as unknown.
 */
import { statSync } from 'node:fs';
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_BIND, DEFAULT_FS_NODE_PORT, DEFAULT_MAX_MESSAGE_BYTES, isIdentifierSafe } from '@svc/protocol';

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
  /** `--help` was given. */
  help: boolean;
}

/** A configuration error: printed as `svc-fs-node: <message>`, exit code 2. */
export class ConfigError extends Error {}

export const FS_NODE_USAGE = `usage: svc-fs-node [--bind ADDR] [--port PORT] [--export NAME=PATH[:ro|:rw]]... [--auth-token T] [--node-name NAME]

Serves directories as FS exports on ws://ADDR:PORT/v2/fs (standalone mode).

  --bind ADDR          listen address (default ${DEFAULT_BIND})
  --port PORT          WebSocket port, 0 picks a free one (default ${DEFAULT_FS_NODE_PORT})
  --export SPEC        NAME=PATH[:ro|:rw], repeatable (default work=.:rw); NAME is identifier-safe
  --auth-token T       require auth_token T in acheron.t_fs_hello (or SVC_FS_NODE_AUTH_TOKEN)
  --node-name NAME     node name reported in the hello (default: the host name)
  -h, --help           this text

environment:
  SVC_FS_NODE_AUTH_TOKEN   FS session token when --auth-token is not given
  SVC_METRICS_PORT         serve /livez /readyz /metrics /metrics.json on this port
  SVC_MAX_MESSAGE_BYTES    largest frame in bytes (default 8 MiB, at least 2 MiB)
  SVC_LOG_LEVEL            trace|debug|info|warn|error|fatal|silent (default info)
  SVC_SHUTDOWN_GRACE_MS    how long SIGTERM waits for requests in flight (default 5000)
`;

const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];
/** Smallest frame limit that still carries a 1 MiB write as base64 JSON. */
const MIN_MAX_MESSAGE_BYTES = 2 * 1024 * 1024;

function parsePort(value: string, what: string): number {
  if (!/^\d{1,5}$/.test(value) || Number(value) > 65535) throw new ConfigError(`${what} must be a port number 0-65535 (got "${value}")`);
  return Number(value);
}

function parseInt(value: string | undefined, fallback: number, what: string, min: number): number {
  if (value === undefined || value === '') return fallback;
  if (!/^\d+$/.test(value) || Number(value) < min) throw new ConfigError(`${what} must be an integer >= ${min} (got "${value}")`);
  return Number(value);
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

function nonEmpty(value: string | undefined): string | null {
  return value === undefined || value === '' ? null : value;
}

/**
 * Builds the configuration from argv and the environment.
 * @throws ConfigError on an unknown flag, an invalid value, a duplicate export name or an
 *   export path that is not a directory
 */
export function loadFsNodeConfig(argv: string[], env: NodeJS.ProcessEnv, cwd = process.cwd()): FsNodeConfig {
  let values: { bind?: string; port?: string; export?: string[]; 'auth-token'?: string; 'node-name'?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        bind: { type: 'string' },
        port: { type: 'string' },
        export: { type: 'string', multiple: true },
        'auth-token': { type: 'string' },
        'node-name': { type: 'string' },
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
  config.bind = values.bind ?? DEFAULT_BIND;
  if (config.bind === '') throw new ConfigError('--bind must not be empty');
  config.port = values.port !== undefined ? parsePort(values.port, '--port') : DEFAULT_FS_NODE_PORT;
  config.exports = (values.export ?? ['work=.:rw']).map((s) => parseExport(s, cwd));
  const seen = new Set<string>();
  for (const e of config.exports) {
    if (seen.has(e.name)) throw new ConfigError(`--export name "${e.name}" is given twice`);
    seen.add(e.name);
  }
  const token = values['auth-token'] ?? nonEmpty(env.SVC_FS_NODE_AUTH_TOKEN);
  if (token === '') throw new ConfigError('--auth-token must not be empty');
  config.authToken = token ?? null;
  config.nodeName = values['node-name'] ?? hostname();
  if (config.nodeName === '' || config.nodeName.length > 256) throw new ConfigError('--node-name must be 1 to 256 characters');
  config.metricsPort = nonEmpty(env.SVC_METRICS_PORT) !== null ? parsePort(env.SVC_METRICS_PORT as string, 'SVC_METRICS_PORT') : null;
  config.maxMessageBytes = parseInt(env.SVC_MAX_MESSAGE_BYTES, DEFAULT_MAX_MESSAGE_BYTES, 'SVC_MAX_MESSAGE_BYTES', MIN_MAX_MESSAGE_BYTES);
  config.logLevel = (nonEmpty(env.SVC_LOG_LEVEL) ?? 'info').toLowerCase();
  if (!LOG_LEVELS.includes(config.logLevel)) throw new ConfigError(`SVC_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}`);
  config.shutdownGraceMs = parseInt(env.SVC_SHUTDOWN_GRACE_MS, 5000, 'SVC_SHUTDOWN_GRACE_MS', 0);
  return config;
}
