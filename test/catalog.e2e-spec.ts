/**
 * e2e: the node service catalog: upsert validation, defaults, secrets, get with permission filtering,
 * watch/unwatch events, and invoke gating in workspace_status.
 */
import { Client, closeSessions, Credentials, failure, gatedTerminalService, INVOKE_GATING, joinNode, ProjectDetail, session } from './helpers/control';
import { cleanupTmp, killAll, Running, sleep, startSvc, waitFor } from './support/processes';

let svc: Running;
let admin: Client;
let node: Credentials;

beforeAll(async () => {
  svc = await startSvc();
  admin = await session(svc.url);
  node = await joinNode(admin, 'cat-node');
});
afterAll(async () => {
  closeSessions();
  await killAll();
  cleanupTmp();
});

const fsService = (over: Record<string, unknown> = {}) => ({
  service_id: 'fs',
  kind: 'fs',
  state: 'online',
  endpoints: ['/nodes/x/fs'],
  ...over,
});

function upsert(c: Client, creds: Credentials, body: Record<string, unknown>) {
  return c.request<Record<string, unknown>>('node_service_upsert', { node_id: creds.node_id, node_secret: creds.node_secret, ...body });
}

describe('node_service_upsert validation', () => {
  const rules: Array<[string, unknown[], string]> = [
    ['service_id not identifier-safe', [fsService({ service_id: '../x' })], 'services[0].service_id'],
    ['service_id with a space', [fsService(), fsService({ service_id: 'a b' })], 'services[1].service_id'],
    ['kind not identifier-safe', [fsService({ kind: 'fs/x' })], 'services[0].kind'],
    ['service_id repeated', [fsService(), fsService({ kind: 'other' })], 'services[1].service_id'],
    ['endpoint not absolute', [fsService({ endpoints: ['/ok', 'relative'] })], 'services[0].endpoints[1]'],
    ['endpoints not an array', [fsService({ endpoints: '/x' })], 'services[0].endpoints'],
    ['capabilities not an object', [fsService({ capabilities: [1] })], 'services[0].capabilities'],
    ['ops not an object', [fsService({ ops: 'invoke' })], 'services[0].ops'],
    ['runtime not an object', [fsService({ runtime: 3 })], 'services[0].runtime'],
    ['permissions not an object', [fsService({ permissions: null })], 'services[0].permissions'],
    ['schema not an object', [fsService({ schema: true })], 'services[0].schema'],
    [
      'mount path not absolute',
      [
        fsService(),
        fsService({
          service_id: 'b',
          mounts: [
            { mount_id: 'm', mount_path: '/ok' },
            { mount_id: 'n', mount_path: 'rel' },
          ],
        }),
      ],
      'services[1].mounts[1].mount_path',
    ],
    ['entry not an object', ['fs'], 'services[0]'],
    ['services not an array', { a: 1 } as unknown as unknown[], 'services'],
  ];

  it('stores a valid record first', async () => {
    await upsert(admin, node, { services: [fsService({ help_md: 'v1' })] });
  });

  it.each(rules)('rejects %s with invalid_payload naming %s, storing nothing', async (_n, services, field) => {
    const before = await admin.request('node_service_get', { node_id: node.node_id });
    const e = await failure(upsert(admin, node, { services, labels: { changed: 'yes' } }));
    expect(e.code).toBe('invalid_payload');
    expect(e.message.startsWith(field)).toBe(true);
    expect(await admin.request('node_service_get', { node_id: node.node_id })).toEqual(before);
  });

  it('rejects missing required fields with missing_field', async () => {
    for (const f of ['service_id', 'kind', 'state', 'endpoints']) {
      const svcEntry = fsService();
      delete (svcEntry as Record<string, unknown>)[f];
      const e = await failure(upsert(admin, node, { services: [svcEntry] }));
      expect(e).toMatchObject({ code: 'missing_field', message: `missing field: services[0].${f}` });
    }
    expect((await failure(admin.request('node_service_upsert', { node_id: node.node_id }))).code).toBe('missing_field');
  });

  it('checks the node secret and the node', async () => {
    expect((await failure(admin.request('node_service_upsert', { node_id: node.node_id, node_secret: 'wrong', services: [] }))).code).toBe('node_auth_failed');
    expect((await failure(admin.request('node_service_upsert', { node_id: 'node-unknown', node_secret: node.node_secret, services: [] }))).code).toBe(
      'node_not_found',
    );
  });
});

