/**
 * e2e: the ops HTTP endpoints on SVC_METRICS_PORT:
 * /livez, /readyz (503 until the state is owned and loaded, 200 after), /metrics as valid
 * Prometheus text, /metrics.json equal in figures to control.metrics. Also graceful SIGTERM.
 */
import { spawn } from 'node:child_process';
// eslint-disable-next-line @typescript-eslint/no-require-imports -- the package has no types; the cast gives the part used here
const parsePrometheus = require('parse-prometheus-text-format') as (
  text: string,
) => Array<{ name: string; type: string; metrics: Array<{ value?: string; labels?: Record<string, string>; buckets?: unknown }> }>;
import { closeSessions, joinNode, ProjectDetail, session } from './helpers/control';
import { ADMIN_TOKEN, BIN, cleanupTmp, killAll, startSvc, USER_TOKEN, waitFor } from './support/processes';

afterEach(() => closeSessions());
afterAll(async () => {
  await killAll();
  cleanupTmp();
});

async function get(url: string): Promise<{ status: number; body: string; type: string | null }> {
  const res = await fetch(url);
  return { status: res.status, body: await res.text(), type: res.headers.get('content-type') };
}

describe('ops endpoints', () => {
  it('serves /livez, /readyz, /metrics and /metrics.json', async () => {
    const svc = await startSvc({ env: { SVC_METRICS_PORT: '0', SVC_LOG_LEVEL: 'trace' } });
    expect(svc.opsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const admin = await session(svc.url);
    const p = await admin.request<ProjectDetail>('project_create', { name: 'metrics' });
    const n = await joinNode(admin, 'm-node');
    await admin.request('project_mount_set', { project_id: p.project_id, node_id: n.node_id, export_name: 'work', mount_path: '/m' });
    await admin.request('project_get', { project_id: 'proj-none' }).catch(() => undefined);

    const live = await get(`${svc.opsUrl}/livez`);
    expect(live.status).toBe(200);
    expect(JSON.parse(live.body)).toMatchObject({ status: 'ok' });
    const ready = await get(`${svc.opsUrl}/readyz`);
    expect(ready.status).toBe(200);

    const text = await get(`${svc.opsUrl}/metrics`);
    expect(text.status).toBe(200);
    expect(text.type).toContain('text/plain');
    const families = parsePrometheus(text.body);
    const byName = new Map(families.map((f) => [f.name, f]));
    for (const name of [
      'svc_sessions',
      'svc_requests_total',
      'svc_request_duration_seconds',
      'svc_nodes',
      'svc_nodes_online',
      'svc_projects',
      'svc_mounts',
      'process_cpu_user_seconds_total',
      'nodejs_heap_size_used_bytes',
    ]) {
      expect(byName.has(name)).toBe(true);
    }
    expect(byName.get('svc_request_duration_seconds')!.type).toBe('HISTOGRAM');
    // every acknowledged mutation went through a store transaction (several may share one)
    const commits = byName.get('svc_store_commit_duration_seconds');
    expect(commits?.type).toBe('HISTOGRAM');
    const commitCount = Number((commits!.metrics[0] as unknown as { count: string }).count);
    expect(commitCount).toBeGreaterThanOrEqual(1);
    expect(commitCount).toBeLessThanOrEqual(10);
    expect(Number(byName.get('svc_projects')!.metrics[0].value)).toBe(1);
    expect(Number(byName.get('svc_nodes_online')!.metrics[0].value)).toBe(1);
    expect(Number(byName.get('svc_sessions')!.metrics[0].value)).toBeGreaterThanOrEqual(1);
    // the store's metrics in SQLite mode too: the one process sweeps, nothing to replicate
    expect(Number(byName.get('svc_sweeper_leader')!.metrics[0].value)).toBe(1);
    expect(byName.get('svc_store_replication_lag_seconds')?.type).toBe('HISTOGRAM');
    expect(Number((byName.get('svc_store_replication_lag_seconds')!.metrics[0] as unknown as { count: string }).count)).toBe(0);
    const mounts = byName.get('svc_mounts')!.metrics;
    expect(mounts.find((m) => m.labels?.state === 'online')?.value).toBe('1');
    const requests = byName.get('svc_requests_total')!.metrics;
    expect(requests.find((m) => m.labels?.type === 'control.project_create' && m.labels?.result === 'ok')?.value).toBe('1');
    expect(requests.find((m) => m.labels?.type === 'control.project_get' && m.labels?.result === 'project_not_found')?.value).toBe('1');
    // no secret anywhere in the metrics, nor in the most verbose log
    for (const secret of [ADMIN_TOKEN, USER_TOKEN, p.project_token!, n.node_secret, n.fs_auth_token]) {
      expect(text.body).not.toContain(secret);
      expect(svc.stderr()).not.toContain(secret);
    }

    const json = JSON.parse((await get(`${svc.opsUrl}/metrics.json`)).body) as {
      metrics: Array<{ name: string; values: Array<{ value: number; labels: Record<string, string> }> }>;
    };
    const viaControl = await admin.request<typeof json>('metrics');
    const names = (m: typeof json) => m.metrics.map((x) => x.name).sort();
    expect(names(viaControl)).toEqual(names(json));
    const figure = (m: typeof json, name: string) => m.metrics.find((x) => x.name === name)!.values[0].value;
    for (const name of ['svc_projects', 'svc_nodes', 'svc_nodes_online']) expect(figure(viaControl, name)).toBe(figure(json, name));
    expect(new Set(names(json))).toEqual(new Set(families.map((f) => f.name)));
  });

  it('reports /readyz 503 while another process owns the state directory, then 200', async () => {
    const first = await startSvc();
    // The second instance waits for the state lock as a standby: live but not ready.
    const standby = spawn(process.execPath, [BIN.svc, '--port', '0', '--state-dir', first.stateDir], {
      env: { ...process.env, SVC_ADMIN_TOKEN: ADMIN_TOKEN, SVC_USER_TOKEN: USER_TOKEN, SVC_METRICS_PORT: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    let out = '';
    standby.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    standby.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    try {
      const ops = await waitFor(() => /"msg":"ops endpoints listening","url":"([^"]+)"/.exec(err)?.[1], 15_000);
      await waitFor(() => err.includes('state directory is in use'), 10_000);
      expect((await get(`${ops}/livez`)).status).toBe(200);
      const notReady = await get(`${ops}/readyz`);
      expect(notReady.status).toBe(503);
      expect(notReady.body).toContain('state_loaded');
      expect(out).toBe('');
      await first.kill();
      await waitFor(async () => (await get(`${ops}/readyz`)).status === 200, 10_000);
      expect(out).toMatch(/^listening on ws:\/\/127\.0\.0\.1:\d+\/\n$/);
    } finally {
      standby.kill('SIGKILL');
    }
  });

  it('exits 0 on SIGTERM after closing sessions with 1001', async () => {
    const svc = await startSvc();
    const admin = await session(svc.url);
    const closed = new Promise<number>((r) => admin.once('close', (code: number) => r(code)));
    const exit = await svc.stop();
    expect(exit.code).toBe(0);
    expect(await closed).toBe(1001);
  });
});
