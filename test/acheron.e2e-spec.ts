/**
 * e2e: the Acheron runtime namespace (docs/namespace.md) on the built `svc`: projected node and
 * service files equal to the catalog, invoke_path resolution, the service permission
 * matrix, fid rules and errors, per-session projections, /debug for admins.
 */
import { Client, closeSessions, Credentials, failure, joinNode, ProjectDetail, session } from './helpers/control';
import { cleanupTmp, killAll, Running, startSvc } from './support/processes';

let svc: Running;
let admin: Client;

beforeAll(async () => {
  svc = await startSvc();
  admin = await session(svc.url);
});
afterAll(async () => {
  closeSessions();
  await killAll();
  cleanupTmp();
});

/** A runtime session with helpers: walk from the root fid 0 and read a whole file. */
async function runtime(role: 'admin' | 'user' = 'admin', agentId?: string) {
  const c = await session(svc.url, role, agentId);
  await c.attach(0, 65536);
  let next = 100;
  const walk = (path: string[]) => {
    const fid = next++;
    return c.acheron<{ qid: { path: string; type: string }; walked: number }>('acheron.t_walk', { fid: 0, newfid: fid, path }).then((r) => ({ fid, ...r }));
  };
  const readAll = async (path: string[]) => {
    const { fid } = await walk(path);
    await c.acheron('acheron.t_open', { fid, mode: 'r' });
    const chunks: Buffer[] = [];
    for (let offset = 0; ;) {
      const r = await c.acheron<{ data_b64: string; n: number; eof: boolean }>('acheron.t_read', { fid, offset, count: 65536 });
      chunks.push(Buffer.from(r.data_b64, 'base64'));
      offset += r.n;
      if (r.eof || r.n === 0) break;
    }
    await c.acheron('acheron.t_clunk', { fid });
    return Buffer.concat(chunks).toString('utf8');
  };
  const ls = async (path: string[]) => (JSON.parse(await readAll(path)) as { entries: Array<{ name: string; kind: string }> }).entries.map((e) => e.name);
  return { c, walk, readAll, ls, json: async (path: string[]) => JSON.parse(await readAll(path)) };
}

async function upsert(creds: Credentials, services: unknown[]) {
  return admin.request('node_service_upsert', { node_id: creds.node_id, node_secret: creds.node_secret, services });
}

const base = (id: string, over: Record<string, unknown> = {}) => ({ service_id: id, kind: 'tool', state: 'online', endpoints: [`/svc/${id}`], ...over });

describe('projected node and service files', () => {
  it('projects NODE.json, STATUS.json and every service file equal to the catalog', async () => {
    const n = await joinNode(admin, 'proj-node');
    await upsert(n, [
      base('fs', { kind: 'fs', capabilities: { rw: true, export_count: 1 }, mounts: [{ mount_id: 'fs', mount_path: `/nodes/${n.node_id}/fs` }] }),
      base('terminal-t1', {
        kind: 'terminal',
        capabilities: { pty: true, terminal_id: 't1', invoke: true },
        ops: { invoke: 'control/invoke.json', paths: { exec: 'control/invoke.json' } },
        runtime: { kind: 'native_proc', entry: 'internal-terminal-invoke' },
        help_md: '# Terminal\n',
      }),
      base('manifest-svc', { schema: { type: 'object' }, permissions: { allow_roles: ['*'] } }),
    ]);
    const r = await runtime();
    expect(await r.ls([])).toEqual(['nodes', 'projects', 'debug']);
    expect(await r.ls(['nodes'])).toContain(n.node_id);
    expect(await r.ls(['nodes', n.node_id])).toEqual(['NODE.json', 'STATUS.json', 'services', 'fs']);
    const { node } = await admin.request<{ node: Record<string, unknown> }>('node_get', { node_id: n.node_id });
    const nodeJson = await r.json(['nodes', n.node_id, 'NODE.json']);
    expect({ ...nodeJson, last_seen_ms: 0 }).toEqual({ ...node, last_seen_ms: 0 });
    expect(await r.json(['nodes', n.node_id, 'STATUS.json'])).toEqual({ state: 'online', online: true, lease_expires_at_ms: node.lease_expires_at_ms });
    const catalog = await admin.request<{ services: Array<Record<string, unknown>> }>('node_service_get', { node_id: n.node_id });
    expect(await r.ls(['nodes', n.node_id, 'services'])).toEqual(catalog.services.map((s) => s.service_id));
    for (const svcEntry of catalog.services) {
      const dir = ['nodes', n.node_id, 'services', svcEntry.service_id as string];
      expect(await r.ls(dir)).toEqual(['SCHEMA.json', 'STATUS.json', 'CAPS.json', 'OPS.json', 'RUNTIME.json', 'PERMISSIONS.json', 'MOUNTS.json', 'HELP.md']);
      expect(await r.json([...dir, 'SCHEMA.json'])).toEqual(svcEntry.schema);
      expect(await r.json([...dir, 'CAPS.json'])).toEqual(svcEntry.capabilities);
      expect(await r.json([...dir, 'OPS.json'])).toEqual(svcEntry.ops);
      expect(await r.json([...dir, 'RUNTIME.json'])).toEqual(svcEntry.runtime);
      expect(await r.json([...dir, 'PERMISSIONS.json'])).toEqual(svcEntry.permissions);
      expect(await r.json([...dir, 'MOUNTS.json'])).toEqual(svcEntry.mounts);
      expect(await r.readAll([...dir, 'HELP.md'])).toBe(svcEntry.help_md ?? '');
      expect((await r.json([...dir, 'STATUS.json'])).state).toBe(svcEntry.state);
    }
  });

  it.each([
    ['the control/invoke.json default', {}, '/svc/x/control/invoke.json'],
    ['a relative ops.invoke', { invoke: 'run/now.json' }, '/svc/x/run/now.json'],
    ['an absolute ops.invoke', { invoke: '/elsewhere/invoke.json' }, '/elsewhere/invoke.json'],
    ['a relative ops.paths.invoke', { paths: { invoke: 'p/invoke.json' } }, '/svc/x/p/invoke.json'],
    ['an absolute ops.paths.invoke', { paths: { invoke: '/abs/p.json' } }, '/abs/p.json'],
    ['ops.invoke before ops.paths.invoke', { invoke: 'first.json', paths: { invoke: 'second.json' } }, '/svc/x/first.json'],
  ])('resolves invoke_path for %s', async (_n, ops, expected) => {
    const n = await joinNode(admin, 'invoke-node');
    await upsert(n, [base('x', { ops })]);
    const r = await runtime();
    expect(await r.json(['nodes', n.node_id, 'services', 'x', 'STATUS.json'])).toEqual({ state: 'online', invoke_path: expected });
  });
});

