/**
 * The flags and environment variables of `svc-control`, with their defaults: the `@Option`
 * decorators of its commands are made from these entries ({@link commanderOption}), and
 * docs/configuration.md is rendered from them (`npm run docs:config`).
 */
import { DEFAULT_REQUEST_TIMEOUT_MS } from '@svc/client';
import { AUDIT_LIST_DEFAULT_LIMIT, DEFAULT_AGENT_ID, DEFAULT_SVC_PORT } from '@svc/protocol/wire';
import { CLIENT_COMMON_OPTIONS, LOCAL_ADMIN_TOKEN } from '../../../libs/ops/src/common-options';
import { OptionSpec } from '../../../libs/ops/src/option-specs';

/** Default control-plane URL (`$SVC_URL` overrides). */
export const DEFAULT_URL = `ws://127.0.0.1:${DEFAULT_SVC_PORT}/`;

/** Section of the options of `svc-control OP` alone (the root command). */
export const OPERATION_SECTION = 'svc-control OP [PAYLOAD]';
/** Section of the options of `svc-control apply`. */
export const APPLY_SECTION = 'svc-control apply';
/** Section of the options of `svc-control audit`. */
export const AUDIT_SECTION = 'svc-control audit';

/**
 * The flags and variables of `svc-control`: the session options every command takes, then the
 * options of one command each.
 */
export const CONTROL_OPTIONS = {
  url: { flag: 'url', value: 'URL', env: 'SVC_URL', default: DEFAULT_URL, description: 'control-plane WebSocket URL' },
  authToken: {
    flag: 'auth-token',
    value: 'TOKEN',
    env: 'SVC_AUTH_TOKEN',
    default: LOCAL_ADMIN_TOKEN,
    description: 'role token of the session',
  },
  operatorToken: {
    flag: 'operator-token',
    value: 'TOKEN',
    env: 'SVC_CONTROL_OPERATOR_TOKEN',
    description: 'operator token, added as `operator_token` to protected operations that lack one',
  },
  agentId: {
    flag: 'agent-id',
    value: 'ID',
    default: DEFAULT_AGENT_ID,
    description: 'agent id of the session (`control.connect`; bindings are per role and agent)',
  },
  tlsCa: CLIENT_COMMON_OPTIONS.tlsCa,
  timeout: { flag: 'timeout-ms', value: 'MS', default: String(DEFAULT_REQUEST_TIMEOUT_MS), unit: 'ms', description: 'time limit of each request' },
  stateDir: CLIENT_COMMON_OPTIONS.stateDir,
  watch: {
    flag: 'watch',
    section: OPERATION_SECTION,
    description: 'after the reply, keep the session open and print pushed events as JSON lines',
  },
  file: { flag: 'file', short: 'f', value: 'FILE', section: APPLY_SECTION, description: 'the workspace file, YAML or JSON; `-` reads standard input' },
  dryRun: { flag: 'dry-run', section: APPLY_SECTION, description: 'print what would change, change nothing' },
  noPrune: { flag: 'no-prune', section: APPLY_SECTION, description: 'only add: keep the mounts of the project that the file does not list' },
  applyJson: { flag: 'json', section: APPLY_SECTION, description: 'print the reply payload as JSON instead of the plan' },
  since: { flag: 'since', value: 'WHEN', section: AUDIT_SECTION, description: 'only entries since then: a duration back (`15m`, `1h`, `7d`) or a date' },
  until: { flag: 'until', value: 'WHEN', section: AUDIT_SECTION, description: 'only entries until then: a duration back or a date' },
  agent: { flag: 'agent', value: 'AGENT_ID', section: AUDIT_SECTION, description: 'only entries of this agent' },
  type: { flag: 'type', value: 'TYPE', section: AUDIT_SECTION, description: 'only entries of this type, e.g. `project_up` (`control.` prefix optional)' },
  limit: { flag: 'limit', value: 'N', default: String(AUDIT_LIST_DEFAULT_LIMIT), section: AUDIT_SECTION, description: 'at most this many entries' },
  auditJson: { flag: 'json', section: AUDIT_SECTION, description: 'one JSON entry per line instead of a table' },
} satisfies Record<string, OptionSpec>;
