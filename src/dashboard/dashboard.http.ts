/**
 * The web dashboard's HTTP side, plugged into the `svc` WebSocket listener
 * ({@link HttpExtension}): same port as `--port`, same TLS when configured.
 *
 * | Request | Answer |
 * |---|---|
 * | `GET /` from a browser (`Accept: text/html`) | 303 to `/ui/` (anything else: the adapter's 426) |
 * | `GET /ui/` | the application shell with a valid session cookie, else the sign-in page; never data |
 * | `POST /ui/sign-in` (form field `token`) | the admin token: a session cookie and 303 to `/ui/`; anything else 401 (user token too: admin only); more than the rate limit: 429 with `Retry-After`. Audited as `ui.sign_in` (`ok` or `auth_failed`), logged, never with the token |
 * | `POST /ui/sign-out` | the cookie cleared (and the session revoked here), 303 to `/ui/` |
 * | `GET /ui/style.css` | the style sheet |
 * | `GET /favicon.ico` | 204 (no icon) |
 * | `GET /ui/<module>.js` | the dashboard's compiled scripts (dist/ui), with a session only |
 *
 * WebSocket upgrades (`checkUpgrade`): an `Origin` that is not this server's own host is
 * refused with 403, whatever the credentials (cross-site WebSocket hijacking); without an
 * `Authorization` header, a valid session cookie with a same-origin `Origin` authenticates
 * the upgrade as admin. Everything else goes to the bearer-token check (docs/protocol.md "Transport").
 *
 * Every answer carries a strict Content-Security-Policy (scripts and styles from this origin
 * only, WebSocket to this host only, no framing), `no-store` for pages, and never a token:
 * the admin token travels only in the sign-in form's body and is never logged.
 */
