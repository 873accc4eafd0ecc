/**
 * `npm run bench:state` (also with PostgreSQL and replicas): how the
 * control-plane state scales with the number of nodes. For each of two scales (BENCH_SMALL_NODES,
 * default 100, first; then BENCH_NODES, default 10,000) it starts the built `svc` on a fresh
 * store (loopback only) and
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
 *     new `svc` on the same store from spawn to its listening line (restart/load time), then
 *     its RSS once listening, and checks that it serves the big project with every mount online.
 * Then prints the two scales side by side with the ratio (large/small). It asserts nothing.
 *
 * Stores (printed in every heading):
 *  - default: SQLite, a fresh temporary `--state-dir` per scale.
 *  - `SVC_DATABASE_URL=postgres://USER[:PASS]@HOST[:PORT]/ANY` (a server whose user may CREATE
 *    DATABASE): each scale runs on a FRESH database `svc_bench_<pid>_<n>`, created through the
 *    server's `postgres` database and handed to svc as SVC_DATABASE_URL (the same URL with that
 *    database); dropped at the end of its scale (and on error or SIGINT/SIGTERM). "State on
 *    disk" is then `pg_database_size` after the load; RSS is svc's only, not PostgreSQL's.
 *  - `BENCH_POSTGRES=1` without SVC_DATABASE_URL: the same on a throwaway PostgreSQL this bench
 *    starts (bench/postgres.ts: initdb into a temp dir as the unprivileged `postgres` user when
 *    run as root, a free loopback port, PostgreSQL's durability defaults: fsync and
 *    synchronous_commit on), stopped and removed at the end.
 *  - `BENCH_REPLICAS=N` (default 1; more needs PostgreSQL): N svc replicas on the same database;
 *    session i talks to replica i mod N, so the 64 sessions are spread evenly for population and
 *    for every phase (the sequential workspace_status figure is one session, on replica 0).
 *    After population the bench waits until every replica shows the big project. With N >= 2 it
 *    also reports the replication lag p50/p99: the difference of every replica's
 *    `svc_store_replication_lag_seconds` histogram (control.metrics) between just before and
 *    just after the lease-refresh phase (once the replay counts stop growing), summed over the
 *    replicas (one observation per commit replayed, and a commit may carry a batch of mutations),
 *    the percentiles ESTIMATED from the buckets by linear interpolation within the
 *    bucket (as Prometheus' histogram_quantile; the bucket is printed beside the estimate); and
 *    which replica holds `svc_sweeper_leader` during the load and after the restart. RSS rows
 *    are the largest replica's (each replica's is printed). The restart phase stops every
 *    replica and starts them all at once, timed until the last one prints its listening line.
 *
 * Targets (2 cores, 10,000 nodes): >= 2,000 lease refreshes/s; project_mount_set p99
 * < 20 ms; workspace_status p99 < 10 ms; restart < 3 s; every 10,000-node figure within 2x of
 * the 100-node one (the big project has 1,000 mounts at both scales, so its replies are the
 * same size). Issue 10, two replicas on PostgreSQL: >= 2,000 acknowledged lease refreshes/s and
 * replication lag p99 < 100 ms.
 *
 * Environment: BENCH_NODES (default 10000), BENCH_SMALL_NODES (default 100), BENCH_SECONDS
 * (multiplier of the phase durations, default 1), BENCH_SERVER_NODE_ARGS (extra node flags for
 * the server, e.g. `--cpu-prof`), SVC_DATABASE_URL, BENCH_POSTGRES, BENCH_REPLICAS (above).
 * Population prints progress on stderr every 5 s; every request has a 60 s timeout. All
 * processes, temporary dirs and benchmark databases are removed at the end, on error and on
 * SIGINT/SIGTERM (a second signal stops at once).
 *
 * Examples: `BENCH_POSTGRES=1 BENCH_REPLICAS=2 npm run bench:state`;
 * `SVC_DATABASE_URL=postgres://svc@127.0.0.1:5432/postgres BENCH_REPLICAS=2 node dist/bench/state.bench.js`.
 */
import { ChildProcess } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { ConnectionError, ControlClient, ControlError } from '../libs/client/src';
import { sleep } from '../test/support/processes';
import { quantile, rssMiB } from './measure';
import { BenchPostgres, startPostgres } from './postgres';
import { BENCH_ADMIN_TOKEN as ADMIN_TOKEN, startBenchSvc, stopProcess } from './programs';
const SESSIONS = 64;
const REQUEST_TIMEOUT_MS = 60_000;
const LEASE_TTL_MS = 3_600_000;
const MOUNTS_PER_PROJECT = 20;
const MAX_PROJECTS = 500;
const MAX_BIG_MOUNTS = 1000;
const FS_URL = 'ws://127.0.0.1:1/v2/fs'; // never dialled: the bench opens no runtime session
const LAG_METRIC = 'svc_store_replication_lag_seconds';
const LEADER_METRIC = 'svc_sweeper_leader';

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

