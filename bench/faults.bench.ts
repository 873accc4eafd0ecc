/**
 * `npm run bench:faults`: injects each fault into running programs and prints how long `svc`
 * takes to notice and to recover, and how many acknowledged mutations were lost. Not a test: it
 * asserts nothing, it prints figures (a table on stdout, progress on stderr).
 *
 * Faults, each while two sessions per replica create projects in a loop:
 *  - PostgreSQL `pg_ctl stop -m fast`, `pg_ctl stop -m immediate` (two replicas; restarted after 1 s),
 *  - `pg_terminate_backend` of every svc session (two replicas),
 *  - a partition: a loopback proxy between svc and PostgreSQL stops forwarding for 10 s,
 *  - a node daemon SIGKILLed (then restarted) and SIGSTOPped (then SIGCONTed), with a debug
 *    session watching for the node's `degraded` availability event,
 *  - the state directory's disk full (SQLite on a 4 MiB tmpfs; needs root), then space freed.
 * For each: the time from the fault to /readyz 503, from the database's (or the space's) return
 * to /readyz 200, from the fault to the `degraded` event and from the daemon's return to the
 * node `online` (daemon faults); and the acknowledged mutations read back on every replica
 * (lost must be 0). The PostgreSQL rows are skipped, saying why, without PostgreSQL.
 *
 * Targets: degraded within 2 s of a daemon's death (SIGKILL; a stopped daemon is found by the
 * server's pings, within 8 s), ready within 5 s of the database's return, 0 lost.
 * BENCH_ROUNDS=n runs each fault n times (default 1); the run stops starting faults after 4 min.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { ControlClient } from '../libs/client/src';
import { missingProjects, Mutators, timeTo } from '../test/support/faults';
import { Postgres, postgresBinDir, startPostgres } from '../test/support/postgres';
import { ADMIN_TOKEN, cleanupTmp, killAll, Running, sleep, startNodeDaemon, startSvc, tmpDir, waitFor } from '../test/support/processes';
import { startTcpProxy } from '../test/support/tcp-proxy';

const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 1));
const START = Date.now();
/** No fault starts after this (the run stays under 5 min). */
const BUDGET_MS = 240_000;

interface Row {
  fault: string;
  to503?: number;
  toReady?: number;
  toDegraded?: number;
  toOnline?: number;
  acked?: number;
  lost?: number;
  note?: string;
}
const rows: Row[] = [];

const log = (text: string) => process.stderr.write(`${text}\n`);
const sessions: ControlClient[] = [];
async function connect(r: Running): Promise<ControlClient> {
  const c = await ControlClient.connect({ url: r.url, token: ADMIN_TOKEN, requestTimeoutMs: 10_000 });
  sessions.push(c);
  return c;
}

/** Two mutating sessions per replica, running until 20 mutations are acknowledged. */
async function mutate(replicas: Running[], label: string): Promise<Mutators> {
  const clients: ControlClient[] = [];
  for (const r of replicas) clients.push(await connect(r), await connect(r));
  const m = new Mutators(clients, label);
  await waitFor(() => m.acked.size >= 20, 10_000, 20);
  return m;
}

/** Waits for 10 more acknowledgements, stops the mutators and counts the acknowledged ids some replica does not show. */
async function settle(m: Mutators, replicas: Running[]): Promise<{ acked: number; lost: number }> {
  const n = m.acked.size;
  await waitFor(() => m.acked.size >= n + 10, 10_000, 20);
  await m.stop();
  let lost = 0;
  for (const r of replicas) {
    const c = await connect(r);
    // another replica's last commits arrive by push: give them a moment
    const missing = await waitFor(async () => ((await missingProjects(c, m.acked)).length === 0 ? [] : undefined), 2000, 50).catch(() =>
      missingProjects(c, m.acked),
    );
    lost = Math.max(lost, missing.length);
  }
  return { acked: m.acked.size, lost };
}

const slowest = async (ps: Promise<number>[]): Promise<number> => Math.max(...(await Promise.all(ps)));