import { Injectable, Logger } from '@nestjs/common';
import { readdirSync, readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { HttpExtension, UpgradeVerdict } from '@svc/transport';
import { AuditService } from '../audit/audit.service';
import { AuthTokensService } from '../control/auth-tokens.service';
import { appShell, signInPage, STYLE_CSS } from './pages';
import { SignInLimiter } from './sign-in-limiter';
import { UI_SESSION_COOKIE, UI_SESSION_TTL_MS, UiSessionsService } from './ui-sessions.service';

/** Audit entry type of a dashboard sign-in (result `ok` or {@link SIGN_IN_REFUSED}). */
export const SIGN_IN_AUDIT_TYPE = 'ui.sign_in';
/** Audit result of a refused dashboard sign-in (a wrong token, or the user token). */
export const SIGN_IN_REFUSED = 'auth_failed';
/** Largest sign-in form body, bytes. */
const MAX_FORM_BYTES = 4096;
/** Where `npm run build` puts the compiled browser modules (ui/ -> dist/ui). */
const DEFAULT_ASSET_DIR = join(__dirname, '..', '..', 'ui');
/** A host header we are willing to repeat in the CSP: host name or address, optional port. */
const HOST_RE = /^[A-Za-z0-9.-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$/;

/** How a request's `Origin` relates to the server it was sent to. */
export type OriginCheck = 'absent' | 'same' | 'cross';

/**
 * Compares the `Origin` header with the request's `Host` (host and port; the scheme is not
 * compared, so a TLS-terminating proxy in front keeps working when it passes `Host` on).
 * `Origin: null` (sandboxed or opaque origins) counts as cross-origin.
 */
export function checkOrigin(req: IncomingMessage): OriginCheck {
  const origin = req.headers.origin;
  if (origin === undefined) return 'absent';
  const host = req.headers.host;
  if (!host || typeof origin !== 'string') return 'cross';
  try {
    const o = new URL(origin);
    if (o.protocol !== 'http:' && o.protocol !== 'https:') return 'cross';
    // Host as the browser would have written it for this scheme (default ports are implied).
    const h = new URL(`${o.protocol}//${host}`);
    const port = (u: URL) => u.port || (u.protocol === 'https:' ? '443' : '80');
    return o.hostname === h.hostname && port(o) === port(h) && h.pathname === '/' && !h.username ? 'same' : 'cross';
  } catch {
    return 'cross';
  }
}

/** An origin for a log line: at most 200 printable characters. */
function printable(value: string | undefined): string {
  return (value ?? '').replace(/[^\x20-\x7e]/g, '?').slice(0, 200);
}

@Injectable()
export class DashboardHttp implements HttpExtension {
  private readonly log = new Logger('Dashboard');
  private readonly limiter = new SignInLimiter();
  /** Compiled browser modules by file name (`app.js`, ...). */
  private readonly scripts = new Map<string, Buffer>();

  constructor(
    private readonly sessions: UiSessionsService,
    private readonly tokens: AuthTokensService,
    private readonly audit: AuditService,
  ) {
    this.loadScripts(DEFAULT_ASSET_DIR);
  }

  /** {@link HttpExtension.handleRequest}: takes `/ui`, `/ui/...` and browsers' `GET /`. */
  handleRequest(req: IncomingMessage, res: ServerResponse): boolean {
    let pathname: string;
    try {
      pathname = new URL(req.url ?? '/', 'http://localhost').pathname;
    } catch {
      return false;
    }
    if (pathname === '/') {
      if ((req.method === 'GET' || req.method === 'HEAD') && /\btext\/html\b/.test(req.headers.accept ?? '')) {
        this.redirect(req, res, '/ui/');
        return true;
      }
      return false;
    }
    if (pathname === '/favicon.ico' && req.headers.upgrade === undefined) {
      // Browsers ask for it on every page: no icon, and no 426 in their console.
      this.send(req, res, 204, 'text/plain; charset=utf-8', '');
      return true;
    }
    if (pathname !== '/ui' && !pathname.startsWith('/ui/')) return false;
    this.route(req, res, pathname).catch((e: Error) => {
      this.log.error({ msg: 'dashboard request failed', error: e.message });
      if (!res.headersSent) this.send(req, res, 500, 'text/plain; charset=utf-8', 'internal error\n');
      else res.destroy();
    });
    return true;
  }

  /** {@link HttpExtension.checkUpgrade}: the Origin rule and the session cookie (module documentation). */
  checkUpgrade(req: IncomingMessage): UpgradeVerdict | null {
    const origin = checkOrigin(req);
    if (origin === 'cross') {
      return {
        refuse: {
          status: 403,
          reason: 'Forbidden',
          log: `cross-origin WebSocket upgrade (Origin ${printable(req.headers.origin)}, Host ${printable(req.headers.host)})`,
        },
      };
    }
    if (req.headers.authorization !== undefined) return null;
    if (!this.sessions.verify(req)) return null;
    if (origin !== 'same') {
      return { refuse: { status: 403, reason: 'Forbidden', log: 'dashboard session cookie on an upgrade without Origin' } };
    }
    return { role: 'admin' };
  }

  private async route(req: IncomingMessage, res: ServerResponse, pathname: string): Promise<void> {
    const method = req.method ?? 'GET';
    const read = method === 'GET' || method === 'HEAD';
    if (pathname === '/ui') return this.redirect(req, res, '/ui/');
    if (pathname === '/ui/') {
      if (!read) return this.notAllowed(req, res, 'GET');
      return this.page(req, res, 200, this.sessions.verify(req) ? appShell() : signInPage());
    }
    if (pathname === '/ui/style.css') {
      if (!read) return this.notAllowed(req, res, 'GET');
      return this.send(req, res, 200, 'text/css; charset=utf-8', STYLE_CSS, { 'Cache-Control': 'no-cache' });
    }
    if (pathname === '/ui/sign-in') {
      if (method !== 'POST') return this.notAllowed(req, res, 'POST');
      return this.signIn(req, res);
    }
    if (pathname === '/ui/sign-out') {
      if (method !== 'POST') return this.notAllowed(req, res, 'POST');
      return this.signOut(req, res);
    }
    const script = /^\/ui\/([a-z0-9-]+\.js)$/.exec(pathname)?.[1];
    if (script && this.scripts.has(script)) {
      if (!read) return this.notAllowed(req, res, 'GET');
      if (!this.sessions.verify(req)) return this.send(req, res, 401, 'text/plain; charset=utf-8', 'sign in first: /ui/\n');
      return this.send(req, res, 200, 'text/javascript; charset=utf-8', this.scripts.get(script)!, { 'Cache-Control': 'no-cache' });
    }
    return this.send(req, res, 404, 'text/plain; charset=utf-8', 'not found\n');
  }

  /** `POST /ui/sign-in`: Origin, rate limit, then the token (module documentation). */
  private async signIn(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const remote = req.socket.remoteAddress ?? 'unknown';
    if (checkOrigin(req) === 'cross') {
      this.log.warn({ msg: 'dashboard sign-in refused: cross-origin form', remote, origin: printable(req.headers.origin) });
      req.resume();
      return this.page(req, res, 403, signInPage('bad_request'));
    }
    const limit = this.limiter.attempt(remote);
    if (!limit.allowed) {
      this.log.warn({ msg: 'dashboard sign-in refused: rate limited', remote, retry_after_s: limit.retryAfterS });
      req.resume();
      return this.page(req, res, 429, signInPage('rate_limited'), { 'Retry-After': String(limit.retryAfterS) });
    }
    let token: string | null;
    try {
      token = await this.formToken(req);
    } catch (e) {
      this.log.warn({ msg: 'dashboard sign-in refused: unreadable form', remote, error: (e as Error).message });
      return this.page(req, res, (e as Error & { status?: number }).status ?? 400, signInPage('bad_request'));
    }
    const role = token ? this.tokens.roleOf(token) : undefined;
    if (role !== 'admin') {
      // Never the token itself: only why it was refused.
      const reason = !token
        ? 'no token given'
        : role === 'user'
          ? 'the user token (the dashboard is admin only)'
          : this.tokens.adminToken()
            ? 'wrong token'
            : 'role tokens not loaded yet';
      this.log.warn({ msg: 'dashboard sign-in refused', remote, reason });
      if (this.tokens.adminToken())
        void this.audit.record({ role: 'admin', agent_id: 'dashboard', type: SIGN_IN_AUDIT_TYPE, target: {}, result: SIGN_IN_REFUSED }, `ui:${remote}`);
      return this.page(req, res, this.tokens.adminToken() ? 401 : 503, signInPage(this.tokens.adminToken() ? 'wrong_token' : 'not_ready'));
    }
    const { value, session } = this.sessions.issue();
    this.log.log({ msg: 'dashboard sign-in', remote, session: session.id.slice(0, 8) });
    void this.audit.record({ role: 'admin', agent_id: 'dashboard', type: SIGN_IN_AUDIT_TYPE, target: {}, result: 'ok' }, `ui:${remote}`);
    this.redirect(req, res, '/ui/', { 'Set-Cookie': this.cookie(req, value, Math.floor(UI_SESSION_TTL_MS / 1000)) });
  }

  /** `POST /ui/sign-out`: revokes the session here and clears the cookie. */
  private signOut(req: IncomingMessage, res: ServerResponse): void {
    req.resume();
    if (checkOrigin(req) === 'cross') return this.send(req, res, 403, 'text/plain; charset=utf-8', 'cross-origin request refused\n');
    const session = this.sessions.verify(req);
    if (session) {
      this.sessions.revoke(session);
      this.log.log({ msg: 'dashboard sign-out', remote: req.socket.remoteAddress, session: session.id.slice(0, 8) });
    }
    this.redirect(req, res, '/ui/', { 'Set-Cookie': this.cookie(req, '', 0) });
  }

  /**
   * The `token` field of an `application/x-www-form-urlencoded` body (at most 4 KiB).
   * @throws Error with `status` 415 (another content type) or 413 (too large)
   */
  private formToken(req: IncomingMessage): Promise<string | null> {
    const type = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
    if (type !== 'application/x-www-form-urlencoded') {
      req.resume();
      return Promise.reject(Object.assign(new Error(`content type ${printable(type) || 'none'}`), { status: 415 }));
    }
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      req.on('data', (c: Buffer) => {
        size += c.length;
        if (size > MAX_FORM_BYTES) {
          req.removeAllListeners('data');
          req.resume();
          reject(Object.assign(new Error('form too large'), { status: 413 }));
          return;
        }
        chunks.push(c);
      });
      req.on('error', reject);
      req.on('end', () => {
        if (size > MAX_FORM_BYTES) return;
        const token = new URLSearchParams(Buffer.concat(chunks).toString('utf8')).get('token');
        resolve(token && token.length > 0 ? token : null);
      });
    });
  }

  /** The session cookie header: `HttpOnly; SameSite=Strict; Path=/`, `Secure` over TLS. */
  private cookie(req: IncomingMessage, value: string, maxAgeS: number): string {
    const secure = (req.socket as TLSSocket).encrypted ? '; Secure' : '';
    return `${UI_SESSION_COOKIE}=${value}; Path=/; Max-Age=${maxAgeS}; HttpOnly; SameSite=Strict${secure}`;
  }

  private page(req: IncomingMessage, res: ServerResponse, status: number, html: string, extra: Record<string, string> = {}): void {
    this.send(req, res, status, 'text/html; charset=utf-8', html, { 'Cache-Control': 'no-store', ...extra });
  }

  private redirect(req: IncomingMessage, res: ServerResponse, location: string, extra: Record<string, string> = {}): void {
    this.send(req, res, 303, 'text/plain; charset=utf-8', `see ${location}\n`, { Location: location, 'Cache-Control': 'no-store', ...extra });
  }

  private notAllowed(req: IncomingMessage, res: ServerResponse, allow: string): void {
    req.resume();
    this.send(req, res, 405, 'text/plain; charset=utf-8', 'method not allowed\n', { Allow: allow === 'GET' ? 'GET, HEAD' : allow });
  }

  /** Sends a complete answer with the security headers of every dashboard response. */
  private send(req: IncomingMessage, res: ServerResponse, status: number, type: string, body: string | Buffer, extra: Record<string, string> = {}): void {
    const host = req.headers.host && HOST_RE.test(req.headers.host) ? req.headers.host : null;
    const ws = host ? ` ws://${host} wss://${host}` : '';
    const data = typeof body === 'string' ? Buffer.from(body) : body;
    res.writeHead(status, {
      'Content-Type': type,
      'Content-Length': String(data.length),
      'Content-Security-Policy': `default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'${ws}; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
      'X-Content-Type-Options': 'nosniff',
      'X-Frame-Options': 'DENY',
      'Referrer-Policy': 'same-origin',
      'Cross-Origin-Opener-Policy': 'same-origin',
      'Cross-Origin-Resource-Policy': 'same-origin',
      ...extra,
    });
    res.end(req.method === 'HEAD' ? undefined : data);
  }

  /** Loads the compiled browser modules; without them the shell says so in the log. */
  private loadScripts(dir: string): void {
    try {
      for (const name of readdirSync(dir)) if (/^[a-z0-9-]+\.js$/.test(name)) this.scripts.set(name, readFileSync(join(dir, name)));
    } catch (e) {
      this.log.warn({
        msg: `dashboard scripts not found in ${dir} (npm run build compiles ui/ there); /ui/ serves the sign-in page only`,
        error: (e as Error).message,
      });
    }
  }
}