/** The PostgreSQL server given by the environment, or null. */
const DATABASE_URL = process.env.SVC_DATABASE_URL ? process.env.SVC_DATABASE_URL : null;
if (DATABASE_URL !== null && !/^postgres(ql)?:\/\//.test(DATABASE_URL)) throw new Error('SVC_DATABASE_URL must be a postgres:// URL');
const BENCH_POSTGRES = process.env.BENCH_POSTGRES ?? '';
if (!['', '0', '1'].includes(BENCH_POSTGRES)) throw new Error(`BENCH_POSTGRES must be 1 (or 0/unset), got ${BENCH_POSTGRES}`);
const STORE: 'sqlite' | 'postgres' = DATABASE_URL !== null || BENCH_POSTGRES === '1' ? 'postgres' : 'sqlite';
const REPLICAS = envInt('BENCH_REPLICAS', 1);
if (REPLICAS > 1 && STORE === 'sqlite') throw new Error(`BENCH_REPLICAS=${REPLICAS} needs PostgreSQL: set SVC_DATABASE_URL or BENCH_POSTGRES=1`);
if (REPLICAS > SESSIONS) throw new Error(`BENCH_REPLICAS must be at most ${SESSIONS} (the number of sessions)`);
/** `sqlite` / `postgres, 2 replicas`, for the headings. */
const STORE_TEXT = STORE === 'sqlite' ? 'sqlite' : `postgres, ${REPLICAS} replica${REPLICAS === 1 ? '' : 's'}`;

function dirBytes(dir: string): number {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    total += e.isDirectory() ? dirBytes(p) : statSync(p).size;
  }
  return total;
}

const list = (xs: number[], digits: number) => xs.map((x) => x.toFixed(digits)).join(' + ');

// ---- PostgreSQL: the server and one fresh database per scale ----

/** The throwaway server (BENCH_POSTGRES=1), or null. */
let pgServer: BenchPostgres | null = null;
/** URL of the server's `postgres` database, through which the bench databases are made. */
let adminUrl: string | null = null;
/** Bench databases not dropped yet. */
const databases = new Set<string>();
let databaseCounter = 0;

/** `url` with its database (the path) replaced; user, password, host and parameters kept. */
function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

function redact(url: string): string {
  const u = new URL(url);
  if (u.password) u.password = '***';
  return u.toString();
}

async function admin<T extends object>(text: string, params: unknown[] = []): Promise<T[]> {
  const c = new Client({ connectionString: adminUrl! });
  await c.connect();
  try {
    return (await c.query<T>(text, params)).rows;
  } finally {
    await c.end();
  }
}

async function createDatabase(): Promise<{ name: string; url: string }> {
  if (cleaning) throw new Error('stopping');
  const name = `svc_bench_${process.pid}_${++databaseCounter}`;
  await admin(`CREATE DATABASE ${name}`);
  databases.add(name);
  return { name, url: withDatabase(DATABASE_URL ?? pgServer!.url, name) };
}

async function dropDatabase(name: string): Promise<void> {
  // WITH (FORCE) (PostgreSQL 13+) ends a connection a killed svc may have left behind
  await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  databases.delete(name);
}

async function setUpPostgres(): Promise<string> {
  if (DATABASE_URL !== null) {
    adminUrl = withDatabase(DATABASE_URL, 'postgres');
    const [{ v }] = await admin<{ v: string }>(`SELECT current_setting('server_version') AS v`);
    return `PostgreSQL ${v} at ${redact(adminUrl)} (SVC_DATABASE_URL)`;
  }
  pgServer = await startPostgres();
  adminUrl = pgServer.url;
  return `${pgServer.version.split(' on ')[0]}, throwaway server on 127.0.0.1:${pgServer.port} (BENCH_POSTGRES=1; durability defaults: fsync on, synchronous_commit on)`;
}

// ---- processes, temp dirs and databases, cleaned up on every way out ----

const children = new Set<ChildProcess>();
const tempDirs = new Set<string>();

/** Last resort (also from the `exit` handler): kills and removes synchronously. */
function cleanupSync(): void {
  for (const p of children) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  children.clear();
  if (pgServer) {
    pgServer.closeSync();
    pgServer = null;
    databases.clear(); // gone with the server
  }
  if (databases.size > 0) console.error(`WARNING: bench databases left on the PostgreSQL server (drop them by hand): ${[...databases].join(', ')}`);
  databases.clear();
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
  tempDirs.clear();
}

