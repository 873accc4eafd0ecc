/**
 * e2e: projects, nodes, mounts, tokens, bindings, workspace status, availability and gates
 * (docs/protocol.md "Gates" to "Workspace status") against the built `svc` over real WebSockets.
 */
import { Client, closeSessions, Credentials, failure, joinNode, ProjectDetail, session } from './helpers/control';
import { cleanupTmp, killAll, Running, sleep, startSvc, waitFor } from './support/processes';

let svc: Running;
let admin: Client;

beforeAll(async () => {
  svc = await startSvc({ env: { SVC_SWEEP_INTERVAL_MS: '200' } });
  admin = await session(svc.url);
});
afterAll(async () => {
  closeSessions();
  await killAll();
  cleanupTmp();
});

interface Status {
  project_id: string | null;
  workspace_root: string | null;
  mounts: Array<Record<string, unknown>>;
  desired_mounts: Array<Record<string, unknown>>;
  actual_mounts: Array<Record<string, unknown>>;
  drift: { count: number; items: Array<Record<string, unknown>> };
  availability: { mounts_total: number; online: number; degraded: number; missing: number };
}

describe('nodes: invites, joins, leases', () => {
  it('joins a node by invite once; reuse is invite_redeemed; unknown is invite_not_found', async () => {
    const { invite_token, expires_at_ms } = await admin.request<{ invite_token: string; expires_at_ms: number }>('node_invite_create', { ttl_ms: 60_000 });
    expect(expires_at_ms).toBeGreaterThan(Date.now());
    const user = await session(svc.url, 'user');
    const creds = await user.request<Credentials>('node_join', {
      invite_token,
      node_name: 'n-join',
      fs_url: 'ws://127.0.0.1:9/v2/fs',
      platform: { os: 'linux' },
    });
    expect(creds).toMatchObject({ node_name: 'n-join' });
    for (const k of ['node_id', 'node_secret', 'fs_auth_token', 'lease_token']) expect(typeof (creds as unknown as Record<string, unknown>)[k]).toBe('string');
    expect(creds.node_secret).not.toBe(creds.fs_auth_token);
    const nodesBefore = (await admin.request<{ nodes: unknown[] }>('node_list')).nodes;
    expect((await failure(user.request('node_join', { invite_token, node_name: 'again', fs_url: 'ws://h:1/' }))).code).toBe('invite_redeemed');
    expect((await failure(user.request('node_join', { invite_token: 'nope', node_name: 'x', fs_url: 'ws://h:1/' }))).code).toBe('invite_not_found');
    // refused joins add no node
    expect((await admin.request<{ nodes: unknown[] }>('node_list')).nodes).toEqual(nodesBefore);
    const { node } = await user.request<{ node: Record<string, unknown> }>('node_get', { node_id: creds.node_id });
    expect(node).toMatchObject({
      node_id: creds.node_id,
      node_name: 'n-join',
      fs_url: 'ws://127.0.0.1:9/v2/fs',
      state: 'online',
      online: true,
      platform: { os: 'linux' },
    });
    expect(JSON.stringify(node)).not.toContain(creds.node_secret);
    expect(JSON.stringify(node)).not.toContain(creds.fs_auth_token);
  });

  it('refuses an expired invite with invite_expired', async () => {
    const { invite_token } = await admin.request<{ invite_token: string }>('node_invite_create', { ttl_ms: 1000 });
    await sleep(1100);
    const nodesBefore = (await admin.request<{ nodes: unknown[] }>('node_list')).nodes;
    expect((await failure(admin.request('node_join', { invite_token, node_name: 'late', fs_url: 'ws://h:1/' }))).code).toBe('invite_expired');
    expect((await admin.request<{ nodes: unknown[] }>('node_list')).nodes).toEqual(nodesBefore);
  });

  it('validates join payloads', async () => {
    const { invite_token } = await admin.request<{ invite_token: string }>('node_invite_create', {});
    const bad = [
      [{ invite_token, node_name: 'x', fs_url: 'http://not-ws/' }, 'invalid_payload', 'fs_url'],
      [{ invite_token, node_name: 'x', fs_url: 'ws://h:1/', lease_ttl_ms: 10 }, 'invalid_payload', 'lease_ttl_ms'],
      [{ invite_token, node_name: 'x', fs_url: 'ws://h:1/', lease_ttl_ms: 86_400_001 }, 'invalid_payload', 'lease_ttl_ms'],
      [{ invite_token, fs_url: 'ws://h:1/' }, 'missing_field', 'node_name'],
      [{ invite_token, node_name: 'x', fs_url: 'ws://h:1/', platform: 'linux' }, 'invalid_payload', 'platform'],
    ] as const;
    for (const [payload, code, field] of bad) {
      const e = await failure(admin.request('node_join', payload));
      expect(e.code).toBe(code);
      expect(e.message).toContain(field);
    }
    // the invite was not consumed by the rejected attempts
    await expect(admin.request('node_join', { invite_token, node_name: 'ok', fs_url: 'ws://h:1/' })).resolves.toBeDefined();
  });

  it('refreshes a lease with the node secret only', async () => {
    const creds = await joinNode(admin, 'n-lease', 5000);
    const user = await session(svc.url, 'user');
    const before = await admin.request('node_get', { node_id: creds.node_id });
    expect(
      (await failure(user.request('node_lease_refresh', { node_id: creds.node_id, node_secret: 'wrong', lease_ttl_ms: 600_000, fs_url: 'ws://evil:1/' }))).code,
    ).toBe('node_auth_failed');
    expect((await failure(user.request('node_lease_refresh', { node_id: 'node-nope', node_secret: creds.node_secret }))).code).toBe('node_not_found');
    // a refused refresh moves neither the lease nor the fs_url
    expect(await admin.request('node_get', { node_id: creds.node_id })).toEqual(before);
    const r = await user.request<{ lease_expires_at_ms: number; lease_token: string }>('node_lease_refresh', {
      node_id: creds.node_id,
      node_secret: creds.node_secret,
      lease_ttl_ms: 600_000,
      fs_url: 'ws://127.0.0.1:7/v2/fs',
    });
    expect(r.lease_expires_at_ms).toBeGreaterThan(Date.now() + 500_000);
    expect(r.lease_token).not.toBe(creds.lease_token);
    const { node } = await user.request<{ node: { fs_url: string; lease_expires_at_ms: number } }>('node_get', { node_id: creds.node_id });
    expect(node.fs_url).toBe('ws://127.0.0.1:7/v2/fs');
    expect(node.lease_expires_at_ms).toBe(r.lease_expires_at_ms);
  });

  it('pairs by request: pending list, approve, credentials once; deny', async () => {
    const node = await session(svc.url, 'user');
    const req = await node.request<{ request_id: string; request_secret: string }>('node_join_request', {
      node_name: 'n-req',
      fs_url: 'ws://127.0.0.1:5/v2/fs',
    });
    expect(await node.request('node_join_status', req)).toMatchObject({ state: 'pending' });
    expect((await failure(node.request('node_join_status', { ...req, request_secret: 'wrong' }))).code).toBe('pending_join_not_found');
    expect((await failure(node.request('node_join_pending_list'))).code).toBe('forbidden');
    const { pending } = await admin.request<{ pending: Array<Record<string, unknown>> }>('node_join_pending_list');
    const entry = pending.find((p) => p.request_id === req.request_id);
    expect(entry).toMatchObject({ node_name: 'n-req' });
    expect(JSON.stringify(pending)).not.toContain(req.request_secret);
    expect((await failure(node.request('node_join_approve', { request_id: req.request_id }))).code).toBe('forbidden');
    const approved = await admin.request<Credentials>('node_join_approve', { request_id: req.request_id });
    const first = await node.request<{ state: string; credentials?: Credentials }>('node_join_status', req);
    expect(first.state).toBe('approved');
    expect(first.credentials).toMatchObject({ node_id: approved.node_id, node_secret: approved.node_secret, fs_auth_token: approved.fs_auth_token });
    const second = await node.request<{ state: string; credentials?: unknown }>('node_join_status', req);
    expect(second).toEqual({ state: 'approved', request_id: req.request_id });
    await expect(node.request('node_lease_refresh', { node_id: approved.node_id, node_secret: approved.node_secret })).resolves.toBeDefined();
    expect((await failure(admin.request('node_join_approve', { request_id: req.request_id }))).code).toBe('pending_join_not_found');

    const req2 = await node.request<{ request_id: string; request_secret: string }>('node_join_request', { node_name: 'n-deny', fs_url: 'ws://h:5/' });
    expect(await admin.request('node_join_deny', { request_id: req2.request_id })).toEqual({ denied: true, request_id: req2.request_id });
    expect(await node.request('node_join_status', req2)).toMatchObject({ state: 'denied' });
    expect((await failure(admin.request('node_join_deny', { request_id: 'join-nope' }))).code).toBe('pending_join_not_found');
  });

  it('deletes a node (admin only); its mounts become missing', async () => {
    const creds = await joinNode(admin, 'n-del');
    const user = await session(svc.url, 'user');
    expect((await failure(user.request('node_delete', { node_id: creds.node_id }))).code).toBe('forbidden');
    expect(await admin.request('node_delete', { node_id: creds.node_id })).toEqual({ deleted: true, node_id: creds.node_id });
    expect((await failure(admin.request('node_get', { node_id: creds.node_id }))).code).toBe('node_not_found');
    expect((await failure(admin.request('node_delete', { node_id: creds.node_id }))).code).toBe('node_not_found');
    expect((await failure(user.request('node_lease_refresh', { node_id: creds.node_id, node_secret: creds.node_secret }))).code).toBe('node_not_found');
  });
});

