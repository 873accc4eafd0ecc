/**
 * `npm run bench:cli`: wall time of whole CLI
 * commands, each a fresh `node` process as a user runs it, next to plain `node -e 0`.
 *
 * Starts what the commands need itself, on loopback: `svc` (embedded store, temp state dir), one
 * `svc-fs-node` in control daemon mode (paired by invite) exporting a temp directory that holds a
 * 1-byte file, a project mounting that export at `/a`, and a standalone `svc-fs-node` (no FS
 * auth) on the same directory for endpoint mode. Then runs, interleaved (one run of
 * each command in turn, so a drift of the machine's speed hits all alike), after
 * BENCH_CLI_WARMUP warm-up rounds, BENCH_CLI_RUNS counted rounds of:
 *  - `node -e 0` (the yardstick: what starting node itself costs);
 *  - `svc-control ping` (negotiates a control session, one request);
 *  - `svc-fs-mount cat /a/one` of the 1-byte file, workspace mode (topology read from svc, then
 *    the node's FS session) and endpoint mode (`--endpoint`: the node's FS session only);
 *  - `svc-fs-mount --help` and `svc-control --help` (start-up and command tree, no I/O);
 *  - `svc-fs-node --help`, and `svc-fs-node` standalone from spawn to its `listening on` line
 *    (then SIGTERM).
 * Every run's exit code (and cat's output) is checked: a failing command stops the bench.
 * Prints, per command, the median and p90 of its wall time and of its CPU time (user + system) in
 * ms, each median's ratio to `node -e 0`'s, and the target (each CLI command under
 * 150 ms wall). bash times each command (wall from fork to exit, CPU of the reaped child); the
 * server's CPU until listening is read from /proc. Prints figures; it asserts nothing.
 *
 * Environment: BENCH_CLI_RUNS (default 20), BENCH_CLI_WARMUP (default 2), BENCH_CLI_BASELINE (the
 * root of another built checkout, e.g. of the commit before a change: its CLIs are timed too, in
 * the same rounds, rows marked `[baseline]`).
 */
import { ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ControlClient } from '../libs/client/src';
import { BIN, ROOT, waitFor } from '../test/support/processes';
import { quantile } from './measure';
import { startListening as startProgram } from './programs';

const RUNS = Number(process.env.BENCH_CLI_RUNS ?? 20);
const WARMUP = Number(process.env.BENCH_CLI_WARMUP ?? 2);
/** Another checkout (built) whose CLIs are timed too, interleaved, against the same servers. */
const BASELINE = process.env.BENCH_CLI_BASELINE ? resolve(process.env.BENCH_CLI_BASELINE) : null;
const ADMIN_TOKEN = 'bench-cli-admin-token-0123456789abcdef';
/** The target for each CLI command, ms of wall time. */
const TARGET_MS = 150;

/** An environment without the variables the CLIs read, so only the arguments given count. */
const CLEAN_ENV: NodeJS.ProcessEnv = {
  ...process.env,
  SVC_AUTH_TOKEN: '',
  SVC_FS_AUTH_TOKEN: '',
  SVC_PROJECT_TOKEN: '',
  SVC_URL: '',
  SVC_FS_NODE_AUTH_TOKEN: '',
  SVC_LOG_LEVEL: 'warn',
};

/** The servers started, while they run. */
const started = new Set<ChildProcess>();

/**
 * Spawns `node script ...args` (environment {@link CLEAN_ENV} plus `env`) and resolves with the
 * URL of its `listening on <url>` line.
 * @throws Error when it exits first or does not listen within 20 s
 */
function startListening(script: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ proc: ChildProcess; url: string }> {
  return startProgram([script, ...args], { ...CLEAN_ENV, ...env }, { timeoutMs: 20_000, track: started });
}

/** One run's figures, ms. */
interface Sample {
  wall: number;
  /** CPU time (user + system) of the program. */
  cpu: number;
}

interface Case {
  name: string;
  run: () => Promise<Sample>;
}

/**
 * Runs `argv` under bash, which times it: wall time from just before the fork to the exit
 * (`$EPOCHREALTIME`, so bash's own start-up is not counted) and the CPU time of the reaped child
 * (`times`, getrusage of the children), written on fd 3. CPU time is what to compare when the
 * machine is shared: a busy neighbour stretches wall time, not CPU time.
 */
