/**
 * e2e: `svc-fs-node` control daemon mode against the built `svc`: pairing by
 * invite and by approved request, the published catalog record,
 * labels, --no-fs-service, manifests and a services dir, lease recovery after the control plane
 * was down for 10 s, re-pairing after node_delete, the fatal cases (exit 3), and the lease at
 * the end: released by a clean stop (failover at once); after a kill, degraded when the
 * daemon's control session closed (docs/protocol.md "Liveness from daemon sessions").
 */
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client, closeSessions, failure, session } from './helpers/control';
import { ADMIN_TOKEN, BIN, cleanupTmp, killAll, runCli, Running, sleep, startNodeDaemon, startSvc, tmpDir, waitFor } from './support/processes';

afterEach(() => closeSessions());
afterAll(async () => {
  await killAll();
  cleanupTmp();
});

const FAST = ['--lease-ttl-ms', '4000', '--refresh-interval-ms', '500', '--reconnect-backoff-ms', '200', '--reconnect-backoff-max-ms', '1000'];

interface Service {
  service_id: string;
  [k: string]: unknown;
}

/** An svc-fs-node started by `startNode`: its directory and its state file. */
type StartedNode = Running & { dir: string; stateFile: string };

/** Starts the daemon of node `name` on `dir` (startNodeDaemon) with the short lease and backoff of {@link FAST}, then `extra`. */
async function startNode(controlUrl: string, name: string, extra: string[], dir = tmpDir('node-')): Promise<StartedNode> {
  return { ...(await startNodeDaemon(dir, controlUrl, name, [...FAST, ...extra])), dir, stateFile: join(dir, 'state.json') };
}

/** Creates an invite on `admin` and starts the daemon of node `name` paired by it ({@link startNode}). */
async function startInvitedNode(admin: Client, controlUrl: string, name: string, extra: string[] = []): Promise<StartedNode> {
  const { invite_token } = await admin.request<{ invite_token: string }>('node_invite_create');
  return startNode(controlUrl, name, ['--invite-token', invite_token, ...extra]);
}

/** The catalog record a daemon on node `nodeId` publishes for its terminal `tid` (`--terminal-id`), with `permissions`. */
function terminalRecord(nodeId: string, tid: string, permissions: Record<string, unknown>): Service {
  return {
    service_id: `terminal-${tid}`,
    kind: 'terminal',
    version: '1',
    state: 'online',
    endpoints: [`/nodes/${nodeId}/terminal/${tid}`],
    capabilities: { pty: true, terminal_id: tid, invoke: true },
    mounts: [{ mount_id: `terminal-${tid}`, mount_path: `/nodes/${nodeId}/terminal/${tid}`, state: 'online' }],
    ops: { invoke: 'control/invoke.json', paths: { exec: 'control/invoke.json' } },
    runtime: { kind: 'native_proc', entry: 'internal-terminal-invoke' },
    permissions,
    schema: {},
  };
}

async function nodeNamed(admin: Client, name: string): Promise<{ node_id: string; fs_url: string; state: string; last_seen_ms: number }> {
  return waitFor(async () => {
    const { nodes } = await admin.request<{ nodes: Array<{ node_id: string; node_name: string; fs_url: string; state: string; last_seen_ms: number }> }>(
      'node_list',
    );
    return nodes.find((n) => n.node_name === name);
  }, 10_000);
}

async function servicesOf(admin: Client, nodeId: string, count: number): Promise<Service[]> {
  return waitFor(async () => {
    const r = await admin.request<{ services: Service[] }>('node_service_get', { node_id: nodeId });
    return r.services.length === count ? r.services : undefined;
  }, 10_000);
}

