/**
 * `npm run bench:state` (issue 9 benchmark): how the control-plane state scales with the number
 * of nodes. For each of two scales (BENCH_SMALL_NODES, default 100, first; then BENCH_NODES,
 * default 10,000) it starts the built `svc` on a fresh temporary state dir (loopback only) and
 *  1. populates it from 64 concurrent admin sessions: N nodes joined (`node_invite_create` +
 *     `node_join`, lease_ttl_ms 1 h so none expires during the run), round(N/20) projects (at
 *     most 500) of 20 mounts each (`project_create` + `project_mount_set`, export `work`, paths
 *     /m0../m19, spread over the nodes), and one "big" project of 1,000 mounts (/big/m0..,
 *     on distinct nodes when N >= 1,000, else 1,000/N mounts per node); prints how long that took;
 *  2. from 64 sessions, each keeping 1 request in flight:
 *     a. `node_lease_refresh` of random nodes (with their node_secret) for 5 s: acknowledged
 *        refreshes/s, p50/p99 latency;
 *     b. `project_mount_set` adding a new mount path to a random small project for 3 s: ops/s,
 *        p50/p99;
 *     c. `workspace_status` of the big project (`{project_id, project_token}`) for 3 s: p50/p99,
 *        from send to the decoded reply (with 64 in flight this includes queueing in the server;
 *        a sequential single-session figure is printed beside it);
 *  3. records the server's RSS (VmRSS) at the end of that load, stops it (SIGTERM), and times a
 *     new `svc` on the same state dir from spawn to its listening line (restart/load time), then
 *     its RSS once listening, and checks that it serves the big project with every mount online.
 * Then prints the two scales side by side with the ratio (large/small). It asserts nothing.
 *
 * Targets (issue 9, 2 cores, 10,000 nodes): >= 2,000 lease refreshes/s; project_mount_set p99
 * < 20 ms; workspace_status p99 < 10 ms; restart < 3 s; every 10,000-node figure within 2x of
 * the 100-node one (the big project has 1,000 mounts at both scales, so its replies are the
 * same size).
 *
 * Environment: BENCH_NODES (default 10000), BENCH_SMALL_NODES (default 100), BENCH_SECONDS
 * (multiplier of the phase durations, default 1), BENCH_SERVER_NODE_ARGS (extra node flags for
 * the server, e.g. `--cpu-prof`). Population prints progress on stderr every 5 s; every request
 * has a 60 s timeout. All processes and temporary dirs are removed at the end, on error and on
 * SIGINT/SIGTERM.
 */
import { ChildProcess, spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ConnectionError, ControlClient, ControlError } from '../libs/client/src';

const ROOT = resolve(__dirname, '..', '..');
const ADMIN_TOKEN = 'bench-admin-token-0123456789';
const USER_TOKEN = 'bench-user-token-0123456789';
const SESSIONS = 64;
const REQUEST_TIMEOUT_MS = 60_000;
const LEASE_TTL_MS = 3_600_000;
const MOUNTS_PER_PROJECT = 20;
const MAX_PROJECTS = 500;
const MAX_BIG_MOUNTS = 1000;
const FS_URL = 'ws://127.0.0.1:1/v2/fs'; // never dialled: the bench opens no runtime session

function envInt(name: string, dflt: number): number {
  const raw = process.env[name];
  const v = raw === undefined || raw === '' ? dflt : Number(raw);
  if (!Number.isInteger(v) || v < 1) throw new Error(`${name} must be a positive integer, got ${raw}`);
  return v;
}
const LARGE_NODES = envInt('BENCH_NODES', 10_000);
const SMALL_NODES = envInt('BENCH_SMALL_NODES', 100);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 1);
if (!(SECONDS > 0)) throw new Error(`BENCH_SECONDS must be a positive number, got ${process.env.BENCH_SECONDS}`);

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function rssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024;
}

function dirBytes(dir: string): number {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    total += e.isDirectory() ? dirBytes(p) : statSync(p).size;
  }
  return total;
}

