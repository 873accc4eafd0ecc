/**
 * The flags and environment variables of `svc-fs-node`, with their defaults: read by the parser
 * (config.ts), rendered into `svc-fs-node --help` and into docs/configuration.md
 * (`npm run docs:config`). Loaded by `--help`, so it imports values only.
 */
import { DEFAULT_FS_NODE_PORT, FS_FEATURES, LEASE_TTL_DEFAULT_MS, LEASE_TTL_MAX_MS, LEASE_TTL_MIN_MS } from '@svc/protocol/wire';
import { SERVER_COMMON_OPTIONS } from '../../../libs/ops/src/common-options';
import { helpLines, OptionSpec, sectionEntries } from '../../../libs/ops/src/option-specs';

/** The export served without `--export`. */
export const DEFAULT_EXPORT = 'work=.:rw';

/** Credentials file of control daemon mode without `--state-file` (relative to the working directory). */
export const DEFAULT_STATE_FILE = './.svc-fs-node-state.json';

/** How the node pairs without `--pair-mode`. */
export const DEFAULT_PAIR_MODE = 'invite';

/** First retry delay while svc is unreachable, ms, without `--reconnect-backoff-ms`; and the shortest accepted. */
export const DEFAULT_RECONNECT_BACKOFF_MS = 1000;
export const MIN_RECONNECT_BACKOFF_MS = 10;

/** Largest retry delay, ms, without `--reconnect-backoff-max-ms` (never below the first delay). */
export const DEFAULT_RECONNECT_BACKOFF_MAX_MS = 30_000;

/** Shortest lease refresh period, ms: the default (a third of the lease) is never below it. */
export const MIN_DEFAULT_REFRESH_INTERVAL_MS = 500;

/** Shortest `--refresh-interval-ms`, ms. */
export const MIN_REFRESH_INTERVAL_MS = 100;

/** Smallest frame limit that still carries a 1 MiB write as base64 JSON, bytes. */
export const MIN_MAX_MESSAGE_BYTES = 2 * 1024 * 1024;

/** Section of the flags that only control daemon mode accepts (each needs `--control-url`). */
export const DAEMON_SECTION = 'control daemon mode';

const FEATURE_LIST = `comma-separated names (${FS_FEATURES.map((f) => `\`${f}\``).join(', ')}), \`all\` or \`none\``;

