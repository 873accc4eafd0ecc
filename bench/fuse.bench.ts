/**
 * `npm run bench:fuse` (issue 4 benchmark): starts the built `svc-fs-node` on a temporary
 * directory and mounts it with the built `svc-fs-mount ... mount` (endpoint mode, binary data
 * path, loopback), then times ordinary tools through the FUSE mount next to the same work on
 * the local disk:
 *  - sequential read of a 256 MiB file (`cat > /dev/null`): each run reads a file this mount has
 *    not cached (the file is touched on the node, and the kernel's 1 s attribute cache left to
 *    expire, before every run);
 *  - sequential write of a 256 MiB file (`cat file > MOUNT/file`, timed until the writer has
 *    closed it: the data is on the node);
 *  - `find` and `grep -R` over a tree of 10,000 files (100 directories of 100 files of about
 *    1 KiB), once cold, then warm;
 *  - `git status` in a repository of 2,000 committed files, once cold, then warm.
 * It prints seconds, MB/s (and MiB/s) where a size applies, the FUSE figure as a percentage of
 * the local disk's speed (local time / FUSE time), and the targets (measured there
 * against sshfs 3.7 on the same machine: read 330 MiB/s, find warm 0.04 s, grep -R 4.8 s). It
 * asserts nothing. Warm figures are the median of BENCH_RUNS runs after the cold one.
 *
 * TLS rows (issue 12): a second node on the same directory serving `wss://` with a throwaway CA
 * made by `openssl`, mounted a second time with `--tls-ca`; sequential read (plain and TLS runs
 * alternated, for the TLS cost; target at most 25 %), and `find` / `grep -R` over the small
 * files, cold and warm. Skipped with the reason when `openssl` is missing.
 *
 * Skipped with a message (exit 0) where FUSE is unavailable: no /dev/fuse, fuse-native not
 * installed, or no fusermount.
 *
 * Environment: BENCH_FILE_MIB (default 256), BENCH_TREE_FILES (10000), BENCH_REPO_FILES (2000),
 * BENCH_RUNS (3), BENCH_DIR (default the OS temp dir), BENCH_MOUNT_ARGS (extra arguments of
 * `svc-fs-mount mount`, e.g. `--poll-us 0`).
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, createWriteStream, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { makeBenchTls } from './tls';

const ROOT = resolve(__dirname, '..', '..');
const NODE = join(ROOT, 'dist/apps/svc-fs-node/src/main.js');
const MOUNT = join(ROOT, 'dist/apps/svc-fs-mount/src/main.js');
const FILE_MIB = Number(process.env.BENCH_FILE_MIB ?? 256);
const TREE_FILES = Number(process.env.BENCH_TREE_FILES ?? 10_000);
const REPO_FILES = Number(process.env.BENCH_REPO_FILES ?? 2000);
const RUNS = Math.max(1, Number(process.env.BENCH_RUNS ?? 3));
const MOUNT_ARGS = (process.env.BENCH_MOUNT_ARGS ?? '').split(/\s+/).filter(Boolean);
const MB = 1e6;
const MIB = 1024 * 1024;

/** Why FUSE cannot be used here, or null. */
function fuseUnavailable(): string | null {
  if (!existsSync('/dev/fuse')) return '/dev/fuse is missing';
  try {
    require('fuse-native');
  } catch (e) {
    return `fuse-native cannot load (${(e as Error).message.split('\n')[0]})`;
  }
  try {
    execFileSync('fusermount', ['-V'], { stdio: 'ignore' });
  } catch {
    return 'fusermount is missing (Debian: apt-get install fuse3)';
  }
  return null;
}

function mounted(dir: string): boolean {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === dir);
}

/** Starts a program and resolves with its process once `pattern` appears on its stdout. */
function startUntil(args: string[], pattern: RegExp, env: NodeJS.ProcessEnv = {}): Promise<{ proc: ChildProcess; match: RegExpExecArray }> {
  const proc = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  return new Promise((res, rej) => {
    proc.stdout!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = pattern.exec(out);
      if (m) res({ proc, match: m });
    });
    proc.once('exit', (c) => rej(new Error(`${args[0]} exited ${c}: ${err.trim()}`)));
  });
}

