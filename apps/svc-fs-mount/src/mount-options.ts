/**
 * Global options of `svc-fs-mount` (declared in option-table.ts) and how they become a router configuration:
 * workspace mode (a control plane gives the topology) or endpoint mode (`--endpoint` list).
 */
import { clientTlsFrom, resolveAuthToken, TlsCaError } from '@svc/client';
import { parseFsFeatures } from '@svc/protocol/wire';
import { DEFAULT_WORKSPACE_SYNC_INTERVAL_MS, EndpointSpec, parseEndpointSpec, ROUTER_DEADLINES, RouterConfig } from '../../../libs/fs/src/router';
import { DEFAULT_WORKSPACE_URL, MAX_DEADLINE_MS } from './option-table';

export { DEFAULT_WORKSPACE_URL, MAX_DEADLINE_MS };

/** A usage error: printed as `svc-fs-mount: <message>`, exit code 2. */
export class UsageError extends Error {}

/** Options as commander parsed them (attribute names of the root command's flags). */
export interface GlobalOptions {
  workspaceUrl?: string;
  projectId?: string;
  projectToken?: string;
  authToken?: string;
  agentId?: string;
  workspaceSyncIntervalMs?: number;
  endpoint?: string[];
  /** false with `--no-binary`. */
  binary?: boolean;
  /** `--fs-features LIST`: FS extensions to ask for (names, `all`, `none`). */
  fsFeatures?: string;
  json?: boolean;
  /** Extra CA file for `wss://` URLs (`--tls-ca`, else `SVC_TLS_CA`). */
  tlsCa?: string;
  /** Deadlines, ms (`--connect-timeout-ms` ...; see {@link ROUTER_DEADLINES}). */
  connectTimeoutMs?: number;
  requestTimeoutMs?: number;
  keepaliveMs?: number;
  keepaliveTimeoutMs?: number;
  opDeadlineMs?: number;
}

/**
 * A deadline flag's value: an integer number of ms from `min` to {@link MAX_DEADLINE_MS}.
 * @throws UsageError naming the flag
 */
export function msArg(v: string, flag: string, min: number): number {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < min || n > MAX_DEADLINE_MS) {
    throw new UsageError(`${flag} must be an integer from ${min} to ${MAX_DEADLINE_MS} (ms), got ${JSON.stringify(v)}`);
  }
  return n;
}

/**
 * The router configuration of the global options.
 * - endpoint mode when `--endpoint` is given: `--auth-token` (else `$SVC_FS_AUTH_TOKEN`) is the
 *   FS session token of every endpoint;
 * - workspace mode otherwise: `--workspace-url` (else `$SVC_URL`, else {@link DEFAULT_WORKSPACE_URL}),
 *   `--auth-token` is the role token, resolved like svc-control does (`$SVC_AUTH_TOKEN`, then
 *   `${SVC_STATE_DIR:-./.svc}/auth_tokens.json`); `--project-token` defaults to `$SVC_PROJECT_TOKEN`.
 * FS extensions asked for: `--fs-features`, else `$SVC_FS_CLIENT_FEATURES`, else all.
 * Deadlines not given are left to the router's defaults ({@link ROUTER_DEADLINES}). In both
 * modes, `wss://` URLs (the control plane's, and the nodes' from the topology or `--endpoint`)
 * are verified against the system CAs plus `--tls-ca` (else `$SVC_TLS_CA`; docs/operations.md "Transport security (TLS)").
 * @throws UsageError for contradictory or malformed options (also `--keepalive-timeout-ms`
 *   not larger than `--keepalive-ms`), an unusable CA file, or when no role token is found
 */
export function routerConfigOf(o: GlobalOptions, env: NodeJS.ProcessEnv = process.env): RouterConfig {
  const keepalive = o.keepaliveMs ?? ROUTER_DEADLINES.keepaliveMs;
  const keepaliveTimeout = o.keepaliveTimeoutMs ?? ROUTER_DEADLINES.keepaliveTimeoutMs;
  if (keepalive > 0 && keepaliveTimeout <= keepalive) {
    throw new UsageError(`--keepalive-timeout-ms (${keepaliveTimeout}) must be larger than --keepalive-ms (${keepalive}): a ping needs time to be answered`);
  }
  let features: string[];
  try {
    features = parseFsFeatures(o.fsFeatures ?? env.SVC_FS_CLIENT_FEATURES, o.fsFeatures !== undefined ? '--fs-features' : 'SVC_FS_CLIENT_FEATURES');
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  let tls;
  try {
    tls = clientTlsFrom(o.tlsCa, env);
  } catch (e) {
    if (e instanceof TlsCaError) throw new UsageError(e.message);
    throw e;
  }
  const common = {
    binary: o.binary !== false,
    features,
    tls,
    connectTimeoutMs: o.connectTimeoutMs,
    requestTimeoutMs: o.requestTimeoutMs,
    keepaliveMs: o.keepaliveMs,
    keepaliveTimeoutMs: o.keepaliveTimeoutMs,
    opDeadlineMs: o.opDeadlineMs,
  };
  if (o.endpoint && o.endpoint.length > 0) {
    if (o.workspaceUrl || o.projectId || o.projectToken) {
      throw new UsageError('--endpoint (endpoint mode) cannot be combined with --workspace-url, --project-id or --project-token (workspace mode)');
    }
    let endpoints: EndpointSpec[];
    try {
      endpoints = o.endpoint.map((s) => parseEndpointSpec(s));
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
    const fsAuthToken = o.authToken ?? (env.SVC_FS_AUTH_TOKEN || undefined);
    return { ...common, mode: 'endpoints', endpoints, fsAuthToken };
  }
  const token = resolveAuthToken(o.authToken, env);
  if (!token) {
    throw new UsageError(
      'no auth token for the control plane: pass --auth-token, set SVC_AUTH_TOKEN, run where ${SVC_STATE_DIR:-./.svc}/auth_tokens.json is readable, or use --endpoint',
    );
  }
  if (o.projectToken !== undefined && o.projectId === undefined) throw new UsageError('--project-token needs --project-id');
  return {
    ...common,
    mode: 'workspace',
    url: o.workspaceUrl ?? (env.SVC_URL || DEFAULT_WORKSPACE_URL),
    token,
    agentId: o.agentId,
    projectId: o.projectId,
    projectToken: o.projectToken ?? (o.projectId !== undefined ? env.SVC_PROJECT_TOKEN || undefined : undefined),
    syncIntervalMs: o.workspaceSyncIntervalMs ?? DEFAULT_WORKSPACE_SYNC_INTERVAL_MS,
  };
}

/** A workspace path argument: made absolute (`docs/a` = `/docs/a`). */
export function workspacePathArg(arg: string | undefined, what = 'PATH'): string {
  if (arg === undefined || arg === '') throw new UsageError(`missing ${what}`);
  return arg.startsWith('/') ? arg : `/${arg}`;
}

/**
 * A non-negative integer argument; `K`, `M`, `G` suffixes are binary multiples (1K = 1024).
 * @throws UsageError
 */
export function sizeArg(arg: string | undefined, what: string): number {
  const m = arg === undefined ? null : /^(\d+)([KMG]?)$/i.exec(arg.trim());
  if (!m) throw new UsageError(`${what} must be a non-negative integer (optionally with K, M or G), got ${JSON.stringify(arg)}`);
  const n = Number(m[1]) * ({ '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3 } as Record<string, number>)[m[2].toUpperCase()];
  if (!Number.isSafeInteger(n)) throw new UsageError(`${what} is too large`);
  return n;
}
