/**
 * e2e: several `svc` replicas on one PostgreSQL (docs/operations.md "State"), on a server this
 * file starts itself: a mutation on one is read on the other within 1 s; catalog events and
 * availability transitions reach every replica's subscribers once; the sweep moves to a
 * surviving replica; role and project tokens rotated on one are refused on the other within
 * 1 s; one invite redeemed on both joins one node; the database stopped and started again is
 * ridden out without a restart. Skipped, saying why, where PostgreSQL is not installed.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ControlClient } from '../libs/client/src';
import { closeSessions, failure, joinNode, ProjectDetail, session, untilAnswered, untilRefused } from './helpers/control';
import { replicaCycles } from './helpers/kill9';
import { Postgres, postgresBinDir, startPostgres } from './support/postgres';
import { cleanupTmp, killAll, Running, sleep, startSvc, waitFor } from './support/processes';
import { fuzzSeed } from './helpers/fuzz';

const maybe = postgresBinDir() ? describe : describe.skip;
let pg: Postgres | null = null;

beforeAll(async () => {
  pg = await startPostgres();
}, 60_000);
afterEach(() => closeSessions());
afterAll(async () => {
  await killAll();
  await pg?.close();
  cleanupTmp();
});

/** Two replicas on one new database (env tokens, a fast sweep). */
async function pair(env: NodeJS.ProcessEnv = {}): Promise<[Running, Running, string]> {
  const url = await pg!.newDatabase();
  const common = { SVC_DATABASE_URL: url, SVC_SWEEP_INTERVAL_MS: '200', ...env };
  const a = await startSvc({ env: common });
  const b = await startSvc({ env: common });
  return [a, b, url];
}

type Event = [string, Record<string, unknown>];
function record(c: ControlClient): Event[] {
  const got: Event[] = [];
  c.on('event', (type: string, payload: Record<string, unknown>) => got.push([type, payload]));
  return got;
}

async function sweeperOf(replicas: Running[]): Promise<number> {
  const found = await waitFor(
    async () => {
      for (let i = 0; i < replicas.length; i++) {
        const c = await session(replicas[i].url);
        const m = await c.request<{ metrics: Array<{ name: string; values: Array<{ value: number }> }> }>('metrics');
        if (m.metrics.find((x) => x.name === 'svc_sweeper_leader')?.values[0]?.value === 1) return { index: i };
      }
      return undefined;
    },
    8000,
    250,
  );
  return found.index;
}