let cleaning: Promise<void> | null = null;
/** Stops every svc (SIGTERM), drops the bench databases, stops the throwaway PostgreSQL, removes the temp dirs. */
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    await Promise.all([...children].map((p) => stopProcess(p, 10_000)));
    for (const name of [...databases]) {
      await dropDatabase(name).catch((e) => console.error(`could not drop database ${name}: ${(e as Error).message}`));
    }
    if (pgServer) {
      await pgServer.close();
      pgServer = null;
    }
    cleanupSync();
  })();
  return cleaning;
}

let signalled = false;
process.on('exit', cleanupSync);
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    if (signalled) {
      cleanupSync();
      process.exit(130);
    }
    signalled = true;
    console.error(`\n${sig}: stopping`);
    setTimeout(() => {
      cleanupSync();
      process.exit(130);
    }, 30_000).unref();
    void cleanup().finally(() => process.exit(130));
  });
}

interface Server {
  url: string;
  pid: number;
  /** Time from `t0` (default: its spawn) to the listening line, ms. */
  startMs: number;
  /** SIGTERM, wait for the exit (SIGKILL after 60 s); resolves with the time it took, ms. */
  stop(): Promise<number>;
}

/**
 * Starts `svc` on `stateDir` with the store `env` names (its log on this process's stderr).
 * @param t0 the instant {@link Server.startMs} counts from (performance.now()), default now
 * @throws Error (rejects) when the bench is stopping, when svc exits before listening, or after `timeoutMs`
 */
async function startServer(stateDir: string, env: NodeJS.ProcessEnv, t0 = performance.now(), timeoutMs = 120_000): Promise<Server> {
  if (cleaning) throw new Error('stopping');
  const { proc, url } = await startBenchSvc(stateDir, env, { timeoutMs, track: children });
  return {
    url,
    pid: proc.pid!,
    startMs: performance.now() - t0,
    stop: async () => {
      const s = performance.now();
      await stopProcess(proc, 60_000);
      return performance.now() - s;
    },
  };
}

/**
 * Starts one replica per state dir, all at once, on the store `env` names; the startMs of each
 * counts from the same instant. When one fails, stops the others and throws.
 */
async function startReplicas(stateDirs: string[], env: NodeJS.ProcessEnv): Promise<Server[]> {
  const t0 = performance.now();
  const started = await Promise.allSettled(stateDirs.map((d) => startServer(d, env, t0)));
  const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) {
    await Promise.all(started.flatMap((r) => (r.status === 'fulfilled' ? [r.value.stop()] : [])));
    throw failed.reason;
  }
  return started.map((r) => (r as PromiseFulfilledResult<Server>).value);
}

/** `n` admin sessions, session i on replica i mod (number of replicas). */
function openSessions(servers: Server[], n = SESSIONS): Promise<ControlClient[]> {
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      ControlClient.connect({ url: servers[i % servers.length].url, token: ADMIN_TOKEN, requestTimeoutMs: REQUEST_TIMEOUT_MS }),
    ),
  );
}

// ---- metrics of the replicas ----

interface MetricJson {
  name: string;
  values: Array<{ value: number; labels: Record<string, string | number>; metricName?: string }>;
}

async function metricsOf(c: ControlClient): Promise<MetricJson[]> {
  return (await c.request<{ metrics: MetricJson[] }>('control.metrics')).metrics;
}

/** Cumulative bucket counts [upper bound s, count] (last: +Inf), summed over the replicas. */
type Histogram = Array<[number, number]>;

async function lagHistogram(perReplica: ControlClient[]): Promise<Histogram> {
  const sum = new Map<number, number>();
  for (const c of perReplica) {
    const m = (await metricsOf(c)).find((x) => x.name === LAG_METRIC);
    for (const v of m?.values ?? []) {
      if (v.metricName !== undefined && v.metricName !== `${LAG_METRIC}_bucket`) continue;
      if (v.labels.le === undefined) continue;
      const le = v.labels.le === '+Inf' ? Infinity : Number(v.labels.le);
      sum.set(le, (sum.get(le) ?? 0) + v.value);
    }
  }
  return [...sum].sort((a, b) => a[0] - b[0]);
}

const histogramCount = (h: Histogram) => (h.length === 0 ? 0 : h[h.length - 1][1]);

function histogramDiff(after: Histogram, before: Histogram): Histogram {
  const b = new Map(before);
  return after.map(([le, n]) => [le, n - (b.get(le) ?? 0)]);
}

