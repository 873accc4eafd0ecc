import { ProtocolError } from './errors';
import { InviteCreateDto, ProjectCreateDto, ProjectUpdateDto, ProjectUpDto } from './dto/control.dto';
import { validatePayload } from './validation';

function codeOf(fn: () => unknown): { code: string; message: string } | null {
  try {
    fn();
    return null;
  } catch (e) {
    return { code: (e as ProtocolError).code, message: (e as Error).message };
  }
}

describe('validatePayload', () => {
  it('refuses null for an optional member, naming it, instead of passing it on as a value', () => {
    expect(codeOf(() => validatePayload(ProjectUpdateDto, { project_id: 'p1', name: null }))).toEqual({
      code: 'invalid_payload',
      message: 'name must not be null (leave it out instead)',
    });
    expect(codeOf(() => validatePayload(ProjectUpdateDto, { project_id: 'p1', access_policy: null }))?.code).toBe('invalid_payload');
    expect(codeOf(() => validatePayload(ProjectCreateDto, { name: 'x', access_policy: { invoke: null } }))).toEqual({
      code: 'invalid_payload',
      message: 'access_policy.invoke must not be null (leave it out instead)',
    });
    expect(codeOf(() => validatePayload(InviteCreateDto, { ttl_ms: null }))?.code).toBe('invalid_payload');
  });

  it('still calls a null required member missing, and accepts absent optional members', () => {
    expect(codeOf(() => validatePayload(ProjectUpdateDto, { project_id: null }))?.code).toBe('missing_field');
    expect(validatePayload(ProjectUpdateDto, { project_id: 'p1', name: 'n' })).toEqual(Object.assign(new ProjectUpdateDto(), { project_id: 'p1', name: 'n' }));
    expect(codeOf(() => validatePayload(InviteCreateDto, {}))).toBeNull();
  });
});

describe('validatePayload: lists of nested DTOs (control.project_up mounts)', () => {
  const mount = { mount_path: '/a', node_name: 'n', export_name: 'x' };
  it('names an element member by its index', () => {
    expect(codeOf(() => validatePayload(ProjectUpDto, { name: 'p', mounts: [mount, { ...mount, export_name: 5 }] }))).toEqual({
      code: 'invalid_payload',
      message: 'mounts[1].export_name must be a string',
    });
    expect(codeOf(() => validatePayload(ProjectUpDto, { name: 'p', mounts: [{ node_name: 'n', export_name: 'x' }] }))).toEqual({
      code: 'missing_field',
      message: 'missing field: mounts[0].mount_path',
    });
  });
  it('refuses an element that is not an object, and null members inside elements', () => {
    expect(codeOf(() => validatePayload(ProjectUpDto, { name: 'p', mounts: [mount, 5] }))).toEqual({
      code: 'invalid_payload',
      message: 'mounts[1] must be an object',
    });
    expect(codeOf(() => validatePayload(ProjectUpDto, { name: 'p', mounts: [{ ...mount, node_id: null }] }))).toEqual({
      code: 'invalid_payload',
      message: 'mounts[0].node_id must not be null (leave it out instead)',
    });
  });
  it('refuses a list that is not one, and one longer than a project may hold', () => {
    expect(codeOf(() => validatePayload(ProjectUpDto, { name: 'p', mounts: { 0: mount } }))?.message).toBe('mounts must be an array');
    expect(codeOf(() => validatePayload(ProjectUpDto, { name: 'p', mounts: new Array(10_001).fill(mount) }))?.message).toBe(
      'mounts must hold at most 10000 entries',
    );
    expect(codeOf(() => validatePayload(ProjectUpDto, { name: 'p', mounts: [] }))).toBeNull();
  });
});