/** The flags and variables of `svc-fs-node`, in the order `--help` lists them. */
export const FS_NODE_OPTIONS = {
  bind: SERVER_COMMON_OPTIONS.bind,
  port: { ...SERVER_COMMON_OPTIONS.port, default: String(DEFAULT_FS_NODE_PORT) },
  export: {
    flag: 'export',
    value: 'NAME=PATH[:ro|:rw]',
    repeatable: true,
    default: DEFAULT_EXPORT,
    description: 'serve the directory PATH as export NAME (identifier-safe), read-only with `:ro`',
  },
  authToken: {
    flag: 'auth-token',
    value: 'T',
    env: 'SVC_FS_NODE_AUTH_TOKEN',
    description: 'FS session token every session must present in `acheron.t_fs_hello`; unset in standalone mode: sessions need none',
  },
  nodeName: { flag: 'node-name', value: 'NAME', default: 'the host name', description: 'node name in the hello reply and to the control plane' },
  terminalId: {
    flag: 'terminal-id',
    value: 'ID',
    repeatable: true,
    description: 'serve a terminal export `terminal-ID` that runs programs for its sessions; needs `--auth-token` or control daemon mode',
  },
  terminalCwd: { flag: 'terminal-cwd', value: 'DIR', default: 'the first read-write export', description: 'directory terminal requests run in' },
  fsFeatures: {
    flag: 'fs-features',
    value: 'LIST',
    env: 'SVC_FS_NODE_FEATURES',
    default: 'all',
    description: `FS extensions granted to sessions that ask for them: ${FEATURE_LIST}`,
  },
  metaIo: {
    flag: 'meta-io',
    value: 'auto|pool',
    env: 'SVC_FS_NODE_META_IO',
    default: 'auto',
    description:
      "where the metadata calls of the exports (stat, chmod, unlink, rename, mkdir, ...), the creation and close of files and writes of at most 64 KiB run: `auto` on the event loop while the disk answers within 20 ms (3 slower calls within 10 s send the export's calls to the thread pool for 60 s), `pool` always on the thread pool (an export on a network filesystem that may hang)",
  },
  tlsCert: SERVER_COMMON_OPTIONS.tlsCert,
  tlsKey: SERVER_COMMON_OPTIONS.tlsKey,
  insecureTransport: SERVER_COMMON_OPTIONS.insecureTransport,
  help: SERVER_COMMON_OPTIONS.help,
  controlUrl: {
    flag: 'control-url',
    value: 'URL',
    section: DAEMON_SECTION,
    description: 'svc WebSocket URL, e.g. `ws://127.0.0.1:18790/`: pair with svc, keep a lease, publish the catalog record',
  },
  tlsCa: {
    flag: 'tls-ca',
    value: 'FILE',
    env: 'SVC_TLS_CA',
    section: DAEMON_SECTION,
    description: 'PEM CA certificates trusted for a `wss://` `--control-url` besides the system CAs; verification cannot be turned off',
  },
  controlAuthToken: { flag: 'control-auth-token', value: 'T', env: 'SVC_AUTH_TOKEN', section: DAEMON_SECTION, description: 'role token for svc; required' },
  pairMode: {
    flag: 'pair-mode',
    value: 'invite|request',
    default: DEFAULT_PAIR_MODE,
    section: DAEMON_SECTION,
    description: 'pair with an invite, or by a join request an admin approves',
  },
  inviteToken: { flag: 'invite-token', value: 'T', section: DAEMON_SECTION, description: 'the invite (from `svc-control node_invite_create`)' },
  fsUrl: {
    flag: 'fs-url',
    value: 'URL',
    default: 'the listening URL: `ws://BIND:PORT/v2/fs`, `wss://` with `--tls-cert`',
    section: DAEMON_SECTION,
    description: 'FS URL advertised to svc',
  },
  stateFile: {
    flag: 'state-file',
    value: 'PATH',
    default: DEFAULT_STATE_FILE,
    section: DAEMON_SECTION,
    description: 'credentials file, written with mode 0600',
  },
  leaseTtl: {
    flag: 'lease-ttl-ms',
    value: 'MS',
    default: String(LEASE_TTL_DEFAULT_MS),
    unit: 'ms',
    section: DAEMON_SECTION,
    description: `lease length asked for, ${LEASE_TTL_MIN_MS} to ${LEASE_TTL_MAX_MS}; a node that stops without releasing it is degraded after this long at the latest`,
  },
  refreshInterval: {
    flag: 'refresh-interval-ms',
    value: 'MS',
    default: `a third of the lease, at least ${MIN_DEFAULT_REFRESH_INTERVAL_MS}`,
    unit: 'ms',
    section: DAEMON_SECTION,
    description: `lease refresh period; at least ${MIN_REFRESH_INTERVAL_MS}`,
  },
  reconnectBackoff: {
    flag: 'reconnect-backoff-ms',
    value: 'MS',
    default: String(DEFAULT_RECONNECT_BACKOFF_MS),
    unit: 'ms',
    section: DAEMON_SECTION,
    description: `first retry delay while svc is unreachable (doubling, with jitter); at least ${MIN_RECONNECT_BACKOFF_MS}`,
  },
  reconnectBackoffMax: {
    flag: 'reconnect-backoff-max-ms',
    value: 'MS',
    default: `${DEFAULT_RECONNECT_BACKOFF_MAX_MS}, or \`--reconnect-backoff-ms\` when larger`,
    unit: 'ms',
    section: DAEMON_SECTION,
    description: 'largest retry delay; at least `--reconnect-backoff-ms`',
  },
  operatorToken: { flag: 'operator-token', value: 'T', section: DAEMON_SECTION, description: "added to the node's control payloads (for svc's operator gate)" },
  noFsService: { flag: 'no-fs-service', section: DAEMON_SECTION, description: 'do not publish the `fs` service in the catalog' },
  terminalAllowUser: {
    flag: 'terminal-allow-user',
    section: DAEMON_SECTION,
    description: 'publish terminals visible to users holding a project token (default: admin only)',
  },
  serviceManifest: {
    flag: 'service-manifest',
    value: 'PATH',
    repeatable: true,
    section: DAEMON_SECTION,
    description: 'publish the services of a manifest file: one service entry, or `{"services":[...]}`',
  },
  servicesDir: { flag: 'services-dir', value: 'DIR', section: DAEMON_SECTION, description: 'publish every `*.json` manifest in DIR, re-read when it changes' },
  label: { flag: 'label', value: 'KEY=VALUE', repeatable: true, section: DAEMON_SECTION, description: 'a node label; KEY is identifier-safe' },
  metricsPort: SERVER_COMMON_OPTIONS.metricsPort,
  maxMessageBytes: {
    ...SERVER_COMMON_OPTIONS.maxMessageBytes,
    description: `${SERVER_COMMON_OPTIONS.maxMessageBytes.description}; at least ${MIN_MAX_MESSAGE_BYTES} (a 1 MiB write as base64 JSON)`,
  },
  logLevel: SERVER_COMMON_OPTIONS.logLevel,
  shutdownGrace: SERVER_COMMON_OPTIONS.shutdownGrace,
} satisfies Record<string, OptionSpec>;

/** `svc-fs-node --help`, and the text after a usage error. */
export const FS_NODE_USAGE = [
  'usage: svc-fs-node [--bind ADDR] [--port PORT] [--export NAME=PATH[:ro|:rw]]... [--auth-token T] [--node-name NAME]',
  '',
  'Serves directories as FS exports on ws://ADDR:PORT/v2/fs (standalone mode).',
  '',
  ...helpLines(sectionEntries(FS_NODE_OPTIONS, undefined, 'flags')),
  '',
  `${DAEMON_SECTION} (pairs with svc, keeps a lease, publishes the node's service catalog):`,
  ...helpLines(sectionEntries(FS_NODE_OPTIONS, DAEMON_SECTION, 'flags')),
  '',
  'environment:',
  ...helpLines(sectionEntries(FS_NODE_OPTIONS, undefined, 'variables')),
  '',
  'SIGTERM or SIGINT: in control daemon mode the node first releases its lease',
  '(control.node_lease_release, giving up after 2 s), so its mounts fail over at once; then',
  'it drains FS requests in flight and exits 0.',
  '',
].join('\n');