interface Quantile {
  /** Estimate, s (linear within its bucket; the largest finite bound when in the +Inf bucket). */
  value: number;
  lo: number;
  hi: number;
}

/** The q-quantile estimated from cumulative buckets as Prometheus' histogram_quantile does; null when empty. */
function histogramQuantile(h: Histogram, q: number): Quantile | null {
  const total = histogramCount(h);
  if (total === 0) return null;
  const rank = q * total;
  for (let i = 0; i < h.length; i++) {
    const [hi, n] = h[i];
    if (n < rank) continue;
    const lo = i === 0 ? 0 : h[i - 1][0];
    const below = i === 0 ? 0 : h[i - 1][1];
    if (hi === Infinity) return { value: lo, lo, hi };
    return { value: n === below ? hi : lo + ((hi - lo) * (rank - below)) / (n - below), lo, hi };
  }
  return null;
}

function quantileText(q: Quantile | null): string {
  if (!q) return 'n/a';
  const ms = (s: number) => (s === Infinity ? '+Inf' : `${+(s * 1000).toFixed(1)}`);
  return q.hi === Infinity ? `> ${ms(q.lo)} ms (bucket ${ms(q.lo)}..+Inf)` : `~${(q.value * 1000).toFixed(1)} ms (bucket ${ms(q.lo)}..${ms(q.hi)} ms)`;
}

/** The lag histogram once the replicas stop replaying (no new observation for 300 ms, at most 10 s). */
async function settledLagHistogram(perReplica: ControlClient[]): Promise<Histogram> {
  let prev = await lagHistogram(perReplica);
  for (let i = 0; i < 33; i++) {
    await sleep(300);
    const cur = await lagHistogram(perReplica);
    if (histogramCount(cur) === histogramCount(prev)) return cur;
    prev = cur;
  }
  return prev;
}

/** "replica 1 of 2" for the replica whose svc_sweeper_leader is 1 (waiting up to `waitMs` for one). */
async function sweeperText(perReplica: ControlClient[], waitMs: number): Promise<string> {
  const deadline = performance.now() + waitMs;
  for (;;) {
    const leaders: number[] = [];
    for (let i = 0; i < perReplica.length; i++) {
      const m = (await metricsOf(perReplica[i])).find((x) => x.name === LEADER_METRIC);
      if (m?.values[0]?.value === 1) leaders.push(i);
    }
    if (leaders.length > 0 || performance.now() >= deadline) {
      if (leaders.length === 0) return `none (no replica reports ${LEADER_METRIC} = 1)`;
      return `${leaders.map((i) => `replica ${i}`).join(' and ')} of ${perReplica.length}${leaders.length > 1 ? ' (MORE THAN ONE)' : ''}`;
    }
    await sleep(250);
  }
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
  // eslint-disable-next-line @typescript-eslint/only-throw-error -- rethrows the first error a job threw, as it was
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
    console.error(
      `  [${label}] populate ${stage}: ${done}/${total} (${(done / s).toFixed(0)}/s), ${mutations} mutations in ${((performance.now() - t0) / 1000).toFixed(0)} s`,
    );
  }, 5000);
  const setStage = (name: string, count: number) => {
    stage = name;
    done = 0;
    total = count;
    stageStart = performance.now();
  };
  try {
    const nodes = new Array<NodeCreds>(n);
    await pool(sessions, n, async (c, i) => {
      const { invite_token } = await c.request<{ invite_token: string }>('node_invite_create', {});
      mutations++;
      const cred = await c.request<NodeCreds>('node_join', { invite_token, node_name: `bench-n${i}`, fs_url: FS_URL, lease_ttl_ms: LEASE_TTL_MS });
      mutations++;
      nodes[i] = { node_id: cred.node_id, node_secret: cred.node_secret };
      done++;
    });

    setStage(`projects and their mounts (requests)`, projectCount * (1 + MOUNTS_PER_PROJECT));
    const projects = new Array<string>(projectCount);
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
      await c.request('project_mount_set', {
        project_id: big.project_id,
        node_id: nodes[(i * stride) % n].node_id,
        export_name: 'work',
        mount_path: `/big/m${i}`,
      });
      mutations++;
      done++;
    });
    return {
      nodes,
      projects,
      big: { project_id: big.project_id, project_token: big.project_token, mounts: bigMounts },
      seconds: (performance.now() - t0) / 1000,
      mutations,
    };
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
async function closedLoop(
  sessions: ControlClient[],
  seconds: number,
  op: (c: ControlClient, session: number, k: number) => Promise<unknown>,
): Promise<LoadResult> {
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
  return { ok, errors, seconds: elapsed, p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99) };
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
  /** Replication lag during the lease-refresh phase, ms (estimated from buckets; NaN: none observed). */
  lagP50Ms: number;
  lagP99Ms: number;
  /** Replays observed during that phase, over every replica. */
  lagReplays: number;
  mountSetPerS: number;
  mountSetP50: number;
  mountSetP99: number;
  statusP50: number;
  statusP99: number;
  statusSeqP50: number;
  statusSeqP99: number;
  statusKiB: number;
  /** The largest replica's. */
  rssLoadMiB: number;
  stateMiB: number;
  shutdownS: number;
  /** Until the last replica printed its listening line. */
  restartS: number;
  rssRestartMiB: number;
  sweeperLoad: string;
  sweeperRestart: string;
}