async function databaseFaults(pg: Postgres): Promise<void> {
  const url = await pg.newDatabase();
  const database = new URL(url).pathname.slice(1);
  const env = { SVC_DATABASE_URL: url, SVC_METRICS_PORT: '0', SVC_SWEEP_INTERVAL_MS: '200' };
  const replicas = [await startSvc({ env }), await startSvc({ env })];
  const stopCase = (mode: 'fast' | 'immediate') => async (): Promise<Row> => {
    const m = await mutate(replicas, mode);
    const t0 = Date.now();
    const to503 = slowest(replicas.map((r) => timeTo(r, 503, t0, 10_000)));
    await pg.stopServer(mode);
    const row: Row = { fault: `pg stop -m ${mode}` };
    try {
      row.to503 = await to503;
      await sleep(1000);
    } finally {
      await pg.startServer();
    }
    const back = Date.now();
    row.toReady = await slowest(replicas.map((r) => timeTo(r, 200, back, 30_000)));
    return { ...row, ...(await settle(m, replicas)) };
  };
  await run('pg stop -m fast', stopCase('fast'));
  await run('pg stop -m immediate', stopCase('immediate'));
  await run('pg_terminate_backend', async () => {
    const m = await mutate(replicas, 'terminate');
    const t0 = Date.now();
    const ended = await pg.terminateBackends(database);
    // no 503 expected: the store reconnects at once; recovery is the first acknowledgement after the fault
    const before = m.acked.size;
    await waitFor(() => m.acked.size > before, 10_000, 5);
    const row: Row = { fault: 'pg_terminate_backend', toReady: Date.now() - t0, note: `${ended} sessions ended; ready = next mutation acknowledged` };
    return { ...row, ...(await settle(m, replicas)) };
  });
  await Promise.all(replicas.map((r) => r.stop()));

  const target = new URL(await pg.newDatabase());
  const proxy = await startTcpProxy(Number(target.port));
  target.port = String(proxy.port);
  const svc = await startSvc({ env: { ...env, SVC_DATABASE_URL: target.toString() } });
  await run('partition 10 s', async () => {
    const m = await mutate([svc], 'partition');
    const t0 = Date.now();
    proxy.block();
    const row: Row = { fault: 'partition 10 s', to503: await timeTo(svc, 503, t0, 10_000) };
    await sleep(Math.max(0, 10_000 - (Date.now() - t0)));
    const back = Date.now();
    proxy.unblock();
    row.toReady = await timeTo(svc, 200, back, 30_000);
    return { ...row, ...(await settle(m, [svc])) };
  });
  await svc.stop();
  await proxy.close();
}

async function daemonFaults(): Promise<void> {
  const svc = await startSvc({ env: { SVC_METRICS_PORT: '0' } });
  const admin = await connect(svc);
  const { invite_token } = await admin.request<{ invite_token: string }>('node_invite_create');
  const dir = tmpDir('bench-faults-node-');
  const startDaemon = (args: string[] = []) => startNodeDaemon(dir, svc.url, 'bench', args, { SVC_LOG_LEVEL: 'warn' });
  let daemon = await startDaemon(['--invite-token', invite_token]);
  const nodeId = await waitFor(
    async () =>
      (await admin.request<{ nodes: Array<{ node_id: string; node_name: string }> }>('node_list')).nodes.find((n) => n.node_name === 'bench')?.node_id,
    10_000,
  );
  const state = async () => (await admin.request<{ node: { state: string } }>('node_get', { node_id: nodeId })).node.state;
  const untilState = async (s: string, t0: number, limitMs: number) => {
    await waitFor(async () => (await state()) === s, limitMs, 25);
    return Date.now() - t0;
  };
  // availability events are about workspaces: a project with a mount on the node
  const project = await admin.request<{ project_id: string }>('project_create', { name: 'bench-faults' });
  await admin.request('project_mount_set', { project_id: project.project_id, node_id: nodeId, export_name: 'work', mount_path: '/w' });
  await untilState('online', Date.now(), 10_000);
  const events: Array<{ state: unknown; at: number }> = [];
  const watcher = await connect(svc);
  watcher.on('event', (type: string, payload: Record<string, unknown>) => {
    if (type === 'control.workspace_availability' && payload.node_id === nodeId) events.push({ state: payload.state, at: Date.now() });
  });
  await watcher.request('debug_subscribe');
  const degradedEvent = (t0: number, limitMs: number) =>
    waitFor(() => events.find((e) => e.at >= t0 && e.state === 'degraded'), limitMs, 10).then((e) => e.at - t0);

  await run('daemon SIGKILL', async () => {
    const m = await mutate([svc], 'sigkill');
    const t0 = Date.now();
    await daemon.kill();
    const row: Row = { fault: 'daemon SIGKILL', toDegraded: await degradedEvent(t0, 10_000) };
    daemon = await startDaemon();
    row.toOnline = await untilState('online', Date.now(), 10_000);
    row.note = 'online = from the restarted daemon listening';
    return { ...row, ...(await settle(m, [svc])) };
  });
  await run('daemon SIGSTOP', async () => {
    const m = await mutate([svc], 'sigstop');
    const t0 = Date.now();
    daemon.proc.kill('SIGSTOP');
    const row: Row = { fault: 'daemon SIGSTOP', toDegraded: await degradedEvent(t0, 15_000) };
    const t1 = Date.now();
    daemon.proc.kill('SIGCONT');
    row.toOnline = await untilState('online', t1, 10_000);
    row.note = 'online = from SIGCONT';
    return { ...row, ...(await settle(m, [svc])) };
  });
  await daemon.stop();
  await svc.stop();
}