// ---- processes and temp dirs, cleaned up on every way out ----

const children = new Set<ChildProcess>();
const tempDirs = new Set<string>();

function cleanupSync(): void {
  for (const p of children) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  children.clear();
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
  tempDirs.clear();
}
process.on('exit', cleanupSync);
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    console.error(`\n${sig}: stopping`);
    cleanupSync();
    process.exit(130);
  });
}

interface Server {
  url: string;
  pid: number;
  /** Time from spawn to the listening line, ms. */
  startMs: number;
  /** SIGTERM, wait for the exit (SIGKILL after 60 s); resolves with the time it took, ms. */
  stop(): Promise<number>;
}

function startServer(stateDir: string, timeoutMs = 120_000): Promise<Server> {
  const nodeArgs = (process.env.BENCH_SERVER_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const t0 = performance.now();
  const proc = spawn(process.execPath, [...nodeArgs, join(ROOT, 'dist/src/main.js'), '--port', '0', '--state-dir', stateDir], {
    env: { ...process.env, SVC_ADMIN_TOKEN: ADMIN_TOKEN, SVC_USER_TOKEN: USER_TOKEN, SVC_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.add(proc);
  const exited = new Promise<void>((r) =>
    proc.once('exit', () => {
      children.delete(proc);
      r();
    }),
  );
  return new Promise<Server>((res, rej) => {
    let out = '';
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      rej(new Error(`svc did not print its listening line within ${timeoutMs} ms`));
    }, timeoutMs);
    proc.stdout!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = /listening on (\S+)/.exec(out);
      if (!m) return;
      clearTimeout(timer);
      const startMs = performance.now() - t0;
      res({
        url: m[1],
        pid: proc.pid!,
        startMs,
        stop: async () => {
          const s = performance.now();
          const kill = setTimeout(() => proc.kill('SIGKILL'), 60_000);
          proc.kill('SIGTERM');
          await exited;
          clearTimeout(kill);
          return performance.now() - s;
        },
      });
    });
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      rej(new Error(`svc exited (${code ?? signal}) before listening`));
    });
  });
}

function openSessions(url: string, n = SESSIONS): Promise<ControlClient[]> {
  return Promise.all(Array.from({ length: n }, () => ControlClient.connect({ url, token: ADMIN_TOKEN, requestTimeoutMs: REQUEST_TIMEOUT_MS })));
}

// ---- population ----

interface NodeCreds {
  node_id: string;
  node_secret: string;
}
interface Population {
  nodes: NodeCreds[];
  projects: string[];
  big: { project_id: string; project_token: string; mounts: number };
  seconds: number;
  mutations: number;
}

