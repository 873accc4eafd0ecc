/**
 * e2e fuzz of stored state: 800 mutations
 * with randomly mangled members (null, wrong types, huge and traversal strings, nested
 * junk) through a real admin session. Whatever is accepted or refused, what the server
 * stores (checked every 10 mutations) keeps its types (names and URLs strings, policies `allow`/`deny`, mount paths
 * absolute, leases finite), the same after a SIGKILL and restart. `FUZZ_SEED` replays a run.
 */
import { closeSessions, session } from './helpers/control';
import { cleanupTmp, killAll, startSvc } from './support/processes';
import { prng } from './support/prng';
import { fuzzSeed, picker } from './helpers/fuzz';
import type { ControlClient } from '../libs/client/src';

const OPS = 800;
const NASTY: unknown[] = [
  null,
  null,
  null,
  true,
  false,
  -1,
  0,
  1.5,
  1e308,
  '',
  'x'.repeat(5000),
  [],
  {},
  ['a'],
  { a: 1 },
  '../x',
  '/ok',
  'ws://h:1/',
  'allow',
  'deny',
  'user',
  'admin',
  123456789,
];

afterAll(async () => {
  closeSessions();
  await killAll();
  cleanupTmp();
});

/** Every stored record as the API shows it keeps its types (docs/protocol.md "Projects and tokens", "Nodes"). */
async function invariants(c: ControlClient, nodeId: string): Promise<string[]> {
  const bad: string[] = [];
  const { projects } = await c.request<{ projects: Array<Record<string, unknown>> }>('project_list');
  for (const p of projects) {
    if (typeof p.name !== 'string' || typeof p.vision !== 'string')
      bad.push(`project ${String(p.project_id)}: name/vision ${JSON.stringify([p.name, p.vision])}`);
  }
  const { mounts, access_policy } = await c
    .request<{ mounts: Array<{ mount_path: unknown }>; access_policy: { invoke: unknown } }>('project_get', {
      project_id: projects[0].project_id,
      project_token: undefined,
    })
    .catch(() => ({ mounts: [], access_policy: { invoke: 'deny' } }));
  if (!['allow', 'deny'].includes(access_policy.invoke as string)) bad.push(`access_policy ${JSON.stringify(access_policy)}`);
  for (const m of mounts) if (typeof m.mount_path !== 'string' || !m.mount_path.startsWith('/')) bad.push(`mount ${JSON.stringify(m)}`);
  const { nodes } = await c.request<{ nodes: Array<Record<string, unknown>> }>('node_list');
  for (const n of nodes) {
    if (typeof n.fs_url !== 'string' || !/^wss?:\/\//.test(n.fs_url)) bad.push(`node fs_url ${JSON.stringify(n.fs_url)}`);
    if (typeof n.node_name !== 'string') bad.push(`node name ${JSON.stringify(n.node_name)}`);
    if (typeof n.lease_expires_at_ms !== 'number' || !Number.isFinite(n.lease_expires_at_ms)) bad.push(`lease ${JSON.stringify(n.lease_expires_at_ms)}`);
    if (typeof n.labels !== 'object' || n.labels === null) bad.push(`labels ${JSON.stringify(n.labels)}`);
  }
  const { services } = await c.request<{ services: Array<{ service_id: unknown }> }>('node_service_get', { node_id: nodeId });
  for (const s of services) if (typeof s.service_id !== 'string') bad.push(`service ${JSON.stringify(s)}`);
  return bad;
}

it(`keeps stored records well-typed through ${OPS} mangled mutations and a restart`, async () => {
  const seed = fuzzSeed();
  const rand = prng(seed);
  const pick = picker(rand);
  let svc = await startSvc({ env: { SVC_LOG_LEVEL: 'warn' } });
  let c = await session(svc.url);
  const proj = await c.request<{ project_id: string; project_token: string }>('project_create', { name: 'base' });
  const { invite_token } = await c.request<{ invite_token: string }>('node_invite_create');
  const node = await c.request<{ node_id: string; node_secret: string }>('node_join', { invite_token, node_name: 'n', fs_url: 'ws://127.0.0.1:1/v2/fs' });
  const ops: Record<string, () => Record<string, unknown>> = {
    project_create: () => ({ name: 'p', vision: 'v', access_policy: { invoke: 'deny' } }),
    project_update: () => ({ project_id: proj.project_id, name: 'n2', vision: 'v2', access_policy: { invoke: 'allow' } }),
    project_mount_set: () => ({ project_id: proj.project_id, node_id: node.node_id, export_name: 'work', mount_path: '/m' }),
    project_mount_remove: () => ({ project_id: proj.project_id, mount_path: '/m' }),
    project_activate: () => ({ project_id: proj.project_id, project_token: proj.project_token }),
    node_lease_refresh: () => ({
      node_id: node.node_id,
      node_secret: node.node_secret,
      lease_ttl_ms: 60_000,
      fs_url: 'ws://127.0.0.1:2/v2/fs',
      fs_auth_token: 'tok',
    }),
    node_service_upsert: () => ({
      node_id: node.node_id,
      node_secret: node.node_secret,
      platform: { os: 'linux', arch: 'x64', runtime_kind: 'native' },
      labels: { a: 'b' },
      services: [{ service_id: 's', kind: 'k', state: 'online', endpoints: ['/s'] }],
    }),
    node_invite_create: () => ({ ttl_ms: 60_000 }),
  };
  let accepted = 0;
  for (let i = 0; i < OPS; i++) {
    const op = pick(Object.keys(ops));
    const payload = ops[op]();
    for (let k = Math.floor(rand() * 3); k > 0; k--) {
      const key = pick(Object.keys(payload));
      const inner = payload[key];
      if (inner && typeof inner === 'object' && !Array.isArray(inner) && rand() < 0.5)
        (inner as Record<string, unknown>)[pick([...Object.keys(inner), 'zz'])] = pick(NASTY);
      else if ((key !== 'node_secret' && key !== 'node_id') || rand() < 0.2) payload[key] = pick(NASTY);
    }
    try {
      await c.request(op, payload);
      accepted++;
    } catch (e) {
      if (!(e as { code?: string }).code) throw new Error(`seed ${seed}, op ${i} ${op}: ${(e as Error).message}`);
    }
    // often, so a bad record is seen before a later good mutation overwrites it
    if (i % 10 === 9) expect({ seed, op: i, bad: await invariants(c, node.node_id) }).toEqual({ seed, op: i, bad: [] });
  }
  expect(accepted).toBeGreaterThan(OPS / 10);
  expect(await invariants(c, node.node_id)).toEqual([]);
  closeSessions();
  await svc.kill();
  svc = await startSvc({ stateDir: svc.stateDir, env: { SVC_LOG_LEVEL: 'warn' } });
  c = await session(svc.url);
  expect(await invariants(c, node.node_id)).toEqual([]);
  expect(svc.stderr()).not.toMatch(/"level":"(error|fatal)"/);
}, 180_000);