describe('projects: life cycle, mounts, tokens, bindings', () => {
  let nodeA: Credentials;
  beforeAll(async () => {
    nodeA = await joinNode(admin, 'p-node-a');
  });

  it('runs the full project life cycle', async () => {
    const created = await admin.request<ProjectDetail>('project_create', { name: 'alpha', vision: 'v', access_policy: { invoke: 'allow' } });
    expect(created).toMatchObject({ name: 'alpha', vision: 'v', token_locked: true, mount_count: 0, access_policy: { invoke: 'allow' }, mounts: [] });
    expect(typeof created.project_token).toBe('string');
    const id = created.project_id;
    const listed = await admin.request<{ projects: Array<Record<string, unknown>> }>('project_list');
    expect(listed.projects.find((p) => p.project_id === id)).toBeDefined();
    expect(JSON.stringify(listed)).not.toContain(created.project_token);

    const updated = await admin.request<ProjectDetail>('project_update', { project_id: id, name: 'alpha-2', access_policy: { invoke: 'deny' } });
    expect(updated).toMatchObject({ name: 'alpha-2', vision: 'v', access_policy: { invoke: 'deny' } });
    expect(updated.project_token).toBeUndefined();

    const m1 = await admin.request<ProjectDetail>('project_mount_set', { project_id: id, node_id: nodeA.node_id, export_name: 'work', mount_path: '//src///' });
    expect(m1.mounts).toEqual([expect.objectContaining({ mount_path: '/src', node_id: nodeA.node_id, export_name: 'work', state: 'online', online: true })]);
    const again = await admin.request<ProjectDetail>('project_mount_set', { project_id: id, node_id: nodeA.node_id, export_name: 'work', mount_path: '/src' });
    expect(again.mounts).toHaveLength(1);
    expect(again.mount_count).toBe(1);
    expect(m1.mounts[0].auth_token).toBeUndefined();

    const list = await admin.request<{ mounts: Array<Record<string, unknown>> }>('project_mount_list', { project_id: id });
    expect(list.mounts[0].auth_token).toBe(nodeA.fs_auth_token);

    const got = await admin.request<ProjectDetail>('project_get', { project_id: id });
    expect(got).toMatchObject({ project_id: id, name: 'alpha-2', mount_count: 1 });

    expect((await failure(admin.request('project_mount_remove', { project_id: id, mount_path: '/other' }))).code).toBe('mount_not_found');
    expect((await admin.request<ProjectDetail>('project_mount_remove', { project_id: id, mount_path: '/src/' })).mounts).toEqual([]);
    expect(await admin.request('project_delete', { project_id: id })).toEqual({ deleted: true, project_id: id });
    expect((await failure(admin.request('project_get', { project_id: id }))).code).toBe('project_not_found');
    expect((await failure(admin.request('project_delete', { project_id: id }))).code).toBe('project_not_found');
  });

  it('rejects bad mounts and null members and leaves the project unchanged', async () => {
    const p = await admin.request<ProjectDetail>('project_create', { name: 'mounts' });
    await admin.request('project_mount_set', { project_id: p.project_id, node_id: nodeA.node_id, export_name: 'work', mount_path: '/ok' });
    const before = await admin.request<ProjectDetail>('project_get', { project_id: p.project_id });
    const bad: Array<[Record<string, unknown>, string]> = [
      [{ mount_path: 'relative/path' }, 'invalid_payload'],
      [{ mount_path: '/a/../b' }, 'invalid_payload'],
      [{ mount_path: '/a/./b' }, 'invalid_payload'],
      [{ mount_path: '/a\u0000b' }, 'invalid_payload'],
      [{ mount_path: '/a\nb' }, 'invalid_payload'],
      [{ mount_path: 42 }, 'invalid_payload'],
      [{ export_name: '../etc' }, 'invalid_payload'],
      [{ node_id: 'node-missing' }, 'node_not_found'],
      [{ project_id: 'proj-missing' }, 'project_not_found'],
      [{ mount_path: undefined }, 'missing_field'],
    ];
    for (const [override, code] of bad) {
      const payload = { project_id: p.project_id, node_id: nodeA.node_id, export_name: 'work', mount_path: '/x', ...override };
      expect((await failure(admin.request('project_mount_set', payload))).code).toBe(code);
    }
    // null is not "absent": an optional member set to null is refused, nothing stored
    for (const override of [{ name: null }, { vision: null }, { access_policy: null }, { access_policy: { invoke: null } }]) {
      const e = await failure(admin.request('project_update', { project_id: p.project_id, ...override }));
      expect(e.code).toBe('invalid_payload');
      expect(e.message).toMatch(/must not be null/);
    }
    const after = await admin.request<ProjectDetail>('project_get', { project_id: p.project_id });
    expect(after).toEqual(before);
  });

  it('gates project operations for users by token or binding', async () => {
    const p = await admin.request<ProjectDetail>('project_create', { name: 'gated' });
    const user = await session(svc.url, 'user', 'agent-g');
    expect((await user.request<{ projects: unknown[] }>('project_list')).projects).toEqual([]);
    expect((await failure(user.request('project_get', { project_id: p.project_id }))).code).toBe('project_auth_failed');
    expect((await failure(user.request('project_get', { project_id: p.project_id, project_token: 'wrong' }))).code).toBe('project_auth_failed');
    await expect(user.request('project_get', { project_id: p.project_id, project_token: p.project_token })).resolves.toMatchObject({
      project_id: p.project_id,
    });
    expect((await failure(user.request('project_create', { name: 'x' }))).code).toBe('forbidden');
    expect((await failure(user.request('project_update', { project_id: p.project_id, name: 'x' }))).code).toBe('forbidden');
    expect(
      (await failure(user.request('project_mount_set', { project_id: p.project_id, node_id: nodeA.node_id, export_name: 'w', mount_path: '/w' }))).code,
    ).toBe('forbidden');
    // forbidden calls changed nothing
    expect(await admin.request('project_get', { project_id: p.project_id })).toMatchObject({ name: 'gated', mount_count: 0 });
    expect((await admin.request<{ projects: Array<{ name: string }> }>('project_list')).projects.filter((x) => x.name === 'x')).toEqual([]);

    expect(await user.request('project_activate', { project_id: p.project_id, project_token: p.project_token })).toEqual({
      agent_id: 'agent-g',
      project_id: p.project_id,
      workspace_root: `/projects/${p.project_id}/fs`,
    });
    expect((await user.request<{ projects: Array<{ project_id: string }> }>('project_list')).projects.map((x) => x.project_id)).toEqual([p.project_id]);
    // bound: no token needed, a wrong one still fails
    await expect(user.request('project_get', { project_id: p.project_id })).resolves.toBeDefined();
    expect((await failure(user.request('project_get', { project_id: p.project_id, project_token: 'wrong' }))).code).toBe('project_auth_failed');
    // the binding is per (role, agent): the same agent id as admin has none, another user agent has none
    const other = await session(svc.url, 'user', 'agent-h');
    expect((await failure(other.request('project_get', { project_id: p.project_id }))).code).toBe('project_auth_failed');
    const adminSameAgent = await session(svc.url, 'admin', 'agent-g');
    expect((await adminSameAgent.request<Status>('workspace_status')).project_id).toBeNull();
  });

  it('rotates and revokes tokens: the old token stops at once and user bindings end', async () => {
    const p = await admin.request<ProjectDetail>('project_create', { name: 'tokens' });
    const user = await session(svc.url, 'user', 'agent-t');
    await user.request('project_activate', { project_id: p.project_id, project_token: p.project_token });
    const adminBound = await session(svc.url, 'admin', 'agent-t');
    await adminBound.request('project_activate', { project_id: p.project_id });
    expect((await user.request<Status>('workspace_status')).project_id).toBe(p.project_id);

    const rotated = await user.request<{ project_token: string; rotated: boolean; updated_at_ms: number }>('project_token_rotate', {
      project_id: p.project_id,
      project_token: p.project_token,
    });
    expect(rotated).toMatchObject({ project_id: p.project_id, rotated: true });
    expect(rotated.project_token).not.toBe(p.project_token);
    expect((await failure(user.request('project_get', { project_id: p.project_id, project_token: p.project_token }))).code).toBe('project_auth_failed');
    await expect(user.request('project_get', { project_id: p.project_id, project_token: rotated.project_token })).resolves.toBeDefined();
    // the user binding ended; the admin binding of the same agent id did not
    expect((await user.request<Status>('workspace_status')).project_id).toBeNull();
    expect((await adminBound.request<Status>('workspace_status')).project_id).toBe(p.project_id);

    const revoked = await admin.request('project_token_revoke', { project_id: p.project_id });
    expect(revoked).toMatchObject({ project_id: p.project_id, project_token: null, revoked: true });
    expect((await failure(user.request('project_get', { project_id: p.project_id, project_token: rotated.project_token }))).code).toBe('project_auth_failed');
    expect((await admin.request<ProjectDetail>('project_get', { project_id: p.project_id })).token_locked).toBe(false);
  });
});