describe('pairing and the published record', () => {
  it('pairs by invite and publishes the built-in fs and terminal services, labels and platform', async () => {
    const svc = await startSvc();
    const admin = await session(svc.url);
    const node = await startInvitedNode(admin, svc.url, 'inv-node', ['--terminal-id', 't1', '--label', 'zone=eu', '--label', 'tier=gold']);
    const info = await nodeNamed(admin, 'inv-node');
    expect(info.fs_url).toBe(node.url);
    const services = await servicesOf(admin, info.node_id, 2);
    const id = info.node_id;
    expect(services).toEqual([
      {
        service_id: 'fs',
        kind: 'fs',
        version: '1',
        state: 'online',
        endpoints: [`/nodes/${id}/fs`],
        capabilities: { rw: true, export_count: 1 },
        mounts: [{ mount_id: 'fs', mount_path: `/nodes/${id}/fs`, state: 'online' }],
        ops: {},
        runtime: {},
        permissions: {},
        schema: {},
      },
      terminalRecord(id, 't1', { default: 'deny-by-default' }),
    ]);
    const record = await admin.request<{ labels: Record<string, string>; platform: Record<string, string> }>('node_service_get', { node_id: id });
    expect(record.labels).toEqual({ zone: 'eu', tier: 'gold' });
    expect(record.platform).toEqual({ os: process.platform, arch: process.arch, runtime_kind: 'native' });
    // credentials persisted 0600, usable after a restart without a new invite
    expect(statSync(node.stateFile).mode & 0o777).toBe(0o600);
    const saved = JSON.parse(readFileSync(node.stateFile, 'utf8'));
    expect(saved.credentials.node_id).toBe(id);
    await node.stop();
    const again = await startNode(svc.url, 'inv-node', [], node.dir);
    await waitFor(async () => (await admin.request<{ node: { fs_url: string } }>('node_get', { node_id: id })).node.fs_url === again.url, 10_000);
    expect((await admin.request<{ nodes: unknown[] }>('node_list')).nodes).toHaveLength(1);
  });

  it('pairs by an approved request; --no-fs-service, --terminal-allow-user, manifests and a services dir', async () => {
    const svc = await startSvc();
    const admin = await session(svc.url);
    const dir = tmpDir('node-');
    const manifest = join(dir, 'manifest.json');
    writeFileSync(manifest, JSON.stringify({ service_id: 'search', kind: 'index', state: 'online', endpoints: ['/search'] }));
    const servicesDir = join(dir, 'services.d');
    mkdirSync(servicesDir);
    writeFileSync(
      join(servicesDir, 'a.json'),
      JSON.stringify({ services: [{ service_id: 'gpu', kind: 'compute', state: 'online', endpoints: ['/gpu'], capabilities: { cuda: true } }] }),
    );
    const node = await startNode(
      svc.url,
      'req-node',
      [
        '--pair-mode',
        'request',
        '--no-fs-service',
        '--terminal-id',
        'x',
        '--terminal-allow-user',
        '--service-manifest',
        manifest,
        '--services-dir',
        servicesDir,
      ],
      dir,
    );
    const pending = await waitFor(
      async () =>
        (await admin.request<{ pending: Array<{ request_id: string; node_name: string }> }>('node_join_pending_list')).pending.find(
          (p) => p.node_name === 'req-node',
        ),
      10_000,
    );
    // an operator approves with svc-control
    const approved = await runCli(BIN.control, ['--url', svc.url, 'node_join_approve', JSON.stringify({ request_id: pending.request_id })], {
      env: { SVC_AUTH_TOKEN: ADMIN_TOKEN },
    });
    expect(approved.code).toBe(0);
    expect(JSON.parse(approved.stdout)).toMatchObject({ node_name: 'req-node', node_id: expect.stringMatching(/^node-/), node_secret: expect.any(String) });
    const info = await nodeNamed(admin, 'req-node');
    expect(info.node_id).toBe(JSON.parse(approved.stdout).node_id);
    const services = await servicesOf(admin, info.node_id, 3);
    const id = info.node_id;
    const defaults = { version: '1', capabilities: {}, mounts: [], ops: {}, runtime: {}, permissions: {}, schema: {} };
    expect(services).toEqual([
      terminalRecord(id, 'x', { allow_roles: ['admin', 'user'], require_project_token: true }),
      { ...defaults, service_id: 'search', kind: 'index', state: 'online', endpoints: ['/search'] },
      { ...defaults, service_id: 'gpu', kind: 'compute', state: 'online', endpoints: ['/gpu'], capabilities: { cuda: true } },
    ]);
    // a change in the services dir is published again
    writeFileSync(join(servicesDir, 'b.json'), JSON.stringify({ service_id: 'extra', kind: 'misc', state: 'online', endpoints: ['/extra'] }));
    expect((await servicesOf(admin, info.node_id, 4)).map((s) => s.service_id)).toEqual(['terminal-x', 'search', 'gpu', 'extra']);
    // an invalid manifest there keeps the last good record and says why
    writeFileSync(join(servicesDir, 'c.json'), JSON.stringify({ service_id: 'bad id', kind: 'x', state: 'online', endpoints: [] }));
    await waitFor(() => /invalid manifest; the last published record stays: .*c\.json: services\[0\]\.service_id/.test(node.stderr()), 5000);
    expect((await admin.request<{ services: Service[] }>('node_service_get', { node_id: info.node_id })).services).toHaveLength(4);
    void node;
  });

  it('exits 3 with a clear message when the join request is denied', async () => {
    const svc = await startSvc();
    const admin = await session(svc.url);
    const node = await startNode(svc.url, 'denied-node', ['--pair-mode', 'request']);
    const pending = await waitFor(
      async () =>
        (await admin.request<{ pending: Array<{ request_id: string; node_name: string }> }>('node_join_pending_list')).pending.find(
          (p) => p.node_name === 'denied-node',
        ),
      10_000,
    );
    await admin.request('node_join_deny', { request_id: pending.request_id });
    const exit = await node.exited;
    expect(exit.code).toBe(3);
    expect(node.stderr()).toContain(`join request ${pending.request_id} was denied`);
  });
});

