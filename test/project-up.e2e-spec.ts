/**
 * e2e: `control.project_up` (docs/protocol.md "Declarative workspaces") against the built `svc` over
 * real WebSockets: create, the same payload again (nothing changes, no topology delta), add
 * and remove mounts, prune off, dry run, nodes by name and by id, all or nothing on an invalid
 * entry, the operator gate and the user role.
 */
import { Client, closeSessions, Credentials, failure, session } from './helpers/control';
import { cleanupTmp, killAll, Running, sleep, startSvc, waitFor } from './support/processes';

const OP = 'op-secret-project-up';

let svc: Running;
let admin: Client;
let a: Credentials;
let b: Credentials;

interface MountSpec {
  mount_path: string;
  node_id: string;
  node_name: string | null;
  export_name: string;
}
interface UpResult {
  project_id: string | null;
  created: boolean;
  project_token?: string;
  changes: { added: MountSpec[]; removed: MountSpec[]; unchanged: number };
  mounts: Array<{ mount_path: string; node_id: string; export_name: string; node_name: string | null; state: string }>;
  workspace_root?: string;
}

const up = (c: Client, payload: Record<string, unknown>) => c.request<UpResult>('project_up', { operator_token: OP, ...payload });
/** Mounts as `path node:export`, sorted. */
const shape = (mounts: Array<{ mount_path: string; node_name: string | null; export_name: string }>) =>
  mounts.map((m) => `${m.mount_path} ${m.node_name}:${m.export_name}`).sort();

beforeAll(async () => {
  svc = await startSvc({ env: { SVC_CONTROL_OPERATOR_TOKEN: OP } });
  admin = await session(svc.url, 'admin', 'ops');
  const join = async (name: string) => {
    const { invite_token } = await admin.request<{ invite_token: string }>('node_invite_create', { operator_token: OP });
    return admin.request<Credentials>('node_join', { invite_token, node_name: name, fs_url: 'ws://127.0.0.1:1/v2/fs', lease_ttl_ms: 3_600_000 });
  };
  a = await join('up-a');
  b = await join('up-b');
});
afterAll(async () => {
  closeSessions();
  await killAll();
  cleanupTmp();
});