describe('workspace status', () => {
  it('selects per mount path: online beats degraded beats missing; the latest lease wins ties', async () => {
    const p = await admin.request<ProjectDetail>('project_create', { name: 'select' });
    const a = await joinNode(admin, 'sel-a', 60_000);
    const b = await joinNode(admin, 'sel-b', 120_000);
    const c = await joinNode(admin, 'sel-c', 60_000);
    for (const n of [a, b])
      await admin.request('project_mount_set', { project_id: p.project_id, node_id: n.node_id, export_name: 'work', mount_path: '/shared' });
    await admin.request('project_mount_set', { project_id: p.project_id, node_id: c.node_id, export_name: 'docs', mount_path: '/docs' });
    const pin = { project_id: p.project_id, project_token: p.project_token };
    const selected = async (path: string) => (await admin.request<Status>('workspace_status', pin)).mounts.find((m) => m.mount_path === path)!;

    // both online: the later lease (b) wins
    expect((await selected('/shared')).node_id).toBe(b.node_id);
    let s = await admin.request<Status>('workspace_status', pin);
    expect(s).toMatchObject({
      project_id: p.project_id,
      workspace_root: `/projects/${p.project_id}/fs`,
      availability: { mounts_total: 2, online: 2, degraded: 0, missing: 0 },
    });
    expect(s.desired_mounts).toHaveLength(3);
    expect(s.actual_mounts).toEqual(s.mounts);
    expect(s.drift.count).toBe(0);
    expect(s.mounts.every((m) => typeof m.auth_token === 'string')).toBe(true);

    // a refreshes with a later lease: a wins
    await admin.request('node_lease_refresh', { node_id: a.node_id, node_secret: a.node_secret, lease_ttl_ms: 300_000 });
    expect((await selected('/shared')).node_id).toBe(a.node_id);

    // a's lease expires: online b beats degraded a, and drift says failover
    await admin.request('node_lease_refresh', { node_id: a.node_id, node_secret: a.node_secret, lease_ttl_ms: 1000 });
    await sleep(1100);
    s = await admin.request<Status>('workspace_status', pin);
    expect(s.mounts.find((m) => m.mount_path === '/shared')).toMatchObject({ node_id: b.node_id, state: 'online' });
    expect(s.desired_mounts.find((m) => m.node_id === a.node_id)).toMatchObject({ state: 'degraded', online: false });
    expect(s.drift.items).toEqual([
      expect.objectContaining({ mount_path: '/shared', kind: 'failover_active', selected_node_id: b.node_id, desired_node_id: a.node_id }),
    ]);

    // b deleted: degraded a beats missing b
    await admin.request('node_delete', { node_id: b.node_id });
    s = await admin.request<Status>('workspace_status', pin);
    expect(s.mounts.find((m) => m.mount_path === '/shared')).toMatchObject({ node_id: a.node_id, state: 'degraded', online: false });
    expect(s.desired_mounts.find((m) => m.node_id === b.node_id)).toMatchObject({ state: 'missing', online: false, fs_url: null });
    expect(s.availability).toEqual({ mounts_total: 2, online: 1, degraded: 1, missing: 0 });
    expect(s.drift.items[0]).toMatchObject({ kind: 'node_offline' });

    // c deleted too: the /docs mount is missing
    await admin.request('node_delete', { node_id: c.node_id });
    s = await admin.request<Status>('workspace_status', pin);
    expect(s.availability).toEqual({ mounts_total: 2, online: 0, degraded: 1, missing: 1 });
    expect(s.drift.items.map((d) => d.kind).sort()).toEqual(['missing_node', 'node_offline']);
  });

  it('selects a project by token, by binding, or refuses (admins too)', async () => {
    const p = await admin.request<ProjectDetail>('project_create', { name: 'selection' });
    const user = await session(svc.url, 'user', 'agent-s');
    expect(await user.request<Status>('workspace_status')).toMatchObject({ project_id: null, mounts: [], availability: { mounts_total: 0 } });
    expect((await failure(user.request('workspace_status', { project_id: p.project_id }))).code).toBe('project_auth_failed');
    expect((await failure(admin.request('workspace_status', { project_id: p.project_id }))).code).toBe('project_auth_failed');
    expect((await failure(user.request('workspace_status', { project_id: p.project_id, project_token: 'bad' }))).code).toBe('project_auth_failed');
    expect((await failure(user.request('workspace_status', { project_id: 'proj-none', project_token: 'x' }))).code).toBe('project_not_found');
    expect((await user.request<Status>('workspace_status', { project_id: p.project_id, project_token: p.project_token })).project_id).toBe(p.project_id);
    await user.request('project_activate', { project_id: p.project_id, project_token: p.project_token });
    expect((await user.request<Status>('workspace_status', { project_id: p.project_id })).project_id).toBe(p.project_id);
    expect((await user.request<Status>('workspace_status')).project_id).toBe(p.project_id);
    expect((await failure(user.request('workspace_status', { project_id: p.project_id, project_token: 'bad' }))).code).toBe('project_auth_failed');
    // connect_ack names the bound project
    const again = await session(svc.url, 'user', 'agent-s');
    expect(again.connectAck.project_id).toBe(p.project_id);
  });

  it('pushes workspace_availability to a debug subscriber within 2 s of a lease expiring', async () => {
    const p = await admin.request<ProjectDetail>('project_create', { name: 'avail' });
    const n = await joinNode(admin, 'avail-n', 60_000);
    await admin.request('project_mount_set', { project_id: p.project_id, node_id: n.node_id, export_name: 'work', mount_path: '/w' });
    const watcher = await session(svc.url);
    const events: Array<Record<string, unknown>> = [];
    watcher.on('event', (type: string, payload: Record<string, unknown>) => {
      if (type === 'control.workspace_availability' && payload.project_id === p.project_id) events.push(payload);
    });
    expect(await watcher.request('debug_subscribe')).toEqual({ subscribed: true });
    const user = await session(svc.url, 'user');
    expect((await failure(user.request('debug_subscribe'))).code).toBe('forbidden');
    const r = await admin.request<{ lease_expires_at_ms: number }>('node_lease_refresh', {
      node_id: n.node_id,
      node_secret: n.node_secret,
      lease_ttl_ms: 1000,
    });
    const ev = await waitFor(() => events.find((e) => e.state === 'degraded'), 4000);
    expect(Date.now() - r.lease_expires_at_ms).toBeLessThan(2000);
    expect(ev).toMatchObject({
      project_id: p.project_id,
      mount_path: '/w',
      node_id: n.node_id,
      previous_state: 'online',
      state: 'degraded',
      availability: { mounts_total: 1, online: 0, degraded: 1, missing: 0 },
    });
    expect(typeof ev.ts_ms).toBe('number');
    await admin.request('node_lease_refresh', { node_id: n.node_id, node_secret: n.node_secret, lease_ttl_ms: 60_000 });
    await waitFor(() => events.find((e) => e.state === 'online' && e.previous_state === 'degraded'), 3000);
    expect(await watcher.request('debug_unsubscribe')).toEqual({ subscribed: false });
    const count = events.length;
    await admin.request('node_lease_refresh', { node_id: n.node_id, node_secret: n.node_secret, lease_ttl_ms: 1000 });
    await sleep(1600);
    expect(events.length).toBe(count);
  });

  it('sends topology deltas only to sessions pinned to the changed project', async () => {
    const p = await admin.request<ProjectDetail>('project_create', { name: 'delta' });
    const q = await admin.request<ProjectDetail>('project_create', { name: 'other' });
    const n = await joinNode(admin, 'delta-n');
    const pinned = await session(svc.url, 'user', 'agent-d');
    const other = await session(svc.url, 'user', 'agent-e');
    const unpinned = await session(svc.url, 'user', 'agent-f');
    const before = await pinned.request<{ revision: number }>('workspace_status', { project_id: p.project_id, project_token: p.project_token });
    await other.request('workspace_status', { project_id: q.project_id, project_token: q.project_token });
    const got: Record<string, Array<Record<string, unknown>>> = { pinned: [], other: [], unpinned: [] };
    for (const [name, c] of Object.entries({ pinned, other, unpinned })) {
      c.on('event', (type: string, payload: Record<string, unknown>) => {
        if (type === 'control.workspace_topology_delta') got[name].push(payload);
      });
    }
    await admin.request('project_mount_set', { project_id: p.project_id, node_id: n.node_id, export_name: 'work', mount_path: '/new' });
    const delta = await waitFor(() => got.pinned[0], 3000);
    expect(delta).toMatchObject({ project_id: p.project_id, revision: before.revision + 1, removed: [], availability: { mounts_total: 1, online: 1 } });
    expect(delta.changed).toEqual([expect.objectContaining({ mount_path: '/new', node_id: n.node_id, auth_token: n.fs_auth_token })]);
    expect(delta.desired).toEqual(delta.changed);
    await sleep(500);
    expect(got.other).toEqual([]);
    expect(got.unpinned).toEqual([]);

    // rotation ends the token pin: one last empty delta, then none
    await admin.request('project_token_rotate', { project_id: p.project_id });
    await waitFor(() => got.pinned.find((d) => d.reason === 'access_ended'), 3000);
    const n1 = got.pinned.length;
    await admin.request('project_mount_remove', { project_id: p.project_id, mount_path: '/new' });
    await sleep(500);
    expect(got.pinned.length).toBe(n1);
  });
});

