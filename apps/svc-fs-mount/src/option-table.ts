/**
 * The flags and environment variables of `svc-fs-mount`, with their defaults: the `@Option`
 * decorators of its commands are made from these entries ({@link commanderOption}), and
 * docs/configuration.md is rendered from them (`npm run docs:config`).
 */
import { DEFAULT_AGENT_ID, DEFAULT_SVC_PORT, FS_FEATURES } from '@svc/protocol/wire';
import { DEFAULT_WORKSPACE_SYNC_INTERVAL_MS, ROUTER_DEADLINES } from '../../../libs/fs/src/router';
import { CLIENT_COMMON_OPTIONS, LOCAL_ADMIN_TOKEN } from '../../../libs/ops/src/common-options';
import { OptionSpec } from '../../../libs/ops/src/option-specs';

/** Default control-plane URL in workspace mode (`$SVC_URL` overrides). */
export const DEFAULT_WORKSPACE_URL = `ws://127.0.0.1:${DEFAULT_SVC_PORT}/`;

/** Largest value of a deadline flag, ms (one hour). */
export const MAX_DEADLINE_MS = 3_600_000;

/** Defaults of `mount`: kernel attribute/entry cache lifetime (ms), the mount's own cache lifetime (ms), poll after each operation (µs). */
export const FUSE_MOUNT_DEFAULTS = { attrTtlMs: 60_000, cacheTtlMs: 60_000, pollUs: 1000 } as const;

/** Largest `--attr-ttl-ms` and `--cache-ttl-ms`, ms (one hour), and largest `--poll-us`, µs. */
export const FUSE_MAX_TTL_MS = 3_600_000;
export const FUSE_MAX_POLL_US = 100_000;

/** Section of the `mount` command's flags. */
export const MOUNT_SECTION = 'svc-fs-mount mount';
/** Section of the `status` command's flags. */
export const STATUS_SECTION = 'svc-fs-mount status';
/** Section of variables the program sets for itself. */
export const INTERNAL_SECTION = 'set by svc-fs-mount itself';

/**
 * The flags and variables of `svc-fs-mount`: global options (accepted before or after the
 * command), then the options of `mount` and `status`.
 */