/** Runs a command with stdin/stdout connected to files (or ignored); resolves with its wall time in s. */
function timedRun(cmd: string, args: string[], options: { cwd?: string; stdin?: string; stdout?: string } = {}): Promise<number> {
  return new Promise((res, rej) => {
    const inFd = options.stdin ? openSync(options.stdin, 'r') : 'ignore';
    const outFd = openSync(options.stdout ?? '/dev/null', 'w');
    const t0 = performance.now();
    const p = spawn(cmd, args, { cwd: options.cwd, stdio: [inFd, outFd, 'pipe'] });
    if (typeof inFd === 'number') closeSync(inFd);
    closeSync(outFd);
    let err = '';
    p.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
    p.once('exit', (code) => (code === 0 ? res((performance.now() - t0) / 1000) : rej(new Error(`${cmd} ${args.join(' ')} exited ${code}: ${err.trim()}`))));
  });
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Writes `mib` MiB of random bytes to `file`. */
async function randomFile(file: string, mib: number): Promise<void> {
  const out = createWriteStream(file);
  for (let i = 0; i < mib; i++) if (!out.write(randomBytes(MIB))) await new Promise<void>((r) => out.once('drain', () => r()));
  await new Promise<void>((r) => out.end(() => r()));
}

const WORDS = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon'.split(' ');

/** Writes `count` text files of about 1 KiB in directories of 100 below `root`; every 7th holds "needle". */
function textTree(root: string, count: number, prefix = 'f'): void {
  let seed = 1;
  const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) % WORDS.length;
  for (let i = 0; i < count; i++) {
    const dir = join(root, `d${String(Math.floor(i / 100)).padStart(3, '0')}`);
    if (i % 100 === 0) mkdirSync(dir, { recursive: true });
    const lines = Array.from({ length: 15 }, () => Array.from({ length: 10 }, () => WORDS[rnd()]).join(' '));
    if (i % 7 === 0) lines.splice(5, 0, 'needle in the haystack');
    writeFileSync(join(dir, `${prefix}${String(i % 100).padStart(3, '0')}.txt`), `${lines.join('\n')}\n`);
  }
}

/** A git repository of `count` committed files at `dir`. */
function gitRepo(dir: string, count: number): void {
  mkdirSync(dir, { recursive: true });
  textTree(dir, count, 'src');
  const git = (...args: string[]) => execFileSync('git', ['-c', 'user.email=bench@example.com', '-c', 'user.name=bench', ...args], { cwd: dir, stdio: 'ignore' });
  git('init', '-q');
  git('add', '-A');
  git('commit', '-qm', 'bench');
}

interface Row {
  what: string;
  fuse: number;
  local: number;
  /** Bytes moved, for MB/s. */
  bytes?: number;
  /** The target for the row; `met` absent when the figure is only reported. */
  target?: { text: string; met?: boolean };
}