describe('operator token gate', () => {
  let gated: Running;
  beforeAll(async () => {
    gated = await startSvc({ env: { SVC_CONTROL_OPERATOR_TOKEN: 'op-secret-123' } });
  });

  it('requires a matching operator_token on protected mutations when set', async () => {
    const c = await session(gated.url);
    const missing = await failure(c.request('project_create', { name: 'x' }));
    expect(missing.code).toBe('operator_auth_failed');
    expect((await failure(c.request('project_create', { name: 'x', operator_token: 'wrong' }))).code).toBe('operator_auth_failed');
    expect((await c.request<{ projects: unknown[] }>('project_list')).projects).toEqual([]);
    const p = await c.request<ProjectDetail>('project_create', { name: 'x', operator_token: 'op-secret-123' });
    expect(p.name).toBe('x');
    expect((await failure(c.request('node_invite_create', {}))).code).toBe('operator_auth_failed');
    expect((await failure(c.request('project_token_rotate', { project_id: p.project_id }))).code).toBe('operator_auth_failed');
    // not protected: reads and the node's own calls
    await expect(c.request('workspace_status')).resolves.toBeDefined();
    await expect(c.request('node_list')).resolves.toEqual({ nodes: [] });
    // role is checked before the operator token
    const u = await session(gated.url, 'user');
    expect((await failure(u.request('project_create', { name: 'y' }))).code).toBe('forbidden');
  });

  it('is off when SVC_CONTROL_OPERATOR_TOKEN is unset', async () => {
    await expect(admin.request('project_create', { name: 'no-gate' })).resolves.toMatchObject({ name: 'no-gate' });
  });
});
