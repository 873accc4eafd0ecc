/**
 * Identifier and path rules shared by servers and clients (5).
 */
import { ProtocolError } from './errors';

const IDENTIFIER_SAFE = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;

/**
 * Identifier-safe: 1 to 128 characters of `A-Z a-z 0-9 . _ -`, not starting with `.`.
 * Given a string, it narrows nothing: false means a string that is not
 * identifier-safe, not "not a string".
 */
export function isIdentifierSafe(value: string): boolean;
export function isIdentifierSafe(value: unknown): value is string;
export function isIdentifierSafe(value: unknown): boolean {
  return typeof value === 'string' && IDENTIFIER_SAFE.test(value);
}

/** True when `value` is an absolute-style path (starts with `/`), as catalog endpoints must be. */
export function isAbsolutePath(value: unknown): value is string {
  return typeof value === 'string' && value.startsWith('/');
}

// eslint-disable-next-line no-control-regex -- matching control characters is its purpose
const CONTROL_CHARS = /[\u0000-\u001f\u007f]/;

/**
 * Normalises a workspace mount path (docs/protocol.md "Projects and tokens"): it must be absolute, without `.` or `..`
 * segments, NUL or control characters; repeated and trailing `/` are removed.
 * @returns the normalised path, e.g. `//src///app/` -> `/src/app`; `/` stays `/`
 * @throws ProtocolError `invalid_payload` naming `field`
 */
export function normalizeMountPath(value: unknown, field = 'mount_path'): string {
  if (typeof value !== 'string') throw new ProtocolError('invalid_payload', `${field} must be a string`);
  if (!value.startsWith('/')) throw new ProtocolError('invalid_payload', `${field} must be absolute (start with "/")`);
  if (value.length > 4096) throw new ProtocolError('invalid_payload', `${field} must be at most 4096 characters`);
  if (CONTROL_CHARS.test(value)) throw new ProtocolError('invalid_payload', `${field} must not contain NUL or control characters`);
  const segments = value.split('/').filter((s) => s.length > 0);
  for (const s of segments) {
    if (s === '.' || s === '..') throw new ProtocolError('invalid_payload', `${field} must not contain "." or ".." segments`);
  }
  return '/' + segments.join('/');
}

/**
 * Splits a normalised absolute path into its segments: `/a/b` -> `['a','b']`, `/` -> `[]`.
 */
export function pathSegments(path: string): string[] {
  return path.split('/').filter((s) => s.length > 0);
}
