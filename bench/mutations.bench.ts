/**
 * `npm run bench:mutations`: mutation-heavy work on the `svc-fs-mount` FUSE mount, on sshfs over
 * loopback and on the local disk, side by side in one run. It prints figures and asserts nothing.
 *
 * Workloads (each one process, timed as a whole, wall seconds):
 *  - `rm`: `rm -rf` of a tree of BENCH_FILES (5,000) files of 1-4 KiB in directories of 100;
 *  - `saves`: BENCH_SAVES (300) editor-style saves by one `python3 -c` process: each writes a
 *    temp file `.docNN.txt.tmp` of 4-20 KiB, fsyncs and closes it and renames it over `docNN.txt`
 *    (20 documents, saved in turn; they exist before the run);
 *  - `sqlite`: BENCH_TRANSACTIONS (300) transactions by one `sqlite3 -bail` process, each
 *    `BEGIN; INSERT ...; COMMIT;` (a row of 100-400 bytes) in a database made beforehand,
 *    default rollback journal (journal_mode DELETE, synchronous FULL);
 *  - `tar`: `tar -xf ARCHIVE --no-same-owner --no-same-permissions` of BENCH_FILES (5,000) files
 *    of 1-4 KiB in directories of 100, from an archive on the local disk (as an ordinary user
 *    extracts: no chown; tar still sets each file's and directory's modification time, with
 *    futimens/utimensat and the access time UTIME_OMIT).
 * Everything a workload starts from (the tree to remove, the documents, the empty database) is
 * made beforehand, untimed, directly on the directory behind each filesystem, in a new
 * directory per round (`rm-r1`, `rm-r2`, ...; the previous round's is removed there): no mount
 * has seen it, and no stale cache can hide it.
 *
 * Filesystems: `local` is a directory of the bench's temporary directory (BENCH_DIR, default the
 * OS temp dir); `svc` is the built `svc-fs-node` exporting a sibling directory, mounted with the
 * built `svc-fs-mount --endpoint w=... mount MNT` (binary data path); `sshfs` is a private
 * `sshd` on a loopback port and `sshfs` with its default options mounting a third sibling
 * (see bench/peers.ts). So all three sit on the same disk, and the two mounts have separate
 * exports: neither server sees the other's work.
 *
 * Rounds: BENCH_ROUNDS (3). Per workload and round, the three directories are prepared, then
 * each filesystem runs the workload once, the order rotating every round (so a busy moment of
 * this shared machine falls on all alike), then the directories are removed. Printed: per
 * workload the median [min-max] seconds per filesystem, svc/sshfs and svc/local (lower is
 * better), and the target: svc/sshfs at most {@link TARGET}.
 *
 * Round trips: the svc-fs-node serves its metrics on a loopback port (SVC_METRICS_PORT);
 * `svc_fs_ops_total{op,result}` is read from `/metrics` before and after every svc run, each
 * time once the counters stop moving (the kernel sends some requests, e.g. release, after the
 * command exited; so do invalidations after the untimed preparation). The difference is the FS
 * requests the run caused: each one request/reply exchange between the mount and the node
 * (several may be in flight at once, so time is not count x latency). Printed per op (lookup,
 * getattr, create, write, fsync, rename, unlink, close, ...) per run and per unit (removed file,
 * save, transaction, extracted file), the median over rounds; what the mount answered from its
 * own caches is not counted. Results other than `ok` (e.g. lookup ENOENT) are listed below.
 *
 * A workload that fails on a filesystem (a command exiting non-zero, or outlasting
 * BENCH_TIMEOUT_S) shows `failed` there, with the reason below the table; the others go on.
 * The output also names the libfuse 3 binding the mount loaded (built at install), so the svc
 * figures can be tied to that build.
 *
 * Measured here (2 CPUs shared with other builds and tests, load average 3.5 before and 1.7
 * after; ext4; defaults, BENCH_ROUNDS=3; 234 s in all), seconds, median [min-max]:
 *
 *   workload                                          local s              sshfs s                svc s  svc/sshfs  svc/local
 *   rm -rf, 5,000 files                   0.702 [0.701-0.784]     2.90 [2.80-2.94]     5.61 [4.82-6.93]      1.93x      7.99x
 *   300 saves (write tmp, fsync, rename)  0.200 [0.193-0.224]   0.975 [0.844-1.06]     1.74 [1.40-2.06]      1.78x      8.71x
 *   300 SQLite transactions               0.330 [0.304-0.402]     1.93 [1.85-2.13]     5.71 [5.51-5.81]      2.96x     17.28x
 *   tar -x, 5,000 files                      3.66 [3.30-3.99]  15.86 [14.72-15.87]  20.41 [19.93-21.40]      1.29x      5.57x
 *
 *   svc FS requests per unit        rm (removed file)  saves (save)  sqlite (transaction)  tar (extracted file)
 *   unlink                                       1.00             -                  1.00                     -
 *   create, close                                   -     1.00 each             1.00 each             1.00 each
 *   write                                           -          1.00                  3.94                  1.00
 *   fsync                                           -             -                  1.00                     -
 *   rename                                          -          1.00                     -                     -
 *   setattr                                         -             -                  1.00                  0.01
 *   lock                                            -             -                  9.02                     -
 *   read, getattr, getxattr                         -             -       1.00, 2.00, 0.38                  0.01
 *   lookup, readdirp, rmdir, mkdir               0.02          0.13                  0.01                  0.03
 *   total                                        1.02          4.13                 21.35                  3.05
 *   svc ms per request (svc s / requests)       1.10          1.40                  0.89                  1.34
 *
 * How to read them: every svc/sshfs ratio is above the 0.5x target (svc 1.3-3.0x the time of
 * sshfs). The request counts are one per system call that changes something (create, write,
 * close, rename, unlink), plus SQLite's locks: the mount answers the lookups of new names and
 * the attributes of the directories from what its own requests' replies told it, and a save's
 * fsync and tar's times travel with the file's last write (`write_then`, docs/protocol.md). So
 * the time goes into the latency of each request (1.1-1.9 ms of svc wall time per request, the
 * requests one after another). SQLite's read, getattr and getxattr per transaction follow from
 * the node's watch, which reports each write of the session back as a change from elsewhere:
 * the mount drops the file's pages. The spread of the figures shows how busy the machine was
 * (svc's `tar` from 14.6 to 25.0 s, its `rm` from 6.3 to 9.5 s in this run): compare ratios
 * only within one run, and changes of the svc side with its old and new builds side by side.
 *
 * Environment:
 *  - BENCH_ROUNDS (3), BENCH_FILES (5000), BENCH_SAVES (300), BENCH_TRANSACTIONS (300);
 *  - BENCH_ONLY: a comma-separated subset of `rm,saves,sqlite,tar` (default all);
 *  - BENCH_SSHFS=0: no sshfs peer; BENCH_DIR: where the temporary directory goes;
 *  - BENCH_MOUNT_ARGS: extra arguments of `svc-fs-mount mount`; BENCH_NODE_FLAGS: extra Node.js
 *    flags for the svc-fs-node and mount processes;
 *  - BENCH_TIMEOUT_S (300): a workload command running longer is killed and its cell marked failed;
 *  - BENCH_KEEP=1: keep the temporary directory.
 * Skipped with a message (exit 0) where FUSE is unavailable; without sshfs (and not root to
 * install it), without python3 or sqlite3, the rest runs and the output says what is missing.
 */