type BigStatus = { availability: { mounts_total: number; online: number } };

/** Waits (up to `waitMs`) until the big project shows `mounts` mounts, all online, on each session given. */
async function expectBigOnline(perReplica: ControlClient[], payload: object, mounts: number, waitMs: number, when: string): Promise<BigStatus[]> {
  const deadline = performance.now() + waitMs;
  for (;;) {
    const got = await Promise.all(perReplica.map((c) => c.request<BigStatus>('workspace_status', payload)));
    const bad = got.findIndex((s) => s.availability.mounts_total !== mounts || s.availability.online !== mounts);
    if (bad < 0) return got;
    if (performance.now() >= deadline) {
      throw new Error(`big project ${when}: expected ${mounts} online mounts, replica ${bad} status says ${JSON.stringify(got[bad].availability)}`);
    }
    await sleep(100);
  }
}

async function runScale(n: number): Promise<Figures> {
  const label = `${n} nodes`;
  const projectCount = Math.max(1, Math.min(MAX_PROJECTS, Math.round(n / MOUNTS_PER_PROJECT)));
  const bigMounts = MAX_BIG_MOUNTS;
  const stateDirs: string[] = [];
  let database: { name: string; url: string } | null = null;
  let servers: Server[] = [];
  let sessions: ControlClient[] = [];
  try {
    for (let r = 0; r < REPLICAS; r++) {
      const d = mkdtempSync(join(tmpdir(), 'svc-state-bench-'));
      tempDirs.add(d);
      stateDirs.push(d);
    }
    if (STORE === 'postgres') database = await createDatabase();
    const env: NodeJS.ProcessEnv = database ? { SVC_DATABASE_URL: database.url } : {};
    servers = await startReplicas(stateDirs, env);
    const where = database ? `database ${database.name}; svc ${servers.map((s) => s.url).join(', ')}` : `svc on ${servers[0].url}`;
    console.log(
      `\n== ${label} [${STORE_TEXT}]: ${projectCount} projects x ${MOUNTS_PER_PROJECT} mounts, big project ${bigMounts} mounts on ${Math.min(n, bigMounts)} distinct nodes; ${where}`,
    );
    sessions = await openSessions(servers);
    /** One session on each replica (session i is on replica i mod REPLICAS). */
    const perReplica = () => sessions.slice(0, REPLICAS);
    const pop = await populate(label, sessions, n, projectCount, bigMounts);
    const statusPayload = { project_id: pop.big.project_id, project_token: pop.big.project_token };
    // every replica must show what the others committed (docs/operations.md "State": within 1 s)
    await expectBigOnline(perReplica(), statusPayload, bigMounts, REPLICAS > 1 ? 10_000 : 0, 'after population');
    const populateMutPerS = pop.mutations / pop.seconds;
    const spread = REPLICAS > 1 ? `${SESSIONS} sessions over ${REPLICAS} replicas` : `${SESSIONS} sessions`;
    console.log(
      `population: ${pop.mutations} mutations (${n} invites + ${n} joins, ${projectCount} projects + ${projectCount * MOUNTS_PER_PROJECT} mounts, 1 + ${bigMounts} big-project mounts) in ${pop.seconds.toFixed(1)} s (${populateMutPerS.toFixed(0)} mutations/s, ${spread})`,
    );

    // a. lease refreshes, with the replication lag they cause on the other replicas
    const lagBefore = STORE === 'postgres' ? await settledLagHistogram(perReplica()) : [];
    const refresh = await closedLoop(sessions, 5 * SECONDS, (c) => {
      const node = pop.nodes[randomInt(n)];
      return c.request('node_lease_refresh', { node_id: node.node_id, node_secret: node.node_secret, lease_ttl_ms: LEASE_TTL_MS });
    });
    const refreshPerS = refresh.ok / refresh.seconds;
    console.log(
      `node_lease_refresh, ${spread} x 1 in flight, ${refresh.seconds.toFixed(1)} s: ${refreshPerS.toFixed(0)} acknowledged/s, p50 ${refresh.p50.toFixed(2)} ms, p99 ${refresh.p99.toFixed(2)} ms (target >= 2000/s)${errorsText(refresh)}`,
    );
    let lagP50: Quantile | null = null;
    let lagP99: Quantile | null = null;
    let lagReplays = 0;
    let sweeperLoad = '';
    if (STORE === 'postgres') {
      const lag = histogramDiff(await settledLagHistogram(perReplica()), lagBefore);
      lagReplays = histogramCount(lag);
      lagP50 = histogramQuantile(lag, 0.5);
      lagP99 = histogramQuantile(lag, 0.99);
      sweeperLoad = await sweeperText(perReplica(), 8000);
      if (REPLICAS > 1) {
        console.log(
          `replication lag during the lease refreshes (${LAG_METRIC} of the ${REPLICAS} replicas summed, after minus before the phase): ${lagReplays} commits replayed (a commit is a batch of mutations); ` +
            `p50 ${quantileText(lagP50)}, p99 ${quantileText(lagP99)} (estimated from the histogram buckets by linear interpolation; target p99 < 100 ms)`,
        );
      }
      console.log(`sweeper (${LEADER_METRIC} = 1): ${sweeperLoad}`);
    }

    // b. mount changes on small projects (a new path each time, so every one is a real change)
    const mountSet = await closedLoop(sessions, 3 * SECONDS, (c, s, k) =>
      c.request('project_mount_set', {
        project_id: pop.projects[randomInt(projectCount)],
        node_id: pop.nodes[randomInt(n)].node_id,
        export_name: 'work',
        mount_path: `/b/s${s}/k${k}`,
      }),
    );
    const mountSetPerS = mountSet.ok / mountSet.seconds;
    console.log(
      `project_mount_set (new path, random small project), ${spread} x 1 in flight, ${mountSet.seconds.toFixed(1)} s: ${mountSetPerS.toFixed(0)} ops/s, p50 ${mountSet.p50.toFixed(2)} ms, p99 ${mountSet.p99.toFixed(2)} ms (target p99 < 20 ms)${errorsText(mountSet)}`,
    );

    // c. workspace_status of the big project
    const statusKiB = Buffer.byteLength(JSON.stringify(await sessions[0].request('workspace_status', statusPayload))) / 1024;
    await Promise.all(
      sessions.map(async (c) => {
        for (let i = 0; i < 3; i++) await c.request('workspace_status', statusPayload); // warm-up
      }),
    );
    const status = await closedLoop(sessions, 3 * SECONDS, (c) => c.request('workspace_status', statusPayload));
    console.log(
      `workspace_status (${bigMounts} mounts, ~${statusKiB.toFixed(0)} KiB payload), ${spread} x 1 in flight, ${status.seconds.toFixed(1)} s: ${(status.ok / status.seconds).toFixed(0)} ops/s, p50 ${status.p50.toFixed(2)} ms, p99 ${status.p99.toFixed(2)} ms, send to decoded reply (target p99 < 10 ms)${errorsText(status)}`,
    );
    const seq: number[] = [];
    const seqCount = Math.max(50, Math.round(300 * SECONDS));
    for (let i = 0; i < seqCount; i++) {
      const s = performance.now();
      await sessions[0].request('workspace_status', statusPayload);
      seq.push(performance.now() - s);
    }
    console.log(
      `workspace_status, 1 session sequential${REPLICAS > 1 ? ' (on replica 0)' : ''}, ${seqCount} requests: p50 ${quantile(seq, 0.5).toFixed(2)} ms, p99 ${quantile(seq, 0.99).toFixed(2)} ms`,
    );

    // restart (every replica stopped, then all started at once)
    const rssLoad = servers.map((s) => rssMiB(s.pid));
    for (const c of sessions) c.close();
    sessions = [];
    const stopped = await Promise.all(servers.map((s) => s.stop()));
    servers = [];
    const shutdownMs = Math.max(...stopped);
    const stateMiB =
      (database ? Number((await admin<{ b: string }>('SELECT pg_database_size($1) AS b', [database.name]))[0].b) : dirBytes(stateDirs[0])) / 1024 / 1024;
    servers = await startReplicas(stateDirs, env);
    const rssRestart = servers.map((s) => rssMiB(s.pid));
    const restartS = Math.max(...servers.map((s) => s.startMs)) / 1000;
    sessions = await openSessions(servers, REPLICAS);
    const reloaded = await Promise.all(sessions.map((c) => c.request<BigStatus>('workspace_status', statusPayload)));
    const sweeperRestart = STORE === 'postgres' ? await sweeperText(sessions, 8000) : '';
    const rssText = (xs: number[]) =>
      xs.length > 1 ? `${list(xs, 1)} MiB (replicas 0..${xs.length - 1}; PostgreSQL's own not counted)` : `${xs[0].toFixed(1)} MiB`;
    const onDisk = database ? `database ${stateMiB.toFixed(1)} MiB (pg_database_size)` : `state dir ${stateMiB.toFixed(1)} MiB`;
    console.log(
      `RSS at the end of the load: ${rssText(rssLoad)}; ${onDisk}; SIGTERM to exit ${(shutdownMs / 1000).toFixed(2)} s${REPLICAS > 1 ? ' (slowest replica)' : ''}`,
    );
    console.log(
      `restart: spawn to listening line ${restartS.toFixed(2)} s${REPLICAS > 1 ? ` (all ${REPLICAS} replicas started at once, until the last one listens)` : ''} (target < 3 s), RSS after load ${rssText(rssRestart)}; ` +
        `big project after restart: ${reloaded.map((s) => `${s.availability.online}/${s.availability.mounts_total}`).join(', ')} mounts online` +
        (sweeperRestart ? `; sweeper: ${sweeperRestart}` : ''),
    );
    if (reloaded.some((s) => s.availability.mounts_total !== bigMounts)) console.log(`  WARNING: expected ${bigMounts} mounts after restart`);

    return {
      nodes: n,
      projects: projectCount,
      bigMounts,
      populateS: pop.seconds,
      populateMutPerS,
      refreshPerS,
      refreshP50: refresh.p50,
      refreshP99: refresh.p99,
      lagP50Ms: lagP50 ? lagP50.value * 1000 : NaN,
      lagP99Ms: lagP99 ? lagP99.value * 1000 : NaN,
      lagReplays,
      mountSetPerS,
      mountSetP50: mountSet.p50,
      mountSetP99: mountSet.p99,
      statusP50: status.p50,
      statusP99: status.p99,
      statusSeqP50: quantile(seq, 0.5),
      statusSeqP99: quantile(seq, 0.99),
      statusKiB,
      rssLoadMiB: Math.max(...rssLoad),
      stateMiB,
      shutdownS: shutdownMs / 1000,
      restartS,
      rssRestartMiB: Math.max(...rssRestart),
      sweeperLoad,
      sweeperRestart,
    };
  } finally {
    for (const c of sessions) c.close();
    await Promise.all(servers.map((s) => s.stop()));
    if (database) await dropDatabase(database.name);
    for (const d of stateDirs) {
      rmSync(d, { recursive: true, force: true });
      tempDirs.delete(d);
    }
  }
}

