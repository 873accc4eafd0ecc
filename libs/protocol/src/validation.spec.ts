import { ProtocolError } from './errors';
import { InviteCreateDto, ProjectCreateDto, ProjectUpdateDto } from './dto/control.dto';
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
    expect(codeOf(() => validatePayload(ProjectUpdateDto, { project_id: 'p1', name: null }))).toEqual({ code: 'invalid_payload', message: 'name must not be null (leave it out instead)' });
    expect(codeOf(() => validatePayload(ProjectUpdateDto, { project_id: 'p1', access_policy: null }))?.code).toBe('invalid_payload');
    expect(codeOf(() => validatePayload(ProjectCreateDto, { name: 'x', access_policy: { invoke: null } }))).toEqual({ code: 'invalid_payload', message: 'access_policy.invoke must not be null (leave it out instead)' });
    expect(codeOf(() => validatePayload(InviteCreateDto, { ttl_ms: null }))?.code).toBe('invalid_payload');
  });

  it('still calls a null required member missing, and accepts absent optional members', () => {
    expect(codeOf(() => validatePayload(ProjectUpdateDto, { project_id: null }))?.code).toBe('missing_field');
    expect(validatePayload(ProjectUpdateDto, { project_id: 'p1', name: 'n' })).toEqual(Object.assign(new ProjectUpdateDto(), { project_id: 'p1', name: 'n' }));
    expect(codeOf(() => validatePayload(InviteCreateDto, {}))).toBeNull();
  });
});