import { ChildProcess, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { prng } from '../test/support/prng';
import { freePort, sleep } from '../test/support/processes';
import { median } from './measure';
import { fuseBindingBuild, fuseUnavailable, fuseUnmount, Peer, SshfsPeer, SvcPeer } from './peers';
import { envWords, log, startFsNode, stopProcess, timedRun, which } from './programs';

// eslint-disable-next-line @typescript-eslint/no-require-imports -- the package has no types; the cast gives the part used here
const parsePrometheus = require('parse-prometheus-text-format') as (
  text: string,
) => Array<{ name: string; metrics: Array<{ value?: string; labels?: Record<string, string> }> }>;

const envInt = (name: string, dflt: number, min: number) => Math.max(min, Math.floor(Number(process.env[name] ?? dflt) || dflt));
/** The target of every workload: svc at most this many times the seconds of sshfs. */
const TARGET = 0.5;
const ROUNDS = envInt('BENCH_ROUNDS', 3, 1);
const FILES = envInt('BENCH_FILES', 5000, 1);
const SAVES = envInt('BENCH_SAVES', 300, 1);
const TRANSACTIONS = envInt('BENCH_TRANSACTIONS', 300, 1);
const TIMEOUT_MS = envInt('BENCH_TIMEOUT_S', 300, 1) * 1000;
const WITH_SSHFS = process.env.BENCH_SSHFS !== '0';
const MOUNT_ARGS = envWords('BENCH_MOUNT_ARGS');
const NODE_FLAGS = envWords('BENCH_NODE_FLAGS');
const ONLY = new Set((process.env.BENCH_ONLY ?? 'rm,saves,sqlite,tar').split(',').map((s) => s.trim()));
/** Files per directory in the trees. */
const PER_DIR = 100;
/** Documents the saves go to, in turn. */
const DOCS = 20;
/** How long the node's counters must stay still to count as quiet, ms. */
const QUIET_MS = 300;
/** Longest wait for quiet, ms. */
const QUIET_LIMIT_MS = 15_000;

/** A filesystem under test: where its directories are made (`disk`) and where the workloads see them (`view`). */
interface Target {
  readonly name: 'local' | 'sshfs' | 'svc';
  readonly disk: string;
  readonly view: string;
}

/** One workload; see the module documentation. */
interface Workload {
  readonly key: string;
  readonly what: string;
  /** What the per-unit round trips count per, e.g. `removed file`. */
  readonly unit: string;
  readonly units: number;
  /** Makes what the workload starts from in `dir` (on the disk, exists and is empty); untimed. */
  prepare(dir: string): void;
  /** Runs the workload on `dir` (the same directory through the filesystem under test). @returns wall time, s */
  run(dir: string): Promise<number>;
}

/** Counts of `svc_fs_ops_total`, keyed `op\0result`. */
type OpCounts = Map<string, number>;

/** One workload's figures. */
interface Result {
  workload: Workload;
  seconds: Map<Target['name'], number[]>;
  /** Why a filesystem has no figure (the first failure; later rounds are skipped). */
  failed: Map<Target['name'], string>;
  /** svc FS requests per round. */
  requests: OpCounts[];
}

const fmtInt = (n: number) => Math.round(n).toLocaleString('en-US');

/**
 * Writes `count` files of 1-4 KiB (bytes 1024-4096, seeded) in directories of {@link PER_DIR}
 * below `root` (created).
 * @throws Error from the file system (e.g. ENOSPC)
 */
function smallTree(root: string, count: number, seed: number): void {
  const rnd = prng(seed);
  const block = Buffer.alloc(8192);
  for (let i = 0; i < block.length; i++) block[i] = 32 + Math.floor(rnd() * 95);
  for (let i = 0; i < count; i++) {
    const dir = join(root, `d${String(Math.floor(i / PER_DIR)).padStart(2, '0')}`);
    if (i % PER_DIR === 0) mkdirSync(dir, { recursive: true });
    const size = 1024 + Math.floor(rnd() * 3073);
    const at = Math.floor(rnd() * (block.length - size));
    writeFileSync(join(dir, `f${String(i % PER_DIR).padStart(3, '0')}.dat`), block.subarray(at, at + size));
  }
}

/** The saves, as a `python3 -c` program: argv directory, count. Sizes 4-20 KiB from a fixed LCG. */
const SAVES_PY = `
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
text = b''.join(b'line %05d of the document being edited, more or less\\n' % i for i in range(400))
seed = 1
for i in range(n):
    seed = (seed * 1103515245 + 12345) % 2147483648
    size = 4096 + seed % (16 * 1024 + 1)
    name = 'doc%02d.txt' % (i % ${DOCS})
    tmp = os.path.join(d, '.' + name + '.tmp')
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    view = memoryview(text)[:size]
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, os.path.join(d, name))
`;

/** `sqlite3` input: `count` transactions of one INSERT each (100-400 bytes of text, seeded). */
function transactionsSql(count: number): string {
  const rnd = prng(7);
  const lines: string[] = [];
  for (let i = 0; i < count; i++) {
    const len = 100 + Math.floor(rnd() * 301);
    const v = Array.from({ length: len }, () => String.fromCharCode(97 + Math.floor(rnd() * 26))).join('');
    lines.push('BEGIN;', `INSERT INTO t(v) VALUES ('${v}');`, 'COMMIT;');
  }
  return `${lines.join('\n')}\n`;
}

/**
 * The node's `svc_fs_ops_total` counters, from its Prometheus text at `/metrics`.
 * @throws Error (rejects) when the endpoint cannot be read or answers other than 200
 */
async function opCounts(metricsUrl: string): Promise<OpCounts> {
  let res: Response | undefined;
  // A busy machine may drop a connection now and then: three tries, 0.5 s apart.
  for (let attempt = 1; !res; attempt++) {
    try {
      res = await fetch(metricsUrl, { signal: AbortSignal.timeout(10_000) });
    } catch (e) {
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      if (attempt >= 3) throw new Error(`${metricsUrl}: ${(e as Error).message}${cause ? ` (${cause.code ?? cause.message})` : ''}`);
      await sleep(500);
    }
  }
  if (!res.ok) throw new Error(`${metricsUrl} answered ${res.status}`);
  const counts: OpCounts = new Map();
  for (const family of parsePrometheus(await res.text())) {
    if (family.name !== 'svc_fs_ops_total') continue;
    for (const m of family.metrics) counts.set(`${m.labels?.op ?? '?'}\0${m.labels?.result ?? '?'}`, Number(m.value ?? 0));
  }
  return counts;
}

const totalOf = (c: OpCounts) => [...c.values()].reduce((a, b) => a + b, 0);

/**
 * Waits until the node's request counters have not moved for {@link QUIET_MS} (at most
 * {@link QUIET_LIMIT_MS}; then it goes on, and says so on stderr).
 * @returns the counters then
 * @throws Error (rejects) when the metrics cannot be read
 */
async function quietCounts(metricsUrl: string): Promise<OpCounts> {
  const deadline = Date.now() + QUIET_LIMIT_MS;
  let last = await opCounts(metricsUrl);
  for (;;) {
    await sleep(QUIET_MS);
    const now = await opCounts(metricsUrl);
    if (totalOf(now) === totalOf(last)) return now;
    if (Date.now() > deadline) {
      log(`  note: the node still answers requests after ${QUIET_LIMIT_MS} ms; counting from here`);
      return now;
    }
    last = now;
  }
}

/** `after` - `before`, per key, without zeros. */
function diff(after: OpCounts, before: OpCounts): OpCounts {
  const d: OpCounts = new Map();
  for (const [k, v] of after) {
    const n = v - (before.get(k) ?? 0);
    if (n !== 0) d.set(k, n);
  }
  return d;
}

/** The filesystem type of the mount holding `dir` (e.g. `ext2/ext3`), or `unknown`. */
function fsType(dir: string): string {
  try {
    return execFileSync('stat', ['-f', '-c', '%T', dir], { encoding: 'utf8' }).trim();
  } catch {
    return 'unknown';
  }
}

/** First line of `cmd args` output, or `unknown`. */
function versionOf(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
      .split('\n')[0]
      .trim();
  } catch {
    return 'unknown';
  }
}

