import { invokeCapable, serviceOfExport, serviceVisible } from './permissions';
import type { ServiceEntry } from '../persistence/state.model';

const svc = (permissions: Record<string, unknown>) => ({ permissions });

describe('serviceVisible', () => {
  const user = { role: 'user' as const, holdsProjectToken: false };
  const userWithToken = { role: 'user' as const, holdsProjectToken: true };
  it('shows everything to admins', () => {
    expect(serviceVisible(svc({ allow_roles: [], default: 'deny', require_project_token: true }), { role: 'admin', holdsProjectToken: false })).toBe(true);
  });
  it('uses allow_roles when present, ignoring default', () => {
    expect(serviceVisible(svc({ allow_roles: ['user'], default: 'deny' }), user)).toBe(true);
    expect(serviceVisible(svc({ allow_roles: ['*'] }), user)).toBe(true);
    expect(serviceVisible(svc({ allow_roles: ['all'] }), user)).toBe(true);
    expect(serviceVisible(svc({ allow_roles: ['admin'] }), user)).toBe(false);
  });
  it('uses default when allow_roles is absent', () => {
    expect(serviceVisible(svc({}), user)).toBe(true);
    expect(serviceVisible(svc({ default: 'deny' }), user)).toBe(false);
    expect(serviceVisible(svc({ default: 'deny-by-default' }), user)).toBe(false);
    expect(serviceVisible(svc({ default: 'allow' }), user)).toBe(true);
  });
  it('requires a held project token under either spelling', () => {
    expect(serviceVisible(svc({ require_project_token: true }), user)).toBe(false);
    expect(serviceVisible(svc({ project_token_required: true }), user)).toBe(false);
    expect(serviceVisible(svc({ require_project_token: true }), userWithToken)).toBe(true);
    expect(serviceVisible(svc({ allow_roles: ['admin'], require_project_token: true }), userWithToken)).toBe(false);
  });
});

describe('invokeCapable', () => {
  it('recognises capabilities.invoke, ops.invoke and ops.paths.invoke', () => {
    expect(invokeCapable({ capabilities: { invoke: true }, ops: {} })).toBe(true);
    expect(invokeCapable({ capabilities: {}, ops: { invoke: 'x.json' } })).toBe(true);
    expect(invokeCapable({ capabilities: {}, ops: { paths: { invoke: 'x' } } })).toBe(true);
    expect(invokeCapable({ capabilities: { invoke: 'yes' }, ops: { paths: {} } })).toBe(false);
  });
  it('maps an export to its service by id or mount id', () => {
    const services = [
      { service_id: 'fs', mounts: [{ mount_id: 'work', mount_path: '/x', state: 'online' }] },
      { service_id: 'terminal-1', mounts: [] },
    ] as unknown as ServiceEntry[];
    expect(serviceOfExport(services, 'terminal-1')?.service_id).toBe('terminal-1');
    expect(serviceOfExport(services, 'work')?.service_id).toBe('fs');
    expect(serviceOfExport(services, 'none')).toBeUndefined();
  });
});
