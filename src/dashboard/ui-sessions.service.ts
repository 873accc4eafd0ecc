/**
 * Dashboard sign-in sessions: a browser cannot put an `Authorization`
 * header on a WebSocket, so the admin signs in once with the admin token and gets a session
 * cookie, which the WebSocket upgrade on `/` then carries.
 *
 * The cookie (`svc_ui_session`, `HttpOnly`, `SameSite=Strict`, `Path=/`, `Secure` over TLS)
 * holds `<payload>.<mac>`: payload = base64url JSON `{v:1, iat, exp, n}` (ms since the epoch,
 * 16 random bytes of nonce), mac = HMAC-SHA256 of the payload under a key derived from the
 * current admin token. So:
 * - it holds no token and no token can be recovered from it;
 * - every replica sharing the admin token accepts it (no session table to share);
 * - rotating the admin token (`control.auth_rotate`) ends every dashboard session;
 * - it lasts {@link UI_SESSION_TTL_MS} (8 h); signing out revokes its nonce on the replica
 *   that served the sign-out (other replicas accept it until it expires) and clears it in the
 *   browser.
 */
import { Injectable } from '@nestjs/common';
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { Clock } from '../common/clock';
import { AuthTokensService } from '../control/auth-tokens.service';

/** Name of the session cookie. */
export const UI_SESSION_COOKIE = 'svc_ui_session';
/** How long a dashboard session lasts after sign-in, ms (8 hours). */
export const UI_SESSION_TTL_MS = 8 * 60 * 60 * 1000;
/** Clock skew tolerated on `iat` between replicas, ms. */
const SKEW_MS = 60_000;
/** Largest cookie value looked at, characters (anything longer is not ours). */
const MAX_COOKIE_CHARS = 512;

interface SessionPayload {
  v: 1;
  /** Issued at, ms since the epoch. */
  iat: number;
  /** Expires at, ms since the epoch. */
  exp: number;
  /** Random nonce (base64url), the session's identity for revocation. */
  n: string;
}

/** A verified dashboard session. */
export interface UiSession {
  /** Nonce of the session (not secret; never a token). */
  id: string;
  expiresAtMs: number;
}

/**
 * The value of cookie `name` in a `Cookie` header, or null. Malformed pairs are skipped.
 * @param header the request's `Cookie` header (string or absent)
 */
export function cookieValue(header: string | string[] | undefined, name: string): string | null {
  const text = Array.isArray(header) ? header.join('; ') : header;
  if (!text) return null;
  for (const part of text.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return null;
}

@Injectable()
export class UiSessionsService {
  /** Revoked nonces and when they would have expired (ms). */
  private readonly revoked = new Map<string, number>();

  constructor(
    private readonly tokens: AuthTokensService,
    private readonly clock: Clock,
  ) {}

  /**
   * A new session cookie value, valid for {@link UI_SESSION_TTL_MS}.
   * @throws Error when the role tokens are not loaded yet (the store is still opening)
   */
  issue(): { value: string; session: UiSession } {
    const key = this.key();
    if (!key) throw new Error('role tokens are not loaded yet');
    const now = this.clock.now();
    const payload: SessionPayload = { v: 1, iat: now, exp: now + UI_SESSION_TTL_MS, n: randomBytes(16).toString('base64url') };
    const body = Buffer.from(JSON.stringify(payload)).toString('base64url');
    return { value: `${body}.${this.mac(key, body)}`, session: { id: payload.n, expiresAtMs: payload.exp } };
  }

  /**
   * The session of a request's cookie, or null when there is none, or it is malformed,
   * forged, expired, revoked, or from before an admin token rotation.
   */
  verify(req: IncomingMessage): UiSession | null {
    const value = cookieValue(req.headers.cookie, UI_SESSION_COOKIE);
    if (!value || value.length > MAX_COOKIE_CHARS) return null;
    const key = this.key();
    if (!key) return null;
    const dot = value.indexOf('.');
    if (dot <= 0) return null;
    const body = value.slice(0, dot);
    const expected = Buffer.from(this.mac(key, body));
    const given = Buffer.from(value.slice(dot + 1));
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
    let payload: SessionPayload;
    try {
      payload = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as SessionPayload;
    } catch {
      return null;
    }
    const now = this.clock.now();
    if (payload?.v !== 1 || typeof payload.exp !== 'number' || typeof payload.iat !== 'number' || typeof payload.n !== 'string') return null;
    if (payload.exp <= now || payload.iat > now + SKEW_MS || payload.exp - payload.iat > UI_SESSION_TTL_MS) return null;
    if (this.revoked.has(payload.n)) return null;
    return { id: payload.n, expiresAtMs: payload.exp };
  }

  /** Ends a session on this replica (sign-out); forgotten once it would have expired anyway. */
  revoke(session: UiSession): void {
    const now = this.clock.now();
    for (const [n, exp] of this.revoked) if (exp <= now) this.revoked.delete(n);
    this.revoked.set(session.id, session.expiresAtMs);
  }

  /** The MAC key: HMAC-SHA256 of a fixed label under the current admin token, or null before load. */
  private key(): Buffer | null {
    const admin = this.tokens.adminToken();
    return admin ? createHmac('sha256', admin).update('svc dashboard session v1').digest() : null;
  }

  private mac(key: Buffer, body: string): string {
    return createHmac('sha256', key).update(body).digest('base64url');
  }
}