/** Runs `count` jobs over the sessions, one in flight per session; stops at the first error. */
async function pool(sessions: ControlClient[], count: number, job: (c: ControlClient, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  let failed: unknown = null;
  await Promise.all(
    sessions.map(async (c) => {
      while (failed === null) {
        const i = next++;
        if (i >= count) return;
        try {
          await job(c, i);
        } catch (e) {
          failed ??= e;
        }
      }
    }),
  );
  if (failed !== null) throw failed;
}

async function populate(label: string, sessions: ControlClient[], n: number, projectCount: number, bigMounts: number): Promise<Population> {
  const t0 = performance.now();
  let stage = 'nodes';
  let done = 0;
  let total = n;
  let mutations = 0;
  let stageStart = t0;
  const progress = setInterval(() => {
    const s = (performance.now() - stageStart) / 1000;
    console.error(`  [${label}] populate ${stage}: ${done}/${total} (${(done / s).toFixed(0)}/s), ${mutations} mutations in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  }, 5000);
  const setStage = (name: string, count: number) => {
    stage = name;
    done = 0;
    total = count;
    stageStart = performance.now();
  };
  try {
    const nodes: NodeCreds[] = new Array(n);
    await pool(sessions, n, async (c, i) => {
      const { invite_token } = await c.request<{ invite_token: string }>('node_invite_create', {});
      mutations++;
      const cred = await c.request<NodeCreds>('node_join', { invite_token, node_name: `bench-n${i}`, fs_url: FS_URL, lease_ttl_ms: LEASE_TTL_MS });
      mutations++;
      nodes[i] = { node_id: cred.node_id, node_secret: cred.node_secret };
      done++;
    });

    setStage(`projects and their mounts (requests)`, projectCount * (1 + MOUNTS_PER_PROJECT));
    const projects: string[] = new Array(projectCount);
    await pool(sessions, projectCount, async (c, p) => {
      const { project_id } = await c.request<{ project_id: string }>('project_create', { name: `bench-p${p}` });
      mutations++;
      done++;
      for (let m = 0; m < MOUNTS_PER_PROJECT; m++) {
        const node = nodes[(p * MOUNTS_PER_PROJECT + m) % n];
        await c.request('project_mount_set', { project_id, node_id: node.node_id, export_name: 'work', mount_path: `/m${m}` });
        mutations++;
        done++;
      }
      projects[p] = project_id;
    });

    setStage('big project mounts', bigMounts);
    const big = await sessions[0].request<{ project_id: string; project_token: string }>('project_create', { name: 'bench-big' });
    mutations++;
    const stride = Math.max(1, Math.floor(n / bigMounts)); // distinct nodes when there are enough, else each node several times
    await pool(sessions, bigMounts, async (c, i) => {
      await c.request('project_mount_set', { project_id: big.project_id, node_id: nodes[(i * stride) % n].node_id, export_name: 'work', mount_path: `/big/m${i}` });
      mutations++;
      done++;
    });
    return { nodes, projects, big: { project_id: big.project_id, project_token: big.project_token, mounts: bigMounts }, seconds: (performance.now() - t0) / 1000, mutations };
  } catch (e) {
    throw new Error(`[${label}] population failed in stage "${stage}" after ${done}/${total} (${mutations} mutations): ${(e as Error).message}`);
  } finally {
    clearInterval(progress);
  }
}

// ---- closed-loop load ----

interface LoadResult {
  ok: number;
  errors: Map<string, number>;
  seconds: number;
  p50: number;
  p99: number;
}

/** Each session keeps one request in flight until `seconds` pass; latency per request, ms. */
async function closedLoop(sessions: ControlClient[], seconds: number, op: (c: ControlClient, session: number, k: number) => Promise<unknown>): Promise<LoadResult> {
  const latencies: number[] = [];
  const errors = new Map<string, number>();
  let ok = 0;
  const t0 = performance.now();
  const deadline = t0 + seconds * 1000;
  await Promise.all(
    sessions.map(async (c, s) => {
      for (let k = 0; performance.now() < deadline; k++) {
        const start = performance.now();
        try {
          await op(c, s, k);
          latencies.push(performance.now() - start);
          ok++;
        } catch (e) {
          const code = e instanceof ControlError ? e.code : e instanceof ConnectionError ? `connection:${e.reason}` : (e as Error).message;
          errors.set(code, (errors.get(code) ?? 0) + 1);
          if (e instanceof ConnectionError && e.reason === 'closed') throw e;
        }
      }
    }),
  );
  const elapsed = (performance.now() - t0) / 1000;
  latencies.sort((a, b) => a - b);
  return { ok, errors, seconds: elapsed, p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

function errorsText(r: LoadResult): string {
  if (r.errors.size === 0) return '';
  return `, ERRORS ${[...r.errors].map(([k, v]) => `${k} x${v}`).join(', ')}`;
}

// ---- one scale ----

interface Figures {
  nodes: number;
  projects: number;
  bigMounts: number;
  populateS: number;
  populateMutPerS: number;
  refreshPerS: number;
  refreshP50: number;
  refreshP99: number;
  mountSetPerS: number;
  mountSetP50: number;
  mountSetP99: number;
  statusP50: number;
  statusP99: number;
  statusSeqP50: number;
  statusSeqP99: number;
  statusKiB: number;
  rssLoadMiB: number;
  stateMiB: number;
  shutdownS: number;
  restartS: number;
  rssRestartMiB: number;
}

async function runScale(n: number): Promise<Figures> {
  const label = `${n} nodes`;
  const projectCount = Math.max(1, Math.min(MAX_PROJECTS, Math.round(n / MOUNTS_PER_PROJECT)));
  const bigMounts = MAX_BIG_MOUNTS;
  const stateDir = mkdtempSync(join(tmpdir(), 'svc-state-bench-'));
  tempDirs.add(stateDir);
  let server: Server | null = await startServer(stateDir);
  let sessions: ControlClient[] = [];
  try {
    console.log(`\n== ${label}: ${projectCount} projects x ${MOUNTS_PER_PROJECT} mounts, big project ${bigMounts} mounts on ${Math.min(n, bigMounts)} distinct nodes; svc on ${server.url}`);
    sessions = await openSessions(server.url);
    const pop = await populate(label, sessions, n, projectCount, bigMounts);
    const check = await sessions[0].request<{ availability: { mounts_total: number; online: number } }>('workspace_status', { project_id: pop.big.project_id, project_token: pop.big.project_token });
    if (check.availability.mounts_total !== bigMounts || check.availability.online !== bigMounts) {
      throw new Error(`big project: expected ${bigMounts} online mounts, status says ${JSON.stringify(check.availability)}`);
    }
    const populateMutPerS = pop.mutations / pop.seconds;
    console.log(`population: ${pop.mutations} mutations (${n} invites + ${n} joins, ${projectCount} projects + ${projectCount * MOUNTS_PER_PROJECT} mounts, 1 + ${bigMounts} big-project mounts) in ${pop.seconds.toFixed(1)} s (${populateMutPerS.toFixed(0)} mutations/s, ${SESSIONS} sessions)`);

    // a. lease refreshes
    const refresh = await closedLoop(sessions, 5 * SECONDS, (c) => {
      const node = pop.nodes[randomInt(n)];
      return c.request('node_lease_refresh', { node_id: node.node_id, node_secret: node.node_secret, lease_ttl_ms: LEASE_TTL_MS });
    });
    const refreshPerS = refresh.ok / refresh.seconds;
    console.log(`node_lease_refresh, ${SESSIONS} sessions x 1 in flight, ${refresh.seconds.toFixed(1)} s: ${refreshPerS.toFixed(0)} acknowledged/s, p50 ${refresh.p50.toFixed(2)} ms, p99 ${refresh.p99.toFixed(2)} ms (target >= 2000/s)${errorsText(refresh)}`);

    // b. mount changes on small projects (a new path each time, so every one is a real change)
    const mountSet = await closedLoop(sessions, 3 * SECONDS, (c, s, k) =>
      c.request('project_mount_set', { project_id: pop.projects[randomInt(projectCount)], node_id: pop.nodes[randomInt(n)].node_id, export_name: 'work', mount_path: `/b/s${s}/k${k}` }),
    );
    const mountSetPerS = mountSet.ok / mountSet.seconds;
    console.log(`project_mount_set (new path, random small project), ${SESSIONS} sessions x 1 in flight, ${mountSet.seconds.toFixed(1)} s: ${mountSetPerS.toFixed(0)} ops/s, p50 ${mountSet.p50.toFixed(2)} ms, p99 ${mountSet.p99.toFixed(2)} ms (target p99 < 20 ms)${errorsText(mountSet)}`);

    // c. workspace_status of the big project
    const statusPayload = { project_id: pop.big.project_id, project_token: pop.big.project_token };
    const statusKiB = Buffer.byteLength(JSON.stringify(await sessions[0].request('workspace_status', statusPayload))) / 1024;
    await Promise.all(
      sessions.map(async (c) => {
        for (let i = 0; i < 3; i++) await c.request('workspace_status', statusPayload); // warm-up
      }),
    );
    const status = await closedLoop(sessions, 3 * SECONDS, (c) => c.request('workspace_status', statusPayload));
    console.log(`workspace_status (${bigMounts} mounts, ~${statusKiB.toFixed(0)} KiB payload), ${SESSIONS} sessions x 1 in flight, ${status.seconds.toFixed(1)} s: ${(status.ok / status.seconds).toFixed(0)} ops/s, p50 ${status.p50.toFixed(2)} ms, p99 ${status.p99.toFixed(2)} ms, send to decoded reply (target p99 < 10 ms)${errorsText(status)}`);
    const seq: number[] = [];
    const seqCount = Math.max(50, Math.round(300 * SECONDS));
    for (let i = 0; i < seqCount; i++) {
      const s = performance.now();
      await sessions[0].request('workspace_status', statusPayload);
      seq.push(performance.now() - s);
    }
    seq.sort((a, b) => a - b);
    console.log(`workspace_status, 1 session sequential, ${seqCount} requests: p50 ${percentile(seq, 50).toFixed(2)} ms, p99 ${percentile(seq, 99).toFixed(2)} ms`);

    // restart
    const rssLoadMiB = rssMiB(server.pid);
    for (const c of sessions) c.close();
    sessions = [];
    const shutdownMs = await server.stop();
    server = null;
    const stateMiB = dirBytes(stateDir) / 1024 / 1024;
    server = await startServer(stateDir);
    const rssRestartMiB = rssMiB(server.pid);
    const restartS = server.startMs / 1000;
    const after = await ControlClient.connect({ url: server.url, token: ADMIN_TOKEN, requestTimeoutMs: REQUEST_TIMEOUT_MS });
    sessions = [after];
    const reloaded = await after.request<{ availability: { mounts_total: number; online: number } }>('workspace_status', statusPayload);
    console.log(`RSS at the end of the load: ${rssLoadMiB.toFixed(1)} MiB; state dir ${stateMiB.toFixed(1)} MiB; SIGTERM to exit ${(shutdownMs / 1000).toFixed(2)} s`);
    console.log(`restart: spawn to listening line ${restartS.toFixed(2)} s (target < 3 s), RSS after load ${rssRestartMiB.toFixed(1)} MiB; big project after restart: ${reloaded.availability.online}/${reloaded.availability.mounts_total} mounts online`);
    if (reloaded.availability.mounts_total !== bigMounts) console.log(`  WARNING: expected ${bigMounts} mounts after restart`);

    return {
      nodes: n,
      projects: projectCount,
      bigMounts,
      populateS: pop.seconds,
      populateMutPerS,
      refreshPerS,
      refreshP50: refresh.p50,
      refreshP99: refresh.p99,
      mountSetPerS,
      mountSetP50: mountSet.p50,
      mountSetP99: mountSet.p99,
      statusP50: status.p50,
      statusP99: status.p99,
      statusSeqP50: percentile(seq, 50),
      statusSeqP99: percentile(seq, 99),
      statusKiB,
      rssLoadMiB,
      stateMiB,
      shutdownS: shutdownMs / 1000,
      restartS,
      rssRestartMiB,
    };
  } finally {
    for (const c of sessions) c.close();
    if (server) await server.stop();
    rmSync(stateDir, { recursive: true, force: true });
    tempDirs.delete(stateDir);
  }
}

// ---- report ----

type Better = 'higher' | 'lower';
interface Row {
  what: string;
  key: keyof Figures;
  digits: number;
  better?: Better;
  /** Target on the large figure: [comparison, value, text]. */
  target?: [Better, number, string];
}

const ROWS: Row[] = [
  { what: 'population, s', key: 'populateS', digits: 1 },
  { what: 'population, mutations/s', key: 'populateMutPerS', digits: 0, better: 'higher' },
  { what: 'lease refresh, acks/s', key: 'refreshPerS', digits: 0, better: 'higher', target: ['higher', 2000, '>= 2000'] },
  { what: 'lease refresh p50, ms', key: 'refreshP50', digits: 2, better: 'lower' },
  { what: 'lease refresh p99, ms', key: 'refreshP99', digits: 2, better: 'lower' },
  { what: 'project_mount_set, ops/s', key: 'mountSetPerS', digits: 0, better: 'higher' },
  { what: 'project_mount_set p50, ms', key: 'mountSetP50', digits: 2, better: 'lower' },
  { what: 'project_mount_set p99, ms', key: 'mountSetP99', digits: 2, better: 'lower', target: ['lower', 20, '< 20'] },
  { what: 'workspace_status p50, ms (64 sess.)', key: 'statusP50', digits: 2, better: 'lower' },
  { what: 'workspace_status p99, ms (64 sess.)', key: 'statusP99', digits: 2, better: 'lower', target: ['lower', 10, '< 10'] },
  { what: 'workspace_status p50, ms (1 sess.)', key: 'statusSeqP50', digits: 2, better: 'lower' },
  { what: 'workspace_status p99, ms (1 sess.)', key: 'statusSeqP99', digits: 2, better: 'lower' },
  { what: 'workspace_status reply, KiB', key: 'statusKiB', digits: 0 },
  { what: 'RSS end of load, MiB', key: 'rssLoadMiB', digits: 1 },
  { what: 'state dir on disk, MiB', key: 'stateMiB', digits: 2 },
  { what: 'shutdown (SIGTERM to exit), s', key: 'shutdownS', digits: 2 },
  { what: 'restart to listening, s', key: 'restartS', digits: 2, better: 'lower', target: ['lower', 3, '< 3'] },
  { what: 'RSS after restart, MiB', key: 'rssRestartMiB', digits: 1 },
];

function printComparison(large: Figures, small: Figures): void {
  const pad = (s: string, w: number) => s.padStart(w);
  console.log(`\n== ${large.nodes} nodes next to ${small.nodes} nodes (big project ${large.bigMounts} vs ${small.bigMounts} mounts; projects ${large.projects} vs ${small.projects})`);
  console.log(`${'figure'.padEnd(38)}${pad('target', 10)}${pad(`${large.nodes} n.`, 12)}${pad('met', 5)}${pad(`${small.nodes} n.`, 12)}${pad('ratio', 8)}${pad('<= 2x', 7)}`);
  for (const r of ROWS) {
    const a = large[r.key];
    const b = small[r.key];
    const ratio = a / b;
    const met = r.target ? ((r.target[0] === 'higher' ? a >= r.target[1] : a < r.target[1]) ? 'yes' : 'NO') : '';
    // "within 2x" in the bad direction: a throughput may not fall below half, a time not double.
    const within = r.better ? ((r.better === 'higher' ? ratio >= 0.5 : ratio <= 2) ? 'yes' : 'NO') : '';
    console.log(`${r.what.padEnd(38)}${pad(r.target?.[2] ?? '', 10)}${pad(a.toFixed(r.digits), 12)}${pad(met, 5)}${pad(b.toFixed(r.digits), 12)}${pad(Number.isFinite(ratio) ? ratio.toFixed(2) : '-', 8)}${pad(within, 7)}`);
  }
  if (large.bigMounts !== small.bigMounts) console.log(`(workspace_status: the replies differ in size, ${large.bigMounts} vs ${small.bigMounts} mounts, so its ratio is not only the effect of the node count)`);
}

async function main(): Promise<void> {
  console.log(`svc state bench (node ${process.version}): ${SMALL_NODES} then ${LARGE_NODES} nodes, ${SESSIONS} sessions, phase durations x${SECONDS}`);
  const small = await runScale(SMALL_NODES);
  const large = await runScale(LARGE_NODES);
  printComparison(large, small);
}

main().then(
  () => {
    cleanupSync();
    process.exit(0);
  },
  (e) => {
    console.error(e);
    cleanupSync();
    process.exit(1);
  },
);