export const MOUNT_OPTIONS = {
  workspaceUrl: { flag: 'workspace-url', value: 'URL', env: 'SVC_URL', default: DEFAULT_WORKSPACE_URL, description: 'control-plane URL (workspace mode)' },
  projectId: { flag: 'project-id', value: 'ID', default: "the project the agent's binding selects", description: 'pin this project' },
  projectToken: {
    flag: 'project-token',
    value: 'TOKEN',
    env: 'SVC_PROJECT_TOKEN',
    description: 'the token of `--project-id` (not needed when the agent is bound to the project)',
  },
  authToken: {
    flag: 'auth-token',
    value: 'TOKEN',
    env: 'SVC_AUTH_TOKEN',
    default: LOCAL_ADMIN_TOKEN,
    description: 'workspace mode: the role token of the control session; endpoint mode: the FS session token of every `--endpoint`, else `$SVC_FS_AUTH_TOKEN`',
  },
  agentId: { flag: 'agent-id', value: 'ID', default: DEFAULT_AGENT_ID, description: 'agent whose binding selects the project when there is no `--project-id`' },
  workspaceSyncInterval: {
    flag: 'workspace-sync-interval-ms',
    value: 'MS',
    default: String(DEFAULT_WORKSPACE_SYNC_INTERVAL_MS),
    unit: 'ms',
    description: 're-read the whole workspace status this often, besides the topology deltas (0: deltas only)',
  },
  endpoint: {
    flag: 'endpoint',
    value: 'SPEC',
    repeatable: true,
    description:
      'endpoint mode, no control plane: SPEC is `name=ws-url[#export][@/mount]` (export `work`, mount `/<name>` unless given); a mount path given twice is a failover group in the order given',
  },
  tlsCa: CLIENT_COMMON_OPTIONS.tlsCa,
  noBinary: { flag: 'no-binary', description: 'use JSON + base64 for data instead of binary frames' },
  fsFeatures: {
    flag: 'fs-features',
    value: 'LIST',
    env: 'SVC_FS_CLIENT_FEATURES',
    default: 'all',
    description: `FS extensions to ask nodes for: comma-separated names (${FS_FEATURES.map((f) => `\`${f}\``).join(', ')}), \`all\` or \`none\``,
  },
  connectTimeout: {
    flag: 'connect-timeout-ms',
    value: 'MS',
    default: String(ROUTER_DEADLINES.connectTimeoutMs),
    unit: 'ms',
    description: 'connect + hello limit per endpoint; a node that lets it pass is hung',
  },
  requestTimeout: {
    flag: 'request-timeout-ms',
    value: 'MS',
    default: String(ROUTER_DEADLINES.requestTimeoutMs),
    unit: 'ms',
    description: 'limit of one request on a node that still answers keepalive pings (then an endpoint failure)',
  },
  keepalive: {
    flag: 'keepalive-ms',
    value: 'MS',
    default: String(ROUTER_DEADLINES.keepaliveMs),
    unit: 'ms',
    description: 'while requests wait, ping the node after this long without an answer (0: no pings)',
  },
  keepaliveTimeout: {
    flag: 'keepalive-timeout-ms',
    value: 'MS',
    default: String(ROUTER_DEADLINES.keepaliveTimeoutMs),
    unit: 'ms',
    description:
      'a node that answered nothing (reply, push, pong) for this long while requests wait is hung: its session is dropped and reads fail over; more than `--keepalive-ms`',
  },
  opDeadline: {
    flag: 'op-deadline-ms',
    value: 'MS',
    default: String(ROUTER_DEADLINES.opDeadlineMs),
    unit: 'ms',
    description: 'budget of one operation from its start, for connects and retries on other candidates',
  },
  json: { flag: 'json', description: 'print results as JSON' },
  fsAuthToken: { env: 'SVC_FS_AUTH_TOKEN', description: 'endpoint mode: the FS session token when `--auth-token` is not given' },
  stateDir: CLIENT_COMMON_OPTIONS.stateDir,
  daemon: { flag: 'daemon', section: MOUNT_SECTION, description: 'detach once mounted and print the pid' },
  allowOther: { flag: 'allow-other', section: MOUNT_SECTION, description: 'let other users see the mount (needs `user_allow_other` in /etc/fuse.conf)' },
  attrTtl: {
    flag: 'attr-ttl-ms',
    value: 'MS',
    default: String(FUSE_MOUNT_DEFAULTS.attrTtlMs),
    unit: 'ms',
    section: MOUNT_SECTION,
    description: `how long the kernel keeps entries and attributes (FUSE entry and attribute timeouts); changes made elsewhere invalidate them at once; at most ${FUSE_MAX_TTL_MS}`,
  },
  cacheTtl: {
    flag: 'cache-ttl-ms',
    value: 'MS',
    default: String(FUSE_MOUNT_DEFAULTS.cacheTtlMs),
    unit: 'ms',
    section: MOUNT_SECTION,
    description: `lifetime of the mount's own attribute, listing and open caches, which the nodes' change events keep coherent; at most ${FUSE_MAX_TTL_MS}`,
  },
  pollUs: {
    flag: 'poll-us',
    value: 'US',
    default: String(FUSE_MOUNT_DEFAULTS.pollUs),
    unit: 'µs',
    section: MOUNT_SECTION,
    description: `after each operation keep polling this long instead of sleeping (0: never), a little CPU for latency on virtual CPUs; at most ${FUSE_MAX_POLL_US}`,
  },
  readOnly: { flag: 'read-only', section: MOUNT_SECTION, description: 'refuse every change with EROFS' },
  metricsPort: {
    flag: 'metrics-port',
    value: 'PORT',
    section: MOUNT_SECTION,
    description: "serve the mount's Prometheus metrics on http://127.0.0.1:PORT/metrics (0: any free port, printed); none by default",
  },
  noProbe: { flag: 'no-probe', section: STATUS_SECTION, description: 'do not connect to the endpoints' },
  detached: {
    env: 'SVC_FS_MOUNT_DETACHED',
    section: INTERNAL_SECTION,
    description: '`1` in the background mount that `mount --daemon` starts (it then stops writing to the closed output)',
  },
} satisfies Record<string, OptionSpec>;