describe('resilience', () => {
  it('keeps serving FS while the control plane is down and re-establishes its lease after it returns', async () => {
    const stateDir = tmpDir('svc-state-');
    let svc = await startSvc({ stateDir });
    const port = new URL(svc.url).port;
    const admin = await session(svc.url);
    const servicesDir = tmpDir('services-d-');
    const node = await startInvitedNode(admin, svc.url, 'res-node', ['--services-dir', servicesDir]);
    const info = await nodeNamed(admin, 'res-node');
    await servicesOf(admin, info.node_id, 1);
    closeSessions();
    await svc.kill();
    // a service added while the control plane is away is published once it is back
    writeFileSync(join(servicesDir, 'late.json'), JSON.stringify({ service_id: 'late', kind: 'misc', state: 'online', endpoints: ['/late'] }));
    await sleep(10_000);
    // the FS server kept serving
    expect(node.proc.exitCode).toBeNull();
    expect(/control plane unreachable \(attempt \d+\)/.test(node.stderr())).toBe(true);
    const restartedAt = Date.now();
    svc = await startSvc({ stateDir, args: ['--port', port] });
    const admin2 = await session(svc.url);
    await waitFor(async () => {
      const { node: n } = await admin2.request<{ node: { last_seen_ms: number; state: string } }>('node_get', { node_id: info.node_id });
      return n.last_seen_ms >= restartedAt && n.state === 'online';
    }, 10_000);
    expect((await servicesOf(admin2, info.node_id, 2)).map((x) => x.service_id)).toEqual(['fs', 'late']);
    expect(node.proc.exitCode).toBeNull();
  }, 60_000);

  it('re-pairs by request after node_delete, ending FS sessions of the old token', async () => {
    const { FsClient } = await import('../libs/client/src');
    const svc = await startSvc();
    const admin = await session(svc.url);
    const node = await startNode(svc.url, 'again-node', ['--pair-mode', 'request']);
    const approve = async () => {
      const p = await waitFor(
        async () =>
          (await admin.request<{ pending: Array<{ request_id: string; node_name: string }> }>('node_join_pending_list')).pending.find(
            (x) => x.node_name === 'again-node',
          ),
        10_000,
      );
      return admin.request<{ fs_auth_token: string }>('node_join_approve', { request_id: p.request_id });
    };
    const oldToken = (await approve()).fs_auth_token;
    const first = await nodeNamed(admin, 'again-node');
    const old = await waitFor(() => FsClient.connect({ url: node.url, authToken: oldToken }).catch(() => undefined), 5000);
    const oldClosed = new Promise<void>((r) => old.once('close', () => r()));
    await admin.request('node_delete', { node_id: first.node_id });
    const newToken = (await approve()).fs_auth_token;
    const second = await waitFor(async () => {
      const { nodes } = await admin.request<{ nodes: Array<{ node_id: string; node_name: string }> }>('node_list');
      return nodes.find((n) => n.node_name === 'again-node' && n.node_id !== first.node_id);
    }, 10_000);
    await servicesOf(admin, second.node_id, 1);
    expect(node.proc.exitCode).toBeNull();
    expect((await failure(admin.request('node_get', { node_id: first.node_id }))).code).toBe('node_not_found');
    // the session admitted with the deleted node's token is closed; that token opens nothing
    await oldClosed;
    expect(old.isOpen).toBe(false);
    await expect(FsClient.connect({ url: node.url, authToken: oldToken })).rejects.toMatchObject({ errno: 13 });
    const fresh = await FsClient.connect({ url: node.url, authToken: newToken });
    expect(fresh.hello.protocol).toBe('unified-v2-fs');
    fresh.close();
  });

  it('says clearly that invite mode needs a new invite after node_delete, and exits 3', async () => {
    const svc = await startSvc();
    const admin = await session(svc.url);
    const node = await startInvitedNode(admin, svc.url, 'gone-node');
    const info = await nodeNamed(admin, 'gone-node');
    await admin.request('node_delete', { node_id: info.node_id });
    const exit = await node.exited;
    expect(exit.code).toBe(3);
    expect(node.stderr()).toContain('needs a new invite');
    expect(node.stderr()).toContain('invite_redeemed');
  });

  it('refuses FS sessions until paired, then opens them with the topology auth_token', async () => {
    const svc = await startSvc();
    const admin = await session(svc.url);
    const node = await startNode(svc.url, 'auth-node', ['--pair-mode', 'request']);
    const { FsClient } = await import('../libs/client/src');
    await expect(FsClient.connect({ url: node.url, authToken: 'anything' })).rejects.toMatchObject({ errno: 13 });
    const p = await waitFor(
      async () =>
        (await admin.request<{ pending: Array<{ request_id: string; node_name: string }> }>('node_join_pending_list')).pending.find(
          (x) => x.node_name === 'auth-node',
        ),
      10_000,
    );
    const creds = await admin.request<{ node_id: string; fs_auth_token: string }>('node_join_approve', { request_id: p.request_id });
    await nodeNamed(admin, 'auth-node');
    const project = await admin.request<{ project_id: string; project_token: string }>('project_create', { name: 'auth' });
    await admin.request('project_mount_set', { project_id: project.project_id, node_id: creds.node_id, export_name: 'work', mount_path: '/w' });
    const status = await admin.request<{ mounts: Array<{ auth_token: string }> }>('workspace_status', project);
    const c = await waitFor(() => FsClient.connect({ url: node.url, authToken: status.mounts[0].auth_token }).catch(() => undefined), 5000);
    expect(c.hello.protocol).toBe('unified-v2-fs');
    c.close();
    await expect(FsClient.connect({ url: node.url })).rejects.toMatchObject({ errno: 13 });
  });
});