async function diskFull(): Promise<void> {
  if (process.getuid?.() !== 0) {
    rows.push({ fault: 'state disk full', note: 'skipped: mounting a tmpfs needs root' });
    return;
  }
  await run('state disk full', async () => {
    const fs = tmpDir('bench-fullfs-');
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4194304', 'tmpfs', fs], { stdio: 'ignore' });
    } catch (e) {
      return { fault: 'state disk full', note: `skipped: cannot mount a tmpfs (${(e as Error).message.split('\n')[0]})` };
    }
    try {
      const stateDir = join(fs, 'state');
      mkdirSync(stateDir);
      const svc = await startSvc({ stateDir, env: { SVC_METRICS_PORT: '0' } });
      const m = await mutate([svc], 'full');
      const filler = join(fs, 'filler');
      try {
        execFileSync('dd', ['if=/dev/zero', `of=${filler}`, 'bs=64k'], { stdio: 'ignore' });
      } catch {
        /* dd stops with ENOSPC: the disk is full */
      }
      const t0 = Date.now();
      const row: Row = { fault: 'state disk full', to503: await timeTo(svc, 503, t0, 10_000), note: '503 = from the disk filled' };
      await sleep(1000);
      rmSync(filler);
      const back = Date.now();
      row.toReady = await timeTo(svc, 200, back, 30_000);
      Object.assign(row, await settle(m, [svc]));
      await svc.stop();
      return row;
    } finally {
      execFileSync('umount', [fs], { stdio: 'ignore' });
    }
  });
}

/** Runs one fault ROUNDS times (while the time budget lasts), recording a row per round. */
async function run(label: string, once: () => Promise<Row>): Promise<void> {
  for (let i = 0; i < ROUNDS; i++) {
    const fault = ROUNDS > 1 ? `${label} #${i + 1}` : label;
    if (Date.now() - START > BUDGET_MS) {
      rows.push({ fault, note: 'skipped: out of time' });
      continue;
    }
    log(`fault: ${fault}`);
    try {
      rows.push({ ...(await once()), fault });
    } catch (e) {
      rows.push({ fault, note: `failed: ${(e as Error).message.split('\n')[0]}` });
    }
  }
}

/** Runs a group of faults; a failure of its setup becomes a row instead of ending the run. */
async function section(label: string, fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (e) {
    rows.push({ fault: label, note: `failed: ${(e as Error).message.split('\n')[0]}` });
  }
}

function print(): void {
  const ms = (v?: number) => (v === undefined ? '-' : `${v} ms`);
  const target = (r: Row): string => {
    if (r.fault.startsWith('daemon SIGKILL')) return 'degraded <= 2000 ms, 0 lost';
    if (r.fault.startsWith('daemon SIGSTOP')) return 'degraded <= 8000 ms (pings), 0 lost';
    if (r.fault.startsWith('pg stop')) return '503 <= 2000 ms, ready <= 5000 ms, 0 lost';
    return 'ready <= 5000 ms, 0 lost';
  };
  const header = ['fault', '/readyz 503', 'ready again', 'degraded event', 'node online', 'acked', 'lost', 'target', 'note'];
  const table = rows.map((r) => [
    r.fault,
    ms(r.to503),
    ms(r.toReady),
    ms(r.toDegraded),
    ms(r.toOnline),
    r.acked === undefined ? '-' : String(r.acked),
    r.lost === undefined ? '-' : String(r.lost),
    target(r),
    r.note ?? '',
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => row[i].length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]))
      .join('  ')
      .trimEnd();
  console.log(`fault bench (${ROUNDS} round${ROUNDS > 1 ? 's' : ''}, ${Math.round((Date.now() - START) / 1000)} s)`);
  console.log(line(header));
  for (const row of table) console.log(line(row));
  console.log('ready again: from the database back (restart / forwarding) or space freed; online: see note');
}

async function main(): Promise<void> {
  let pg: Postgres | null = null;
  try {
    if (postgresBinDir()) {
      pg = await startPostgres();
      if (pg) await section('PostgreSQL faults', () => databaseFaults(pg!));
    } else {
      for (const fault of ['pg stop -m fast', 'pg stop -m immediate', 'pg_terminate_backend', 'partition 10 s'])
        rows.push({ fault, note: 'skipped: PostgreSQL is not installed (no initdb)' });
    }
    await section('node daemon faults', daemonFaults);
    await section('state disk full', diskFull);
  } finally {
    for (const c of sessions) c.close();
    await killAll();
    await pg?.close();
    cleanupTmp();
  }
  print();
  // the sessions' sockets may keep the loop alive a while after they close
  process.exit(0);
}

main().catch((e) => {
  print();
  console.error(e);
  process.exit(1);
});
