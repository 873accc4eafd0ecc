/**
 * e2e: the control-plane suite (test/control-plane.e2e-spec.ts) on PostgreSQL
 * (docs/operations.md "Replicas on PostgreSQL", `--database-url`): the same tests, each `svc` on a fresh database of a
 * PostgreSQL that this file starts and stops. Skipped, saying why, where PostgreSQL is not
 * installed.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { closeSessions, joinNode, ProjectDetail, session } from './helpers/control';
import { Postgres, postgresBinDir, startPostgres } from './support/postgres';
import { BIN, startSvc, tmpDir, useStoreEnv } from './support/processes';

let pg: Postgres | null = null;
beforeAll(async () => {
  pg = await startPostgres();
  useStoreEnv(async () => ({ SVC_DATABASE_URL: await pg!.newDatabase() }));
}, 60_000);
afterAll(async () => {
  useStoreEnv(null);
  await pg?.close();
});

if (postgresBinDir()) {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- the suite is registered only when PostgreSQL is installed
  require('./control-plane.e2e-spec');
} else {
  it.skip('control-plane suite on PostgreSQL (PostgreSQL not installed)', () => undefined);
}

describe('the PostgreSQL store itself', () => {
  const run = (env: NodeJS.ProcessEnv) =>
    spawnSync(process.execPath, [BIN.svc, '--port', '0', '--state-dir', tmpDir()], {
      env: { ...process.env, SVC_ADMIN_TOKEN: 'a'.repeat(20), SVC_USER_TOKEN: 'u'.repeat(20), ...env },
      encoding: 'utf8',
      timeout: 20_000,
    });

  (postgresBinDir() ? it : it.skip)(
    'keeps the records in the database, not in the state directory; refuses a foreign database, a missing one and a wrong key',
    async () => {
      const url = await pg!.newDatabase();
      const svc = await startSvc({ env: { SVC_DATABASE_URL: url, SVC_CONTROL_STATE_KEY_HEX: 'd'.repeat(64) } });
      const admin = await session(svc.url);
      const p = await admin.request<ProjectDetail>('project_create', { name: 'in-postgres' });
      closeSessions();
      await svc.stop();
      expect(existsSync(join(svc.stateDir, 'state.db'))).toBe(false);
      const c = new Client({ connectionString: url });
      await c.connect();
      const rows = await c.query('SELECT id, body FROM projects');
      expect(rows.rows.map((r) => r.id)).toEqual([p.project_id]);
      expect(rows.rows[0].body).not.toContain('in-postgres');
      const before = JSON.stringify((await c.query('SELECT id, body FROM projects UNION ALL SELECT key, value FROM svc_meta ORDER BY 1')).rows);
      // a wrong key: refused, nothing written
      const wrong = run({ SVC_DATABASE_URL: url, SVC_CONTROL_STATE_KEY_HEX: 'e'.repeat(64) });
      expect(wrong.status).toBe(2);
      expect(wrong.stderr).toContain('not the key');
      expect(JSON.stringify((await c.query('SELECT id, body FROM projects UNION ALL SELECT key, value FROM svc_meta ORDER BY 1')).rows)).toBe(before);
      await c.end();
      // a schema written by a newer svc: refused, nothing changed
      const newer = await pg!.newDatabase();
      const first = await startSvc({ env: { SVC_DATABASE_URL: newer } });
      await first.stop();
      const n = new Client({ connectionString: newer });
      await n.connect();
      await n.query("INSERT INTO svc_migration (name, timestamp) VALUES ('9999_from_the_future', now()::text)");
      const refusedNewer = run({ SVC_DATABASE_URL: newer });
      expect(refusedNewer.status).toBe(2);
      expect(refusedNewer.stderr).toContain('written by a newer svc');
      expect((await n.query('SELECT count(*)::int AS c FROM svc_migration')).rows[0].c).toBe(4);
      await n.end();
      // a database of another application
      const foreignUrl = await pg!.newDatabase();
      const f = new Client({ connectionString: foreignUrl });
      await f.connect();
      await f.query('CREATE TABLE invoices (id serial primary key, total int)');
      await f.end();
      const foreign = run({ SVC_DATABASE_URL: foreignUrl });
      expect(foreign.status).toBe(2);
      expect(foreign.stderr).toContain('not an svc state store');
      // a database that does not exist: refused at once, the URL's password never printed
      const missing = run({ SVC_DATABASE_URL: pg!.url('no_such_db').replace('svc@', 'svc:hunter2@') });
      expect(missing.status).toBe(2);
      expect(missing.stderr).toContain('no_such_db');
      expect(missing.stderr).not.toContain('hunter2');
    },
    60_000,
  );
});

describe('moving from SQLite to PostgreSQL', () => {
  (postgresBinDir() ? it : it.skip)(
    'svc state export from SQLite, svc state import into PostgreSQL: the same workspace status and node list',
    async () => {
      const env = { SVC_CONTROL_STATE_KEY_HEX: 'f'.repeat(64) };
      const lite = await startSvc({ stateDir: tmpDir(), env });
      const admin = await session(lite.url);
      const p = await admin.request<ProjectDetail>('project_create', { name: 'moving' });
      const a = await joinNode(admin, 'mv-a', 3_600_000);
      await admin.request('project_mount_set', { project_id: p.project_id, node_id: a.node_id, export_name: 'work', mount_path: '/m' });
      const status = await admin.request('workspace_status', { project_id: p.project_id, project_token: p.project_token });
      const nodes = await admin.request('node_list');
      closeSessions();
      await lite.stop();
      const file = join(tmpDir(), 'move.json');
      const cli = (args: string[]) => spawnSync(process.execPath, [BIN.svc, 'state', ...args], { env: { ...process.env, ...env }, encoding: 'utf8' });
      expect(cli(['export', '--out', file, '--state-dir', lite.stateDir]).status).toBe(0);
      const url = await pg!.newDatabase();
      const im = cli(['import', file, '--database-url', url]);
      expect(im.stderr).toContain('imported');
      expect(im.status).toBe(0);
      expect(cli(['import', file, '--database-url', url]).status).toBe(2); // not empty any more
      const onPg = await startSvc({ env: { ...env, SVC_DATABASE_URL: url } });
      const admin2 = await session(onPg.url);
      expect(await admin2.request('workspace_status', { project_id: p.project_id, project_token: p.project_token })).toEqual(status);
      expect(await admin2.request('node_list')).toEqual(nodes);
      // and an export from PostgreSQL while it runs
      const back = cli(['export', '--database-url', url]);
      expect(back.status).toBe(0);
      expect(JSON.parse(back.stdout)).toMatchObject({ format: 'svc-control-state', encryption: { alg: 'AES-256-GCM' } });
      closeSessions();
      await onPg.stop();
    },
    60_000,
  );
});