describe('node_service_upsert and get', () => {
  it('applies defaults and returns what was stored', async () => {
    const stored = await upsert(admin, node, {
      platform: { os: 'linux', arch: 'x64', runtime_kind: 'native' },
      labels: { zone: 'a', tier: 'gold' },
      services: [
        fsService({
          mounts: [
            { mount_id: 'fs', mount_path: '/nodes/x/fs' },
            { mount_id: 'fs2', mount_path: '/nodes/x/fs2', state: 'degraded' },
          ],
        }),
        {
          service_id: 'terminal-t1',
          kind: 'terminal',
          state: 'ready',
          endpoints: ['/nodes/x/terminal/t1'],
          capabilities: { pty: true, invoke: true },
          help_md: '# hi',
        },
      ],
    });
    expect(stored).toEqual({
      node_id: node.node_id,
      node_name: 'cat-node',
      platform: { os: 'linux', arch: 'x64', runtime_kind: 'native' },
      labels: { zone: 'a', tier: 'gold' },
      services: [
        {
          service_id: 'fs',
          kind: 'fs',
          version: '1',
          state: 'online',
          endpoints: ['/nodes/x/fs'],
          capabilities: {},
          mounts: [
            { mount_id: 'fs', mount_path: '/nodes/x/fs', state: 'online' },
            { mount_id: 'fs2', mount_path: '/nodes/x/fs2', state: 'degraded' },
          ],
          ops: {},
          runtime: {},
          permissions: {},
          schema: {},
        },
        {
          service_id: 'terminal-t1',
          kind: 'terminal',
          version: '1',
          state: 'ready',
          endpoints: ['/nodes/x/terminal/t1'],
          capabilities: { pty: true, invoke: true },
          mounts: [],
          ops: {},
          runtime: {},
          permissions: {},
          schema: {},
          help_md: '# hi',
        },
      ],
    });
    expect(await admin.request('node_service_get', { node_id: node.node_id })).toEqual(stored);
    const { node: info } = await admin.request<{ node: Record<string, unknown> }>('node_get', { node_id: node.node_id });
    expect(info).toMatchObject({ labels: { zone: 'a', tier: 'gold' }, platform: { os: 'linux', arch: 'x64', runtime_kind: 'native' } });
    expect((await failure(admin.request('node_service_get', { node_id: 'node-none' }))).code).toBe('node_not_found');
  });

  it('keeps services when an upsert omits them, and replaces the list when given', async () => {
    await upsert(admin, node, { services: [fsService(), fsService({ service_id: 'b' })] });
    await upsert(admin, node, { labels: { only: 'labels' } });
    expect((await admin.request<{ services: unknown[] }>('node_service_get', { node_id: node.node_id })).services).toHaveLength(2);
    await upsert(admin, node, { services: [fsService({ service_id: 'c' })] });
    expect(
      (await admin.request<{ services: Array<{ service_id: string }> }>('node_service_get', { node_id: node.node_id })).services.map((s) => s.service_id),
    ).toEqual(['c']);
  });
});

describe('watch', () => {
  it('pushes an event within 1 s of an upsert, none after unwatch, and one on node deletion', async () => {
    const n = await joinNode(admin, 'watched');
    const watcher = await session(svc.url);
    const events: Array<Record<string, unknown>> = [];
    watcher.on('event', (type: string, payload: Record<string, unknown>) => {
      if (type === 'control.node_service_event') events.push(payload);
    });
    expect(await watcher.request('node_service_watch', {})).toEqual({ watching: true, node_id: null });
    await upsert(admin, n, { services: [fsService(), fsService({ service_id: 'gone' })] });
    const t0 = Date.now();
    const first = await waitFor(() => events.find((e) => e.node_id === n.node_id), 1000);
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(first).toMatchObject({ event: 'upsert', node_id: n.node_id, added: ['fs', 'gone'], removed: [], changed: [] });
    await upsert(admin, n, { services: [fsService({ state: 'degraded' }), fsService({ service_id: 'new' })] });
    expect(await waitFor(() => events[1], 1000)).toMatchObject({ added: ['new'], removed: ['gone'], changed: ['fs'] });

    // watching one node filters the others
    const other = await joinNode(admin, 'other');
    await watcher.request('node_service_watch', { node_id: n.node_id });
    await upsert(admin, other, { services: [] });
    await sleep(300);
    expect(events.filter((e) => e.node_id === other.node_id)).toEqual([]);

    expect(await watcher.request('node_service_unwatch')).toEqual({ watching: false });
    const count = events.length;
    await upsert(admin, n, { services: [] });
    await sleep(500);
    expect(events.length).toBe(count);

    await watcher.request('node_service_watch');
    await admin.request('node_delete', { node_id: n.node_id });
    expect(await waitFor(() => events.find((e) => e.event === 'delete'), 1000)).toMatchObject({ event: 'delete', node_id: n.node_id });
    expect((await failure(watcher.request('node_service_watch', { node_id: 'node-missing' }))).code).toBe('node_not_found');
  });
});