const TIMED = 't0=$EPOCHREALTIME; "$@"; rc=$?; t1=$EPOCHREALTIME; { echo "$t0 $t1"; times; } >&3; exit $rc';

/** `1m2.345s` (bash `times`) in ms. */
function bashTimeMs(t: string): number {
  const m = /^(\d+)m([\d.]+)s$/.exec(t);
  if (!m) throw new Error(`unexpected time ${JSON.stringify(t)}`);
  return (Number(m[1]) * 60 + Number(m[2])) * 1000;
}

/**
 * A case that runs `argv` to completion with stdout collected.
 * @param expectStdout when given, stdout must equal it
 * @throws Error (from run) when the exit code is not 0 or stdout differs
 */
function processCase(name: string, argv: string[], expectStdout?: string): Case {
  return {
    name,
    run: () =>
      new Promise((res, rej) => {
        const p = spawn('bash', ['-c', TIMED, 'bash', ...argv], { env: CLEAN_ENV, stdio: ['ignore', 'pipe', 'pipe', 'pipe'] });
        let out = '';
        let err = '';
        let timing = '';
        p.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
        p.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
        (p.stdio[3] as NodeJS.ReadableStream).setEncoding('utf8').on('data', (d: string) => (timing += d));
        p.once('close', (code) => {
          if (code !== 0) return rej(new Error(`${name}: exit ${code}: ${err}`));
          if (expectStdout !== undefined && out !== expectStdout)
            return rej(new Error(`${name}: printed ${JSON.stringify(out)}, expected ${JSON.stringify(expectStdout)}`));
          // "t0 t1" then the shell's and its children's "user sys" lines.
          const [wall, , children] = timing.trim().split('\n');
          const [t0, t1] = wall.split(' ').map(Number);
          const [user, sys] = children.trim().split(/\s+/).map(bashTimeMs);
          res({ wall: (t1 - t0) * 1000, cpu: user + sys });
        });
      }),
  };
}

/** CPU time a live process has run so far, ms (`/proc/PID/schedstat`, ns). */
function cpuSoFarMs(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;
}

/** A case that times `svc-fs-node` from spawn to its `listening on` line (wall and CPU), then stops it. */
function listeningCase(name: string, script: string, args: string[]): Case {
  return {
    name,
    run: async () => {
      const t0 = performance.now();
      const { proc } = await startListening(script, args, {});
      const wall = performance.now() - t0;
      const cpu = cpuSoFarMs(proc.pid!);
      await new Promise<void>((r) => {
        proc.once('exit', () => r());
        proc.kill('SIGTERM');
      });
      return { wall, cpu };
    },
  };
}