maybe('replicas on one PostgreSQL', () => {
  it('shows a mutation made on one replica on the other within 1 s, and serves every operation on both', async () => {
    const [a, b] = await pair();
    const ca = await session(a.url);
    const cb = await session(b.url);
    for (let i = 0; i < 5; i++) {
      const p = await ca.request<ProjectDetail>('project_create', { name: `seen-${i}` });
      const t0 = Date.now();
      await untilAnswered(cb, 'project_get', { project_id: p.project_id });
      expect(Date.now() - t0).toBeLessThan(1000);
      // and back: a change on B, read on A
      await cb.request('project_update', { project_id: p.project_id, vision: `v${i}` });
      await waitFor(
        async () =>
          ((await ca.request<ProjectDetail>('project_get', { project_id: p.project_id })) as unknown as { vision: string }).vision === `v${i}` || undefined,
        1000,
        20,
      );
    }
    // read your writes behind a load balancer: a node paired on A refreshes its lease on B at
    // once, a project created on A is opened with its token on B at once, a request filed on A
    // is polled on B at once
    for (let i = 0; i < 5; i++) {
      const fresh = await joinNode(ca, `lb-${i}`);
      await cb.request('node_lease_refresh', { node_id: fresh.node_id, node_secret: fresh.node_secret });
      const q = await ca.request<ProjectDetail>('project_create', { name: `lb-${i}` });
      const user = await session(b.url, 'user', `lb-${i}`);
      await user.request('project_get', { project_id: q.project_id, project_token: q.project_token });
      await user.request('workspace_status', { project_id: q.project_id, project_token: q.project_token });
      const r = await ca.request<{ request_id: string; request_secret: string }>('node_join_request', {
        node_name: `lb-req-${i}`,
        fs_url: 'ws://127.0.0.1:1/v2/fs',
      });
      await expect(cb.request('node_join_status', r)).resolves.toMatchObject({ state: 'pending' });
    }
    const n = await joinNode(cb, 'on-b');
    const t1 = Date.now();
    await waitFor(
      async () => (await ca.request<{ nodes: Array<{ node_id: string }> }>('node_list')).nodes.some((x) => x.node_id === n.node_id) || undefined,
      1000,
      20,
    );
    expect(Date.now() - t1).toBeLessThan(1000);
  }, 60_000);

  it('delivers a catalog event of an upsert made on A to a watcher on B once, and each availability transition to a debug subscriber on each replica once', async () => {
    const [a, b] = await pair();
    const ca = await session(a.url);
    const cb = await session(b.url);
    const node = await joinNode(ca, 'watched', 4000);
    await untilAnswered(cb, 'node_service_watch', { node_id: node.node_id });
    const onB = record(cb);
    await ca.request('node_service_upsert', {
      node_id: node.node_id,
      node_secret: node.node_secret,
      services: [{ service_id: 'svc1', kind: 'fs', state: 'ready', endpoints: ['/nodes/x/fs'] }],
    });
    await waitFor(() => onB.find(([t]) => t === 'control.node_service_event'), 2000);
    await sleep(500);
    const catalog = onB.filter(([t]) => t === 'control.node_service_event');
    expect(catalog).toHaveLength(1);
    expect(catalog[0][1]).toMatchObject({ event: 'upsert', node_id: node.node_id, added: ['svc1'] });

    const p = await cb.request<ProjectDetail>('project_create', { name: 'avail' });
    await untilAnswered(ca, 'project_get', { project_id: p.project_id });
    const da = await session(a.url);
    const db = await session(b.url);
    await da.request('debug_subscribe');
    await db.request('debug_subscribe');
    const evA = record(da);
    const evB = record(db);
    await ca.request('project_mount_set', { project_id: p.project_id, node_id: node.node_id, export_name: 'work', mount_path: '/w' });
    // the lease (4 s) runs out: one transition online -> degraded, seen once on each replica
    const degraded = (ev: Event[]) => ev.filter(([t, e]) => t === 'control.workspace_availability' && e.mount_path === '/w' && e.state === 'degraded');
    await waitFor(() => degraded(evA).length > 0 && degraded(evB).length > 0, 6000);
    await sleep(800);
    expect(degraded(evA)).toHaveLength(1);
    expect(degraded(evB)).toHaveLength(1);
    const online = (ev: Event[]) => ev.filter(([t, e]) => t === 'control.workspace_availability' && e.mount_path === '/w' && e.state === 'online');
    expect(online(evA)).toHaveLength(1);
    expect(online(evB)).toHaveLength(1);
  }, 60_000);

  it('moves the sweep to the surviving replica when the sweeper is killed: a later expiry is one transition within 6 s', async () => {
    const [a, b] = await pair();
    const replicas = [a, b];
    const leader = await sweeperOf(replicas);
    const survivor = replicas[1 - leader];
    const admin = await session(survivor.url);
    const p = await admin.request<ProjectDetail>('project_create', { name: 'takeover' });
    const node = await joinNode(admin, 'short-lease', 60_000);
    await admin.request('project_mount_set', { project_id: p.project_id, node_id: node.node_id, export_name: 'work', mount_path: '/t' });
    const debug = await session(survivor.url);
    await debug.request('debug_subscribe');
    const ev = record(debug);
    await replicas[leader].kill();
    // the lease ends 1 s after the sweeper died
    const { lease_expires_at_ms } = await admin.request<{ lease_expires_at_ms: number }>('node_lease_refresh', {
      node_id: node.node_id,
      node_secret: node.node_secret,
      lease_ttl_ms: 1000,
    });
    const transitions = () => ev.filter(([t, e]) => t === 'control.workspace_availability' && e.mount_path === '/t' && e.state === 'degraded');
    await waitFor(() => transitions().length > 0, 7000, 50);
    expect(Date.now() - lease_expires_at_ms).toBeLessThan(6000);
    await sleep(1000);
    expect(transitions()).toHaveLength(1);
    expect(await sweeperOf([survivor])).toBe(0);
  }, 60_000);

  it('refuses a role token rotated on A, and a project token rotated on A, on B within 1 s', async () => {
    // generated role tokens (not from the environment), shared by both replicas
    const url = await pg!.newDatabase();
    const env = { SVC_DATABASE_URL: url, SVC_ADMIN_TOKEN: '', SVC_USER_TOKEN: '' };
    const a = await startSvc({ env });
    const b = await startSvc({ env });
    const tokens = JSON.parse(readFileSync(join(a.stateDir, 'auth_tokens.json'), 'utf8')) as { admin_token: string; user_token: string };
    const connect = (url: string, token: string) => ControlClient.connect({ url, token, connectTimeoutMs: 3000 });
    const ca = await connect(a.url, tokens.admin_token);
    const cbUser = await connect(b.url, tokens.user_token);
    cbUser.close();
    const { token: newUser } = await ca.request<{ token: string }>('auth_rotate', { role: 'user' });
    const t0 = Date.now();
    await waitFor(
      () =>
        connect(b.url, tokens.user_token).then(
          (c) => (c.close(), undefined),
          () => true,
        ),
      1000,
      25,
    );
    expect(Date.now() - t0).toBeLessThan(1000);
    (await connect(b.url, newUser)).close();

    const p = await ca.request<ProjectDetail>('project_create', { name: 'rotated' });
    const cb = await connect(b.url, tokens.admin_token);
    await untilAnswered(cb, 'project_get', { project_id: p.project_id });
    const user = await connect(b.url, newUser);
    await user.request('workspace_status', { project_id: p.project_id, project_token: p.project_token });
    await ca.request('project_token_rotate', { project_id: p.project_id });
    const t1 = Date.now();
    await untilRefused(user, 'project_get', { project_id: p.project_id, project_token: p.project_token });
    expect(Date.now() - t1).toBeLessThan(1000);
    expect((await failure(user.request('project_get', { project_id: p.project_id, project_token: p.project_token }))).code).toBe('project_auth_failed');
    for (const c of [ca, cb, user]) c.close();
  }, 60_000);

  it('joins one node when one invite is redeemed on A and B at once; racing mount_sets give a serial result', async () => {
    const [a, b] = await pair();
    const ca = await session(a.url);
    const cb = await session(b.url);
    for (let round = 0; round < 10; round++) {
      const { invite_token } = await ca.request<{ invite_token: string }>('node_invite_create', { ttl_ms: 60_000 });
      const results = await Promise.allSettled([
        ca.request('node_join', { invite_token, node_name: `race-${round}-a`, fs_url: 'ws://127.0.0.1:1/v2/fs' }),
        cb.request('node_join', { invite_token, node_name: `race-${round}-b`, fs_url: 'ws://127.0.0.1:1/v2/fs' }),
      ]);
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
      const refused = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
      expect((refused.reason as { code: string }).code).toBe('invite_redeemed');
    }
    await sleep(300);
    const names = (await cb.request<{ nodes: Array<{ node_name: string }> }>('node_list')).nodes.map((n) => n.node_name).filter((n) => n.startsWith('race-'));
    expect(names).toHaveLength(10);
    // the same mount set on both at once: one mount, not two
    const p = await ca.request<ProjectDetail>('project_create', { name: 'race' });
    const n = await joinNode(ca, 'race-target');
    await untilAnswered(cb, 'node_get', { node_id: n.node_id });
    const set = { project_id: p.project_id, node_id: n.node_id, export_name: 'work', mount_path: '/same' };
    await Promise.all([ca.request('project_mount_set', set), cb.request('project_mount_set', set)]);
    expect((await cb.request<ProjectDetail>('project_get', { project_id: p.project_id })).mounts).toHaveLength(1);
  }, 60_000);

  it('rides out PostgreSQL stopping and starting again: /readyz 503 then 200, mutations unavailable meanwhile, reads served, nothing acknowledged lost', async () => {
    const url = await pg!.newDatabase();
    const a = await startSvc({ env: { SVC_DATABASE_URL: url, SVC_METRICS_PORT: '0' } });
    const ca = await session(a.url);
    const acked: string[] = [];
    for (let i = 0; i < 5; i++) acked.push((await ca.request<ProjectDetail>('project_create', { name: `before-${i}` })).project_id);
    const ready = async () => (await fetch(`${a.opsUrl}/readyz`)).status;
    expect(await ready()).toBe(200);
    await pg!.stopServer();
    try {
      const refused = await failure(ca.request('project_create', { name: 'during' }));
      expect(refused.code).toBe('unavailable');
      await waitFor(async () => ((await ready()) === 503 ? true : undefined), 5000, 100);
      // reads are served from the last known state
      const { projects } = await ca.request<{ projects: Array<{ project_id: string }> }>('project_list');
      expect(projects.map((p) => p.project_id).sort()).toEqual([...acked].sort());
    } finally {
      await pg!.startServer();
    }
    await waitFor(async () => ((await ready()) === 200 ? true : undefined), 10_000, 100);
    acked.push((await ca.request<ProjectDetail>('project_create', { name: 'after' })).project_id);
    // a second replica, started now, reads everything acknowledged
    const b = await startSvc({ env: { SVC_DATABASE_URL: url } });
    const cb = await session(b.url);
    const { projects } = await cb.request<{ projects: Array<{ project_id: string; name: string }> }>('project_list');
    expect(projects.map((p) => p.project_id).sort()).toEqual([...acked].sort());
    expect(projects.some((p) => p.name === 'during')).toBe(false);
  }, 90_000);
});

maybe('kill -9 durability with two replicas', () => {
  const seed = fuzzSeed();
  it('30 cycles: a replica SIGKILLed at a random instant loses nothing acknowledged, the other keeps serving', async () => {
    console.log(`replica kill -9 cycles: FUZZ_SEED=${seed}`);
    await replicaCycles(await pg!.newDatabase(), 30, seed);
  }, 240_000);
});
