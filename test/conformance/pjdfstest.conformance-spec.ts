/**
 * pjdfstest, the POSIX filesystem conformance suite vendored beside this file, through real FUSE
 * mounts. A step of `npm test` of its own, after the jest suite (jest.conformance.config.js;
 * alone: `npm run test:conformance`).
 *
 * The suite is unpacked and built in a temporary directory ({@link buildPjdfstest}), then every test file runs, {@link PARALLEL} at a time, on three directories
 * at once, all on the filesystem of the temporary directory:
 * - `local`: a directory of that filesystem itself, the baseline;
 * - `root node`: a mount (`--allow-other`) of an `svc-fs-node` running as root;
 * - `user node`: a mount of an `svc-fs-node` running as an ordinary user ({@link NODE_USER}),
 *   which owns everything it makes and says `caps.identity: "node"`.
 * Each test file runs as its own `/bin/sh FILE` process with the mount's directory as working
 * directory (as `prove -r` runs it), and its TAP output is read per file. pjdfstest runs some
 * checks only on filesystems it knows (the ctime of a rename: ext4, UFS, ZFS); on the mounts it
 * is told the filesystem is the node's (`PJDFSTEST_FS`), since the node's filesystem is what
 * the mount serves.
 *
 * Asserted:
 * - root node: every assertion that passes on the local filesystem passes through the mount;
 * - user node: every assertion that fails through the mount and passes locally is one of those
 *   that need another identity, listed in pjdfstest-node-user-failures.txt; and in each test
 *   file with failures the first one is a step that needs another identity (a step run as
 *   another user or group, a change of owner, a block or character device, an owner or
 *   set-ID bit read back), so the rest of that file failed because of it.
 *
 * Skipped with the reason printed when FUSE is unavailable, when not run as root (pjdfstest
 * changes owners and runs steps as other users), or when autoreconf, make, a C compiler or
 * perl's prove is missing (`.ci/run` installs them).
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fuseUnavailable, killMount } from '../helpers/fs-mount';
import { startFsNode } from '../helpers/fs-peer';
import { has, Mount, run, startMount } from '../helpers/mount-tools';
import { buildPjdfstest, compactRanges, expandRanges, fsTypeOf } from '../support/pjdfstest';
import { killAll, ROOT, Running, tmpDir } from '../support/processes';

const SUITE = 'pjdfstest';
const USER_FAILURES = join(ROOT, 'test', 'conformance', 'pjdfstest-node-user-failures.txt');
/** The ordinary user the second node runs as (pjdfstest itself steps as 65531..65534). */
const NODE_USER = { uid: 54321, gid: 54321 };
/** Test files run at once on each directory (the three directories run at once too). */
const PARALLEL = 3;
/** Longest a test file may run, ms. */
const FILE_TIMEOUT_MS = 300_000;

/**
 * A failed step that needs another identity than the node's: run as another user or group
 * (`-u`, `-g`), a change of owner (`chown`/`lchown` other than `-1 -1`), a block or character
 * device, or an owner or set-ID bit read back.
 */
const IDENTITY_STEP = /^tried '(-u \d|-g \d|(?:-- )?l?chown \S+ (?!-1 -1')|mknod \S+ [bc] |.*\b(uid|gid)\b|(l?stat) \S+ mode'.*expected 0?[2467]\d{3})/;

/** What one test file printed: its plan and each assertion's outcome. */
interface FileResult {
  /** The plan (`1..N`), or 0 when it printed none. */
  plan: number;
  /** Assertions that passed: `ok N`, or `not ok N # TODO` (a failure pjdfstest expects on this OS). */
  passed: Set<number>;
  /** Failed assertions and what each says (`tried '...', expected X, got Y`). */
  failed: Map<number, string>;
  /** Why the file ended badly (timeout, signal, exit status without a plan), or null. */
  problem: string | null;
}

type Results = Map<string, FileResult>;

