/**
 * e2e: the audit log (docs/protocol.md "Audit log" `control.audit_list`) against the built
 * `svc` and `svc-control`: each mutation of a scripted session appears once with the right
 * actor, type, target and result; refused operator tokens, project tokens and node secrets
 * appear as refusals; reads, heartbeats and dry runs do not appear; no entry, row or log line
 * holds any token or secret the test created; entries survive a restart; retention by count
 * and by age drops old entries; a flood of bad tokens is rate limited; on PostgreSQL, two
 * replicas share one log, encrypted with the state key.
 */
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import type { AuditEntry, AuditListResult } from '../libs/protocol/src';
import { Client, closeSessions, Credentials, failure, ProjectDetail, session } from './helpers/control';
import { Postgres, postgresBinDir, startPostgres } from './support/postgres';
import { ADMIN_TOKEN, BIN, cleanupTmp, killAll, runCli, sleep, startSvc, USER_TOKEN, waitFor } from './support/processes';

const OP = 'op-secret-for-the-audit-test';

type Expected = Omit<AuditEntry, 'ts_ms'>;

const list = (c: Client, filter: Record<string, unknown> = {}) => c.request<AuditListResult>('audit_list', { limit: 1000, ...filter });
const strip = (entries: AuditEntry[]) => entries.map(({ ts_ms: _ts, ...rest }) => rest);

afterEach(() => closeSessions());
afterAll(async () => {
  await killAll();
  cleanupTmp();
});

