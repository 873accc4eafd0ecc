/**
 * Unit test: a payload member of the wrong JSON type is reported as a type
 * error, for every member of every payload DTO (control DTOs in libs/protocol/src/dto, FS DTOs
 * in libs/fs/src/server/fs.dto.ts), nested members included. The members are read from the
 * class-validator metadata, so a member added later without a type constraint fails here.
 */
import 'reflect-metadata';
import { getMetadataStorage } from 'class-validator';
// eslint-disable-next-line @typescript-eslint/no-require-imports -- an internal module of class-transformer, not in its typed exports
const { defaultMetadataStorage } = require('class-transformer/cjs/storage') as {
  defaultMetadataStorage: { findTypeMetadata(target: Cls, property: string): { typeFunction: () => Cls } | undefined };
};
import * as controlDtos from '../libs/protocol/src/dto/control.dto';
import * as fsDtos from '../libs/fs/src/server/fs.dto';
import { ProtocolError, TYPE_CONSTRAINTS, validatePayload } from '../libs/protocol/src';

type Cls = new () => object;

/** A valid value for each member name used by the DTOs (each DTO's base payload is built from these). */
const VALID: Record<string, unknown> = {
  // control
  protocol: 'unified-v2',
  agent_id: 'agent-1',
  invoke: 'allow',
  name: 'a name',
  vision: 'a vision',
  access_policy: { invoke: 'deny' },
  project_id: 'proj-1',
  project_token: 'token',
  node_id: 'node-1',
  export_name: 'work',
  mount_path: '/work',
  role: 'user',
  ttl_ms: 60_000,
  os: 'linux',
  arch: 'x64',
  runtime_kind: 'node',
  node_name: 'node one',
  fs_url: 'ws://127.0.0.1:1/v2/fs',
  platform: { os: 'linux' },
  invite_token: 'invite',
  lease_ttl_ms: 30_000,
  request_id: 'join-1',
  request_secret: 'secret',
  node_secret: 'secret',
  fs_auth_token: 'fs-token',
  mounts: [{ mount_path: '/work', node_name: 'node one', export_name: 'work' }],
  prune: true,
  activate: true,
  seq: 1,
  dry_run: false,
  since_ms: 0,
  until_ms: 1_700_000_000_000,
  actor_agent_id: 'agent-1',
  type: 'control.project_up',
  limit: 10,
  cursor: '42',
  // FS
  mode: 0o644,
  uid: 1000,
  gid: 1000,
  sz: 10,
  at: 1_700_000_000_000_000_000,
  mt: 1_700_000_000_000_000_000,
  cookie: 0,
  max: 10,
  flags: 0,
  off: 0,
  len: 10,
  data_b64: 'aGk=',
  n: 2,
  old_parent: 1,
  old_name: 'a',
  new_parent: 1,
  new_name: 'b',
  target: 'a',
  read: 4096,
  close_at_eof: true,
  names: ['a', 'b'],
  max_file: 65536,
  max_total: 1048576,
  // FS, the posix extension
  kind: 'posix',
  owner: 'owner-1',
  wait: true,
  pid: 4242,
  tag: 7,
  start: 0,
  rdev: 0,
  size: 64,
  value_b64: 'aGk=',
  cred: { uid: 1000, gid: 1000 },
  set: { mode: 0o644, uid: 1000, gid: 1000, at: 1_700_000_000_000_000_000, mt: 1_700_000_000_000_000_000 },
  sync: true,
};

/** Valid values of members whose name another DTO uses for something else, by DTO class. */
const VALID_IN: Record<string, Record<string, unknown>> = {
  FallocateDto: { mode: 1 },
  GetlkDto: { type: 'wr' },
  LockDto: { type: 'wr' },
};

/** Values of the wrong JSON type for each type constraint. */
const WRONG: Record<string, unknown[]> = {
  isString: [5, 0, true, false, [], ['x'], {}, { a: 'x' }],
  isInt: ['5', '', true, [], [1], {}, { a: 1 }],
  isNumber: ['5', true, [], {}],
  isBoolean: [1, 'true', [], {}],
  isObject: [5, 'x', '', true, [], [{}]],
  isArray: [5, 'x', true, {}],
};

/** What a type message must say for each type constraint. */
const SAYS: Record<string, RegExp> = {
  isString: /must be a string/,
  isInt: /must be an integer/,
  isNumber: /must be a number/,
  isBoolean: /must be a boolean/,
  isObject: /must be an object/,
  isArray: /must be an array/,
};

interface Member {
  /** Wire path, e.g. `access_policy.invoke`. */
  path: string;
  property: string;
  constraints: Array<{ name: string; message: string }>;
  nested: Cls | null;
}

/** The members of a DTO class with their constraints, from the class-validator metadata (inherited members included). */
function membersOf(cls: Cls): Map<string, Member> {
  const storage = getMetadataStorage();
  const members = new Map<string, Member>();
  for (const m of storage.getTargetValidationMetadatas(cls, '', true, false)) {
    const member = members.get(m.propertyName) ?? { path: m.propertyName, property: m.propertyName, constraints: [], nested: null };
    members.set(m.propertyName, member);
    if (m.type === 'customValidation') {
      const name = storage.getTargetValidatorConstraints(m.constraintCls)[0]?.name ?? '?';
      member.constraints.push({ name, message: typeof m.message === 'function' ? '' : String(m.message ?? '') });
    } else if (m.type === 'nestedValidation') {
      member.nested = defaultMetadataStorage.findTypeMetadata(cls, m.propertyName)?.typeFunction() ?? null;
    }
  }
  return members;
}

