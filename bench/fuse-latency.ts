/**
 * `npm run bench:fuse-latency`: where the time of one small-file
 * operation through the FUSE mount goes. It starts the built `svc-fs-node` on a temporary export
 * holding a tree of BENCH_TREE_FILES (10,000) files of about 1 KiB (and a git repository) and mounts it with
 * `svc-fs-mount ... mount`, both with `bench/latency-probe` preloaded (and, unless
 * BENCH_CPU_PROF=0, `--cpu-prof`), then runs four phases, each on a freshly started node and
 * mount with the page cache dropped first (when permitted):
 *  1. `hand-off`: lists every directory (the mount caches every entry's attributes), waits for
 *     the kernel's 1 s attribute and entry cache to expire, then `stat`s every file: each stat is
 *     one FUSE operation answered from the mount's cache, so its latency is the kernel, the FUSE
 *     thread and its hand-off to the event loop and back, and nothing else;
 *  2. `files`: reads every file as `grep` does (open, read until 0, close), timing each system
 *     call in this process;
 *  3. `grep`: a cold `grep -R -c needle` over the tree (wall time), for the CPU profiles;
 *  4. `git`: a cold `git status --porcelain` in a repository of BENCH_REPO_FILES (2,000) committed
 *     files (the index refreshed through the mount first, then the mount restarted: only that
 *     second mount is probed and profiled).
 * It prints, per phase, the medians and 90th percentiles (µs) and the totals (ms) of: the system calls seen by the
 * caller; each FUSE operation's time in the mount's JS (empty: see the mount's metrics);
 * each FS request's round trip as the mount sees it (sent -> reply received); each request's
 * time in the node (frame received -> reply sent). Derived: FUSE hand-off = system call - JS
 * operation; wire = round trip - node. Then, per phase and process, the functions with the most
 * CPU time (self time) from the CPU profiles, with the share of busy (non-idle) time.
 *
 * Environment: BENCH_TREE_FILES (10000), BENCH_REPO_FILES (2000), BENCH_DIR (default the OS temp dir), BENCH_MOUNT_ARGS
 * (extra `svc-fs-mount mount` arguments), BENCH_CPU_PROF=0 (no CPU profiles), BENCH_PHASES
 * (comma-separated subset of `handoff,files,grep,git`), BENCH_TOP (profile rows per process, 15),
 * BENCH_KEEP=1 (keep the temporary directory with the profiles and probe files).
 */
import { ChildProcess, execFileSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, readSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BIN, ROOT, sleep } from '../test/support/processes';
import { quantile } from './measure';
import { dropCaches, GIT, gitRepo, mounted, textTree } from './peers';
import { envWords, log, startListening, startUntil, stopProcess } from './programs';

const PROBE = join(__dirname, 'latency-probe.js');
const TREE_FILES = Number(process.env.BENCH_TREE_FILES ?? 10_000);
const REPO_FILES = Number(process.env.BENCH_REPO_FILES ?? 2000);
const MOUNT_ARGS = envWords('BENCH_MOUNT_ARGS');
const CPU_PROF = process.env.BENCH_CPU_PROF !== '0';
const PHASES = new Set((process.env.BENCH_PHASES ?? 'handoff,files,grep,git').split(',').map((s) => s.trim()));
const TOP = Number(process.env.BENCH_TOP ?? 15);

function us(n: number): string {
  return Number.isNaN(n) ? '-' : n >= 1000 ? n.toFixed(0) : n.toFixed(1);
}

type Series = Record<string, number[]>;
interface ProbeFile {
  pid: number;
  role: 'node' | 'mount';
  fuse: Series;
  rtt: Series;
  node: Series;
}

