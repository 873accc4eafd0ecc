/**
 * Unit: dashboard session cookies (expiry, forgery, revocation, admin token rotation), the
 * sign-in rate limit, and the Origin rule of src/dashboard.
 */
import type { IncomingMessage } from 'node:http';
import { Clock } from '../common/clock';
import type { AuthTokensService } from '../control/auth-tokens.service';
import { checkOrigin } from './dashboard.http';
import { SignInLimiter } from './sign-in-limiter';
import { cookieValue, UI_SESSION_COOKIE, UI_SESSION_TTL_MS, UiSessionsService } from './ui-sessions.service';

class FixedClock extends Clock {
  t = 1_700_000_000_000;
  override now(): number {
    return this.t;
  }
}

/** The one method the session service reads; the real service needs a store. */
function tokens(admin: { current: string | null }): AuthTokensService {
  return { adminToken: () => admin.current } as unknown as AuthTokensService;
}

const req = (headers: Record<string, string>): IncomingMessage => ({ headers }) as unknown as IncomingMessage;

describe('UiSessionsService', () => {
  const admin = { current: 'admin-token-0123456789abcdef' as string | null };
  const clock = new FixedClock();
  const sessions = new UiSessionsService(tokens(admin), clock);
  const withCookie = (v: string) => req({ cookie: `other=1; ${UI_SESSION_COOKIE}=${v}; x=y` });

  beforeEach(() => {
    admin.current = 'admin-token-0123456789abcdef';
    clock.t = 1_700_000_000_000;
  });

  it('verifies its own cookie until it expires, and it holds no token', () => {
    const { value, session } = sessions.issue();
    expect(value).not.toContain(admin.current);
    expect(Buffer.from(value.split('.')[0], 'base64url').toString()).not.toContain(admin.current!);
    expect(sessions.verify(withCookie(value))).toEqual(session);
    clock.t += UI_SESSION_TTL_MS - 1;
    expect(sessions.verify(withCookie(value))).not.toBeNull();
    clock.t += 1;
    expect(sessions.verify(withCookie(value))).toBeNull();
  });

  it('refuses forged, altered, malformed and absent cookies', () => {
    const { value } = sessions.issue();
    const [body, mac] = value.split('.');
    const longer = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(body, 'base64url').toString()), exp: clock.t + 10 * UI_SESSION_TTL_MS })).toString(
      'base64url',
    );
    // the MAC with its last character changed (to one it is not: a fixed 'A' left it as it was 1 time in 16)
    const altered = `${mac.slice(0, -1)}${mac.endsWith('A') ? 'E' : 'A'}`;
    expect(altered).not.toBe(mac);
    for (const bad of [`${longer}.${mac}`, `${body}.${altered}`, body, `.${mac}`, 'x'.repeat(600), '']) expect(sessions.verify(withCookie(bad))).toBeNull();
    expect(sessions.verify(req({}))).toBeNull();
  });

  it('ends every session when the admin token changes, and one session when revoked', () => {
    const a = sessions.issue();
    const b = sessions.issue();
    sessions.revoke(a.session);
    expect(sessions.verify(withCookie(a.value))).toBeNull();
    expect(sessions.verify(withCookie(b.value))).not.toBeNull();
    admin.current = 'rotated-admin-token-0123456789';
    expect(sessions.verify(withCookie(b.value))).toBeNull();
    admin.current = null;
    expect(() => sessions.issue()).toThrow(/not loaded/);
  });

  it('reads one cookie out of a Cookie header', () => {
    expect(cookieValue('a=1; b=2;c=3', 'b')).toBe('2');
    expect(cookieValue(['a=1', 'b=2'], 'b')).toBe('2');
    expect(cookieValue('ab=1', 'b')).toBeNull();
    expect(cookieValue(undefined, 'b')).toBeNull();
  });
});

describe('SignInLimiter', () => {
  it('allows the burst per address, then refuses with a retry time until it refills', () => {
    const limits = { perAddressPerMin: 6, perAddressBurst: 3, globalPerMin: 6, globalBurst: 4, maxAddresses: 2 };
    const l = new SignInLimiter(limits, 0);
    for (let i = 0; i < 3; i++) expect(l.attempt('a', 0).allowed).toBe(true);
    expect(l.attempt('a', 0)).toEqual({ allowed: false, retryAfterS: 10 });
    expect(l.attempt('a', 10_000).allowed).toBe(true);
    // another address has its own bucket, but the process-wide one runs out too
    expect(l.attempt('b', 10_000).allowed).toBe(true);
    expect(l.attempt('c', 10_000).allowed).toBe(false);
  });
});

describe('checkOrigin', () => {
  it('compares Origin with Host', () => {
    expect(checkOrigin(req({ host: '127.0.0.1:80' }))).toBe('absent');
    expect(checkOrigin(req({ host: '127.0.0.1:80', origin: 'http://127.0.0.1:80' }))).toBe('same');
    expect(checkOrigin(req({ host: '127.0.0.1', origin: 'http://127.0.0.1:80' }))).toBe('same');
    expect(checkOrigin(req({ host: 'svc.example:443', origin: 'https://SVC.example' }))).toBe('same');
    expect(checkOrigin(req({ host: '[::1]:8080', origin: 'http://[::1]:8080' }))).toBe('same');
    expect(checkOrigin(req({ host: 'svc.example', origin: 'https://svc.example:8443' }))).toBe('cross');
    expect(checkOrigin(req({ host: '127.0.0.1:80', origin: 'http://127.0.0.1:81' }))).toBe('cross');
    expect(checkOrigin(req({ host: '127.0.0.1:80', origin: 'null' }))).toBe('cross');
    expect(checkOrigin(req({ host: '127.0.0.1:80', origin: 'file://127.0.0.1:80' }))).toBe('cross');
    expect(checkOrigin(req({ origin: 'http://127.0.0.1:80' }))).toBe('cross');
  });
});