async function main(): Promise<void> {
  const reason = fuseUnavailable();
  if (reason) {
    process.stdout.write(`bench:fuse skipped: FUSE is not available here: ${reason}\n`);
    return;
  }
  const base = mkdtempSync(join(process.env.BENCH_DIR ?? tmpdir(), 'svc-bench-fuse-'));
  const exp = join(base, 'export');
  const local = join(base, 'local');
  const mnt = join(base, 'mnt');
  for (const d of [exp, local, mnt]) mkdirSync(d);
  const procs: ChildProcess[] = [];
  let stopping = false;
  const cleanup = async () => {
    if (stopping) return;
    stopping = true;
    const mount = procs[1];
    if (mount && mount.exitCode === null) {
      const exited = new Promise((r) => mount.once('exit', r));
      mount.kill('SIGTERM');
      await Promise.race([exited, sleep(5000)]);
    }
    if (mounted(mnt)) {
      try {
        execFileSync('fusermount', ['-uz', mnt], { stdio: 'ignore' });
      } catch {
        /* already gone */
      }
    }
    for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
    rmSync(base, { recursive: true, force: true });
  };
  const onSignal = () => void cleanup().then(() => process.exit(130));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const rows: Row[] = [];
  const size = FILE_MIB * MIB;
  let tlsCost: string | null = null;
  try {
    process.stderr.write(`preparing a ${FILE_MIB} MiB file, a ${TREE_FILES}-file tree and a ${REPO_FILES}-file git repository in ${base}\n`);
    await randomFile(join(local, 'seq.bin'), FILE_MIB);
    execFileSync('cp', [join(local, 'seq.bin'), join(exp, 'seq.bin')]);
    for (const root of [exp, local]) {
      textTree(join(root, 'tree'), TREE_FILES);
      gitRepo(join(root, 'repo'), REPO_FILES);
    }

    const node = await startUntil([NODE, '--port', '0', '--export', `work=${exp}`], /listening on (\S+)/, { SVC_LOG_LEVEL: 'warn', SVC_FS_NODE_AUTH_TOKEN: '' });
    procs.push(node.proc);
    const mount = await startUntil([MOUNT, '--endpoint', `w=${node.match[1]}`, 'mount', mnt, ...MOUNT_ARGS], /mounted on /, { SVC_LOG_LEVEL: 'warn' });
    procs.push(mount.proc);
    const m = join(mnt, 'w');

    process.stderr.write('sequential read\n');
    const fuseReads: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      // A new mtime on the node, and the kernel's attribute cache (1 s) expired: the next open
      // drops whatever the kernel kept of the file.
      const t = new Date(Date.now() - (i + 1) * 60_000);
      utimesSync(join(exp, 'seq.bin'), t, t);
      await sleep(1500);
      fuseReads.push(await timedRun('cat', [join(m, 'seq.bin')]));
    }
    const localReads: number[] = [];
    for (let i = 0; i < RUNS; i++) localReads.push(await timedRun('cat', [join(local, 'seq.bin')]));
    const read = median(fuseReads);
    rows.push({ what: `sequential read, ${FILE_MIB} MiB (cat)`, fuse: read, local: median(localReads), bytes: size, target: { text: '>= 330 MiB/s', met: size / MIB / read >= 330 } });

    process.stderr.write('sequential write\n');
    const fuseWrites: number[] = [];
    const localWrites: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      fuseWrites.push(await timedRun('cat', [join(local, 'seq.bin')], { stdout: join(m, 'out.bin') }));
      localWrites.push(await timedRun('cat', [join(local, 'seq.bin')], { stdout: join(local, 'out.bin') }));
    }
    rows.push({ what: `sequential write, ${FILE_MIB} MiB (cat > file)`, fuse: median(fuseWrites), local: median(localWrites), bytes: size });

    const cmdRows = async (what: string, cmd: string, args: (root: string) => string[], cwd?: (root: string) => string, target?: (warm: number) => Row['target']) => {
      process.stderr.write(`${what}\n`);
      const run = (root: string) => timedRun(cmd, args(root), { cwd: cwd?.(root) });
      const cold = await run(m);
      const localCold = await run(local);
      const warm: number[] = [];
      const localWarm: number[] = [];
      for (let i = 0; i < RUNS; i++) {
        warm.push(await run(m));
        localWarm.push(await run(local));
      }
      rows.push({ what: `${what}, cold (first run)`, fuse: cold, local: localCold });
      rows.push({ what: `${what}, warm`, fuse: median(warm), local: median(localWarm), target: target?.(median(warm)) });
    };
    await cmdRows(`find over ${TREE_FILES} files`, 'find', (r) => [join(r, 'tree')], undefined, (w) => ({ text: '< 0.1 s', met: w < 0.1 }));
    await cmdRows(`grep -R over ${TREE_FILES} files`, 'grep', (r) => ['-R', '-c', 'needle', join(r, 'tree')], undefined, (w) => ({ text: '< 2.4 s (sshfs 4.8 s / 2)', met: w < 2.4 }));
    await cmdRows(`git status, ${REPO_FILES}-file repository`, 'git', () => ['status', '--porcelain'], (r) => join(r, 'repo'), () => ({ text: 'ratio to local disk reported' }));
    tlsCost = await tlsRows(rows, { exp, local, mnt: m, base, size });
  } finally {
    await cleanup();
  }

  const header = ['measurement', 'FUSE s', 'local s', 'FUSE MB/s', 'local MB/s', 'FUSE MiB/s', 'FUSE speed / local', 'target'];
  const fmt = (n: number) => (n >= 100 ? n.toFixed(0) : n >= 1 ? n.toFixed(2) : n.toFixed(3));
  const body = rows.map((r) => [
    r.what,
    fmt(r.fuse),
    fmt(r.local),
    r.bytes ? (r.bytes / MB / r.fuse).toFixed(0) : '',
    r.bytes ? (r.bytes / MB / r.local).toFixed(0) : '',
    r.bytes ? (r.bytes / MIB / r.fuse).toFixed(0) : '',
    `${((r.local / r.fuse) * 100).toFixed(1)} %`,
    r.target ? (r.target.met === undefined ? r.target.text : `${r.target.text}: ${r.target.met ? 'met' : 'NOT met'}`) : '',
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => (i >= 1 && i <= 6 ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join('  ');
  process.stdout.write(`\nsvc-fs-mount FUSE mount over loopback (binary data path), warm = median of ${RUNS} runs after a cold one; MB = 10^6 bytes\n\n`);
  process.stdout.write(`${line(header)}\n${body.map(line).join('\n')}\n`);
  if (tlsCost) process.stdout.write(`\n${tlsCost}\n`);
}

/**
 * The TLS rows: a second node on the export serving wss://, a second mount of it with
 * --tls-ca; sequential reads alternated with the plain mount `m`, then find and grep -R over
 * the tree through the TLS mount. Both are stopped before returning.
 * @returns the TLS cost line, or null (with a message on stderr) when openssl is missing
 */
async function tlsRows(rows: Row[], at: { exp: string; local: string; mnt: string; base: string; size: number }): Promise<string | null> {
  const tls = makeBenchTls(join(at.base, 'tls'));
  if (typeof tls === 'string') {
    process.stderr.write(`TLS rows skipped: ${tls}\n`);
    return null;
  }
  const mntTls = join(at.base, 'mnt-tls');
  mkdirSync(mntTls);
  const node = await startUntil([NODE, '--port', '0', '--export', `work=${at.exp}`, '--tls-cert', tls.cert, '--tls-key', tls.key], /listening on (\S+)/, { SVC_LOG_LEVEL: 'warn', SVC_FS_NODE_AUTH_TOKEN: '' });
  let mount: ChildProcess | null = null;
  try {
    mount = (await startUntil([MOUNT, '--endpoint', `w=${node.match[1]}`, '--tls-ca', tls.ca, 'mount', mntTls, ...MOUNT_ARGS], /mounted on /, { SVC_LOG_LEVEL: 'warn' })).proc;
    const m = join(mntTls, 'w');
    process.stderr.write('sequential read, plain and TLS alternated\n');
    const plain: number[] = [];
    const secure: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      for (const [dir, out] of [[at.mnt, plain], [m, secure]] as const) {
        const t = new Date(Date.now() - (i + 10) * 60_000 - (out === secure ? 30_000 : 0));
        utimesSync(join(at.exp, 'seq.bin'), t, t);
        await sleep(1500);
        out.push(await timedRun('cat', [join(dir, 'seq.bin')]));
      }
    }
    const localRead = await timedRun('cat', [join(at.local, 'seq.bin')]);
    rows.push({ what: `TLS: sequential read, ${FILE_MIB} MiB (cat)`, fuse: median(secure), local: localRead, bytes: at.size, target: { text: '>= 330 MiB/s', met: at.size / MIB / median(secure) >= 330 } });
    for (const [what, cmd, args] of [
      [`TLS: find over ${TREE_FILES} files`, 'find', (r: string) => [join(r, 'tree')]],
      [`TLS: grep -R over ${TREE_FILES} files`, 'grep', (r: string) => ['-R', '-c', 'needle', join(r, 'tree')]],
    ] as const) {
      process.stderr.write(`${what}\n`);
      const cold = await timedRun(cmd, args(m));
      const localCold = await timedRun(cmd, args(at.local));
      const warm: number[] = [];
      const localWarm: number[] = [];
      for (let i = 0; i < RUNS; i++) {
        warm.push(await timedRun(cmd, args(m)));
        localWarm.push(await timedRun(cmd, args(at.local)));
      }
      rows.push({ what: `${what}, cold (first run)`, fuse: cold, local: localCold });
      rows.push({ what: `${what}, warm`, fuse: median(warm), local: median(localWarm) });
    }
    const p = at.size / MB / median(plain);
    const t = at.size / MB / median(secure);
    return `TLS cost on sequential read through FUSE (${FILE_MIB} MiB, medians of ${RUNS} alternated runs): plain ${p.toFixed(0)} MB/s, TLS ${t.toFixed(0)} MB/s: ${(((p - t) / p) * 100).toFixed(1)} % slower (target <= 25 %)`;
  } finally {
    if (mount && mount.exitCode === null) {
      const exited = new Promise((r) => mount!.once('exit', r));
      mount.kill('SIGTERM');
      await Promise.race([exited, sleep(5000)]);
    }
    if (mounted(mntTls)) {
      try {
        execFileSync('fusermount', ['-uz', mntTls], { stdio: 'ignore' });
      } catch {
        /* already gone */
      }
    }
    node.proc.kill('SIGTERM');
  }
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${(e as Error).message}\n`);
  process.exit(1);
});
