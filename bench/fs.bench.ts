/**
 * `npm run bench:fs`: starts the built `svc-fs-node` on a temporary
 * directory (loopback) and measures, for the JSON data path and the binary data path:
 *  - sequential write and read of a 256 MiB file through the real `svc-fs-mount write -` /
 *    `svc-fs-mount cat` (stdout to /dev/null), wall time including the program's start-up, and
 *    net of it (start-up = the median time of a `getattr`), next to coreutils `cat` on the
 *    local disk (also a process per run);
 *  - random 4 KiB reads (1 and 16 in flight) and `readdir` + `getattr` over a tree of 10,000
 *    files, through the WorkspaceRouter the CLI uses, in this process (a process per 4 KiB read
 *    would measure process start-up only);
 * each next to the same work done directly on the local disk, and the ratio. The binary path is
 * measured a second time over `wss://` (a second node on the same directory serving TLS with a
 * throwaway CA made by `openssl`; skipped with the reason when it is missing), and the TLS cost
 * on sequential read is measured apart, in process (no start-up): plain and TLS reads of the
 * file alternated, medians compared (target: at most 25 %). Prints figures; it asserts nothing.
 * Targets (2 cores): JSON path >= 200 MB/s sequential read, binary >= 500 MB/s.
 *
 * Environment: BENCH_FILE_MIB (default 256), BENCH_TREE_FILES (default 10000),
 * BENCH_RANDOM_READS (default 4000), BENCH_DIR (default the OS temp dir), BENCH_TLS_RUNS
 * (alternated plain and TLS reads for the TLS cost, default 5 each).
 */
import { randomBytes, randomInt } from 'node:crypto';
import { createWriteStream, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { open, readdir, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { FsClient, loadClientTls } from '../libs/client/src';
import { OpenFlags, parseEndpointSpec, readFileTo, StaticTopologySource, WorkspaceRouter } from '../libs/fs/src/router';
import { BIN } from '../test/support/processes';
import { median } from './measure';
import { startFsNode, timedRun } from './programs';
import { BenchTls, makeBenchTls } from './tls';
const FILE_MIB = Number(process.env.BENCH_FILE_MIB ?? 256);
const TREE_FILES = Number(process.env.BENCH_TREE_FILES ?? 10_000);
const RANDOM_READS = Number(process.env.BENCH_RANDOM_READS ?? 4000);
const TLS_RUNS = Math.max(1, Number(process.env.BENCH_TLS_RUNS ?? 5));
const MB = 1e6;

interface Row {
  what: string;
  unit: 'MB/s' | 'ops/s';
  remote: number;
  local: number;
  note?: string;
}

/** Starts svc-fs-node on `dir` (serving TLS with `tls`), its log (warnings) on this process's stderr. */
async function startNode(dir: string, tls?: BenchTls): Promise<{ url: string; stop: () => void }> {
  const { proc, url } = await startFsNode(
    ['--export', `work=${dir}`, ...(tls ? ['--tls-cert', tls.cert, '--tls-key', tls.key] : [])],
    {},
    { stderr: 'inherit' },
  );
  return { url, stop: () => proc.kill('SIGTERM') };
}

/** Runs svc-fs-mount with stdin/stdout connected to files; returns the wall time in s. */
function runMount(args: string[], stdinFile: string | null, stdoutFile: string): Promise<number> {
  return timedRun(process.execPath, [BIN.fsMount, ...args], { stdin: stdinFile ?? undefined, stdout: stdoutFile });
}

/** `cat src > dst` with coreutils; returns the wall time in s. */
function runCat(src: string, dst: string): Promise<number> {
  return timedRun('cat', [src], { stdout: dst });
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return (performance.now() - t0) / 1000;
}

/** Reads `path` (`size` bytes) to a sink with `readFileTo`, as `svc-fs-mount cat` does (1 MiB reads, 8 in flight); returns MB/s. */
async function sequentialRead(router: WorkspaceRouter, path: string, size: number): Promise<number> {
  let bytes = 0;
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      bytes += chunk.length;
      cb();
    },
  });
  const s = await timed(() => readFileTo(router, path, sink));
  if (bytes !== size) throw new Error(`read ${bytes} bytes of ${size}`);
  return size / MB / s;
}