// ---- report ----

type Better = 'higher' | 'lower';
type NumericKey = { [K in keyof Figures]: Figures[K] extends number ? K : never }[keyof Figures];
interface Row {
  what: string;
  key: NumericKey;
  digits: number;
  better?: Better;
  /** Target on the large figure: [comparison, value, text]. */
  target?: [Better, number, string];
}

const maxOf = REPLICAS > 1 ? ` (max of ${REPLICAS})` : '';
const ROWS: Row[] = [
  { what: 'population, s', key: 'populateS', digits: 1 },
  { what: 'population, mutations/s', key: 'populateMutPerS', digits: 0, better: 'higher' },
  { what: 'lease refresh, acks/s', key: 'refreshPerS', digits: 0, better: 'higher', target: ['higher', 2000, '>= 2000'] },
  { what: 'lease refresh p50, ms', key: 'refreshP50', digits: 2, better: 'lower' },
  { what: 'lease refresh p99, ms', key: 'refreshP99', digits: 2, better: 'lower' },
  ...(STORE === 'postgres' && REPLICAS > 1
    ? ([
        { what: 'replication lag p50, ms (est.)', key: 'lagP50Ms', digits: 1, better: 'lower' },
        { what: 'replication lag p99, ms (est.)', key: 'lagP99Ms', digits: 1, better: 'lower', target: ['lower', 100, '< 100'] },
        { what: 'commits replayed (refresh phase)', key: 'lagReplays', digits: 0 },
      ] as Row[])
    : []),
  { what: 'project_mount_set, ops/s', key: 'mountSetPerS', digits: 0, better: 'higher' },
  { what: 'project_mount_set p50, ms', key: 'mountSetP50', digits: 2, better: 'lower' },
  { what: 'project_mount_set p99, ms', key: 'mountSetP99', digits: 2, better: 'lower', target: ['lower', 20, '< 20'] },
  { what: 'workspace_status p50, ms (64 sess.)', key: 'statusP50', digits: 2, better: 'lower' },
  { what: 'workspace_status p99, ms (64 sess.)', key: 'statusP99', digits: 2, better: 'lower', target: ['lower', 10, '< 10'] },
  { what: 'workspace_status p50, ms (1 sess.)', key: 'statusSeqP50', digits: 2, better: 'lower' },
  { what: 'workspace_status p99, ms (1 sess.)', key: 'statusSeqP99', digits: 2, better: 'lower' },
  { what: 'workspace_status reply, KiB', key: 'statusKiB', digits: 0 },
  { what: `RSS end of load, MiB${maxOf}`, key: 'rssLoadMiB', digits: 1 },
  { what: STORE === 'sqlite' ? 'state dir on disk, MiB' : 'database size, MiB', key: 'stateMiB', digits: 2 },
  { what: 'shutdown (SIGTERM to exit), s', key: 'shutdownS', digits: 2 },
  { what: 'restart to listening, s', key: 'restartS', digits: 2, better: 'lower', target: ['lower', 3, '< 3'] },
  { what: `RSS after restart, MiB${maxOf}`, key: 'rssRestartMiB', digits: 1 },
];