/** Reads the TAP output of one test file. */
function parseTap(out: string): FileResult {
  const r: FileResult = { plan: 0, passed: new Set(), failed: new Map(), problem: null };
  for (const line of out.split('\n')) {
    const plan = /^1\.\.(\d+)/.exec(line);
    if (plan) r.plan = Number(plan[1]);
    const tap = /^(not )?ok (\d+)\b(?: - )?(.*)$/.exec(line);
    if (!tap) continue;
    const n = Number(tap[2]);
    if (!tap[1] || /#\s*TODO/i.test(tap[3])) r.passed.add(n);
    else r.failed.set(n, tap[3].trim());
  }
  // Assertions of the plan that never printed (the file died) failed.
  for (let n = 1; n <= r.plan; n++) if (!r.passed.has(n) && !r.failed.has(n)) r.failed.set(n, 'did not run');
  return r;
}

/** Runs `/bin/sh file` in `cwd` (as prove would); resolves with its TAP results (never rejects). */
async function runFile(file: string, cwd: string, env: NodeJS.ProcessEnv): Promise<FileResult> {
  const r = await run('/bin/sh', [file], { cwd, env, timeoutMs: FILE_TIMEOUT_MS });
  const result = parseTap(r.stdout);
  result.problem = r.timedOut ? `killed after ${FILE_TIMEOUT_MS} ms` : r.signal ? `ended by ${r.signal}` : result.plan === 0 ? 'printed no plan' : null;
  return result;
}

/** Runs every test file in `files` (paths under `testsDir`), {@link PARALLEL} at a time, in `cwd`. */
async function runAll(files: string[], testsDir: string, cwd: string, env: NodeJS.ProcessEnv): Promise<Results> {
  const results: Results = new Map();
  let next = 0;
  const worker = async () => {
    while (next < files.length) {
      const file = files[next++];
      results.set(relative(testsDir, file), await runFile(file, cwd, env));
    }
  };
  await Promise.all(Array.from({ length: PARALLEL }, worker));
  return results;
}

/** Every `*.t` file under `dir`, sorted. */
function testFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...testFiles(p));
    else if (e.name.endsWith('.t')) out.push(p);
  }
  return out.sort();
}

/** pjdfstest-node-user-failures.txt: test file -> the assertion numbers listed. */
function readList(path: string): Map<string, Set<number>> {
  const list = new Map<string, Set<number>>();
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    if (line.trim() === '' || line.startsWith('#')) continue;
    const m = /^(\S+\.t)\s+(.+)$/.exec(line);
    if (!m) throw new Error(`${path}: not "<file> <ranges>": ${line}`);
    list.set(m[1], new Set(expandRanges(m[2])));
  }
  return list;
}

/** Assertions passed over assertions planned, for the summary. */
function tally(results: Results): string {
  let passed = 0;
  let planned = 0;
  for (const r of results.values()) {
    passed += r.passed.size;
    planned += r.plan;
  }
  return `${passed.toLocaleString('en-US')} / ${planned.toLocaleString('en-US')}`;
}