async function main(): Promise<void> {
  const tmp = mkdtempSync(join(tmpdir(), 'bench-cli-'));
  let admin: ControlClient | null = null;
  try {
    const stateDir = join(tmp, 'state');
    const exportDir = join(tmp, 'export');
    mkdirSync(stateDir);
    mkdirSync(exportDir);
    writeFileSync(join(exportDir, 'one'), 'x');

    const svc = await startListening(BIN.svc, ['--port', '0', '--state-dir', stateDir], { SVC_ADMIN_TOKEN: ADMIN_TOKEN });
    admin = await ControlClient.connect({ url: svc.url, token: ADMIN_TOKEN });
    const { invite_token } = await admin.request<{ invite_token: string }>('node_invite_create');
    await startListening(
      BIN.fsNode,
      [
        '--port',
        '0',
        '--control-url',
        svc.url,
        '--invite-token',
        invite_token,
        '--node-name',
        'bench-node',
        '--state-file',
        join(tmp, 'node-state.json'),
        '--export',
        `work=${exportDir}`,
      ],
      { SVC_AUTH_TOKEN: ADMIN_TOKEN },
    );
    const c = admin;
    const nodeId = await waitFor(
      async () => {
        const { nodes } = await c.request<{ nodes: Array<{ node_id: string; node_name: string }> }>('node_list');
        const n = nodes.find((x) => x.node_name === 'bench-node');
        if (!n) return undefined;
        const { services } = await c.request<{ services: unknown[] }>('node_service_get', { node_id: n.node_id });
        return services.length > 0 ? n.node_id : undefined;
      },
      15_000,
      100,
    );
    const project = await admin.request<{ project_id: string; project_token: string }>('project_create', { name: 'bench-cli' });
    await admin.request('project_mount_set', { project_id: project.project_id, node_id: nodeId, export_name: 'work', mount_path: '/a' });
    // Endpoint mode needs a node without FS session auth (a daemon node requires tokens).
    const standalone = await startListening(BIN.fsNode, ['--port', '0', '--export', `work=${exportDir}`], {});
    const workspace = ['--workspace-url', svc.url, '--auth-token', ADMIN_TOKEN, '--project-id', project.project_id, '--project-token', project.project_token];

    const node0 = process.execPath;
    const cases: Case[] = [processCase('node -e 0', [node0, '-e', '0'])];
    for (const { root, label } of [{ root: ROOT, label: '' }, ...(BASELINE ? [{ root: BASELINE, label: ' [baseline]' }] : [])]) {
      const bin = (app: string) => join(root, 'dist/apps', app, 'src/main.js');
      cases.push(
        processCase(`svc-control ping${label}`, [node0, bin('svc-control'), '--url', svc.url, '--auth-token', ADMIN_TOKEN, 'ping']),
        processCase(`svc-fs-mount cat (workspace mode, 1 byte)${label}`, [node0, bin('svc-fs-mount'), ...workspace, 'cat', '/a/one'], 'x'),
        processCase(
          `svc-fs-mount cat (--endpoint, 1 byte)${label}`,
          [node0, bin('svc-fs-mount'), '--endpoint', `a=${standalone.url}#work@/a`, 'cat', '/a/one'],
          'x',
        ),
        processCase(`svc-control --help${label}`, [node0, bin('svc-control'), '--help']),
        processCase(`svc-fs-mount --help${label}`, [node0, bin('svc-fs-mount'), '--help']),
        processCase(`svc-fs-node --help${label}`, [node0, bin('svc-fs-node'), '--help']),
        listeningCase(`svc-fs-node to listening${label}`, bin('svc-fs-node'), ['--port', '0', '--export', `work=${exportDir}`]),
      );
    }
    const samples = new Map<string, Sample[]>(cases.map((k) => [k.name, []]));
    for (let round = 0; round < WARMUP + RUNS; round++) {
      for (const k of cases) {
        const sample = await k.run();
        if (round >= WARMUP) samples.get(k.name)!.push(sample);
      }
    }

    const of = (name: string, f: keyof Sample) => samples.get(name)!.map((x) => x[f]);
    const baseWall = quantile(of('node -e 0', 'wall'), 0.5);
    const baseCpu = quantile(of('node -e 0', 'cpu'), 0.5);
    const width = Math.max(...cases.map((k) => k.name.length));
    const num = (x: number, w: number, d = 1) => x.toFixed(d).padStart(w);
    console.log(
      `CLI start-up, ${RUNS} runs each after ${WARMUP} warm-up rounds, interleaved (node ${process.version}, ${cpus().length} CPUs, load average ${loadavg()[0].toFixed(1)} at the end)`,
    );
    console.log(`target: each CLI command < ${TARGET_MS} ms wall; CPU time (user + system) is what to compare on a shared machine`);
    console.log(`${'command'.padEnd(width)}  wall median    p90  x node -e 0 | CPU median    p90  x node -e 0`);
    for (const k of cases) {
      const wall = of(k.name, 'wall');
      const cpu = of(k.name, 'cpu');
      const w = quantile(wall, 0.5);
      const c = quantile(cpu, 0.5);
      const mark = k.name === 'node -e 0' ? '' : w < TARGET_MS ? '  < target' : '  over target';
      console.log(
        `${k.name.padEnd(width)}  ${num(w, 11)} ${num(quantile(wall, 0.9), 6)} ${num(w / baseWall, 12, 2)} | ${num(c, 10)} ${num(quantile(cpu, 0.9), 6)} ${num(c / baseCpu, 12, 2)}${mark}`,
      );
    }
  } finally {
    admin?.close();
    for (const p of started) if (p.exitCode === null && p.signalCode === null) p.kill('SIGTERM');
    rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  for (const p of started) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  process.exit(1);
});
