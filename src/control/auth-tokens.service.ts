/**
 * Role tokens (PROTOCOL.md 1: how a session is identified as admin). Taken from
 * `SVC_ADMIN_TOKEN` / `SVC_USER_TOKEN` when set, otherwise generated (32 random bytes,
 * base64url) on first start into `<state-dir>/auth_tokens.json` (mode 0600). Compared in
 * constant time; never logged.
 */
import { Injectable, Logger } from '@nestjs/common';
import { chmodSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fail, newSecret, Role, secretsEqual } from '@svc/protocol';
import { writeFileAtomicSync } from '@svc/ops';
import { ServerConfig } from '../config';

interface TokenFile {
  admin_token: string;
  user_token: string;
}

@Injectable()
export class AuthTokensService {
  private readonly logger = new Logger('AuthTokens');
  /** Path of the token file. */
  readonly path: string;
  private tokens: TokenFile;

  constructor(private readonly config: ServerConfig) {
    this.path = join(config.stateDir, 'auth_tokens.json');
    this.tokens = this.loadOrCreate();
  }

  /**
   * The role of a bearer token, or undefined. Both tokens are always compared, in constant time.
   */
  roleOf(token: string): Role | undefined {
    const isAdmin = secretsEqual(token, this.tokens.admin_token);
    const isUser = secretsEqual(token, this.tokens.user_token);
    return isAdmin ? 'admin' : isUser ? 'user' : undefined;
  }

  /** `control.auth_status`: both tokens and the file path (admin only). */
  status(): { admin_token: string; user_token: string; path: string } {
    return { ...this.tokens, path: this.path };
  }

  /**
   * `control.auth_rotate`: a new token for `role`, written to the file. New connections must
   * use it; sessions already open keep their role until they close.
   * @throws ProtocolError `invalid_payload` when the role's token comes from the environment
   */
  rotate(role: Role): { role: Role; token: string } {
    const envName = role === 'admin' ? 'SVC_ADMIN_TOKEN' : 'SVC_USER_TOKEN';
    if ((role === 'admin' ? this.config.adminToken : this.config.userToken) !== null) {
      fail('invalid_payload', `the ${role} token comes from ${envName}; change the environment and restart instead`);
    }
    const token = newSecret();
    const next = { ...this.tokens, [`${role}_token`]: token } as TokenFile;
    this.write(next);
    this.tokens = next;
    this.logger.log({ msg: `${role} token rotated` });
    return { role, token };
  }

  private loadOrCreate(): TokenFile {
    let stored: Partial<TokenFile> = {};
    try {
      stored = JSON.parse(readFileSync(this.path, 'utf8')) as Partial<TokenFile>;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') {
        throw new Error(`cannot read ${this.path}: ${(e as Error).message}; fix or remove it`);
      }
    }
    const valid = (t: unknown): t is string => typeof t === 'string' && t.length >= 16;
    const tokens: TokenFile = {
      admin_token: this.config.adminToken ?? (valid(stored.admin_token) ? stored.admin_token : newSecret()),
      user_token: this.config.userToken ?? (valid(stored.user_token) ? stored.user_token : newSecret()),
    };
    if (tokens.admin_token === tokens.user_token) throw new Error('admin and user tokens must differ');
    if (tokens.admin_token !== stored.admin_token || tokens.user_token !== stored.user_token) this.write(tokens);
    else chmodSync(this.path, 0o600);
    return tokens;
  }

  private write(tokens: TokenFile): void {
    mkdirSync(this.config.stateDir, { recursive: true, mode: 0o700 });
    writeFileAtomicSync(this.path, JSON.stringify(tokens, null, 2) + '\n', 0o600);
  }
}
