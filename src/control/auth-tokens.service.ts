/**
 * Role tokens (docs/protocol.md "Transport": how a session is identified as admin; shared by every
 * replica). Taken from `SVC_ADMIN_TOKEN` / `SVC_USER_TOKEN` when set; otherwise generated
 * (32 random bytes, base64url) once into the state store, which holds the truth (encrypted
 * with the records when a state key is set). `<state-dir>/auth_tokens.json` (mode 0600) is
 * kept as a copy for local CLIs; a token file of an earlier version is taken into the store
 * on first start. Compared in constant time; never logged.
 */
import { Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fail, newSecret, Role, secretsEqual } from '@svc/protocol';
import { writeFileAtomicSync } from '@svc/ops';
import { ServerConfig } from '../config';
import { StateService } from '../persistence/state.service';

interface TokenFile {
  admin_token: string;
  user_token: string;
}

const valid = (t: unknown): t is string => typeof t === 'string' && t.length >= 16;

@Injectable()
export class AuthTokensService implements OnModuleInit {
  private readonly logger = new Logger('AuthTokens');
  /** Path of the token file (a copy for local CLIs). */
  readonly path: string;
  private tokens: TokenFile | null = null;

  constructor(
    private readonly config: ServerConfig,
    private readonly store: StateService,
  ) {
    this.path = join(config.stateDir, 'auth_tokens.json');
  }

  onModuleInit(): void {
    this.store.addOpenHook(() => this.load());
    // A token rotated through another process on a shared store takes effect here too.
    this.store.applied$.subscribe(({ changes, local }) => {
      if (local || !this.tokens || !changes.role_tokens) return;
      for (const [role, record] of changes.role_tokens) {
        if (!record || (role === 'admin' ? this.config.adminToken : this.config.userToken) !== null) continue;
        this.tokens = { ...this.tokens, [`${role}_token`]: record.token };
      }
      this.writeFile();
    });
  }

  /**
   * The role of a bearer token, or undefined (also before the store is loaded). Both tokens
   * are always compared, in constant time.
   */
  roleOf(token: string): Role | undefined {
    if (!this.tokens) return undefined;
    const isAdmin = secretsEqual(token, this.tokens.admin_token);
    const isUser = secretsEqual(token, this.tokens.user_token);
    return isAdmin ? 'admin' : isUser ? 'user' : undefined;
  }

  /**
   * The current admin token, or null before the store is loaded. For keys derived from it
   * in-process (the dashboard's session cookies, src/dashboard); never logged or sent.
   */
  adminToken(): string | null {
    return this.tokens?.admin_token ?? null;
  }

  /** `control.auth_status`: both tokens and the file path (admin only). */
  status(): { admin_token: string; user_token: string; path: string } {
    return { ...this.tokens!, path: this.path };
  }

  /**
   * `control.auth_rotate`: a new token for `role`, stored, then copied to the file. New
   * connections must use it; sessions already open keep their role until they close.
   * @throws ProtocolError `invalid_payload` when the role's token comes from the environment;
   *   `internal_error` when it cannot be stored (the old token stays)
   */
  async rotate(role: Role): Promise<{ role: Role; token: string }> {
    const envName = role === 'admin' ? 'SVC_ADMIN_TOKEN' : 'SVC_USER_TOKEN';
    if ((role === 'admin' ? this.config.adminToken : this.config.userToken) !== null) {
      fail('invalid_payload', `the ${role} token comes from ${envName}; change the environment and restart instead`);
    }
    const token = newSecret();
    await this.store.mutate((s) => {
      s.roleTokens.put({ role, token, updated_at_ms: Date.now() });
    });
    this.tokens = { ...this.tokens!, [`${role}_token`]: token };
    this.writeFile();
    this.logger.log({ msg: `${role} token rotated` });
    return { role, token };
  }

  /**
   * Takes the tokens from the environment, else the store, else an earlier token file, else
   * new ones; decided inside one mutation, so replicas starting together agree on one pair.
   */
  private async load(): Promise<void> {
    let legacy: Partial<TokenFile> = {};
    try {
      legacy = JSON.parse(readFileSync(this.path, 'utf8')) as Partial<TokenFile>;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT')
        this.logger.warn({ msg: `cannot read ${this.path}; it will be rewritten from the store`, error: (e as Error).message });
    }
    const fresh = { admin: newSecret(), user: newSecret() };
    this.tokens = await this.store.mutate((s) => {
      const now = Date.now();
      const pick = (role: Role, env: string | null): string => {
        if (env !== null) return env;
        const stored = s.roleTokens.get(role)?.token;
        if (valid(stored)) return stored;
        const l = legacy[`${role}_token`];
        const token = valid(l) ? l : fresh[role];
        s.roleTokens.put({ role, token, updated_at_ms: now });
        return token;
      };
      const tokens = { admin_token: pick('admin', this.config.adminToken), user_token: pick('user', this.config.userToken) };
      if (tokens.admin_token === tokens.user_token) throw new Error('admin and user tokens must differ');
      return tokens;
    });
    if (legacy.admin_token !== this.tokens.admin_token || legacy.user_token !== this.tokens.user_token) this.writeFile();
  }

  private writeFile(): void {
    try {
      mkdirSync(this.config.stateDir, { recursive: true, mode: 0o700 });
      writeFileAtomicSync(this.path, JSON.stringify(this.tokens, null, 2) + '\n', 0o600);
    } catch (e) {
      this.logger.warn({ msg: `cannot write ${this.path} (local CLIs read their token there); the store holds the tokens`, error: (e as Error).message });
    }
  }
}