/** Self time per function of a V8 `.cpuprofile`, ms, and the idle and total times. */
function profileSelfTimes(file: string): { total: number; idle: number; rows: Array<{ name: string; ms: number }> } {
  const prof = JSON.parse(readFileSync(file, 'utf8')) as {
    nodes: Array<{ id: number; callFrame: { functionName: string; url: string; lineNumber: number } }>;
    samples: number[];
    timeDeltas: number[];
  };
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  let total = 0;
  let idle = 0;
  prof.samples.forEach((id, i) => {
    const dt = (prof.timeDeltas[i + 1] ?? 0) / 1000;
    const n = byId.get(id);
    if (!n) return;
    const f = n.callFrame;
    const url = f.url
      .replace(/^file:\/\//, '')
      .replace(`${ROOT}/`, '')
      .replace(/.*node_modules\//, 'node_modules/');
    const name = `${f.functionName || '(anonymous)'} ${url ? `${url}:${f.lineNumber + 1}` : ''}`.trim();
    total += dt;
    if (f.functionName === '(idle)') idle += dt;
    self.set(name, (self.get(name) ?? 0) + dt);
  });
  const rows = [...self.entries()].map(([name, ms]) => ({ name, ms })).sort((a, b) => b.ms - a.ms);
  return { total, idle, rows };
}

interface Phase {
  name: string;
  /** System call latencies measured by this process, µs, by call. */
  calls: Series;
  wall: number;
  probes: ProbeFile[];
  profiles: Array<{ role: string; file: string }>;
}

async function runPhase(
  name: string,
  base: string,
  exp: string,
  work: (root: string, remount: () => Promise<void>) => Promise<{ calls: Series; wall: number }>,
): Promise<Phase> {
  const dir = join(base, `phase-${name}`);
  const mnt = join(base, `mnt-${name}`);
  mkdirSync(dir);
  mkdirSync(mnt);
  const nodeFlags = ['-r', PROBE, ...(CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${dir}`] : [])];
  const env = { SVC_LOG_LEVEL: 'warn', LATENCY_PROBE_DIR: dir };
  let node: ChildProcess | null = null;
  let mount: ChildProcess | null = null;
  const stopMount = async () => {
    if (mount) await stopProcess(mount, 10_000);
    mount = null;
    if (mounted(mnt)) execFileSync('fusermount', ['-uz', mnt], { stdio: 'ignore' });
  };
  try {
    const started = await startListening([BIN.fsNode, '--port', '0', '--export', `work=${exp}`], { ...env, SVC_FS_NODE_AUTH_TOKEN: '' }, { nodeFlags });
    node = started.proc;
    const url = started.url;
    const startMount = async () => {
      // Only the mount that does the measured work is probed and profiled.
      mount = (await startUntil([BIN.fsMount, '--endpoint', `w=${url}`, 'mount', mnt, ...MOUNT_ARGS], /mounted on /, env, { nodeFlags })).proc;
      if (dropCaches() !== null) log('  (the page cache cannot be dropped here)');
    };
    const remount = async () => {
      await stopMount();
      for (const f of readdirSync(dir)) if (f.startsWith('probe-') || f.endsWith('.cpuprofile')) rmSync(join(dir, f));
      node?.kill('SIGUSR2'); // the node's probe forgets the warm-up (its CPU profile covers the whole phase)
      await startMount();
    };
    await startMount();
    log(`phase ${name}`);
    const r = await work(join(mnt, 'w'), remount);
    return { name, ...r, probes: [], profiles: [] };
  } finally {
    await stopMount();
    if (node) await stopProcess(node, 10_000);
  }
}

function collect(phase: Phase, base: string): void {
  const dir = join(base, `phase-${phase.name}`);
  for (const f of readdirSync(dir)) {
    if (f.startsWith('probe-')) phase.probes.push(JSON.parse(readFileSync(join(dir, f), 'utf8')) as ProbeFile);
  }
  for (const f of readdirSync(dir)) {
    if (!f.endsWith('.cpuprofile')) continue;
    const pid = Number(f.split('.')[3]);
    const role = phase.probes.find((p) => p.pid === pid)?.role ?? `pid ${pid}`;
    phase.profiles.push({ role, file: join(dir, f) });
  }
}

/** Times `fn` (a synchronous system call), µs, into `series[name]`. */
function timed<T>(series: Series, name: string, fn: () => T): T {
  const t0 = process.hrtime.bigint();
  const r = fn();
  (series[name] ??= []).push(Number(process.hrtime.bigint() - t0) / 1000);
  return r;
}

function report(phase: Phase): void {
  const out: string[] = [];
  out.push(`\n== phase ${phase.name}: ${phase.wall.toFixed(2)} s wall`);
  // The total shows what a tail costs, which the medians hide.
  const rows: string[][] = [['what', 'n', 'p50 µs', 'p90 µs', 'total ms']];
  const put = (what: string, xs: number[] | undefined) => {
    if (xs && xs.length > 0)
      rows.push([what, String(xs.length), us(quantile(xs, 0.5)), us(quantile(xs, 0.9)), (xs.reduce((a, b) => a + b, 0) / 1000).toFixed(0)]);
  };
  for (const [call, xs] of Object.entries(phase.calls)) put(`caller: ${call}(2)`, xs);
  const mount = phase.probes.find((p) => p.role === 'mount');
  const node = phase.probes.find((p) => p.role === 'node');
  for (const [op, xs] of Object.entries(mount?.fuse ?? {})) put(`mount JS: fuse ${op}`, xs);
  for (const [op, xs] of Object.entries(mount?.rtt ?? {})) put(`mount: round trip fs_${op}`, xs);
  for (const [op, xs] of Object.entries(node?.node ?? {})) put(`node: receive -> reply fs_${op}`, xs);
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  for (const r of rows) out.push(r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  '));
  const med = (xs: number[] | undefined) => (xs && xs.length > 0 ? quantile(xs, 0.5) : NaN);
  const derived: string[] = [];
  const pairs: Array<[string, string, string]> = [
    ['stat', 'getattr', ''],
    ['open', 'open', 'open'],
    ['read', 'read', 'read'],
  ];
  for (const [call, op, req] of pairs) {
    const sys = med(phase.calls[call]);
    const js = med(mount?.fuse[op]);
    if (!Number.isNaN(sys) && !Number.isNaN(js))
      derived.push(`${call}: system call ${us(sys)} - mount JS ${us(js)} = kernel + FUSE thread hand-off ${us(sys - js)}`);
    if (req) {
      const r = med(mount?.rtt[req]);
      const n = med(node?.node[req]);
      if (!Number.isNaN(r) && !Number.isNaN(n))
        derived.push(
          `  fs_${req}: mount JS ${us(js)} = round trip ${us(r)} (node ${us(n)} + wire and event loops ${us(r - n)}) + mount JS around it ${us(js - r)}`,
        );
    }
  }
  if (derived.length) out.push('medians, µs:', ...derived.map((d) => `  ${d}`));
  for (const p of phase.profiles) {
    const { total, idle, rows: fns } = profileSelfTimes(p.file);
    const busy = total - idle;
    out.push(`CPU profile, ${p.role}: ${(total / 1000).toFixed(2)} s profiled, ${(busy / 1000).toFixed(2)} s busy; top self time (share of busy):`);
    for (const f of fns.filter((r) => r.name !== '(idle)').slice(0, TOP))
      out.push(`  ${((f.ms / busy) * 100).toFixed(1).padStart(5)} %  ${f.ms.toFixed(0).padStart(6)} ms  ${f.name}`);
  }
  process.stdout.write(`${out.join('\n')}\n`);
}

async function main(): Promise<void> {
  if (!existsSync('/dev/fuse')) {
    process.stdout.write('bench:fuse-latency skipped: /dev/fuse is missing\n');
    return;
  }
  const base = mkdtempSync(join(process.env.BENCH_DIR ?? tmpdir(), 'svc-bench-latency-'));
  const exp = join(base, 'export');
  mkdirSync(exp);
  const phases: Phase[] = [];
  try {
    log(`preparing a ${TREE_FILES}-file tree in ${exp}`);
    textTree(join(exp, 'tree'), TREE_FILES);
    if (PHASES.has('git')) gitRepo(join(exp, 'repo'), REPO_FILES);
    const dirs = readdirSync(join(exp, 'tree')).sort();
    const files = dirs.flatMap((d) =>
      readdirSync(join(exp, 'tree', d))
        .sort()
        .map((f) => `tree/${d}/${f}`),
    );

    if (PHASES.has('handoff')) {
      phases.push(
        await runPhase('handoff', base, exp, async (root) => {
          for (const d of dirs) readdirSync(join(root, 'tree', d));
          await sleep(1500);
          const calls: Series = {};
          const t0 = performance.now();
          for (const f of files) timed(calls, 'stat', () => statSync(join(root, f)));
          return { calls, wall: (performance.now() - t0) / 1000 };
        }),
      );
    }
    if (PHASES.has('files')) {
      phases.push(
        await runPhase('files', base, exp, async (root) => {
          const calls: Series = {};
          const buf = Buffer.alloc(96 * 1024);
          const t0 = performance.now();
          for (const d of dirs) {
            const dir = join(root, 'tree', d);
            for (const name of timed(calls, 'readdir', () => readdirSync(dir))) {
              const fd = timed(calls, 'open', () => openSync(join(dir, name), 'r'));
              // The first read goes to the mount; one at the end of the file is answered by the kernel.
              if (timed(calls, 'read', () => readSync(fd, buf, 0, buf.length, null)) > 0) {
                while (timed(calls, 'read at EOF', () => readSync(fd, buf, 0, buf.length, null)) > 0);
              }
              timed(calls, 'close', () => closeSync(fd));
            }
          }
          return { calls, wall: (performance.now() - t0) / 1000 };
        }),
      );
    }
    if (PHASES.has('grep')) {
      phases.push(
        await runPhase('grep', base, exp, async (root) => {
          const t0 = performance.now();
          try {
            execFileSync('grep', ['-R', '-c', 'needle', join(root, 'tree')], { stdio: 'ignore' });
          } catch (e) {
            if ((e as { status?: number }).status !== 1) throw e;
          }
          return { calls: {}, wall: (performance.now() - t0) / 1000 };
        }),
      );
    }
    if (PHASES.has('git')) {
      phases.push(
        await runPhase('git', base, exp, async (root, remount) => {
          const status = () => execFileSync('git', [...GIT, 'status', '--porcelain'], { cwd: join(root, 'repo'), stdio: 'ignore' });
          // The index learns this mount's inode numbers and times first (as in bench:fuse), then all is cold.
          status();
          await remount();
          const t0 = performance.now();
          status();
          return { calls: {}, wall: (performance.now() - t0) / 1000 };
        }),
      );
    }
    for (const p of phases) collect(p, base);
  } finally {
    if (process.env.BENCH_KEEP === '1') log(`kept ${base}`);
  }
  process.stdout.write(
    `FUSE small-file latency split, ${TREE_FILES} files (probe and ${CPU_PROF ? 'CPU profiler' : 'no profiler'} in the node and the mount: absolute times are a little higher than without)\n`,
  );
  for (const p of phases) report(p);
  if (process.env.BENCH_KEEP !== '1') rmSync(base, { recursive: true, force: true });
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${(e as Error).stack}\n`);
  process.exit(1);
});