describe('the lease when a daemon stops', () => {
  interface MountView {
    mount_path: string;
    node_id: string;
    state: string;
    online: boolean;
  }
  interface Status {
    mounts: MountView[];
    desired_mounts: MountView[];
  }
  const stateOf = (status: Status, nodeId: string) => status.desired_mounts.find((m) => m.node_id === nodeId)?.state;
  const lastLines = (node: Running, n = 3) => node.stderr().trim().split('\n').slice(-n).join('\n');

  it('a clean daemon stop releases its lease: its mount is degraded and the other node selected within 2 s', async () => {
    const svc = await startSvc();
    const admin = await session(svc.url);
    // A lease far longer than the test: only the release can make the mount degraded in time.
    const lease = ['--lease-ttl-ms', '60000', '--refresh-interval-ms', '1000'];
    const nodes: Record<string, StartedNode> = {};
    for (const name of ['rel-1', 'rel-2']) {
      const node = await startInvitedNode(admin, svc.url, name, lease);
      const info = await nodeNamed(admin, name);
      await servicesOf(admin, info.node_id, 1);
      nodes[info.node_id] = node;
    }
    const ids = Object.keys(nodes);
    const project = await admin.request<{ project_id: string; project_token: string }>('project_create', { name: 'release' });
    for (const node_id of ids)
      await admin.request('project_mount_set', { project_id: project.project_id, node_id, export_name: 'work', mount_path: '/shared' });
    const before = await admin.request<Status>('workspace_status', project);
    expect(before.desired_mounts.map((m) => m.state)).toEqual(['online', 'online']);
    const selected = before.mounts[0].node_id;
    const other = ids.find((id) => id !== selected)!;
    const stopping = nodes[selected];

    const t0 = Date.now();
    const exited = stopping.stop();
    await waitFor(
      async () => {
        const status = await admin.request<Status>('workspace_status', project);
        return stateOf(status, selected) === 'degraded' && status.mounts[0].node_id === other && status.mounts[0].state === 'online';
      },
      2000 - (Date.now() - t0),
    ).catch((e: Error) => {
      throw new Error(`${e.message}; the stopped node's last log lines:\n${lastLines(stopping)}`);
    });
    expect(Date.now() - t0).toBeLessThanOrEqual(2000);
    const { node } = await admin.request<{ node: { online: boolean; state: string } }>('node_get', { node_id: selected });
    expect(node).toMatchObject({ online: false, state: 'degraded' });
    expect((await exited).code).toBe(0);
    expect(stopping.stderr()).toContain('lease released');
    // nothing secret in the log
    const secret = JSON.parse(readFileSync(join(stopping.stateFile), 'utf8')).credentials.node_secret as string;
    expect(stopping.stderr()).not.toContain(secret);
    // the other node is untouched
    expect((await admin.request<{ node: { online: boolean } }>('node_get', { node_id: other })).node.online).toBe(true);
  });

  it("a killed daemon's mounts turn degraded within 2 s (its control session closed), long before its lease ends", async () => {
    const svc = await startSvc();
    const admin = await session(svc.url);
    // a 60 s lease: only the closed session can make the mount degraded in time
    const node = await startInvitedNode(admin, svc.url, 'killed', ['--lease-ttl-ms', '60000', '--refresh-interval-ms', '20000']);
    const info = await nodeNamed(admin, 'killed');
    await servicesOf(admin, info.node_id, 1);
    const project = await admin.request<{ project_id: string; project_token: string }>('project_create', { name: 'killed' });
    await admin.request('project_mount_set', { project_id: project.project_id, node_id: info.node_id, export_name: 'work', mount_path: '/k' });

    const t0 = Date.now();
    await node.kill();
    // a reconnect would be ridden over: still online just after the kill
    await sleep(500);
    const soon = await admin.request<Status>('workspace_status', project);
    expect(stateOf(soon, info.node_id)).toBe('online');
    await waitFor(async () => stateOf(await admin.request<Status>('workspace_status', project), info.node_id) === 'degraded', 2000 - (Date.now() - t0), 25);
    expect(Date.now() - t0).toBeLessThanOrEqual(2000);
    expect((await admin.request<{ node: { online: boolean } }>('node_get', { node_id: info.node_id })).node.online).toBe(false);
  });
});