describe('audit log (embedded store)', () => {
  it('records each mutation once and every refused authentication, never a secret; survives a restart; retention by count and age', async () => {
    const svc = await startSvc({ env: { SVC_CONTROL_OPERATOR_TOKEN: OP } });
    const ops = await session(svc.url, 'admin', 'ops');
    const dev = await session(svc.url, 'user', 'dev');
    const nodeS = await session(svc.url, 'user', 'node-agent');
    const op = { operator_token: OP };
    const secrets: string[] = [ADMIN_TOKEN, USER_TOKEN, OP, 'wrong-operator-token-xyz', 'wrong-project-token-xyz', 'wrong-node-secret-xyz'];
    const expected: Expected[] = [];
    const admin = (type: string, target: Record<string, string>, result = 'ok') =>
      expected.push({ role: 'admin', agent_id: 'ops', type: `control.${type}`, target, result });
    const user = (agent: string, type: string, target: Record<string, string>, result = 'ok') =>
      expected.push({ role: 'user', agent_id: agent, type: `control.${type}`, target, result });

    // --- the scripted session ---
    const { invite_token } = await ops.request<{ invite_token: string }>('node_invite_create', op);
    secrets.push(invite_token);
    admin('node_invite_create', {});
    const n = await nodeS.request<Credentials>('node_join', { invite_token, node_name: 'audit-n', fs_url: 'ws://127.0.0.1:1/v2/fs', lease_ttl_ms: 3_600_000 });
    secrets.push(n.node_secret, n.fs_auth_token, n.lease_token);
    user('node-agent', 'node_join', { node_id: n.node_id });
    const p = await ops.request<ProjectDetail>('project_create', { name: 'audit-p', ...op });
    secrets.push(p.project_token!);
    admin('project_create', { project_id: p.project_id });
    await ops.request('project_mount_set', { project_id: p.project_id, node_id: n.node_id, export_name: 'work', mount_path: '/w/', ...op });
    admin('project_mount_set', { project_id: p.project_id, node_id: n.node_id, mount_path: '/w' });
    // a failed mutation: recorded with its error; an unknown id is left out of the target
    expect(
      (
        await failure(
          ops.request('project_mount_set', { project_id: 'proj-0000000000000000', node_id: n.node_id, export_name: 'work', mount_path: '/z', ...op }),
        )
      ).code,
    ).toBe('project_not_found');
    admin('project_mount_set', { node_id: n.node_id, mount_path: '/z' }, 'project_not_found');
    await ops.request('project_update', { project_id: p.project_id, vision: 'audited', ...op });
    admin('project_update', { project_id: p.project_id });
    await dev.request('project_activate', { project_id: p.project_id, project_token: p.project_token, ...op });
    user('dev', 'project_activate', { project_id: p.project_id });
    const up = await ops.request<{ project_id: string; project_token: string }>('project_up', {
      name: 'audit-up',
      mounts: [{ mount_path: '/u', node_name: 'audit-n', export_name: 'work' }],
      ...op,
    });
    secrets.push(up.project_token);
    admin('project_up', { project_id: up.project_id });
    // not recorded: a dry run, reads, a lease refresh (heartbeat), join status polls
    await ops.request('project_up', { name: 'audit-up', mounts: [], dry_run: true, ...op });
    await ops.request('project_list');
    await ops.request('node_list');
    await dev.request('workspace_status');
    await nodeS.request('node_lease_refresh', { node_id: n.node_id, node_secret: n.node_secret, lease_ttl_ms: 3_600_000 });
    await nodeS.request('node_service_upsert', { node_id: n.node_id, node_secret: n.node_secret, services: [] });
    user('node-agent', 'node_service_upsert', { node_id: n.node_id });
    const req = await nodeS.request<{ request_id: string; request_secret: string }>('node_join_request', {
      node_name: 'audit-req',
      fs_url: 'ws://127.0.0.1:1/v2/fs',
    });
    secrets.push(req.request_secret);
    user('node-agent', 'node_join_request', { request_id: req.request_id });
    const approved = await ops.request<Credentials>('node_join_approve', { request_id: req.request_id, ...op });
    secrets.push(approved.node_secret, approved.fs_auth_token, approved.lease_token);
    admin('node_join_approve', { request_id: req.request_id, node_id: approved.node_id });
    await nodeS.request('node_join_status', req);
    await ops.request('project_mount_remove', { project_id: p.project_id, mount_path: '/w', ...op });
    admin('project_mount_remove', { project_id: p.project_id, mount_path: '/w' });
    const rotated = await ops.request<{ project_token: string }>('project_token_rotate', { project_id: p.project_id, ...op });
    secrets.push(rotated.project_token);
    admin('project_token_rotate', { project_id: p.project_id });
    expect((await failure(ops.request('auth_rotate', { role: 'user', ...op }))).code).toBe('invalid_payload');
    admin('auth_rotate', {}, 'invalid_payload');
    // --- refused authentications ---
    expect((await failure(ops.request('project_create', { name: 'x', operator_token: 'wrong-operator-token-xyz' }))).code).toBe('operator_auth_failed');
    admin('project_create', {}, 'operator_auth_failed');
    expect((await failure(ops.request('node_delete', { node_id: n.node_id }))).code).toBe('operator_auth_failed');
    admin('node_delete', { node_id: n.node_id }, 'operator_auth_failed');
    expect((await failure(dev.request('project_get', { project_id: p.project_id, project_token: 'wrong-project-token-xyz' }))).code).toBe(
      'project_auth_failed',
    );
    user('dev', 'project_get', { project_id: p.project_id }, 'project_auth_failed');
    // the token before the rotation
    expect((await failure(dev.request('workspace_status', { project_id: p.project_id, project_token: p.project_token }))).code).toBe('project_auth_failed');
    user('dev', 'workspace_status', { project_id: p.project_id }, 'project_auth_failed');
    expect((await failure(nodeS.request('node_lease_refresh', { node_id: n.node_id, node_secret: 'wrong-node-secret-xyz' }))).code).toBe('node_auth_failed');
    user('node-agent', 'node_lease_refresh', { node_id: n.node_id }, 'node_auth_failed');
    expect((await failure(nodeS.request('node_service_upsert', { node_id: n.node_id, node_secret: 'wrong-node-secret-xyz', services: [] }))).code).toBe(
      'node_auth_failed',
    );
    user('node-agent', 'node_service_upsert', { node_id: n.node_id }, 'node_auth_failed');
    // the role gate on a mutation
    expect((await failure(dev.request('project_create', { name: 'y', ...op }))).code).toBe('forbidden');
    user('dev', 'project_create', {}, 'forbidden');
    // --- the rest of the script ---
    await nodeS.request('node_lease_release', { node_id: n.node_id, node_secret: n.node_secret });
    user('node-agent', 'node_lease_release', { node_id: n.node_id });
    await ops.request('node_delete', { node_id: approved.node_id, ...op });
    admin('node_delete', { node_id: approved.node_id });
    await ops.request('project_delete', { project_id: up.project_id, ...op });
    admin('project_delete', { project_id: up.project_id });

    // --- each once, in order, newest first ---
    const all = await list(ops);
    expect(all.next_cursor).toBeNull();
    expect(strip(all.entries)).toEqual([...expected].reverse());
    const times = all.entries.map((e) => e.ts_ms);
    expect([...times].sort((x, y) => y - x)).toEqual(times);
    expect(times[times.length - 1]).toBeGreaterThan(Date.now() - 120_000);

    // filters and paging
    expect(strip((await list(ops, { actor_agent_id: 'dev' })).entries)).toEqual(expected.filter((e) => e.agent_id === 'dev').reverse());
    expect(strip((await list(ops, { type: 'control.node_service_upsert' })).entries).map((e) => e.result)).toEqual(['node_auth_failed', 'ok']);
    const mid = all.entries[Math.floor(all.entries.length / 2)].ts_ms;
    expect((await list(ops, { since_ms: mid })).entries.every((e) => e.ts_ms >= mid)).toBe(true);
    expect((await list(ops, { until_ms: mid })).entries.every((e) => e.ts_ms <= mid)).toBe(true);
    const pages: AuditEntry[] = [];
    let cursor: string | null = null;
    do {
      const page: AuditListResult = await list(ops, { limit: 4, ...(cursor ? { cursor } : {}) });
      expect(page.entries.length).toBeLessThanOrEqual(4);
      pages.push(...page.entries);
      cursor = page.next_cursor;
    } while (cursor);
    expect(pages).toEqual(all.entries);
    // admin only; bad filters
    expect((await failure(dev.request('audit_list', {}))).code).toBe('forbidden');
    expect((await failure(ops.request('audit_list', { limit: 5000 }))).message).toBe('limit must be at most 1000');
    expect((await failure(ops.request('audit_list', { since_ms: 10, until_ms: 5 }))).code).toBe('invalid_payload');
    expect((await failure(ops.request('audit_list', { cursor: 'abc' }))).code).toBe('invalid_payload');

    // the table
    const table = await runCli(BIN.control, ['--url', svc.url, 'audit', '--agent', 'node-agent', '--type', 'node_lease_refresh'], {
      env: { SVC_AUTH_TOKEN: ADMIN_TOKEN },
    });
    expect(table.code).toBe(0);
    const rows = table.stdout.trim().split('\n');
    expect(rows[0]).toMatch(/^TIME +ROLE +AGENT +TYPE +TARGET +RESULT$/);
    expect(rows.slice(1)).toEqual([
      expect.stringMatching(new RegExp(`^\\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z +user +node-agent +node_lease_refresh +node=${n.node_id} +node_auth_failed$`)),
    ]);
    const since = await runCli(BIN.control, ['--url', svc.url, 'audit', '--since', '10m', '--json'], { env: { SVC_AUTH_TOKEN: ADMIN_TOKEN } });
    expect(
      since.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as AuditEntry),
    ).toEqual(all.entries.slice(0, 100));
    const userCli = await runCli(BIN.control, ['--url', svc.url, 'audit'], { env: { SVC_AUTH_TOKEN: USER_TOKEN } });
    expect(userCli.code).toBe(1);
    expect(userCli.stderr).toMatch(/^error: forbidden: /);
    const badSince = await runCli(BIN.control, ['--url', svc.url, 'audit', '--since', 'yesterday'], { env: { SVC_AUTH_TOKEN: ADMIN_TOKEN } });
    expect(badSince.code).toBe(2);

    // --- no secret anywhere: entries, the CLI's table, rows in the database, log lines ---
    closeSessions();
    await svc.stop();
    const rowsDb = new Database(join(svc.stateDir, 'state.db'), { readonly: true });
    const auditRows = JSON.stringify(rowsDb.prepare('SELECT * FROM svc_audit').all());
    rowsDb.close();
    expect(JSON.parse(auditRows)).toHaveLength(expected.length);
    const haystacks = { entries: JSON.stringify(all), table: table.stdout + since.stdout, rows: auditRows, stdout: svc.stdout(), stderr: svc.stderr() };
    for (const secret of secrets) {
      for (const [where, text] of Object.entries(haystacks)) expect({ where, secret, found: text.includes(secret) }).toEqual({ where, secret, found: false });
    }

    // --- a restart keeps every entry ---
    const again = await startSvc({ stateDir: svc.stateDir, env: { SVC_CONTROL_OPERATOR_TOKEN: OP } });
    const ops2 = await session(again.url, 'admin', 'ops');
    expect((await list(ops2)).entries).toEqual(all.entries);
    closeSessions();
    await again.stop();

    // --- retention by count: the newest 3 are kept (applied at start) ---
    const capped = await startSvc({ stateDir: svc.stateDir, env: { SVC_CONTROL_OPERATOR_TOKEN: OP, SVC_AUDIT_MAX_ENTRIES: '3' } });
    const ops3 = await session(capped.url, 'admin', 'ops');
    expect((await list(ops3)).entries).toEqual(all.entries.slice(0, 3));
    expect(capped.stderr()).toMatch(/"msg":"audit retention applied","deleted":\d+/);
    closeSessions();
    await capped.stop();

    // --- retention by age: 0.00002 days = 1.7 s ---
    await sleep(2000);
    const aged = await startSvc({ stateDir: svc.stateDir, env: { SVC_CONTROL_OPERATOR_TOKEN: OP, SVC_AUDIT_RETENTION_DAYS: '0.00002' } });
    const ops4 = await session(aged.url, 'admin', 'ops');
    expect((await list(ops4)).entries).toEqual([]);
    await ops4.request('node_invite_create', op);
    expect(strip((await list(ops4)).entries)).toEqual([{ role: 'admin', agent_id: 'ops', type: 'control.node_invite_create', target: {}, result: 'ok' }]);
    closeSessions();
    await aged.stop();
  }, 180_000);

  it('rate limits refusals: a flood of bad operator tokens from one session writes a bounded number of entries; other sessions are still recorded', async () => {
    const svc = await startSvc({ env: { SVC_CONTROL_OPERATOR_TOKEN: OP } });
    const flood = await session(svc.url, 'admin', 'flood');
    const replies = await Promise.all(
      Array.from({ length: 400 }, (_, i) => failure(flood.request('project_create', { name: `f${i}`, operator_token: `bad-${i}` }))),
    );
    expect(replies.every((r) => r.code === 'operator_auth_failed')).toBe(true);
    const ops = await session(svc.url, 'admin', 'ops');
    const fromFlood = (await list(ops, { actor_agent_id: 'flood' })).entries;
    expect(fromFlood.length).toBeGreaterThanOrEqual(20);
    expect(fromFlood.length).toBeLessThan(100);
    const other = await session(svc.url, 'admin', 'other');
    expect((await failure(other.request('node_invite_create', { operator_token: 'bad' }))).code).toBe('operator_auth_failed');
    expect(strip((await list(ops, { actor_agent_id: 'other' })).entries)).toEqual([
      { role: 'admin', agent_id: 'other', type: 'control.node_invite_create', target: {}, result: 'operator_auth_failed' },
    ]);
    const metrics = await ops.request<{ metrics: Array<{ name: string; values: Array<{ labels: Record<string, string>; value: number }> }> }>('metrics');
    const dropped = metrics.metrics.find((m) => m.name === 'svc_audit_dropped_total')?.values.find((v) => v.labels.reason === 'rate_limited')?.value ?? 0;
    expect(dropped).toBe(400 - fromFlood.length);
    expect(svc.stderr()).toContain('audit entries of refusals or failures were not written');
    for (let i = 0; i < 400; i++) expect(svc.stderr()).not.toContain(`bad-${i}"`);
  }, 120_000);
});

