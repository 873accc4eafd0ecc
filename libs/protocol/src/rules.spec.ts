import { isIdentifierSafe, normalizeMountPath } from './identifiers';
import { availabilityOf, rankMounts } from './topology';
import { forbiddenKeyPath, validatePayload } from './validation';
import { MountSetDto, NodeJoinDto, ProjectCreateDto } from './dto/control.dto';
import { matchesDigest, newSecret, secretsEqual, sha256Hex } from './secrets';
import { ProtocolError } from './errors';

describe('identifier-safe', () => {
  it.each(['a', 'A-b_c.d', '0', 'x'.repeat(128)])('accepts %s', (v) => expect(isIdentifierSafe(v)).toBe(true));
  it.each(['', '.hidden', 'a/b', 'a b', 'x'.repeat(129), 'é', 5, null])('rejects %s', (v) => expect(isIdentifierSafe(v)).toBe(false));
});

describe('normalizeMountPath', () => {
  it.each([
    ['/', '/'],
    ['//a///b//', '/a/b'],
    ['/src', '/src'],
    ['/a.b/c..d', '/a.b/c..d'],
  ])('%s -> %s', (input, out) => expect(normalizeMountPath(input)).toBe(out));
  it.each(['a', '', '/a/../b', '/./a', '/a/..', '/a\u0000', '/a\tb', '/\u007f'])('rejects %j', (input) => {
    expect(() => normalizeMountPath(input)).toThrow(ProtocolError);
  });
});

describe('rankMounts (selection rule)', () => {
  const m = (node: string, state: 'online' | 'degraded' | 'missing', lease: number | null) => ({ node, state, lease_expires_at_ms: lease });
  it('prefers online over degraded over missing', () => {
    expect(rankMounts([m('miss', 'missing', null), m('deg', 'degraded', 900), m('on', 'online', 100)]).map((x) => x.node)).toEqual(['on', 'deg', 'miss']);
  });
  it('prefers the later lease among equals, then configured order', () => {
    expect(rankMounts([m('a', 'online', 100), m('b', 'online', 200), m('c', 'online', 200)]).map((x) => x.node)).toEqual(['b', 'c', 'a']);
  });
  it('counts availability', () => {
    expect(availabilityOf([m('a', 'online', 1), m('b', 'missing', null)])).toEqual({ mounts_total: 2, online: 1, degraded: 0, missing: 1 });
  });
});

describe('validatePayload', () => {
  const code = (fn: () => unknown) => {
    try {
      fn();
    } catch (e) {
      return [(e as ProtocolError).code, (e as ProtocolError).message];
    }
    return ['ok', ''];
  };
  it('reports a missing field as missing_field', () => {
    expect(code(() => validatePayload(MountSetDto, { project_id: 'p', node_id: 'n', export_name: 'e' }))).toEqual([
      'missing_field',
      'missing field: mount_path',
    ]);
  });
  it('names nested fields', () => {
    const [c, msg] = code(() => validatePayload(ProjectCreateDto, { name: 'x', access_policy: { invoke: 'maybe' } }));
    expect(c).toBe('invalid_payload');
    expect(msg).toContain('access_policy.invoke');
  });
  it('drops unknown members', () => {
    expect(validatePayload(ProjectCreateDto, { name: 'x', extra: 1 })).toEqual({ name: 'x' });
  });
  it('checks lease bounds', () => {
    expect(code(() => validatePayload(NodeJoinDto, { invite_token: 't', node_name: 'n', fs_url: 'ws://h:1/', lease_ttl_ms: 999 }))[0]).toBe('invalid_payload');
    expect(code(() => validatePayload(NodeJoinDto, { invite_token: 't', node_name: 'n', fs_url: 'ws://h:1/', lease_ttl_ms: 1.5 }))[0]).toBe('invalid_payload');
  });
  it('finds prototype keys anywhere, naming their path (the envelope parser refuses them)', () => {
    expect(forbiddenKeyPath(JSON.parse('{"a":{"b":{"__proto__":{}}}}'))).toBe('a.b.__proto__');
    expect(forbiddenKeyPath({ a: [{ constructor: 1 }] })).toBe('a[0].constructor');
    expect(forbiddenKeyPath([{ x: { prototype: 1 } }], 'services')).toBe('services[0].x.prototype');
    expect(forbiddenKeyPath({ a: { b: [1, 'constructor', { c: 'prototype' }] } })).toBeNull();
    expect(forbiddenKeyPath('constructor')).toBeNull();
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});

describe('secrets', () => {
  it('generates 32-byte base64url secrets and matches digests in constant time', () => {
    const s = newSecret();
    expect(s).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(matchesDigest(s, sha256Hex(s))).toBe(true);
    expect(matchesDigest(s + 'x', sha256Hex(s))).toBe(false);
    expect(matchesDigest(s, null)).toBe(false);
    expect(matchesDigest(s, 'short')).toBe(false);
    expect(secretsEqual('a', 'a')).toBe(true);
    expect(secretsEqual('a', 'ab')).toBe(false);
  });

  it('never starts a secret with "-" (it would be read as a command-line option)', () => {
    const firsts = new Set(Array.from({ length: 5000 }, () => newSecret()[0]));
    expect(firsts.has('-')).toBe(false);
    expect(firsts.size).toBeGreaterThan(40); // still spread over the alphabet
  });
});
