/**
 * e2e: workspace mode against a real `svc` and two real `svc-fs-node`s with FS session auth: a
 * project with two nodes on one mount path; reads from the primary; SIGKILL of the primary and
 * the next `cat` served by the survivor within 5 s; restart on the same port; the topology's
 * `auth_token` opens each node (and a client without it is refused); project selection by
 * binding; a mount path changed with project_mount_remove/project_mount_set while a router runs
 * converges.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ControlClient } from '../libs/client/src';
import { WorkspaceRouter, WorkspaceTopologySource } from '../libs/fs/src/router';
import { closeSessions, Credentials, joinNode, session } from './helpers/control';
import { portOf, runMount, startFsNode } from './helpers/fs-mount';
import { ADMIN_TOKEN, BIN, cleanupTmp, killAll, Running, startProcess, startSvc, tmpDir, USER_TOKEN, waitFor } from './support/processes';

let svc: Running & { stateDir: string };
let admin: ControlClient;
let dirA: string;
let dirB: string;
let nodeA: Running;
let credsA: Credentials;
let credsB: Credentials;
let projectId: string;
let projectToken: string;
let ws: string[];

/**
 * Starts a node serving `dir` as export `shared` with its FS token, and tells svc its URL.
 * Node A gets the longer lease, so the selection rule (latest lease expiry among online
 * mounts) makes it the primary of /shared.
 */
async function startNode(creds: Credentials, dir: string, port = 0): Promise<Running> {
  const node = await startFsNode([`shared=${dir}`], { authToken: creds.fs_auth_token, port, name: creds.node_name });
  const lease = creds.node_name === 'node-a' ? 900_000 : 600_000;
  await admin.request('node_lease_refresh', { node_id: creds.node_id, node_secret: creds.node_secret, fs_url: node.url, lease_ttl_ms: lease });
  return node;
}

beforeAll(async () => {
  svc = await startSvc();
  admin = await session(svc.url);
  dirA = tmpDir('svc-ws-a-');
  dirB = tmpDir('svc-ws-b-');
  writeFileSync(join(dirA, 'who'), 'served by A\n');
  writeFileSync(join(dirB, 'who'), 'served by B\n');
  credsA = await joinNode(admin, 'node-a', 600_000);
  credsB = await joinNode(admin, 'node-b', 600_000);
  // node B runs until the end (killAll)
  [nodeA] = await Promise.all([startNode(credsA, dirA), startNode(credsB, dirB)]);
  const project = await admin.request<{ project_id: string; project_token: string }>('project_create', { name: 'workspace-e2e' });
  projectId = project.project_id;
  projectToken = project.project_token;
  for (const creds of [credsA, credsB]) {
    await admin.request('project_mount_set', { project_id: projectId, node_id: creds.node_id, export_name: 'shared', mount_path: '/shared' });
  }
  ws = ['--workspace-url', svc.url, '--auth-token', ADMIN_TOKEN, '--project-id', projectId, '--project-token', projectToken];
}, 60_000);

afterAll(async () => {
  closeSessions();
  await killAll();
  cleanupTmp();
});

it('reads from the primary with the auth_token of the topology; a client without it is refused', async () => {
  const r = await runMount([...ws, 'cat', '/shared/who']);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  expect(r.stdout.toString()).toBe('served by A\n');
  const root = await runMount([...ws, '--json', 'readdir', '/']);
  expect(JSON.parse(root.stdout.toString()).entries.map((e: { name: string }) => e.name)).toEqual(['shared']);
  // the same node, without the token the topology carries
  const bare = await runMount(['--endpoint', `a=${nodeA.url}#shared`, 'cat', '/a/who']);
  expect(bare.code).toBe(1);
  expect(bare.stderr).toMatch(/AuthMissing.*\(errno 13\)/);
});

it('status shows the project, both candidates with their state and a probe, and no secret', async () => {
  const r = await runMount([...ws, '--json', 'status']);
  expect(r.code).toBe(0);
  const out = r.stdout.toString();
  for (const secret of [credsA.fs_auth_token, credsB.fs_auth_token, projectToken, ADMIN_TOKEN]) expect(out).not.toContain(secret);
  const report = JSON.parse(out);
  expect(report).toMatchObject({ mode: 'workspace', project_id: projectId, availability: { mounts_total: 1, online: 1 } });
  expect(report.mounts).toHaveLength(1);
  expect(report.mounts[0].candidates).toEqual([
    expect.objectContaining({
      node_id: credsA.node_id,
      node_name: 'node-a',
      state: 'online',
      selected: true,
      auth: true,
      probe: expect.objectContaining({ ok: true }),
    }),
    expect.objectContaining({ node_id: credsB.node_id, state: 'online', selected: false, auth: true, probe: expect.objectContaining({ ok: true }) }),
  ]);
  const table = await runMount([...ws, 'status']);
  expect(table.stdout.toString()).toMatch(/^\/shared +node-a +shared +online +primary +token .* ok /m);
  expect(table.stdout.toString()).toMatch(/^ +node-b +shared +online +standby 1 +token .* ok /m);
});

