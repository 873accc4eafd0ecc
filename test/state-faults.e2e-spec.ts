/**
 * e2e: the record store under faults and at size: a full disk under the state directory
 * refuses changes with `unavailable` naming the cause and makes `/readyz` 503, keeps serving
 * reads, loses nothing acknowledged, and recovers (ready, changes accepted) when space
 * returns, without a restart; a change of one mount of a 1,000-mount project is a delta of
 * that one mount; `svc state export` then `svc state import` into a fresh directory gives the
 * same workspace status and node list, and both commands read their configuration as the
 * server does.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { closeSessions, failure, joinNode, ProjectDetail, session } from './helpers/control';
import { BIN, cleanupTmp, killAll, startSvc, tmpDir, waitFor } from './support/processes';

afterEach(() => closeSessions());
afterAll(async () => {
  await killAll();
  cleanupTmp();
});

/** A small tmpfs to fill up (needs root and mount(2)); null when this machine cannot. */
function smallFs(bytes: number): string | null {
  const dir = tmpDir('svc-fullfs-');
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${bytes}`, 'tmpfs', dir], { stdio: 'ignore' });
    return dir;
  } catch {
    return null;
  }
}

describe('full disk', () => {
  const readyz = async (opsUrl: string): Promise<number> => (await fetch(`${opsUrl}/readyz`, { signal: AbortSignal.timeout(1000) })).status;

  it('refuses changes with unavailable naming the cause, /readyz 503, serves reads, loses nothing acknowledged, recovers without a restart', async () => {
    const fs = smallFs(4 * 1024 * 1024);
    if (!fs) {
      process.stderr.write('full-disk e2e skipped: cannot mount a tmpfs here (needs root)\n');
      return;
    }
    try {
      const stateDir = join(fs, 'state');
      mkdirSync(stateDir);
      const svc = await startSvc({ stateDir, env: { SVC_METRICS_PORT: '0' } });
      const ops = svc.opsUrl!;
      const admin = await session(svc.url);
      const acked: string[] = [];
      for (let i = 0; i < 5; i++) acked.push((await admin.request<ProjectDetail>('project_create', { name: `before-${i}` })).project_id);
      expect(await readyz(ops)).toBe(200);
      // Fill what is left of the file system.
      const filler = join(fs, 'filler');
      try {
        execFileSync('dd', ['if=/dev/zero', `of=${filler}`, 'bs=64k'], { stdio: 'ignore' });
      } catch {
        /* dd stops with ENOSPC: the disk is full */
      }
      let refused: { code: string; message: string } | null = null;
      const vision = 'v'.repeat(4000);
      let tFull = 0;
      for (let i = 0; i < 400 && !refused; i++) {
        try {
          acked.push((await admin.request<ProjectDetail>('project_create', { name: `full-${i}`, vision })).project_id);
        } catch (e) {
          tFull = Date.now();
          refused = await failure(Promise.reject(e));
        }
      }
      expect(refused).not.toBeNull();
      expect(refused!.code).toBe('unavailable');
      expect(refused!.message).toContain('disk of the state directory is full');
      expect(refused!.message).toContain('nothing was changed');
      // not ready while full (the readiness poll runs every 250 ms), and the next change is refused the same way
      await waitFor(async () => (await readyz(ops)) === 503, 2000, 25);
      const ms503 = Date.now() - tFull;
      expect((await failure(admin.request('project_create', { name: 'still-full' }))).code).toBe('unavailable');
      expect(await readyz(ops)).toBe(503);
      // reads are served, and show exactly what was acknowledged
      const { projects } = await admin.request<{ projects: Array<{ project_id: string }> }>('project_list');
      expect(projects.map((p) => p.project_id).sort()).toEqual([...acked].sort());
      // space returns: ready again by the directory probe, mutations accepted, without a restart
      rmSync(filler);
      const tFree = Date.now();
      await waitFor(async () => (await readyz(ops)) === 200, 3000, 25);
      const ms200 = Date.now() - tFree;
      process.stderr.write(`full state disk: /readyz 503 ${ms503} ms after the first refusal; 200 ${ms200} ms after the filler was deleted\n`);
      acked.push((await admin.request<ProjectDetail>('project_create', { name: 'after' })).project_id);
      expect(svc.proc.exitCode).toBeNull();
      closeSessions();
      await svc.kill();
      const again = await startSvc({ stateDir });
      const admin2 = await session(again.url);
      const after = await admin2.request<{ projects: Array<{ project_id: string }> }>('project_list');
      expect(after.projects.map((p) => p.project_id).sort()).toEqual([...acked].sort());
      closeSessions();
      await again.stop();
    } finally {
      spawnSync('umount', ['-l', fs]);
    }
  }, 120_000);
});

describe('deltas at size', () => {
  it('a change of one mount in a 1,000-mount project is a delta of that one mount', async () => {
    const svc = await startSvc();
    const admin = await session(svc.url);
    const p = await admin.request<ProjectDetail>('project_create', { name: 'big' });
    const nodes = await Promise.all([0, 1, 2, 3].map((i) => joinNode(admin, `big-${i}`, 600_000)));
    const sessions = await Promise.all([0, 1, 2, 3, 4, 5, 6, 7].map(() => session(svc.url)));
    await Promise.all(
      sessions.map(async (s, k) => {
        for (let i = k; i < 1000; i += sessions.length) {
          await s.request('project_mount_set', { project_id: p.project_id, node_id: nodes[i % 4].node_id, export_name: 'work', mount_path: `/m/${i}` });
        }
      }),
    );
    const pinned = await session(svc.url, 'user', 'big-user');
    const status = await pinned.request<{ revision: number; mounts: unknown[] }>('workspace_status', {
      project_id: p.project_id,
      project_token: p.project_token,
    });
    expect(status.mounts).toHaveLength(1000);
    const deltas: Array<{ revision: number; changed: Array<{ mount_path: string; node_id: string }>; desired: unknown[]; removed: string[] }> = [];
    let bytes = 0;
    pinned.on('event', (type: string, payload: (typeof deltas)[number]) => {
      if (type !== 'control.workspace_topology_delta') return;
      deltas.push(payload);
      bytes += JSON.stringify(payload).length;
    });
    // a standby for one path: the path's topology changes, nothing else
    await admin.request('project_mount_set', { project_id: p.project_id, node_id: nodes[1].node_id, export_name: 'work', mount_path: '/m/500' });
    await waitFor(() => deltas.length === 1, 3000);
    expect(deltas[0].revision).toBe(status.revision + 1);
    expect(deltas[0].changed.map((m) => m.mount_path)).toEqual(['/m/500']);
    expect(deltas[0].desired).toHaveLength(2);
    expect(deltas[0].removed).toEqual([]);
    // removing a mount: one removed path
    await admin.request('project_mount_remove', { project_id: p.project_id, mount_path: '/m/7' });
    await waitFor(() => deltas.length === 2, 3000);
    expect(deltas[1]).toMatchObject({ revision: status.revision + 2, changed: [], desired: [], removed: ['/m/7'] });
    // a lease refresh that changes nothing visible sends nothing and changes no revision
    await admin.request('node_lease_refresh', { node_id: nodes[3].node_id, node_secret: nodes[3].node_secret, lease_ttl_ms: 600_000 });
    await new Promise((r) => setTimeout(r, 300));
    expect(deltas).toHaveLength(2);
    expect((await pinned.request<{ revision: number }>('workspace_status', { project_id: p.project_id, project_token: p.project_token })).revision).toBe(
      status.revision + 2,
    );
    expect(bytes).toBeLessThan(4000);
    closeSessions();
    await svc.stop();
  }, 120_000);
});

describe('svc state export / import', () => {
  it('export then import into a fresh directory gives the same workspace status and node list; import refuses a non-empty store', async () => {
    for (const env of [{}, { SVC_CONTROL_STATE_KEY_HEX: 'c'.repeat(64) }]) {
      const svc = await startSvc({ env });
      const admin = await session(svc.url);
      const p = await admin.request<ProjectDetail>('project_create', { name: 'exported' });
      const a = await joinNode(admin, 'exp-a', 3_600_000);
      const b = await joinNode(admin, 'exp-b', 3_600_000);
      for (const [n, path] of [
        [a, '/w'],
        [b, '/w'],
        [b, '/x'],
      ] as const) {
        await admin.request('project_mount_set', { project_id: p.project_id, node_id: n.node_id, export_name: 'work', mount_path: path });
      }
      await admin.request('project_activate', { project_id: p.project_id });
      const status = await admin.request('workspace_status', { project_id: p.project_id, project_token: p.project_token });
      const nodes = await admin.request('node_list');
      // export while the server runs
      const file = join(tmpDir(), 'export.json');
      const ex = spawnSync(process.execPath, [BIN.svc, 'state', 'export', '--out', file, '--state-dir', svc.stateDir], {
        env: { ...process.env, ...env },
        encoding: 'utf8',
      });
      expect(ex.status).toBe(0);
      if ('SVC_CONTROL_STATE_KEY_HEX' in env) expect(JSON.stringify(JSON.parse(readFileSync(file, 'utf8')))).not.toContain('exported');
      closeSessions();
      await svc.stop();
      const fresh = tmpDir();
      const im = spawnSync(process.execPath, [BIN.svc, 'state', 'import', file, '--state-dir', fresh], { env: { ...process.env, ...env }, encoding: 'utf8' });
      expect(im.stderr).toContain('imported');
      expect(im.status).toBe(0);
      // a second import into the now non-empty store: refused, nothing changed
      const again = spawnSync(process.execPath, [BIN.svc, 'state', 'import', file, '--state-dir', fresh], {
        env: { ...process.env, ...env },
        encoding: 'utf8',
      });
      expect(again.status).toBe(2);
      expect(again.stderr).toContain('not empty');
      const restored = await startSvc({ stateDir: fresh, env });
      const admin2 = await session(restored.url);
      expect(await admin2.request('workspace_status', { project_id: p.project_id, project_token: p.project_token })).toEqual(status);
      expect(await admin2.request('node_list')).toEqual(nodes);
      // the binding came along too
      expect(await admin2.request('workspace_status')).toMatchObject({ project_id: p.project_id });
      closeSessions();
      await restored.stop();
    }
  }, 120_000);

  it('finds the store as the server does: SVC_STATE_DIR by default, SVC_STATE_SYNC read, invalid values refused (exit 2) before anything is written', () => {
    const file = join(tmpDir(), 'empty.json');
    writeFileSync(file, JSON.stringify({ format: 'svc-control-state', saved_at_ms: 0, state: { version: 2, tables: {} } }));
    const dir = tmpDir();
    const cli = (args: string[], env: Record<string, string>) =>
      spawnSync(process.execPath, [BIN.svc, 'state', ...args], { env: { ...process.env, SVC_DATABASE_URL: '', SVC_STATE_DIR: dir, ...env }, encoding: 'utf8' });
    const badSync = cli(['import', file], { SVC_STATE_SYNC: 'sometimes' });
    expect(badSync.stderr).toContain('SVC_STATE_SYNC must be normal or full');
    expect(badSync.status).toBe(2);
    const badUrl = cli(['export', '--database-url', 'mysql://db/svc'], {});
    expect(badUrl.stderr).toContain('must be a postgres:// URL');
    expect(badUrl.status).toBe(2);
    expect(existsSync(join(dir, 'state.db'))).toBe(false);
    const im = cli(['import', file], { SVC_STATE_SYNC: 'full' });
    expect(im.stderr).toContain('imported');
    expect(im.status).toBe(0);
    expect(existsSync(join(dir, 'state.db'))).toBe(true);
  });

  it('import is refused while a server runs on the store', async () => {
    const svc = await startSvc();
    const file = join(tmpDir(), 'empty.json');
    writeFileSync(file, JSON.stringify({ format: 'svc-control-state', saved_at_ms: 0, state: { version: 2, tables: {} } }));
    const r = spawnSync(process.execPath, [BIN.svc, 'state', 'import', file, '--state-dir', svc.stateDir], { encoding: 'utf8' });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('a server is running');
    await svc.stop();
  });
});