/** Runs `count` operations with `depth` in flight; returns ops/s. */
async function opsPerSecond(count: number, depth: number, op: (i: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const s = await timed(() =>
    Promise.all(
      Array.from({ length: depth }, async () => {
        while (next < count) await op(next++);
      }),
    ),
  );
  return count / s;
}

async function main(): Promise<void> {
  const base = mkdtempSync(join(process.env.BENCH_DIR ?? tmpdir(), 'svc-bench-fs-'));
  const exp = join(base, 'export');
  const local = join(base, 'local');
  mkdirSync(exp);
  mkdirSync(local);
  const node = await startNode(exp);
  const tls = makeBenchTls(join(base, 'tls'));
  if (typeof tls === 'string') process.stderr.write(`TLS rows skipped: ${tls}\n`);
  const tlsNode = typeof tls === 'string' ? null : await startNode(exp, tls);
  const rows: Row[] = [];
  let tlsCost: string | null = null;
  const size = FILE_MIB * 1024 * 1024;
  try {
    process.stderr.write(`preparing a ${FILE_MIB} MiB file and a tree of ${TREE_FILES} files in ${base}\n`);
    const src = join(local, 'source.bin');
    {
      const out = createWriteStream(src);
      for (let i = 0; i < FILE_MIB; i++) if (!out.write(randomBytes(1024 * 1024))) await new Promise<void>((r) => out.once('drain', () => r()));
      await new Promise<void>((r) => out.end(() => r()));
    }
    const perDir = 100;
    const dirs = Math.ceil(TREE_FILES / perDir);
    for (const root of [exp, local]) {
      for (let d = 0; d < dirs; d++) {
        const dir = join(root, 'tree', `d${String(d).padStart(3, '0')}`);
        mkdirSync(dir, { recursive: true });
        for (let f = 0; f < perDir && d * perDir + f < TREE_FILES; f++) writeFileSync(join(dir, `f${String(f).padStart(3, '0')}`), 'x'.repeat(f));
      }
    }
    writeFileSync(join(exp, 'small'), 'small');

    // --- local baselines: coreutils cat (a process per run, like svc-fs-mount), page cache
    const localWrite = median([await runCat(src, join(local, 'copy1.bin')), await runCat(src, join(local, 'copy2.bin'))]);
    const localRead = median([await runCat(src, '/dev/null'), await runCat(src, '/dev/null'), await runCat(src, '/dev/null')]);
    const fh = await open(src, 'r');
    const buf = Buffer.alloc(4096);
    const localRand1 = await opsPerSecond(RANDOM_READS, 1, () => fh.read(buf, 0, 4096, randomInt(0, size / 4096) * 4096));
    const localRand16 = await opsPerSecond(RANDOM_READS, 16, () => fh.read(Buffer.alloc(4096), 0, 4096, randomInt(0, size / 4096) * 4096));
    await fh.close();
    const localTree = await (async () => {
      const t0 = performance.now();
      const names: string[] = [];
      for (const d of await readdir(join(local, 'tree'))) for (const f of await readdir(join(local, 'tree', d))) names.push(join(local, 'tree', d, f));
      let i = 0;
      await Promise.all(
        Array.from({ length: 32 }, async () => {
          while (i < names.length) await stat(names[i++]);
        }),
      );
      return (names.length + dirs + 1) / ((performance.now() - t0) / 1000);
    })();

    const modes: Array<{ mode: string; url: string; flags: string[]; binary: boolean; tls?: BenchTls }> = [
      { mode: 'json', url: node.url, flags: ['--no-binary'], binary: false },
      { mode: 'binary', url: node.url, flags: [], binary: true },
    ];
    if (tlsNode && typeof tls !== 'string') modes.push({ mode: 'binary over TLS', url: tlsNode.url, flags: ['--tls-ca', tls.ca], binary: true, tls });
    for (const { mode, url, flags, binary, tls: modeTls } of modes) {
      const ep = ['--endpoint', `w=${url}`];
      const file = `seq-${mode.replace(/ /g, '-')}.bin`;
      process.stderr.write(`${mode} path: CLI start-up, write, cat\n`);
      const startup = median([
        await runMount([...ep, ...flags, 'getattr', '/w/small'], null, '/dev/null'),
        await runMount([...ep, ...flags, 'getattr', '/w/small'], null, '/dev/null'),
        await runMount([...ep, ...flags, 'getattr', '/w/small'], null, '/dev/null'),
      ]);
      const w = await runMount([...ep, ...flags, 'write', `/w/${file}`, '-'], src, '/dev/null');
      const r = median([
        await runMount([...ep, ...flags, 'cat', `/w/${file}`], null, '/dev/null'),
        await runMount([...ep, ...flags, 'cat', `/w/${file}`], null, '/dev/null'),
      ]);
      const net = (t: number) => (t - startup > 0.05 ? size / MB / (t - startup) : NaN);
      rows.push({ what: `${mode}: sequential write (svc-fs-mount write - < file), wall`, unit: 'MB/s', remote: size / MB / w, local: size / MB / localWrite });
      rows.push({ what: `${mode}: sequential write, net of start-up (${startup.toFixed(2)} s)`, unit: 'MB/s', remote: net(w), local: size / MB / localWrite });
      rows.push({ what: `${mode}: sequential read (svc-fs-mount cat > /dev/null), wall`, unit: 'MB/s', remote: size / MB / r, local: size / MB / localRead });
      rows.push({ what: `${mode}: sequential read, net of start-up`, unit: 'MB/s', remote: net(r), local: size / MB / localRead });

      process.stderr.write(`${mode} path: random reads and metadata (router in process)\n`);
      const clientTls = modeTls ? loadClientTls(modeTls.ca) : undefined;
      const router = new WorkspaceRouter(new StaticTopologySource([parseEndpointSpec(`w=${url}`)]), {
        binary,
        connect: (o) => FsClient.connect({ ...o, tls: clientTls }),
      });
      await router.start();
      try {
        const { fh: h } = await router.open(`/w/${file}`, OpenFlags.O_RDONLY);
        const rand1 = await opsPerSecond(RANDOM_READS, 1, () => router.read(h, randomInt(0, size / 4096) * 4096, 4096));
        const rand16 = await opsPerSecond(RANDOM_READS, 16, () => router.read(h, randomInt(0, size / 4096) * 4096, 4096));
        await router.release(h);
        rows.push({ what: `${mode}: random 4 KiB reads, 1 in flight`, unit: 'ops/s', remote: rand1, local: localRand1 });
        rows.push({ what: `${mode}: random 4 KiB reads, 16 in flight`, unit: 'ops/s', remote: rand16, local: localRand16 });
        const tree = await (async () => {
          const t0 = performance.now();
          const paths: string[] = [];
          for (const d of await router.readdirAll('/w/tree'))
            for (const f of await router.readdirAll(`/w/tree/${d.name}`)) paths.push(`/w/tree/${d.name}/${f.name}`);
          let i = 0;
          await Promise.all(
            Array.from({ length: 32 }, async () => {
              while (i < paths.length) await router.getattr(paths[i++]);
            }),
          );
          return (paths.length + dirs + 1) / ((performance.now() - t0) / 1000);
        })();
        rows.push({
          what: `${mode}: readdir + getattr over ${TREE_FILES} files (32 in flight)`,
          unit: 'ops/s',
          remote: tree,
          local: localTree,
          note: 'ops = entries',
        });
      } finally {
        router.close();
      }
    }

    if (tlsNode && typeof tls !== 'string') {
      // The TLS cost on sequential read, apart and without process start-up: the file read
      // through a router in this process the way `svc-fs-mount cat` reads (1 MiB reads, 8 in
      // flight), plain and TLS runs alternated so both see the same page cache and load.
      process.stderr.write(`TLS cost: ${TLS_RUNS} plain and ${TLS_RUNS} TLS sequential reads in process, alternated\n`);
      const clientTls = loadClientTls(tls.ca);
      const open = async (url: string, secure: boolean) => {
        const r = new WorkspaceRouter(new StaticTopologySource([parseEndpointSpec(`w=${url}`)]), {
          binary: true,
          connect: (o) => FsClient.connect({ ...o, tls: secure ? clientTls : undefined }),
        });
        await r.start();
        return r;
      };
      const routers = { plain: await open(node.url, false), tls: await open(tlsNode.url, true) };
      try {
        const speeds = { plain: [] as number[], tls: [] as number[] };
        for (let i = 0; i < TLS_RUNS; i++) {
          for (const kind of ['plain', 'tls'] as const) speeds[kind].push(await sequentialRead(routers[kind], '/w/seq-binary.bin', size));
        }
        const plain = median(speeds.plain);
        const secure = median(speeds.tls);
        tlsCost =
          `TLS cost on sequential read (binary path, ${FILE_MIB} MiB in process as svc-fs-mount cat reads, medians of ${TLS_RUNS} alternated runs): ` +
          `plain ${plain.toFixed(0)} MB/s, TLS ${secure.toFixed(0)} MB/s: ${(((plain - secure) / plain) * 100).toFixed(1)} % slower (target <= 25 %)`;
      } finally {
        routers.plain.close();
        routers.tls.close();
      }
    }
  } finally {
    tlsNode?.stop();
    node.stop();
    rmSync(base, { recursive: true, force: true });
  }

  const header = ['measurement', 'unit', 'svc-fs-mount', 'local disk', 'ratio'];
  const body = rows.map((r) => [
    r.what,
    r.unit,
    Number.isNaN(r.remote) ? 'n/a' : r.remote.toFixed(0),
    r.local.toFixed(0),
    Number.isNaN(r.remote) ? 'n/a' : `${((r.remote / r.local) * 100).toFixed(1)} %`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => (i >= 2 ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join('  ');
  process.stdout.write(`\nsvc-fs-mount over loopback, ${FILE_MIB} MiB file, ${TREE_FILES}-file tree (MB = 10^6 bytes)\n\n`);
  process.stdout.write(`${line(header)}\n${body.map(line).join('\n')}\n`);
  if (tlsCost) process.stdout.write(`\n${tlsCost}\n`);
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${(e as Error).message}\n`);
  process.exit(1);
});