function printComparison(large: Figures, small: Figures): void {
  const pad = (s: string, w: number) => s.padStart(w);
  const fmt = (x: number, digits: number) => (Number.isFinite(x) ? x.toFixed(digits) : '-');
  console.log(
    `\n== [${STORE_TEXT}] ${large.nodes} nodes next to ${small.nodes} nodes (big project ${large.bigMounts} vs ${small.bigMounts} mounts; projects ${large.projects} vs ${small.projects})`,
  );
  console.log(
    `${'figure'.padEnd(38)}${pad('target', 10)}${pad(`${large.nodes} n.`, 12)}${pad('met', 5)}${pad(`${small.nodes} n.`, 12)}${pad('ratio', 8)}${pad('<= 2x', 7)}`,
  );
  for (const r of ROWS) {
    const a = large[r.key];
    const b = small[r.key];
    const ratio = a / b;
    const met = r.target && Number.isFinite(a) ? ((r.target[0] === 'higher' ? a >= r.target[1] : a < r.target[1]) ? 'yes' : 'NO') : '';
    // "within 2x" in the bad direction: a throughput may not fall below half, a time not double.
    const within = r.better && Number.isFinite(ratio) ? ((r.better === 'higher' ? ratio >= 0.5 : ratio <= 2) ? 'yes' : 'NO') : '';
    console.log(
      `${r.what.padEnd(38)}${pad(r.target?.[2] ?? '', 10)}${pad(fmt(a, r.digits), 12)}${pad(met, 5)}${pad(fmt(b, r.digits), 12)}${pad(Number.isFinite(ratio) ? ratio.toFixed(2) : '-', 8)}${pad(within, 7)}`,
    );
  }
  if (large.bigMounts !== small.bigMounts)
    console.log(
      `(workspace_status: the replies differ in size, ${large.bigMounts} vs ${small.bigMounts} mounts, so its ratio is not only the effect of the node count)`,
    );
  if (STORE === 'postgres' && REPLICAS > 1) {
    console.log(
      `(replication lag: ${LAG_METRIC} of every replica, difference over the lease-refresh phase, percentiles estimated from its buckets by linear interpolation)`,
    );
    console.log(
      `sweeper: ${large.nodes} n.: ${large.sweeperLoad} during the load, ${large.sweeperRestart} after the restart; ${small.nodes} n.: ${small.sweeperLoad}, then ${small.sweeperRestart}`,
    );
  }
}

async function main(): Promise<void> {
  const store =
    STORE === 'sqlite'
      ? 'sqlite (a fresh temporary state dir per scale)'
      : `postgres, ${REPLICAS} replica${REPLICAS === 1 ? '' : 's'} on a fresh database per scale; ${await setUpPostgres()}`;
  console.log(
    `svc state bench (node ${process.version}): store ${store}; ${SMALL_NODES} then ${LARGE_NODES} nodes, ${SESSIONS} sessions, phase durations x${SECONDS}`,
  );
  const small = await runScale(SMALL_NODES);
  const large = await runScale(LARGE_NODES);
  printComparison(large, small);
}

main().then(
  async () => {
    if (signalled) return;
    await cleanup();
    process.exit(0);
  },
  async (e) => {
    if (signalled) return;
    console.error(e);
    await cleanup().catch((c) => console.error(c));
    process.exit(1);
  },
);
