/**
 * Secret generation and constant-time comparison (docs/protocol.md "Role tokens", "Projects and tokens"): tokens are 32 random
 * bytes in base64url; stored secrets are SHA-256 hex digests; comparisons hash both sides and
 * use `timingSafeEqual`, so neither content nor length leaks through timing.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * A new secret: 32 random bytes, base64url (43 characters), never starting with `-` (a
 * token is often passed as the next command-line argument, e.g. `--invite-token T`, and one
 * that starts with `-` would be read as an option).
 */
export function newSecret(): string {
  for (;;) {
    const s = randomBytes(32).toString('base64url');
    if (s[0] !== '-') return s;
  }
}

/** A short random id with a prefix, e.g. `newId('proj')` -> `proj-3f9a0c1b2d4e5f60`. */
export function newId(prefix: string): string {
  return `${prefix}-${randomBytes(8).toString('hex')}`;
}

/** SHA-256 hex digest of a UTF-8 string. */
export function sha256Hex(value: string): string {
  return createHash('sha256').update(value, 'utf8').digest('hex');
}

/** Constant-time check of a presented secret against a stored SHA-256 hex digest. */
export function matchesDigest(presented: string, storedSha256Hex: string | null | undefined): boolean {
  if (typeof storedSha256Hex !== 'string' || storedSha256Hex.length !== 64) return false;
  const a = createHash('sha256').update(presented, 'utf8').digest();
  const b = Buffer.from(storedSha256Hex, 'hex');
  return b.length === a.length && timingSafeEqual(a, b);
}

/** Constant-time equality of two secrets (compares their SHA-256 digests). */
export function secretsEqual(a: string, b: string): boolean {
  const da = createHash('sha256').update(a, 'utf8').digest();
  const db = createHash('sha256').update(b, 'utf8').digest();
  return timingSafeEqual(da, db);
}
