/**
 * Where clients take their role token (docs/protocol.md "Transport"): `--auth-token`, else `SVC_AUTH_TOKEN`,
 * else the admin token in `${SVC_STATE_DIR:-./.svc}/auth_tokens.json` when readable (local use).
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { DEFAULT_STATE_DIR } from '@svc/protocol/wire';

/**
 * @param flag value of `--auth-token`, if given
 * @param env the environment
 * @returns the token, or null when none is found
 */
export function resolveAuthToken(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string | null {
  if (flag) return flag;
  if (env.SVC_AUTH_TOKEN) return env.SVC_AUTH_TOKEN;
  const file = join(resolve(env.SVC_STATE_DIR || DEFAULT_STATE_DIR), 'auth_tokens.json');
  try {
    const tokens = JSON.parse(readFileSync(file, 'utf8')) as { admin_token?: unknown };
    return typeof tokens.admin_token === 'string' ? tokens.admin_token : null;
  } catch {
    return null;
  }
}
