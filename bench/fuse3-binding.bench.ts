/**
 * `npm run bench:fuse3`: the cost of one request through the libfuse 3 binding (native/fuse3,
 * libs/fuse3). It mounts, in this process, a filesystem of one directory and one file whose
 * getattr answers at once from memory with an attribute timeout of 0 (entry timeout 60 s, so a
 * path walk needs no lookup): every stat(2) of the file is then one GETATTR request through the
 * kernel, the binding's loop thread, this event loop and back. A child process (`node`, never
 * this one: the filesystem answers on this event loop) stats the file BENCH_STATS (100,000)
 * times in a loop, timing each call, with 1 and BENCH_PARALLEL (2) such children at once (the
 * throughput of the one event loop); the mount is made twice, with the loop thread's spin off
 * (`spinUs` 0) and at BENCH_SPIN_US (50) µs. Then the same loops on a file of the local disk (the
 * page-cache path, no FUSE). Prints, per case, each child's median and 99th percentile of one
 * stat (µs), the stats per second of all, and the GETATTR requests answered per second.
 * Wake-ups of sleeping threads dominate the figures and cost more on an idle virtual machine than
 * on a busy one: the header gives the CPUs and the load average.
 *
 * Environment: BENCH_STATS (100000), BENCH_PARALLEL (2), BENCH_SPIN_US (50), BENCH_DIR (default
 * the OS temp dir). Needs the built binding and /dev/fuse, and root or fusermount3; says why and
 * exits 0 otherwise.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Attr, AttrReply, Entry, FuseError, fuse3Unavailable, FuseSession, mount, ROOT_INO } from '../libs/fuse3/src';

const run = promisify(execFile);
const STATS = Number(process.env.BENCH_STATS ?? 100_000);
const PARALLEL = Number(process.env.BENCH_PARALLEL ?? 2);
const SPIN_US = Number(process.env.BENCH_SPIN_US ?? 50);
const FILE_INO = 2;

const children = (n: number) => `${n} child${n > 1 ? 'ren' : ''}`;

function log(text: string): void {
  process.stdout.write(`${text}\n`);
}

/** Untimed stats before each child's loop. */
const WARMUP = 1000;

/** The child's loop: stats `file` `n` times, prints one stat's median and p99 and the loop's total (ns) as JSON. */
const STAT_LOOP = `
const { statSync } = require('node:fs');
const { performance } = require('node:perf_hooks');
const [file, n] = [process.argv[1], Number(process.argv[2])];
for (let i = 0; i < ${WARMUP}; i++) statSync(file);
const each = new Float64Array(n);
const t0 = performance.now();
for (let i = 0; i < n; i++) {
  const a = performance.now();
  statSync(file);
  each[i] = performance.now() - a;
}
const total = performance.now() - t0;
each.sort();
const ns = (ms) => Math.round(ms * 1e6);
process.stdout.write(JSON.stringify({ median: ns(each[Math.floor(n / 2)]), p99: ns(each[Math.floor(n * 0.99)]), total: ns(total) }));
`;

interface LoopResult {
  median: number;
  p99: number;
  total: number;
}

async function statLoops(file: string, parallel: number): Promise<LoopResult[]> {
  const runs = Array.from({ length: parallel }, () => run(process.execPath, ['-e', STAT_LOOP, file, String(STATS)], { encoding: 'utf8', timeout: 600_000 }));
  return (await Promise.all(runs)).map((r) => JSON.parse(r.stdout) as LoopResult);
}

/**
 * One line of results: each child's median and p99 of one stat, the stats per second of all
 * (over the longest child's timed loop) and, for the mount, the GETATTR requests answered per
 * second over the same time.
 */
function report(label: string, results: LoopResult[], requests?: number): void {
  const wallNs = Math.max(...results.map((r) => r.total));
  const perSec = (results.length * STATS) / (wallNs / 1e9);
  const us = (ns: number) => (ns / 1000).toFixed(1);
  const medians = results.map((r) => us(r.median)).join('/');
  const p99s = results.map((r) => us(r.p99)).join('/');
  const req = requests === undefined ? '' : `, ${Math.round(requests / (wallNs / 1e9)).toLocaleString('en-US')} GETATTR/s answered`;
  log(`${label.padEnd(32)} stat median ${medians} µs, p99 ${p99s} µs, ${Math.round(perSec).toLocaleString('en-US')} stats/s${req}`);
}

interface BenchFs {
  session: FuseSession;
  dir: string;
  /** GETATTR requests answered so far. */
  getattrs(): number;
}

/** Mounts the one-file filesystem on a new directory under `base`. */
async function mountBench(base: string, spinUs: number): Promise<BenchFs> {
  const dir = mkdtempSync(join(base, 'm-'));
  const now = BigInt(Date.now()) * 1_000_000n;
  const attrs: Record<number, Attr> = {
    [ROOT_INO]: { ino: ROOT_INO, mode: 0o40755, nlink: 2, uid: 0, gid: 0, size: 0, atimeNs: now, mtimeNs: now, ctimeNs: now },
    [FILE_INO]: { ino: FILE_INO, mode: 0o100644, nlink: 1, uid: 0, gid: 0, size: 6, atimeNs: now, mtimeNs: now, ctimeNs: now },
  };
  let getattrs = 0;
  const session = await mount(
    dir,
    {
      async lookup(parent: number, name: string): Promise<Entry> {
        if (parent !== ROOT_INO || name !== 'f') throw new FuseError('ENOENT');
        return { ino: FILE_INO, attr: attrs[FILE_INO], entryTimeout: 60, attrTimeout: 0 };
      },
      async getattr(ino: number): Promise<AttrReply> {
        getattrs++;
        const attr = attrs[ino];
        if (!attr) throw new FuseError('ENOENT');
        return { attr, attrTimeout: ino === ROOT_INO ? 60 : 0 };
      },
    },
    { spinUs },
  );
  return { session, dir, getattrs: () => getattrs };
}

async function main(): Promise<void> {
  const reason = fuse3Unavailable();
  if (reason) {
    log(`bench:fuse3 skipped: ${reason}`);
    return;
  }
  const base = mkdtempSync(join(process.env.BENCH_DIR ?? tmpdir(), 'svc-fuse3-bench-'));
  const local = join(base, 'local.txt');
  writeFileSync(local, 'hello\n');
  log(`bench:fuse3: ${STATS.toLocaleString('en-US')} stat(2) per child, ${cpus().length} CPUs, load average ${loadavg()[0].toFixed(1)}`);
  try {
    for (const spinUs of [0, SPIN_US]) {
      const fs = await mountBench(base, spinUs);
      try {
        for (const parallel of [1, PARALLEL]) {
          const before = fs.getattrs();
          const results = await statLoops(join(fs.dir, 'f'), parallel);
          report(`fuse3, spinUs ${spinUs}, ${children(parallel)}`, results, fs.getattrs() - before - WARMUP * parallel);
        }
      } finally {
        await fs.session.unmount();
        rmdirSync(fs.dir);
      }
    }
    for (const parallel of [1, PARALLEL]) report(`local disk, ${children(parallel)}`, await statLoops(local, parallel));
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`bench:fuse3 failed: ${(e as Error)?.stack ?? String(e)}\n`);
  process.exit(1);
});