/** pjdfstest's long paths cut to their length, for messages. */
const shorten = (msg: string) => msg.replace(/[^\s']{61,}/g, (w) => `<${w.length} chars>`);

/**
 * The assertions that pass in `base` and not in `other`, as `file n: message` lines (at most
 * `max`, then a count), with those `allowed` left out.
 */
function regressions(base: Results, other: Results, allowed: Map<string, Set<number>> = new Map()): string[] {
  const out: string[] = [];
  for (const [file, b] of base) {
    const o = other.get(file);
    for (const n of b.passed) {
      if (o?.passed.has(n) || allowed.get(file)?.has(n)) continue;
      out.push(`${file} ${n}: ${o ? shorten(o.failed.get(n) ?? 'did not run') : 'the file did not run'}${o?.problem ? ` (${o.problem})` : ''}`);
    }
  }
  return out;
}

function unavailable(): string | null {
  const fuse = fuseUnavailable();
  if (fuse) return `FUSE is not available here: ${fuse}`;
  if (process.getuid?.() !== 0) return 'not root (pjdfstest changes owners and runs steps as other users)';
  const missing = ['autoreconf', 'make', 'cc', 'prove', 'tar'].filter((t) => !has(t));
  if (missing.length > 0) return `${missing.join(', ')} not installed (Debian: autoconf automake gcc make perl tar)`;
  return null;
}

const reason = unavailable();
if (reason) process.stdout.write(`${SUITE}: skipped: ${reason}\n`);
const describeIf = reason ? describe.skip : describe;

describeIf('pjdfstest through the mount', () => {
  const mounts: Mount[] = [];
  const nodes: Running[] = [];
  let base: string;
  let results: { local: Results; root: Results; user: Results };

  beforeAll(async () => {
    base = tmpDir('svc-pjdfstest-');
    // Other users (pjdfstest's -u steps, the user node) pass through; mkdtemp makes it 0700.
    chmodSync(base, 0o755);
    const build = join(base, 'build');
    mkdirSync(build);
    const testsDir = buildPjdfstest(build);
    const files = testFiles(testsDir);

    const local = join(base, 'local');
    const rootExport = join(base, 'root-export');
    const userExport = join(base, 'user-export');
    for (const d of [local, rootExport, userExport]) mkdirSync(d, { mode: 0o755 });
    chownSync(userExport, NODE_USER.uid, NODE_USER.gid);
    const fsType = fsTypeOf(local);

    const rootNode = await startFsNode([`work=${rootExport}`], { env: { SVC_LOG_LEVEL: 'warn' } });
    const userNode = await startFsNode([`work=${userExport}`], { env: { SVC_LOG_LEVEL: 'warn' }, user: NODE_USER });
    nodes.push(rootNode, userNode);
    const logs = join(base, 'logs');
    mkdirSync(logs);
    for (const [name, node] of [
      ['root-node', rootNode],
      ['user-node', userNode],
    ] as const) {
      const m = await startMount({ mountArgs: ['--endpoint', `w=${node.url}`] }, logs, name, ['--allow-other']);
      chmodSync(dirname(m.dir), 0o755);
      mounts.push(m);
      mkdirSync(join(m.dir, 'w', 'pjd'), { mode: 0o755 });
    }
    expect(statSync(join(userExport, 'pjd')).uid).toBe(NODE_USER.uid);

    const t0 = Date.now();
    const [l, r, u] = await Promise.all([
      runAll(files, testsDir, local, {}),
      runAll(files, testsDir, join(mounts[0].dir, 'w', 'pjd'), { PJDFSTEST_FS: fsType }),
      runAll(files, testsDir, join(mounts[1].dir, 'w', 'pjd'), { PJDFSTEST_FS: fsType }),
    ]);
    results = { local: l, root: r, user: u };
    process.stdout.write(
      `${SUITE}: ${files.length} test files on ${fsType} in ${Math.round((Date.now() - t0) / 1000)} s: assertions passed: ` +
        `local ${tally(l)}, mount of a root node ${tally(r)}, mount of a user node ${tally(u)}\n`,
    );
  }, 1_500_000);

  afterAll(async () => {
    for (const m of mounts) killMount(m.proc, m.dir);
    for (const n of nodes) await n.kill().catch(() => undefined);
    await killAll();
    // rm(1), not rmSync: pjdfstest leaves nothing, but a failed run may leave paths over PATH_MAX.
    if (base) execFileSync('rm', ['-rf', base]);
  });

  it('runs the whole suite on the local filesystem (the baseline)', () => {
    expect(results.local.size).toBeGreaterThan(200);
    expect([...results.local.values()].reduce((n, r) => n + r.passed.size, 0)).toBeGreaterThan(8000);
  });

  it('passes through a mount of a node running as root every assertion that passes on the node filesystem', () => {
    const lost = regressions(results.local, results.root);
    expect(lost.slice(0, 40).join('\n') + (lost.length > 40 ? `\n... ${lost.length - 40} more` : '')).toBe('');
  });

  it('fails through a mount of a node running as an ordinary user only the assertions that need another identity', () => {
    const listed = readList(USER_FAILURES);
    const unlisted = regressions(results.local, results.user, listed);
    const found = new Map<string, number[]>();
    for (const [file, r] of results.user) {
      const failing = [...r.failed.keys()].filter((n) => results.local.get(file)?.passed.has(n));
      if (failing.length > 0) found.set(file, failing);
    }
    const asList = [...found].map(([file, ns]) => `${file} ${compactRanges(ns)}`).join('\n');
    expect({ unlisted: unlisted.slice(0, 40), count: unlisted.length, run: unlisted.length > 0 ? asList : '' }).toEqual({ unlisted: [], count: 0, run: '' });
    // The first failure of each file is a step that needs another identity; the rest follow from it.
    const firsts = [...found]
      .map(([file, ns]) => ({ file, n: Math.min(...ns), msg: results.user.get(file)!.failed.get(Math.min(...ns))! }))
      .filter((f) => !IDENTITY_STEP.test(f.msg))
      .map((f) => `${f.file} ${f.n}: ${shorten(f.msg)}`);
    expect(firsts).toEqual([]);
  });
});