it('a wrong project token is refused by the control plane (exit 2)', async () => {
  const r = await runMount([
    '--workspace-url',
    svc.url,
    '--auth-token',
    ADMIN_TOKEN,
    '--project-id',
    projectId,
    '--project-token',
    'not-the-token',
    'cat',
    '/shared/who',
  ]);
  expect(r.code).toBe(2);
  expect(r.stderr).toMatch(/^svc-fs-mount: control plane: project_auth_failed: /);
  expect(r.stderr).not.toContain('not-the-token');
});

it('the agent binding selects the project when --project-id is not given', async () => {
  const agent = await session(svc.url, 'admin', 'agent-x');
  await agent.request('project_activate', { project_id: projectId, project_token: projectToken });
  const r = await runMount(['--workspace-url', svc.url, '--auth-token', ADMIN_TOKEN, '--agent-id', 'agent-x', 'cat', '/shared/who']);
  expect(r.code).toBe(0);
  expect(r.stdout.toString()).toBe('served by A\n');
  const other = await runMount(['--workspace-url', svc.url, '--auth-token', ADMIN_TOKEN, '--agent-id', 'agent-y', '--json', 'readdir', '/']);
  expect(JSON.parse(other.stdout.toString()).entries).toEqual([]);
});

it('SIGKILL of the primary: the next cat returns the survivor within 5 s; the restarted node serves again', async () => {
  const port = portOf(nodeA.url);
  await nodeA.kill();
  const r = await runMount([...ws, 'cat', '/shared/who']);
  expect(r.code).toBe(0);
  expect(r.stdout.toString()).toBe('served by B\n');
  expect(r.ms).toBeLessThan(5000);
  nodeA = await startNode(credsA, dirA, port);
  expect(portOf(nodeA.url)).toBe(port);
  const again = await runMount([...ws, 'cat', '/shared/who']);
  expect(again.code).toBe(0);
  expect(again.stdout.toString()).toBe('served by A\n');
}, 30_000);

it('a running router follows deltas: a mount path moved with project_mount_remove/project_mount_set converges', async () => {
  // sync interval 0: only the topology deltas can bring the change
  const source = new WorkspaceTopologySource({ url: svc.url, token: ADMIN_TOKEN, projectId, projectToken, syncIntervalMs: 0 });
  const router = new WorkspaceRouter(source);
  const changes: Array<{ added: string[]; removed: string[] }> = [];
  router.on('topology', (c) => changes.push(c));
  try {
    await router.start();
    expect((await router.readdirAll('/')).map((e) => e.name)).toEqual(['shared']);
    const fh = (await router.open('/shared/who')).fh;
    expect((await router.read(fh, 0, 100)).data.toString()).toBe('served by A\n');
    await router.release(fh);
    await admin.request('project_mount_remove', { project_id: projectId, mount_path: '/shared' });
    await admin.request('project_mount_set', { project_id: projectId, node_id: credsB.node_id, export_name: 'shared', mount_path: '/team/moved' });
    await waitFor(async () => JSON.stringify(router.mountPaths) === '["/team/moved"]', 5000);
    expect((await router.readdirAll('/')).map((e) => e.name)).toEqual(['team']);
    expect((await router.readdirAll('/team')).map((e) => e.name)).toEqual(['moved']);
    await expect(router.getattr('/shared/who')).rejects.toMatchObject({ errno: 2 });
    const h = (await router.open('/team/moved/who')).fh;
    expect((await router.read(h, 0, 100)).data.toString()).toBe('served by B\n');
    await router.release(h);
    expect(changes.some((c) => c.removed.includes('/shared') || c.added.includes('/team/moved'))).toBe(true);
    expect(source.info()).toMatchObject({ kind: 'workspace', connected: true, last_error: null });
  } finally {
    router.close();
  }
}, 30_000);

it('while svc is down the router keeps the last topology and serves; it reconnects when svc is back', async () => {
  const source = new WorkspaceTopologySource({ url: svc.url, token: ADMIN_TOKEN, projectId, projectToken, syncIntervalMs: 0 });
  const router = new WorkspaceRouter(source);
  try {
    await router.start();
    const mounts = [...router.mountPaths];
    expect(mounts.length).toBeGreaterThan(0);
    const port = portOf(svc.url);
    const syncedBefore = source.info().last_sync_ms!;
    closeSessions();
    await svc.stop();
    await waitFor(() => !source.info().connected, 5000);
    expect([...router.mountPaths]).toEqual(mounts);
    expect((await router.getattr(`${mounts[0]}/who`)).k).toBe(1);
    const back = await startProcess(BIN.svc, ['--port', String(port), '--state-dir', svc.stateDir], {
      SVC_ADMIN_TOKEN: ADMIN_TOKEN,
      SVC_USER_TOKEN: USER_TOKEN,
    });
    svc = { ...back, stateDir: svc.stateDir };
    await waitFor(() => source.info().connected, 15_000, 100);
    // a fresh read of the status after the reconnect
    await waitFor(() => (source.info().last_sync_ms ?? 0) > syncedBefore && source.info().last_error === null, 5000);
    expect([...router.mountPaths]).toEqual(mounts);
  } finally {
    router.close();
  }
}, 40_000);