/**
 * The workloads this run measures (BENCH_ONLY); why any is left out goes to `notes`. Makes the
 * archive and the SQL in `src`. Their commands are in `running` while they run.
 * @throws Error when the archive cannot be made
 */
function workloads(src: string, notes: string[], running: Set<ChildProcess>): Workload[] {
  const list: Workload[] = [];
  const run = (cmd: string, args: string[], options: { stdin?: string } = {}) => timedRun(cmd, args, { ...options, timeoutMs: TIMEOUT_MS, track: running });
  if (ONLY.has('rm')) {
    list.push({
      key: 'rm',
      what: `rm -rf, ${fmtInt(FILES)} files`,
      unit: 'removed file',
      units: FILES,
      prepare: (dir) => smallTree(join(dir, 'tree'), FILES, 1000),
      run: (dir) => run('rm', ['-rf', join(dir, 'tree')]),
    });
  }
  if (ONLY.has('saves')) {
    // The real interpreter, not a version manager's shim (which would add its own start-up to every figure).
    const python = which('python3') ? versionOf('python3', ['-c', 'import sys; print(sys.executable)']) : null;
    if (!python || python === 'unknown') notes.push('saves skipped: python3 is missing');
    else {
      notes.push(`saves: ${python} (${versionOf(python, ['--version'])})`);
      list.push({
        key: 'saves',
        what: `${SAVES} saves (write tmp, fsync, rename)`,
        unit: 'save',
        units: SAVES,
        prepare: (dir) => {
          for (let i = 0; i < DOCS; i++) writeFileSync(join(dir, `doc${String(i).padStart(2, '0')}.txt`), 'first version\n'.repeat(600));
        },
        // A failure names the program, not its text.
        run: (dir) =>
          run(python, ['-c', SAVES_PY, dir, String(SAVES)]).catch((e: Error) => {
            throw new Error(e.message.replace(SAVES_PY, '<saves program>'));
          }),
      });
    }
  }
  if (ONLY.has('sqlite')) {
    if (!which('sqlite3')) notes.push('sqlite skipped: the sqlite3 command is missing (Debian: apt-get install sqlite3)');
    else {
      const sql = join(src, 'transactions.sql');
      writeFileSync(sql, transactionsSql(TRANSACTIONS));
      notes.push(`sqlite: sqlite3 ${versionOf('sqlite3', ['--version']).split(' ')[0]}, -bail, defaults (journal_mode DELETE, synchronous FULL)`);
      list.push({
        key: 'sqlite',
        what: `${TRANSACTIONS} SQLite transactions`,
        unit: 'transaction',
        units: TRANSACTIONS,
        prepare: (dir) =>
          void execFileSync('sqlite3', [join(dir, 'bench.db'), 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL);'], { stdio: 'ignore' }),
        run: (dir) => run('sqlite3', ['-bail', join(dir, 'bench.db')], { stdin: sql }),
      });
    }
  }
  if (ONLY.has('tar')) {
    const archive = join(src, 'tree.tar');
    smallTree(join(src, 'tree'), FILES, 2000);
    execFileSync('tar', ['-cf', archive, '-C', src, 'tree']);
    rmSync(join(src, 'tree'), { recursive: true });
    notes.push(`tar: ${versionOf('tar', ['--version'])}, -xf --no-same-owner --no-same-permissions`);
    list.push({
      key: 'tar',
      what: `tar -x, ${fmtInt(FILES)} files`,
      unit: 'extracted file',
      units: FILES,
      prepare: () => undefined,
      run: (dir) => run('tar', ['-xf', archive, '--no-same-owner', '--no-same-permissions', '-C', dir]),
    });
  }
  return list;
}

async function main(): Promise<void> {
  const reason = fuseUnavailable();
  if (reason) {
    process.stdout.write(`bench:mutations skipped: FUSE is not available here: ${reason}\n`);
    return;
  }
  const t0 = performance.now();
  const base = mkdtempSync(join(process.env.BENCH_DIR ?? tmpdir(), 'svc-bench-mutations-'));
  const dirs = {
    local: join(base, 'local'),
    svcExport: join(base, 'svc-export'),
    sshfsExport: join(base, 'sshfs-export'),
    svcMnt: join(base, 'mnt-svc'),
    sshMnt: join(base, 'mnt-sshfs'),
    src: join(base, 'src'),
  };
  for (const d of Object.values(dirs)) mkdirSync(d);
  /** The workload command running now (stopped first at clean-up: it keeps a mount busy). */
  const running = new Set<ChildProcess>();
  /** svc-fs-node, sshd. */
  const processes = new Set<ChildProcess>();
  const peers: Peer[] = [];
  let stopping = false;
  let cleaning: Promise<void> | null = null;
  /** Stops everything and removes the temporary directory; once (a second call waits for the first). Never rejects. */
  const cleanup = () =>
    (cleaning ??= (async () => {
      stopping = true;
      for (const p of running) await stopProcess(p, 1000);
      for (const p of peers) await p.stop().catch(() => undefined);
      for (const p of processes) await stopProcess(p, 5000);
      fuseUnmount(dirs.svcMnt);
      fuseUnmount(dirs.sshMnt);
      if (process.env.BENCH_KEEP === '1') log(`kept ${base}`);
      else rmSync(base, { recursive: true, force: true });
    })().catch((e) => log(`clean-up: ${(e as Error).message}`)));
  const onSignal = (signal: string) => {
    if (stopping) return log(`${signal}: still cleaning up`);
    log(`${signal}: stopping the workload, unmounting, stopping the servers`);
    void cleanup().then(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const notes: string[] = [];
  const results: Result[] = [];
  const loadBefore = loadavg();
  try {
    log(`preparing in ${base}`);
    const list = workloads(dirs.src, notes, running);

    const metricsPort = await freePort();
    const node = await startFsNode(
      ['--export', `work=${dirs.svcExport}`],
      { SVC_METRICS_PORT: String(metricsPort) },
      { nodeFlags: NODE_FLAGS, timeoutMs: 60_000 },
    );
    processes.add(node.proc);
    node.proc.once('exit', (code, signal) => {
      if (!stopping) log(`svc-fs-node exited (${code ?? signal}) during the run: ${node.stderr().trim().slice(-2000)}`);
    });
    const metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
    const svc = new SvcPeer(node.url, dirs.svcMnt, 'svc', [], { mountArgs: MOUNT_ARGS, nodeFlags: NODE_FLAGS, timeoutMs: 60_000 });
    peers.push(svc);
    await svc.remount();
    notes.push(
      `svc: svc-fs-node ${node.url} exporting ${dirs.svcExport}, metrics ${metricsUrl}; svc-fs-mount --endpoint w=${node.url} mount ${dirs.svcMnt}${MOUNT_ARGS.length ? ` ${MOUNT_ARGS.join(' ')}` : ''}`,
    );
    notes.push(`svc: libfuse 3 binding ${fuseBindingBuild()}`);
    const targets: Target[] = [{ name: 'local', disk: dirs.local, view: dirs.local }];
    if (WITH_SSHFS) {
      // A peer that cannot start is left out with the reason, like a missing one.
      const peer = await SshfsPeer.start(join(base, 'ssh'), dirs.sshfsExport, dirs.sshMnt, processes).catch((e: Error) => `it did not start: ${e.message}`);
      if (typeof peer === 'string') {
        notes.push(`sshfs skipped: ${peer}`);
        log(`sshfs skipped: ${peer}`);
      } else {
        peers.push(peer);
        targets.push({ name: 'sshfs', disk: dirs.sshfsExport, view: peer.root });
        notes.push(`sshfs ${peer.version}: sshfs ${peer.args.join(' ')}`);
      }
    } else notes.push('sshfs skipped: BENCH_SSHFS=0');
    targets.push({ name: 'svc', disk: dirs.svcExport, view: svc.root });
    notes.push(`every directory (local, behind the mounts) on ${fsType(base)}, in ${base}`);

    for (const w of list) {
      log(`${w.what}`);
      const r: Result = { workload: w, seconds: new Map(targets.map((t) => [t.name, []])), failed: new Map(), requests: [] };
      results.push(r);
      for (let round = 1; round <= ROUNDS; round++) {
        if (stopping) throw new Error('interrupted');
        const name = `${w.key}-r${round}`;
        const active = targets.filter((t) => !r.failed.has(t.name));
        for (const t of active) {
          mkdirSync(join(t.disk, name));
          w.prepare(join(t.disk, name));
        }
        // Written back and quiet (the node may push invalidations for the new directories) before anything is timed.
        execFileSync('sync');
        // Not fatal here: a node that stopped answering fails the svc run below, with the reason.
        await quietCounts(metricsUrl).catch((e: Error) => log(`  note: ${e.message}`));
        let before: OpCounts = new Map();
        // Rotate the order every round: each filesystem goes first, second and last in turn.
        const order = active.map((_, i) => active[(i + round - 1) % active.length]);
        for (const t of order) {
          if (stopping) throw new Error('interrupted');
          const dir = join(t.view, name);
          try {
            if (!existsSync(dir)) throw new Error(`${dir} made on the disk is not visible through ${t.name}`);
            if (t.name === 'svc') before = await quietCounts(metricsUrl);
            const s = await w.run(dir);
            r.seconds.get(t.name)!.push(s);
            let extra = '';
            if (t.name === 'svc') {
              const d = diff(await quietCounts(metricsUrl), before);
              r.requests.push(d);
              extra = `, ${fmtInt(totalOf(d))} FS requests`;
            }
            log(`  ${w.key} round ${round}, ${t.name}: ${s.toFixed(3)} s${extra}`);
          } catch (e) {
            const msg = (e as Error).message.split('\n').slice(0, 3).join(' / ');
            r.failed.set(t.name, msg);
            log(`  ${w.key} round ${round}, ${t.name}: FAILED: ${msg}`);
          }
        }
        for (const t of active) rmSync(join(t.disk, name), { recursive: true, force: true });
      }
    }
  } finally {
    await cleanup();
  }
  const loadAfter = loadavg();
  report(results, notes, loadBefore, loadAfter, (performance.now() - t0) / 1000);
}

/** Prints the tables; see the module documentation. */
function report(results: Result[], notes: string[], loadBefore: number[], loadAfter: number[], totalS: number): void {
  const out = (s = '') => process.stdout.write(`${s}\n`);
  const fmtS = (xs: number[] | undefined, failed: string | undefined) => {
    if (failed !== undefined && (!xs || xs.length === 0)) return 'failed';
    if (!xs || xs.length === 0) return '-';
    const f = (n: number) => (n >= 100 ? n.toFixed(0) : n >= 1 ? n.toFixed(2) : n.toFixed(3));
    return `${f(median(xs))} [${f(Math.min(...xs))}-${f(Math.max(...xs))}]${failed !== undefined ? ' (then failed)' : ''}`;
  };
  const table = (header: string[], body: string[][], left: Set<number>) => {
    const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
    const line = (cells: string[]) =>
      cells
        .map((c, i) => (left.has(i) ? c.padEnd(widths[i]) : c.padStart(widths[i])))
        .join('  ')
        .trimEnd();
    out(line(header));
    for (const b of body) out(line(b));
  };

  out();
  out(`Mutation-heavy work on the svc FUSE mount, sshfs (loopback) and the local disk; ${ROUNDS} round(s), filesystems interleaved round by round`);
  out('  seconds: wall time of the one process doing the workload, median [min-max] over the rounds; ratios of the medians, lower is better');
  out(`  local: the same on the disk behind both mounts (page cache, no FUSE, no network): the floor; target: svc/sshfs <= ${TARGET}x`);
  out('  the spread [min-max] of the local column shows how busy the machine was: compare ratios within one run only');
  for (const n of notes) out(`  ${n}`);
  out(`  load average (1 min) ${loadBefore[0].toFixed(2)} before, ${loadAfter[0].toFixed(2)} after (2 CPUs shared with others: figures are noisy)`);
  out();
  const ratio = (a: number, b: number) => (Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${(a / b).toFixed(2)}x` : '-');
  table(
    ['workload', 'local s', 'sshfs s', 'svc s', 'svc/sshfs', 'svc/local', 'target'],
    results.map((r) => {
      const m = (n: Target['name']) => median(r.seconds.get(n) ?? []);
      const [svc, sshfs, local] = [m('svc'), m('sshfs'), m('local')];
      const measured = Number.isFinite(svc) && Number.isFinite(sshfs) && !r.failed.has('svc') && !r.failed.has('sshfs');
      return [
        r.workload.what,
        fmtS(r.seconds.get('local'), r.failed.get('local')),
        fmtS(r.seconds.get('sshfs'), r.failed.get('sshfs')),
        fmtS(r.seconds.get('svc'), r.failed.get('svc')),
        ratio(svc, sshfs),
        ratio(svc, local),
        `<= ${TARGET}x: ${measured ? (svc / sshfs <= TARGET ? 'met' : 'NOT met') : 'not measured'}`,
      ];
    }),
    new Set([0, 6]),
  );
  for (const r of results) for (const [t, msg] of r.failed) out(`  ${r.workload.key} on ${t} failed: ${msg}`);

  // Round trips: per op (all results), the median over rounds, per run and per unit.
  const counted = results.filter((r) => r.requests.length > 0);
  if (counted.length > 0) {
    out();
    out('svc round trips: FS requests the svc-fs-node answered per run (svc_fs_ops_total before/after, once quiet), median over rounds; in () per unit');
    out('  each a request/reply between the mount and the node; what the mount answers from its caches is not here; ms per request = svc s / total');
    const byOp = (c: OpCounts) => {
      const m = new Map<string, number>();
      for (const [k, v] of c) m.set(k.split('\0')[0], (m.get(k.split('\0')[0]) ?? 0) + v);
      return m;
    };
    const perRound = counted.map((r) => r.requests.map(byOp));
    const ops = [...new Set(perRound.flatMap((rs) => rs.flatMap((m) => [...m.keys()])))];
    const opMedian = (i: number, op: string) => median(perRound[i].map((m) => m.get(op) ?? 0));
    ops.sort(
      (a, b) =>
        counted.reduce((s, _, i) => s + opMedian(i, b) / counted[i].workload.units, 0) -
        counted.reduce((s, _, i) => s + opMedian(i, a) / counted[i].workload.units, 0),
    );
    const cell = (n: number, units: number) => (n === 0 ? '-' : `${fmtInt(n)} (${(n / units).toFixed(2)})`);
    const totals = counted.map((r) => r.requests.map(totalOf));
    const body = ops.map((op) => [op, ...counted.map((r, i) => cell(opMedian(i, op), r.workload.units))]);
    body.push([
      'total',
      ...counted.map((r, i) => {
        const xs = totals[i];
        const spread = Math.min(...xs) === Math.max(...xs) ? '' : ` [${fmtInt(Math.min(...xs))}-${fmtInt(Math.max(...xs))}]`;
        return `${cell(median(xs), r.workload.units)}${spread}`;
      }),
    ]);
    body.push([
      'svc ms per request',
      ...counted.map((r, i) => {
        const s = median(r.seconds.get('svc') ?? []);
        return Number.isFinite(s) && median(totals[i]) > 0 ? ((s * 1000) / median(totals[i])).toFixed(3) : '-';
      }),
    ]);
    table(['op', ...counted.map((r) => `${r.workload.key} (per ${r.workload.unit})`)], body, new Set([0]));
    for (const [i, r] of counted.entries()) {
      const notOk = new Map<string, number[]>();
      for (const c of r.requests) for (const k of c.keys()) if (!k.endsWith('\0ok')) notOk.set(k, []);
      for (const c of r.requests) for (const [k, xs] of notOk) xs.push(c.get(k) ?? 0);
      if (notOk.size === 0) continue;
      const parts = [...notOk].map(([k, xs]) => `${k.replace('\0', ' ')} ${fmtInt(median(xs))} (${(median(xs) / r.workload.units).toFixed(2)})`);
      out(`  not ok in ${counted[i].workload.key}: ${parts.join(', ')}`);
    }
  }
  out();
  out(`total run time ${totalS.toFixed(0)} s`);
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${(e as Error).message}\n`);
  process.exit(1);
});
