/**
 * `npm run bench:fuse`: the `svc-fs-mount` FUSE mount side by
 * side with sshfs on the same export, both over loopback.
 *
 * It starts the built `svc-fs-node` on a temporary export directory and mounts it with the built
 * `svc-fs-mount --endpoint w=... mount MNT` (binary data path). Beside it, as the peer, it
 * starts a private `sshd` on a free loopback port (throwaway config, host key, client key and
 * `AuthorizedKeysFile` in a temp dir; `UsePAM no`, `StrictModes no`, `Subsystem sftp
 * internal-sftp`; `/run/sshd` is created when missing, for privilege separation) and mounts the
 * SAME export directory with
 *   `sshfs -f -p PORT -o IdentityFile=KEY,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,
 *    BatchMode=yes,LogLevel=ERROR USER@127.0.0.1:EXPORT MNT2`
 * i.e. sshfs's defaults for everything that affects speed (its own caches on, no kernel_cache);
 * `-f` only keeps sshfs in the foreground as this bench's child, BatchMode/LogLevel only stop
 * ssh from prompting or chattering. When `sshfs` or `sshd` is missing the bench installs them
 * with `apt-get install -y sshfs openssh-server` when it runs as root; otherwise it prints why
 * the peer is skipped and measures the FUSE mount alone.
 *
 * Measured (each figure the median of BENCH_RUNS runs, per mount; the two mounts alternate which
 * goes first):
 *  - sequential read of a BENCH_FILE_MIB (256) MiB file with `cat`, cold;
 *  - sequential write of the same size (`cat file > MNT/out.bin`, timed until the writer closed
 *    it: the data is on the node / the sftp server), reported without target;
 *  - `find` over a tree of BENCH_TREE_FILES (10,000) files of about 1 KiB in directories of 100,
 *    warm;
 *  - `grep -R -c needle` over the same tree, cold and warm;
 *  - `git status --porcelain` in a repository of BENCH_REPO_FILES (2,000) committed files, cold
 *    and warm. Before each cold run the repository's index is refreshed through the mount about
 *    to be timed (an untimed `git status`): the index keeps inode numbers and times, which differ
 *    between the two mounts and the local disk, and a stale index would make git hash every file.
 *    A mount whose inode numbers change when it is mounted again (libfuse numbers inodes in the
 *    order they are looked up unless `use_ino`) still makes git read every file in the cold run:
 *    that is part of what the figure measures.
 * Cold: before every cold run BOTH mounts are unmounted and mounted again (the svc mount process
 * is restarted; sshfs reconnects), and the page cache is dropped (`sync; echo 3 >
 * /proc/sys/vm/drop_caches`). Where dropping is not permitted (a container) the output says so
 * and cold runs rely on the remounts: neither mount's caches survive them, but the node's and
 * the sftp server's reads of the export are then served from the host's page cache (the same
 * for both). Warm: after one untimed run on the same mount.
 *
 * It prints, for each figure, svc seconds, sshfs seconds, the ratio svc/sshfs (lower is better)
 * and the target with met / NOT met (cold `grep -R`, cold `git status` and the sequential read
 * at most 0.5x sshfs), and the same work on the local disk (page cache warm) with the ratio
 * svc/local and its target (warm `find`, `grep -R` and `git status` at most 1.5x the local disk). Every sample goes to stderr as it is
 * taken. It asserts nothing. The machine is usually shared: the load average before and after is
 * printed with the table.
 *
 * TLS: a second `svc-fs-node` on the same export serving `wss://` with a throwaway CA
 * made by `openssl` (bench/tls.ts), mounted a second time with `--tls-ca` ("svc TLS"), is measured
 * in the same alternation on the sequential read and the small-file rows (`find`, `grep -R`); the
 * table gives its seconds and the TLS cost (the throughput given up against the plain svc mount;
 * target on sequential read: at most 25 %). BENCH_TLS=0, or no `openssl`, leaves it out
 * (the output says why).
 *
 * Skipped with a message (exit 0) where FUSE is unavailable: no /dev/fuse, the libfuse 3 binding
 * not built, or no fusermount3.
 *
 * Environment:
 *  - BENCH_FILE_MIB (default 256), BENCH_TREE_FILES (10000), BENCH_REPO_FILES (2000),
 *    BENCH_RUNS (5), BENCH_DIR (default the OS temp dir);
 *  - BENCH_MOUNT_ARGS: extra arguments of `svc-fs-mount mount`, e.g. `--poll-us 0`;
 *  - BENCH_SSHFS=0: no sshfs peer (the svc mount alone);
 *  - BENCH_ONLY: a comma-separated subset of `read,write,find,grep,git` (default all);
 *  - BENCH_NODE_FLAGS: extra Node.js flags for the svc-fs-node and mount processes, e.g.
 *    `--cpu-prof --cpu-prof-dir=/tmp/prof` (profiles are written when they exit, at each remount);
 *  - BENCH_KEEP=1: keep the temporary directory (the tree, the repository, the profiles).
 */
import { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, createWriteStream, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { median } from './measure';
import { dropCaches, fuseUnavailable, fuseUnmount, GIT, gitRepo, Peer, SshfsPeer, SvcPeer, textTree } from './peers';
import { envWords, log, startFsNode, stopProcess, timedRun } from './programs';
import { makeBenchTls } from './tls';

const FILE_MIB = Number(process.env.BENCH_FILE_MIB ?? 256);
const TREE_FILES = Number(process.env.BENCH_TREE_FILES ?? 10_000);
const REPO_FILES = Number(process.env.BENCH_REPO_FILES ?? 2000);
const RUNS = Math.max(1, Number(process.env.BENCH_RUNS ?? 5));
const MOUNT_ARGS = envWords('BENCH_MOUNT_ARGS');
const NODE_FLAGS = envWords('BENCH_NODE_FLAGS');
const WITH_SSHFS = process.env.BENCH_SSHFS !== '0';
const WITH_TLS = process.env.BENCH_TLS !== '0';
const ONLY = new Set((process.env.BENCH_ONLY ?? 'read,write,find,grep,git').split(',').map((s) => s.trim()));
const MB = 1e6;
const MIB = 1024 * 1024;

/** Writes `mib` MiB of random bytes to `file`. */
async function randomFile(file: string, mib: number): Promise<void> {
  const out = createWriteStream(file);
  for (let i = 0; i < mib; i++) if (!out.write(randomBytes(MIB))) await new Promise<void>((r) => out.once('drain', () => r()));
  await new Promise<void>((r) => out.end(() => r()));
}

interface Row {
  what: string;
  svc: number;
  /** sshfs seconds; undefined without the peer. */
  sshfs?: number;
  /** svc over TLS seconds; undefined when not measured. */
  tls?: number;
  /** Largest TLS cost accepted (throughput given up, 0.25 = 25 %); undefined when only reported. */
  tlsTarget?: number;
  /** Local disk seconds (page cache warm); undefined when not measured. */
  local?: number;
  /** Bytes moved, for MB/s. */
  bytes?: number;
  /** Largest svc/sshfs ratio accepted; undefined when only reported. */
  target?: number;
  /** Largest svc/local ratio accepted; undefined when only reported. */
  localTarget?: number;
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
  const svcMnt = join(base, 'mnt-svc');
  const sshMnt = join(base, 'mnt-sshfs');
  const tlsMnt = join(base, 'mnt-svc-tls');
  for (const d of [exp, local, svcMnt, sshMnt, tlsMnt]) mkdirSync(d);
  const processes = new Set<ChildProcess>();
  const peers: Peer[] = [];
  let stopping = false;
  const cleanup = async () => {
    if (stopping) return;
    stopping = true;
    for (const p of peers) await p.stop().catch(() => undefined);
    for (const p of processes) await stopProcess(p, 5000);
    fuseUnmount(svcMnt);
    fuseUnmount(sshMnt);
    fuseUnmount(tlsMnt);
    if (process.env.BENCH_KEEP === '1') log(`kept ${base}`);
    else rmSync(base, { recursive: true, force: true });
  };
  const onSignal = () => void cleanup().then(() => process.exit(130));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const rows: Row[] = [];
  const notes: string[] = [];
  const loadBefore = loadavg();
  const size = FILE_MIB * MIB;
  try {
    log(`preparing a ${FILE_MIB} MiB file, a ${TREE_FILES}-file tree and a ${REPO_FILES}-file git repository in ${base}`);
    if (ONLY.has('read') || ONLY.has('write')) {
      await randomFile(join(local, 'seq.bin'), FILE_MIB);
      copyFileSync(join(local, 'seq.bin'), join(exp, 'seq.bin'));
    }
    for (const root of [exp, local]) {
      if (ONLY.has('find') || ONLY.has('grep')) textTree(join(root, 'tree'), TREE_FILES);
      if (ONLY.has('git')) gitRepo(join(root, 'repo'), REPO_FILES);
    }

    const mountOptions = { mountArgs: MOUNT_ARGS, nodeFlags: NODE_FLAGS };
    const node = await startFsNode(['--export', `work=${exp}`], {}, { nodeFlags: NODE_FLAGS });
    processes.add(node.proc);
    const svc = new SvcPeer(node.url, svcMnt, 'svc', [], mountOptions);
    peers.push(svc);
    await svc.remount();
    let sshfs: SshfsPeer | null = null;
    if (WITH_SSHFS) {
      const peer = await SshfsPeer.start(join(base, 'ssh'), exp, sshMnt, processes);
      if (typeof peer === 'string') {
        notes.push(`sshfs skipped: ${peer}`);
        log(`sshfs skipped: ${peer}`);
      } else {
        sshfs = peer;
        peers.push(peer);
        notes.push(`sshfs ${peer.version}: sshfs ${peer.args.join(' ')}`);
      }
    } else notes.push('sshfs skipped: BENCH_SSHFS=0');
    let tlsPeer: SvcPeer | null = null;
    if (WITH_TLS) {
      const tls = makeBenchTls(join(base, 'tls'));
      if (typeof tls === 'string') {
        notes.push(`svc TLS skipped: ${tls}`);
        log(`svc TLS skipped: ${tls}`);
      } else {
        const tlsNode = await startFsNode(['--export', `work=${exp}`, '--tls-cert', tls.cert, '--tls-key', tls.key], {}, { nodeFlags: NODE_FLAGS });
        processes.add(tlsNode.proc);
        tlsPeer = new SvcPeer(tlsNode.url, tlsMnt, 'svc TLS', ['--tls-ca', tls.ca], mountOptions);
        peers.push(tlsPeer);
        await tlsPeer.remount();
        notes.push(
          `svc TLS: a second svc-fs-node on the export serving ${tlsNode.url} (TLS 1.3, throwaway CA), mounted with --tls-ca; measured on the read, find and grep rows`,
        );
      }
    } else notes.push('svc TLS skipped: BENCH_TLS=0');

    let dropNote: string | null | undefined;
    /** Remounts both mounts and drops the page cache: the next run is cold. */
    const cold = async () => {
      for (const p of peers) await p.remount();
      const why = dropCaches();
      if (dropNote === undefined) {
        dropNote = why;
        const mounts = peers.length > 2 ? `all ${peers.length} mounts` : peers.length > 1 ? 'both mounts' : 'the mount';
        notes.push(
          why === null
            ? `cold runs: ${mounts} remounted and the page cache dropped before each`
            : `cold runs: ${mounts} remounted before each; the page cache could NOT be dropped (/proc/sys/vm/drop_caches: ${why}), so the node's (and sshd's) reads of the export hit the host's page cache`,
        );
        if (why !== null) log(`note: cannot drop the page cache (${why}); relying on remounts`);
      }
    };
    /**
     * Runs `fn` on each mount RUNS times, alternating which mount goes first; `prepare` runs before
     * each timed run. The TLS mount takes part when `withTls`.
     */
    const each = async (what: string, fn: (p: Peer) => Promise<number>, prepare?: (p: Peer) => Promise<void>, withTls = false) => {
      const runPeers = peers.filter((p) => withTls || p !== tlsPeer);
      const times = new Map<Peer, number[]>(runPeers.map((p) => [p, []]));
      for (let i = 0; i < RUNS; i++) {
        const order = i % 2 === 0 ? runPeers : [...runPeers].reverse();
        for (const p of order) {
          await prepare?.(p);
          const t = await fn(p);
          times.get(p)!.push(t);
          log(`  ${what}, ${p.name} run ${i + 1}: ${t.toFixed(3)} s`);
        }
      }
      return {
        svc: median(times.get(svc)!),
        sshfs: sshfs ? median(times.get(sshfs)!) : undefined,
        tls: withTls && tlsPeer ? median(times.get(tlsPeer)!) : undefined,
      };
    };
    const localMedian = async (fn: () => Promise<number>) => {
      const xs: number[] = [];
      for (let i = 0; i < RUNS; i++) xs.push(await fn());
      return median(xs);
    };

    if (ONLY.has('read')) {
      const what = `sequential read, ${FILE_MIB} MiB (cat), cold`;
      log(what);
      const r = await each('read', (p) => timedRun('cat', [join(p.root, 'seq.bin')]), cold, true);
      rows.push({ what, ...r, local: await localMedian(() => timedRun('cat', [join(local, 'seq.bin')])), bytes: size, target: 0.5, tlsTarget: 0.25 });
    }
    if (ONLY.has('write')) {
      const what = `sequential write, ${FILE_MIB} MiB (cat > file)`;
      log(what);
      const r = await each('write', (p) => timedRun('cat', [join(local, 'seq.bin')], { stdout: join(p.root, 'out.bin') }));
      rows.push({ what, ...r, local: await localMedian(() => timedRun('cat', [join(local, 'seq.bin')], { stdout: join(local, 'out.bin') })), bytes: size });
      rmSync(join(exp, 'out.bin'), { force: true });
      rmSync(join(local, 'out.bin'), { force: true });
    }
    const find = (root: string) => timedRun('find', [join(root, 'tree')]);
    const grep = (root: string) => timedRun('grep', ['-R', '-c', 'needle', join(root, 'tree')]);
    if (ONLY.has('grep')) {
      const what = `grep -R over ${TREE_FILES} files, cold`;
      log(what);
      rows.push({ what, ...(await each('grep cold', (p) => grep(p.root), cold, true)), target: 0.5 });
    }
    if (ONLY.has('find') || ONLY.has('grep')) {
      // One untimed run of each on every mount first: then both are warm.
      for (const p of peers) {
        if (ONLY.has('grep')) await grep(p.root);
        else await find(p.root);
      }
    }
    if (ONLY.has('find')) {
      const what = `find over ${TREE_FILES} files, warm`;
      log(what);
      rows.push({ what, ...(await each('find warm', (p) => find(p.root), undefined, true)), local: await localMedian(() => find(local)), localTarget: 1.5 });
    }
    if (ONLY.has('grep')) {
      const what = `grep -R over ${TREE_FILES} files, warm`;
      log(what);
      rows.push({ what, ...(await each('grep warm', (p) => grep(p.root), undefined, true)), local: await localMedian(() => grep(local)), localTarget: 1.5 });
    }
    if (ONLY.has('git')) {
      const status = (root: string) => timedRun('git', [...GIT, 'status', '--porcelain'], { cwd: join(root, 'repo') });
      const what = `git status, ${REPO_FILES}-file repository, cold`;
      log(what);
      // The index is refreshed through the mount about to be timed (see module documentation), then everything remounted.
      rows.push({
        what,
        ...(await each(
          'git status cold',
          (p) => status(p.root),
          async (p) => (await status(p.root), await cold()),
        )),
        target: 0.5,
      });
      for (const p of peers) await status(p.root);
      const warm = `git status, ${REPO_FILES}-file repository, warm`;
      log(warm);
      rows.push({
        what: warm,
        ...(await each(
          'git status warm',
          (p) => status(p.root),
          async (p) => void (await status(p.root)),
        )),
        local: await localMedian(() => status(local)),
        localTarget: 1.5,
      });
    }
  } finally {
    await cleanup();
  }

  const header = [
    'measurement',
    'svc s',
    'sshfs s',
    'svc/sshfs',
    'target',
    'svc MB/s',
    'sshfs MB/s',
    'local s',
    'svc/local',
    'target',
    'svc TLS s',
    'TLS cost',
  ];
  const fmt = (n: number | undefined) => (n === undefined ? '-' : n >= 100 ? n.toFixed(0) : n >= 1 ? n.toFixed(2) : n.toFixed(3));
  const body = rows.map((r) => {
    const ratio = r.sshfs !== undefined ? r.svc / r.sshfs : undefined;
    const target =
      r.target === undefined
        ? ''
        : ratio === undefined
          ? `<= ${r.target.toFixed(1)}x: not measured`
          : `<= ${r.target.toFixed(1)}x: ${ratio <= r.target ? 'met' : 'NOT met'}`;
    return [
      r.what,
      fmt(r.svc),
      fmt(r.sshfs),
      ratio === undefined ? '-' : `${ratio.toFixed(2)}x`,
      target,
      r.bytes ? (r.bytes / MB / r.svc).toFixed(0) : '',
      r.bytes && r.sshfs ? (r.bytes / MB / r.sshfs).toFixed(0) : '',
      fmt(r.local),
      r.local === undefined ? '-' : `${(r.svc / r.local).toFixed(2)}x`,
      r.localTarget === undefined || r.local === undefined ? '' : `<= ${r.localTarget.toFixed(1)}x: ${r.svc / r.local <= r.localTarget ? 'met' : 'NOT met'}`,
      fmt(r.tls),
      r.tls === undefined
        ? ''
        : `${((1 - r.svc / r.tls) * 100).toFixed(1)} %${r.tlsTarget === undefined ? '' : ` (<= ${r.tlsTarget * 100} %: ${1 - r.svc / r.tls <= r.tlsTarget ? 'met' : 'NOT met'})`}`,
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 || i === 4 || i === 9 || i === 11 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  const loadAfter = loadavg();
  process.stdout.write(
    `\nsvc-fs-mount FUSE mount (binary data path) beside sshfs, same export, loopback; each figure the median of ${RUNS} runs per mount; ` +
      `ratio = svc time / sshfs time (lower is better); local = the same on the local disk, page cache warm; ` +
      `TLS cost = the throughput the svc TLS mount gives up against the plain one (1 - svc s / svc TLS s); MB = 10^6 bytes\n`,
  );
  for (const n of notes) process.stdout.write(`  ${n}\n`);
  process.stdout.write(
    `  load average (1 min) ${loadBefore[0].toFixed(2)} before, ${loadAfter[0].toFixed(2)} after (the machine may be shared: figures are noisy)\n\n`,
  );
  process.stdout.write(`${line(header)}\n${body.map(line).join('\n')}\n`);
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${(e as Error).message}\n`);
  process.exit(1);
});