describe('permission matrix', () => {
  const allowRoles = [undefined, ['user'], ['admin'], ['*']];
  const defaults = [undefined, 'deny'];
  const requireToken = [false, true];
  const cases: Array<{ id: string; permissions: Record<string, unknown>; allow: unknown; def: unknown; req: boolean }> = [];
  let i = 0;
  for (const allow of allowRoles) {
    for (const def of defaults) {
      for (const req of requireToken) {
        const permissions: Record<string, unknown> = {};
        if (allow !== undefined) permissions.allow_roles = allow;
        if (def !== undefined) permissions.default = def;
        if (req) permissions.require_project_token = true;
        cases.push({ id: `s${i++}`, permissions, allow, def, req });
      }
    }
  }
  /** The service permission rule, written out independently of the implementation. */
  const expected = (c: (typeof cases)[number], role: 'admin' | 'user', token: boolean) => {
    if (role === 'admin') return true;
    let visible: boolean;
    if (Array.isArray(c.allow)) visible = (c.allow as string[]).some((r) => ['user', 'all', '*'].includes(r));
    else visible = c.def !== 'deny';
    return visible && (!c.req || token);
  };

  it.each([
    ['admin', false],
    ['admin', true],
    ['user', false],
    ['user', true],
  ] as const)('role %s, bound project token %s: /services shows exactly the permitted services', async (role, token) => {
    const n = await joinNode(admin, `matrix-${role}-${token}`);
    await upsert(
      n,
      cases.map((c) => base(c.id, { permissions: c.permissions })),
    );
    const agent = `matrix-${role}-${token}`;
    if (token) {
      const p = await admin.request<ProjectDetail>('project_create', { name: agent });
      const c = await session(svc.url, role, agent);
      await c.request('project_activate', { project_id: p.project_id, project_token: p.project_token });
    }
    const r = await runtime(role, agent);
    const listed = await r.ls(['nodes', n.node_id, 'services']);
    for (const c of cases) {
      const want = expected(c, role, token);
      expect({ id: c.id, permissions: c.permissions, visible: listed.includes(c.id) }).toEqual({ id: c.id, permissions: c.permissions, visible: want });
      if (!want) {
        // hidden services are absent from walks too: enoent, not eperm
        expect((await failure(r.walk(['nodes', n.node_id, 'services', c.id]))).code).toBe('enoent');
      }
    }
  });
});