describe('control.project_up', () => {
  it('creates a project with its mounts, nodes by name or id, binds the agent; the same payload again changes nothing and sends no delta', async () => {
    const payload = {
      name: 'up-main',
      vision: 'declared',
      access_policy: { invoke: 'allow' },
      mounts: [
        { mount_path: '/src/', node_name: 'up-a', export_name: 'work' },
        { mount_path: '/shared', node_name: 'up-a', export_name: 'shared' },
        { mount_path: '/shared', node_id: b.node_id, export_name: 'shared' },
      ],
    };
    const first = await up(admin, payload);
    expect(first.created).toBe(true);
    expect(first.project_id).toMatch(/^proj-/);
    expect(typeof first.project_token).toBe('string');
    expect(first.workspace_root).toBe(`/projects/${first.project_id}/fs`);
    expect(first.changes.added).toEqual([
      { mount_path: '/src', node_id: a.node_id, node_name: 'up-a', export_name: 'work' },
      { mount_path: '/shared', node_id: a.node_id, node_name: 'up-a', export_name: 'shared' },
      { mount_path: '/shared', node_id: b.node_id, node_name: 'up-b', export_name: 'shared' },
    ]);
    expect(first.changes).toMatchObject({ removed: [], unchanged: 0 });
    expect(shape(first.mounts)).toEqual(['/shared up-a:shared', '/shared up-b:shared', '/src up-a:work']);
    expect(first.mounts.every((m) => m.state === 'online' && !('auth_token' in m))).toBe(true);
    const detail = await admin.request<{ name: string; vision: string; access_policy: { invoke: string }; mounts: unknown[]; updated_at_ms: number }>(
      'project_get',
      { project_id: first.project_id },
    );
    expect(detail).toMatchObject({ name: 'up-main', vision: 'declared', access_policy: { invoke: 'allow' } });
    expect(detail.mounts).toHaveLength(3);
    // activate (default): the caller's agent is bound, so its workspace is this project
    const status = await admin.request<{ project_id: string }>('workspace_status');
    expect(status.project_id).toBe(first.project_id);

    // a user session pinned to the project sees every topology change as a delta
    const pinned = await session(svc.url, 'user', 'watcher');
    const before = await pinned.request<{ revision: number }>('workspace_status', { project_id: first.project_id, project_token: first.project_token });
    const deltas: Array<Record<string, unknown>> = [];
    pinned.on('event', (type: string, p: Record<string, unknown>) => {
      if (type === 'control.workspace_topology_delta') deltas.push(p);
    });
    const again = await up(admin, payload);
    expect(again).toMatchObject({ project_id: first.project_id, created: false, changes: { added: [], removed: [], unchanged: 3 } });
    expect(again.project_token).toBeUndefined();
    expect(shape(again.mounts)).toEqual(shape(first.mounts));
    await sleep(700);
    expect(deltas).toEqual([]);
    const after = await admin.request<{ updated_at_ms: number }>('project_get', { project_id: first.project_id });
    expect(after.updated_at_ms).toBe(detail.updated_at_ms);
    expect(
      (await pinned.request<{ revision: number }>('workspace_status', { project_id: first.project_id, project_token: first.project_token })).revision,
    ).toBe(before.revision);

    // a real change does send one
    await up(admin, { ...payload, mounts: [...payload.mounts, { mount_path: '/extra', node_name: 'up-b', export_name: 'work' }] });
    const delta = await waitFor(() => deltas[0], 3000);
    expect(delta).toMatchObject({ project_id: first.project_id, revision: before.revision + 1 });
    expect((delta.changed as Array<{ mount_path: string }>).map((m) => m.mount_path)).toEqual(['/extra']);
  });

  it('adds and removes mounts; with prune off only adds', async () => {
    const base = {
      name: 'up-diff',
      mounts: [
        { mount_path: '/a', node_name: 'up-a', export_name: 'work' },
        { mount_path: '/b', node_name: 'up-b', export_name: 'work' },
      ],
    };
    const created = await up(admin, base);
    const next = await up(admin, {
      name: 'up-diff',
      mounts: [
        { mount_path: '/a', node_id: a.node_id, export_name: 'work' },
        { mount_path: '/c', node_name: 'up-b', export_name: 'other' },
      ],
    });
    expect(next.project_id).toBe(created.project_id);
    expect(next.changes).toEqual({
      added: [{ mount_path: '/c', node_id: b.node_id, node_name: 'up-b', export_name: 'other' }],
      removed: [{ mount_path: '/b', node_id: b.node_id, node_name: 'up-b', export_name: 'work' }],
      unchanged: 1,
    });
    expect(shape(next.mounts)).toEqual(['/a up-a:work', '/c up-b:other']);
    const kept = await up(admin, { name: 'up-diff', prune: false, mounts: [{ mount_path: '/d', node_name: 'up-a', export_name: 'work' }] });
    expect(kept.changes).toEqual({ added: [expect.objectContaining({ mount_path: '/d' })], removed: [], unchanged: 2 });
    expect(shape(kept.mounts)).toEqual(['/a up-a:work', '/c up-b:other', '/d up-a:work']);
    // an empty list with prune removes everything
    const emptied = await up(admin, { name: 'up-diff', mounts: [] });
    expect(emptied.changes.removed).toHaveLength(3);
    expect(emptied.mounts).toEqual([]);
    // activate:false leaves the binding alone and reports no workspace root
    const status = await admin.request<{ project_id: string }>('workspace_status');
    const quiet = await up(admin, { name: 'up-quiet', activate: false, mounts: [] });
    expect(quiet.workspace_root).toBeUndefined();
    expect((await admin.request<{ project_id: string }>('workspace_status')).project_id).toBe(status.project_id);
  });

  it('dry_run answers what would change and changes nothing', async () => {
    const projectsBefore = await admin.request<{ projects: unknown[] }>('project_list');
    const fresh = await up(admin, { name: 'up-dry', dry_run: true, mounts: [{ mount_path: '/x', node_name: 'up-a', export_name: 'work' }] });
    expect(fresh).toMatchObject({
      project_id: null,
      created: true,
      changes: { added: [expect.objectContaining({ mount_path: '/x', node_id: a.node_id })], removed: [], unchanged: 0 },
    });
    expect(fresh.project_token).toBeUndefined();
    expect(fresh.workspace_root).toBeUndefined();
    expect(await admin.request('project_list')).toEqual(projectsBefore);

    const real = await up(admin, { name: 'up-dry2', mounts: [{ mount_path: '/x', node_name: 'up-a', export_name: 'work' }] });
    const plan = await up(admin, { name: 'up-dry2', dry_run: true, mounts: [{ mount_path: '/y', node_name: 'up-b', export_name: 'work' }] });
    expect(plan).toMatchObject({
      project_id: real.project_id,
      created: false,
      changes: { added: [expect.objectContaining({ mount_path: '/y' })], removed: [expect.objectContaining({ mount_path: '/x' })], unchanged: 0 },
    });
    expect(shape(plan.mounts)).toEqual(['/y up-b:work']);
    const unchanged = await admin.request<{ mounts: Array<{ mount_path: string; node_name: string; export_name: string }> }>('project_get', {
      project_id: real.project_id,
    });
    expect(shape(unchanged.mounts)).toEqual(['/x up-a:work']);
  });

  it('is all or nothing: an invalid entry anywhere changes nothing, and the error names it', async () => {
    const made = await up(admin, { name: 'up-atomic', vision: 'v1', mounts: [{ mount_path: '/keep', node_name: 'up-a', export_name: 'work' }] });
    // two nodes share a name: ambiguous
    const { invite_token } = await admin.request<{ invite_token: string }>('node_invite_create', { operator_token: OP });
    await admin.request('node_join', { invite_token, node_name: 'up-a', fs_url: 'ws://127.0.0.1:1/v2/fs' });
    const snapshot = async () => JSON.stringify([await admin.request('project_list'), await admin.request('project_get', { project_id: made.project_id })]);
    const before = await snapshot();
    const good = { mount_path: '/new', node_id: b.node_id, export_name: 'work' };
    const cases: Array<[Record<string, unknown>, string, RegExp]> = [
      [{ mount_path: '/z', node_name: 'nobody', export_name: 'w' }, 'node_not_found', /^mounts\[1\]\.node_name: no node is named "nobody"/],
      [
        { mount_path: '/z', node_id: 'node-0000000000000000', export_name: 'w' },
        'node_not_found',
        /^mounts\[1\]\.node_id: node node-0000000000000000 not found/,
      ],
      [{ mount_path: '/z', node_name: 'up-a', export_name: 'w' }, 'invalid_payload', /^mounts\[1\]\.node_name: 2 nodes are named "up-a"/],
      [{ mount_path: 'relative', node_id: b.node_id, export_name: 'w' }, 'invalid_payload', /^mounts\[1\]\.mount_path must be absolute/],
      [{ mount_path: '/new/', node_id: b.node_id, export_name: 'other' }, 'invalid_payload', /^mounts\[1\]\.mount_path: \/new is given twice for node up-b/],
      [{ mount_path: '/z', node_id: b.node_id, node_name: 'up-b', export_name: 'w' }, 'invalid_payload', /not both/],
      [{ mount_path: '/z', export_name: 'w' }, 'missing_field', /mounts\[1\]\.node_id or mounts\[1\]\.node_name/],
      [{ mount_path: 5, node_id: b.node_id, export_name: 'w' }, 'invalid_payload', /^mounts\[1\]\.mount_path must be a string$/],
    ];
    for (const [bad, code, message] of cases) {
      const e = await failure(up(admin, { name: 'up-atomic', vision: 'v2', mounts: [good, bad] }));
      expect({ bad, code: e.code }).toEqual({ bad, code });
      expect(e.message).toMatch(message);
      // a new project is not created either
      expect((await failure(up(admin, { name: 'up-atomic-new', mounts: [good, bad] }))).code).toBe(code);
    }
    expect(await snapshot()).toBe(before);
    expect((await admin.request<{ projects: Array<{ name: string }> }>('project_list')).projects.some((p) => p.name === 'up-atomic-new')).toBe(false);
    // two projects with the name: refused, naming them
    await admin.request('project_create', { name: 'up-twice', operator_token: OP });
    await admin.request('project_create', { name: 'up-twice', operator_token: OP });
    expect(await failure(up(admin, { name: 'up-twice', mounts: [] }))).toMatchObject({
      code: 'invalid_payload',
      message: expect.stringMatching(/^name: 2 projects are named "up-twice" \(proj-/),
    });
  });

  it('is a protected admin mutation: operator token required, user role refused', async () => {
    expect((await failure(admin.request('project_up', { name: 'up-gate', mounts: [] }))).code).toBe('operator_auth_failed');
    expect((await failure(admin.request('project_up', { name: 'up-gate', mounts: [], operator_token: 'wrong' }))).code).toBe('operator_auth_failed');
    const user = await session(svc.url, 'user', 'someone');
    expect((await failure(user.request('project_up', { name: 'up-gate', mounts: [], operator_token: OP }))).code).toBe('forbidden');
    expect((await failure(user.request('project_up', { name: 'up-gate', mounts: [], operator_token: OP, dry_run: true }))).code).toBe('forbidden');
    expect((await admin.request<{ projects: Array<{ name: string }> }>('project_list')).projects.some((p) => p.name === 'up-gate')).toBe(false);
    // bad payloads
    expect((await failure(up(admin, { name: 'up-gate' }))).code).toBe('missing_field');
    expect((await failure(up(admin, { name: 'up-gate', mounts: [], prune: 'no' }))).message).toBe('prune must be a boolean');
  });
});