function baseOf(cls: Cls): Record<string, unknown> {
  const base: Record<string, unknown> = {};
  for (const key of membersOf(cls).keys()) {
    const own = VALID_IN[cls.name];
    if (own && key in own) {
      base[key] = structuredClone(own[key]);
      continue;
    }
    if (!(key in VALID)) throw new Error(`${cls.name}.${key}: add a valid value to VALID`);
    base[key] = structuredClone(VALID[key]);
  }
  return base;
}

function failureOf(fn: () => unknown): { code: string; message: string } | null {
  try {
    fn();
    return null;
  } catch (e) {
    if (!(e instanceof ProtocolError)) throw e;
    return { code: e.code, message: e.message };
  }
}

/** The message validatePayload reports for a member: class-validator names the leaf, nested paths are made explicit. */
function reported(member: Member, message: string): string {
  return message.startsWith(member.property) && member.path !== member.property ? member.path + message.slice(member.property.length) : message;
}

const DTOS: Array<[string, Cls]> = [...Object.entries(controlDtos), ...Object.entries(fsDtos)]
  .filter(([, v]) => typeof v === 'function' && /Dto$/.test((v as Cls).name))
  .map(([k, v]) => [k, v as Cls]);

/** Every (DTO, member) pair, nested members under their parent's path. */
const CASES: Array<{ dto: string; cls: Cls; member: Member; parent: string | null }> = [];
for (const [dto, cls] of DTOS) {
  for (const member of membersOf(cls).values()) {
    CASES.push({ dto, cls, member, parent: null });
    if (member.nested) {
      // a list of nested DTOs (project_up `mounts`) is checked through its first element
      const at = Array.isArray(VALID[member.property]) ? `${member.path}[0]` : member.path;
      for (const inner of membersOf(member.nested).values())
        CASES.push({ dto, cls, member: { ...inner, path: `${at}.${inner.path}` }, parent: member.property });
    }
  }
}

describe('payload DTOs: a value of the wrong type is reported as a type error', () => {
  it('covers the DTOs of both endpoints', () => {
    const names = DTOS.map(([n]) => n);
    expect(names).toEqual(
      expect.arrayContaining([
        'ProjectCreateDto',
        'NodeJoinDto',
        'NodeServiceWatchDto',
        'PlatformDto',
        'AccessPolicyDto',
        'RenameDto',
        'SetattrDto',
        'WriteDto',
      ]),
    );
    expect(CASES.length).toBeGreaterThan(60);
  });

  it.each(DTOS)('%s: its base payload is valid', (_name, cls) => {
    expect(failureOf(() => validatePayload(cls, baseOf(cls)))).toBeNull();
  });

  it.each(CASES.map((c) => [`${c.dto} ${c.member.path}`, c] as const))('%s has one type constraint, and a wrong type gets its message', (_label, c) => {
    const types = c.member.constraints.filter((k) => TYPE_CONSTRAINTS.includes(k.name));
    expect(types.map((t) => t.name)).toHaveLength(1);
    const type = types[0];
    expect(type.message).toMatch(SAYS[type.name]);
    for (const wrong of WRONG[type.name]) {
      const payload = baseOf(c.cls);
      if (c.parent === null) payload[c.member.property] = wrong;
      else if (Array.isArray(payload[c.parent])) payload[c.parent] = [{ ...(payload[c.parent] as object[])[0], [c.member.property]: wrong }];
      else payload[c.parent] = { ...(payload[c.parent] as object), [c.member.property]: wrong };
      const failure = failureOf(() => validatePayload(c.cls, payload));
      expect({ wrong, failure }).toEqual({ wrong, failure: { code: 'invalid_payload', message: reported(c.member, type.message) } });
    }
  });

  it('answers control.project_create {"name":5} and {"name":true} with "name must be a string"', () => {
    for (const name of [5, true]) {
      expect(failureOf(() => validatePayload(controlDtos.ProjectCreateDto, { name }))).toEqual({ code: 'invalid_payload', message: 'name must be a string' });
    }
    // other constraints keep their messages
    expect(failureOf(() => validatePayload(controlDtos.ProjectCreateDto, { name: '' }))?.message).toBe('name must be 1 to 256 characters');
    expect(failureOf(() => validatePayload(controlDtos.ProjectCreateDto, { name: 'a\u0001' }))?.message).toBe('name must not contain control characters');
    expect(failureOf(() => validatePayload(controlDtos.NodeRefDto, { node_id: '.x' }))?.message).toMatch(/^node_id must be identifier-safe/);
    expect(failureOf(() => validatePayload(controlDtos.AuthRotateDto, { role: 'root' }))?.message).toBe('role must be "admin" or "user"');
    expect(failureOf(() => validatePayload(fsDtos.ReadDto, { off: -1, len: 1 }))?.message).toBe('off must not be negative');
  });
});