(postgresBinDir() ? describe : describe.skip)('audit log on PostgreSQL', () => {
  let pg: Postgres | null = null;
  beforeAll(async () => {
    pg = await startPostgres();
  }, 60_000);
  afterAll(async () => {
    await killAll();
    await pg?.close();
  });

  it('is one log for two replicas, encrypted with the state key, kept across restarts', async () => {
    const url = await pg!.newDatabase();
    const env = { SVC_DATABASE_URL: url, SVC_CONTROL_STATE_KEY_HEX: 'c'.repeat(64), SVC_CONTROL_OPERATOR_TOKEN: OP };
    const a = await startSvc({ env });
    const b = await startSvc({ env });
    const ca = await session(a.url, 'admin', 'on-a');
    const cb = await session(b.url, 'admin', 'on-b');
    const p = await ca.request<ProjectDetail>('project_create', { name: 'pg-audit', operator_token: OP });
    expect((await failure(cb.request('project_update', { project_id: p.project_id, vision: 'v', operator_token: 'nope' }))).code).toBe('operator_auth_failed');
    await cb.request('project_update', { project_id: p.project_id, vision: 'v', operator_token: OP });
    const want = [
      { role: 'admin', agent_id: 'on-b', type: 'control.project_update', target: { project_id: p.project_id }, result: 'ok' },
      { role: 'admin', agent_id: 'on-b', type: 'control.project_update', target: { project_id: p.project_id }, result: 'operator_auth_failed' },
      { role: 'admin', agent_id: 'on-a', type: 'control.project_create', target: { project_id: p.project_id }, result: 'ok' },
    ];
    expect(strip((await list(ca)).entries)).toEqual(want);
    expect(strip((await list(cb)).entries)).toEqual(want);
    // encrypted at rest: only time, agent and type in the clear
    const c = new PgClient({ connectionString: url });
    await c.connect();
    const rows = (await c.query('SELECT agent_id, type, body FROM svc_audit ORDER BY seq')).rows as Array<{ agent_id: string; type: string; body: string }>;
    await c.end();
    expect(rows.map((r) => [r.agent_id, r.type])).toEqual(want.map((w) => [w.agent_id, w.type]).reverse());
    for (const r of rows) {
      expect(r.body.startsWith('e1.')).toBe(true);
      expect(r.body).not.toContain(p.project_id);
    }
    closeSessions();
    await Promise.all([a.stop(), b.stop()]);
    const c2 = await startSvc({ env });
    expect(strip((await list(await session(c2.url))).entries)).toEqual(want);
  }, 120_000);
});

describe('svc-control audit on an empty log', () => {
  it('says so', async () => {
    const svc = await startSvc();
    const r = await runCli(BIN.control, ['--url', svc.url, 'audit'], { env: { SVC_AUTH_TOKEN: ADMIN_TOKEN } });
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 0, stdout: 'no audit entries match\n' });
    await waitFor(() => true);
  }, 60_000);
});