describe('fids, opens and errors', () => {
  it('applies the fid rules and answers each bad input with its code, keeping the session', async () => {
    const n = await joinNode(admin, 'fid-node');
    const r = await runtime();
    const c = r.c;
    expect((await failure(c.acheron('acheron.t_walk', { fid: 999, newfid: 5, path: [] }))).code).toBe('invalid');
    await c.acheron('acheron.t_walk', { fid: 0, newfid: 5, path: ['nodes'] });
    expect((await failure(c.acheron('acheron.t_walk', { fid: 0, newfid: 5, path: [] }))).code).toBe('invalid');
    expect((await failure(c.acheron('acheron.t_walk', { fid: 0, newfid: 6, path: ['nodes', 'node-missing'] }))).code).toBe('enoent');
    expect((await failure(c.acheron('acheron.t_walk', { fid: 0, newfid: 6, path: ['nodes', n.node_id, 'NODE.json', 'x'] }))).code).toBe('enotdir');
    expect((await failure(c.acheron('acheron.t_walk', { fid: 0, newfid: 6, path: ['..'] }))).code).toBe('invalid');
    expect((await failure(c.acheron('acheron.t_walk', { fid: 0, newfid: 6, path: 'nodes' }))).code).toBe('invalid');
    const file = await r.walk(['nodes', n.node_id, 'NODE.json']);
    expect(file.qid).toEqual({ path: `/nodes/${n.node_id}/NODE.json`, type: 'file' });
    expect((await failure(c.acheron('acheron.t_open', { fid: file.fid, mode: 'w' }))).code).toBe('eperm');
    expect((await failure(c.acheron('acheron.t_open', { fid: file.fid, mode: 'x' }))).code).toBe('invalid');
    expect((await failure(c.acheron('acheron.t_read', { fid: file.fid, offset: 0, count: 10 }))).code).toBe('invalid');
    expect((await failure(c.acheron('acheron.t_open', { fid: 5, mode: 'rw' }))).code).toBe('eisdir');
    const opened = await c.acheron<{ iounit: number }>('acheron.t_open', { fid: file.fid, mode: 'r' });
    expect((await failure(c.acheron('acheron.t_write', { fid: file.fid, offset: 0, data_b64: 'AA==' }))).code).toBe('invalid');
    // reading more than msize is clamped
    const big = await c.acheron<{ n: number }>('acheron.t_read', { fid: file.fid, offset: 0, count: 10_000_000 });
    expect(big.n).toBeLessThanOrEqual(opened.iounit);
    const stat = await c.acheron<Record<string, unknown>>('acheron.t_stat', { fid: file.fid });
    expect(stat).toMatchObject({ name: 'NODE.json', kind: 'file', writable: false, mode: 0o100444 });
    expect(await c.acheron('acheron.t_clunk', { fid: file.fid })).toEqual({});
    expect((await failure(c.acheron('acheron.t_clunk', { fid: file.fid }))).code).toBe('invalid');
    expect(await c.acheron('acheron.t_flush', { oldtag: 12345 })).toEqual({});
    // still alive
    expect(await c.request('ping')).toEqual({});
  });
});

describe('per-session projections', () => {
  it('shows projects and /debug by role and binding, never across sessions', async () => {
    const p = await admin.request<ProjectDetail>('project_create', { name: 'visible' });
    const q = await admin.request<ProjectDetail>('project_create', { name: 'hidden' });
    const n = await joinNode(admin, 'sess-node');
    await upsert(n, [base('secret', { permissions: { default: 'deny' } }), base('public')]);
    const user = await runtime('user', 'sess-user');
    const boss = await runtime('admin', 'sess-admin');
    await user.c.request('project_activate', { project_id: p.project_id, project_token: p.project_token });
    const [userProjects, adminProjects] = await Promise.all([user.ls(['projects']), boss.ls(['projects'])]);
    expect(userProjects).toEqual([p.project_id]);
    expect(adminProjects).toEqual(expect.arrayContaining([p.project_id, q.project_id]));
    expect((await failure(user.walk(['projects', q.project_id]))).code).toBe('enoent');
    expect(await user.ls(['projects', p.project_id])).toEqual(['STATUS.json', 'fs']);
    const status = await user.json(['projects', p.project_id, 'STATUS.json']);
    expect(status).toMatchObject({ project_id: p.project_id, agent_id: 'sess-user' });
    expect(await user.ls(['nodes', n.node_id, 'services'])).toEqual(['public']);
    expect(await boss.ls(['nodes', n.node_id, 'services'])).toEqual(['secret', 'public']);
    expect(await user.ls([])).toEqual(['nodes', 'projects']);
    expect((await failure(user.walk(['debug']))).code).toBe('enoent');
    expect(await boss.ls(['debug'])).toEqual(['availability.json', 'events.ndjson']);
    const availability = await boss.json(['debug', 'availability.json']);
    expect(Array.isArray(availability.mounts)).toBe(true);
  });

  it('lists recent availability transitions in /debug/events.ndjson', async () => {
    const p = await admin.request<ProjectDetail>('project_create', { name: 'events' });
    const n = await joinNode(admin, 'ev-node');
    await admin.request('project_mount_set', { project_id: p.project_id, node_id: n.node_id, export_name: 'work', mount_path: '/ev' });
    const boss = await runtime();
    const lines = (await boss.readAll(['debug', 'events.ndjson']))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.some((e) => e.project_id === p.project_id && e.mount_path === '/ev' && e.state === 'online')).toBe(true);
  });
});