describe('permission filtering for non-admin sessions', () => {
  it('filters by allow_roles, default and require_project_token', async () => {
    const n = await joinNode(admin, 'perm');
    const p = await admin.request<ProjectDetail>('project_create', { name: 'perm' });
    await upsert(admin, n, {
      services: [
        fsService({ service_id: 'open' }),
        fsService({ service_id: 'users', permissions: { allow_roles: ['user'], default: 'deny' } }),
        fsService({ service_id: 'star', permissions: { allow_roles: ['*'] } }),
        fsService({ service_id: 'admins', permissions: { allow_roles: ['admin'] } }),
        fsService({ service_id: 'denied', permissions: { default: 'deny' } }),
        fsService({ service_id: 'deny-default', permissions: { default: 'deny-by-default' } }),
        fsService({ service_id: 'token', permissions: { require_project_token: true } }),
        fsService({ service_id: 'token2', permissions: { allow_roles: ['user'], project_token_required: true } }),
      ],
    });
    const ids = async (c: Client) =>
      (await c.request<{ services: Array<{ service_id: string }> }>('node_service_get', { node_id: n.node_id })).services.map((s) => s.service_id);
    expect(await ids(admin)).toEqual(['open', 'users', 'star', 'admins', 'denied', 'deny-default', 'token', 'token2']);
    const user = await session(svc.url, 'user', 'perm-agent');
    expect(await ids(user)).toEqual(['open', 'users', 'star']);
    await user.request('project_activate', { project_id: p.project_id, project_token: p.project_token });
    expect(await ids(user)).toEqual(['open', 'users', 'star', 'token', 'token2']);
    // pinned by token in another session, without a binding
    const pinned = await session(svc.url, 'user', 'perm-other');
    await pinned.request('workspace_status', { project_id: p.project_id, project_token: p.project_token });
    expect(await ids(pinned)).toEqual(['open', 'users', 'star', 'token', 'token2']);
  });
});

describe('invoke gating in workspace_status', () => {
  it.each(INVOKE_GATING)('policy %s, service permission %s, %s: invoke mount present = %s', async (policy, perm, role, present) => {
    const n = await joinNode(admin, `gate-${policy}-${perm}-${role}`);
    const p = await admin.request<ProjectDetail>('project_create', { name: 'gate', access_policy: { invoke: policy } });
    await upsert(admin, n, {
      services: [
        fsService({ service_id: 'fs', mounts: [{ mount_id: 'work', mount_path: '/x' }] }),
        gatedTerminalService('terminal-t', '/nodes/x/terminal/t', perm),
      ],
    });
    await admin.request('project_mount_set', { project_id: p.project_id, node_id: n.node_id, export_name: 'work', mount_path: '/work' });
    await admin.request('project_mount_set', { project_id: p.project_id, node_id: n.node_id, export_name: 'terminal-t', mount_path: '/term' });
    const c = await session(svc.url, role);
    const status = await c.request<{ mounts: Array<{ mount_path: string }>; desired_mounts: Array<{ mount_path: string }> }>('workspace_status', {
      project_id: p.project_id,
      project_token: p.project_token,
    });
    expect(status.mounts.map((m) => m.mount_path)).toEqual(present ? ['/term', '/work'] : ['/work']);
    expect(status.desired_mounts.some((m) => m.mount_path === '/term')).toBe(present);
  });
});
