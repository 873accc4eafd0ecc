/**
 * Option table entries several programs share, so each is written once: the listener, TLS and
 * process settings of the two servers (`svc`, `svc-fs-node`), and the client settings of the
 * CLIs (`svc-control`, `svc-fs-mount`). A program's table takes them as they are, or spreads one
 * and changes what differs (its default port, a tighter limit). Imports values only: `svc-fs-node
 * --help` loads this module.
 */
import { DEFAULT_BIND, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_STATE_DIR } from '../../protocol/src/constants';
import { DEFAULT_LOG_LEVEL, DEFAULT_SHUTDOWN_GRACE_MS, LOG_LEVELS } from './config-values';
import type { OptionSpec } from './option-specs';

/** Entries of both servers, `svc` and `svc-fs-node`. */
export const SERVER_COMMON_OPTIONS = {
  bind: {
    flag: 'bind',
    value: 'ADDR',
    default: DEFAULT_BIND,
    description: 'listen address of the WebSocket and ops listeners; beyond loopback it needs TLS or `--insecure-transport`',
  },
  /** The default port differs: each server spreads this entry with its own `default`. */
  port: { flag: 'port', value: 'PORT', description: 'WebSocket port; 0 picks a free one' },
  tlsCert: {
    flag: 'tls-cert',
    value: 'FILE',
    env: 'SVC_TLS_CERT',
    description: 'serve `wss://` with this PEM certificate chain; re-read within 10 s of a change and on SIGHUP',
  },
  tlsKey: { flag: 'tls-key', value: 'FILE', env: 'SVC_TLS_KEY', description: 'the PEM private key of `--tls-cert`' },
  insecureTransport: { flag: 'insecure-transport', description: 'allow a `--bind` beyond loopback without TLS (tokens and data in clear; warns at start)' },
  help: { flag: 'help', short: 'h', description: 'print this text' },
  metricsPort: { env: 'SVC_METRICS_PORT', description: 'serve `/livez`, `/readyz`, `/metrics` and `/metrics.json` on this port (same bind address)' },
  maxMessageBytes: {
    env: 'SVC_MAX_MESSAGE_BYTES',
    default: String(DEFAULT_MAX_MESSAGE_BYTES),
    unit: 'bytes',
    description: 'largest frame; a larger one closes the connection with 1009',
  },
  logLevel: { env: 'SVC_LOG_LEVEL', default: DEFAULT_LOG_LEVEL, description: `log level: ${LOG_LEVELS.join(', ')}` },
  shutdownGrace: {
    env: 'SVC_SHUTDOWN_GRACE_MS',
    default: String(DEFAULT_SHUTDOWN_GRACE_MS),
    unit: 'ms',
    description: 'how long SIGTERM waits for requests in flight',
  },
} satisfies Record<string, OptionSpec>;

/** Entries of the CLIs that open control or FS sessions (`svc-control`, `svc-fs-mount`). */
export const CLIENT_COMMON_OPTIONS = {
  tlsCa: {
    flag: 'tls-ca',
    value: 'FILE',
    env: 'SVC_TLS_CA',
    description: 'PEM CA certificates trusted for `wss://` URLs besides the system CAs; verification cannot be turned off',
  },
  stateDir: {
    env: 'SVC_STATE_DIR',
    default: DEFAULT_STATE_DIR,
    description: 'without a role token: the directory whose `auth_tokens.json` holds the admin token',
  },
} satisfies Record<string, OptionSpec>;

/** The default of a client's `--auth-token`: the admin token of the local state directory. */
export const LOCAL_ADMIN_TOKEN = `the admin token in \`\${SVC_STATE_DIR:-${DEFAULT_STATE_DIR}}/auth_tokens.json\``;
