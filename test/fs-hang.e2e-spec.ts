/**
 * e2e: a hung node, one that stops answering without closing its connections (`SIGSTOP`), is
 * found by the client's keepalive and deadlines: its reads fail over, or fail, within 5 s.
 *
 * Two real `svc-fs-node`s export different directories as `shared`, both for mount path `/s`
 * (endpoint mode: node A primary, node B standby), so the content tells which one answered.
 * - `SIGSTOP` of A: `cat` of a file not read before, through a FUSE mount whose session to A
 *   is open and through `svc-fs-mount cat`, returns B's content within 5 s of its start;
 * - `SIGSTOP` of A as the only candidate of a mount: EIO within 5 s (every time, not once per
 *   connect timeout), and after `SIGCONT` the same mount serves again without a remount;
 * - `svc-fs-mount status` names the stopped candidate's failure ("no answer ... within N ms").
 * Stopped processes are always continued (finally, afterAll) before being killed. FUSE cases
 * are skipped, with the reason printed, where /dev/fuse or the libfuse 3 binding is missing.
 */
import { ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fuseUnavailable, killMount, runMount, startFsNode } from './helpers/fs-mount';
import { BIN, cleanupTmp, killAll, Running, tmpDir, waitFor } from './support/processes';

/** The bound set for a whole user operation, ms. */
const BOUND_MS = 5000;

const fuseReason = fuseUnavailable();
if (fuseReason) process.stdout.write(`FUSE cases of fs-hang skipped: ${fuseReason}\n`);
const describeFuse = fuseReason ? describe.skip : describe;

let dirA: string;
let dirB: string;
let nodeA: Running;
let nodeB: Running;
const stopped = new Set<Running>();
const mounts: Array<{ proc: ChildProcess; dir: string }> = [];

/** SIGSTOP: the process keeps its sockets (the kernel still accepts connections) but answers nothing. */
function stop(node: Running): void {
  stopped.add(node);
  node.proc.kill('SIGSTOP');
}

function cont(node: Running): void {
  node.proc.kill('SIGCONT');
  stopped.delete(node);
}

/** The same file name with different content on each node: "<name> from A" / "<name> from B". */
function fresh(name: string): string {
  writeFileSync(join(dirA, name), `${name} from A\n`);
  writeFileSync(join(dirB, name), `${name} from B\n`);
  return name;
}

const both = () => ['--endpoint', `p=${nodeA.url}#shared@/s`, '--endpoint', `q=${nodeB.url}#shared@/s`];
const onlyA = () => ['--endpoint', `p=${nodeA.url}#shared@/s`];

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** Runs a program to completion (killed after 30 s), timing it from the spawn. */
function run(cmd: string, args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    p.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => p.kill('SIGKILL'), 30_000);
    p.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - t0 });
    });
  });
}

/** `svc-fs-mount ARGS cat PATH`, as a Run. */
async function mountCat(args: string[], path: string): Promise<Run> {
  const r = await runMount([...args, 'cat', path]);
  return { code: r.code, stdout: r.stdout.toString(), stderr: r.stderr, ms: r.ms };
}

beforeAll(async () => {
  dirA = tmpDir('svc-hang-a-');
  dirB = tmpDir('svc-hang-b-');
  writeFileSync(join(dirA, 'who'), 'A\n');
  writeFileSync(join(dirB, 'who'), 'B\n');
  [nodeA, nodeB] = await Promise.all([startFsNode([`shared=${dirA}`], { name: 'node-a' }), startFsNode([`shared=${dirB}`], { name: 'node-b' })]);
}, 60_000);

afterEach(() => {
  for (const n of [...stopped]) cont(n);
});

afterAll(async () => {
  for (const n of [...stopped]) cont(n);
  for (const m of mounts) killMount(m.proc, m.dir);
  await killAll();
  cleanupTmp();
});

describe('svc-fs-mount cat with a hung node', () => {
  it('SIGSTOP of the primary: cat returns the standby content within 5 s', async () => {
    const name = fresh('cli-failover.txt');
    expect((await mountCat(both(), '/s/who')).stdout).toBe('A\n');
    stop(nodeA);
    try {
      const r = await mountCat(both(), `/s/${name}`);
      process.stdout.write(`fs-hang: svc-fs-mount cat failed over in ${r.ms} ms\n`);
      expect(r).toMatchObject({ code: 0, stdout: `${name} from B\n` });
      expect(r.ms).toBeLessThan(BOUND_MS);
    } finally {
      cont(nodeA);
    }
  }, 30_000);

  it('SIGSTOP of the only node: EIO within 5 s; status names the silence; after SIGCONT cat serves again', async () => {
    const name = fresh('cli-only.txt');
    stop(nodeA);
    try {
      const r = await mountCat(onlyA(), `/s/${name}`);
      process.stdout.write(`fs-hang: svc-fs-mount cat got EIO in ${r.ms} ms\n`);
      expect(r.code).not.toBe(0);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(/^svc-fs-mount: .*no answer from ws:\/\/.* within \d+ ms.* \(errno 5\)\n$/);
      expect(r.ms).toBeLessThan(BOUND_MS);
      const st = await runMount([...both(), '--json', 'status']);
      const probes = JSON.parse(st.stdout.toString()).mounts[0].candidates.map((c: { probe: { ok: boolean; error?: string } }) => c.probe);
      expect(probes[0]).toMatchObject({ ok: false, error: expect.stringMatching(/^no answer from ws:\/\/.* within \d+ ms/) });
      expect(probes[1]).toMatchObject({ ok: true });
    } finally {
      cont(nodeA);
    }
    expect(await mountCat(onlyA(), `/s/${name}`)).toMatchObject({ code: 0, stdout: `${name} from A\n` });
  }, 30_000);
});

describe('deadline flags of svc-fs-mount', () => {
  it('--connect-timeout-ms sets the limit a stopped node is given; contradictory or malformed values exit 2', async () => {
    stop(nodeA);
    try {
      const st = await runMount([...onlyA(), '--connect-timeout-ms', '700', '--json', 'status']);
      expect(st.code).toBe(1);
      const probe = JSON.parse(st.stdout.toString()).mounts[0].candidates[0].probe;
      expect(probe).toMatchObject({ ok: false, error: `no answer from ${nodeA.url} within 700 ms (connect)` });
      expect(probe.ms).toBeGreaterThanOrEqual(650);
      expect(probe.ms).toBeLessThan(2000);
    } finally {
      cont(nodeA);
    }
    const contradictory = await runMount([...onlyA(), '--keepalive-ms', '1000', '--keepalive-timeout-ms', '500', 'cat', '/s/who']);
    expect(contradictory.code).toBe(2);
    expect(contradictory.stderr).toContain('--keepalive-timeout-ms (500) must be larger than --keepalive-ms (1000)');
    const malformed = await runMount([...onlyA(), '--op-deadline-ms', 'soon', 'cat', '/s/who']);
    expect(malformed.code).toBe(2);
    expect(malformed.stderr).toContain('--op-deadline-ms must be an integer from 1 to 3600000 (ms), got "soon"');
    // keepalive off is allowed
    expect((await runMount([...onlyA(), '--keepalive-ms', '0', 'cat', '/s/who'])).stdout.toString()).toBe('A\n');
  }, 30_000);
});

describeFuse('FUSE mount with a hung node', () => {
  /** Mounts the workspace of `args` on a fresh directory; resolves once mounted. */
  async function mount(args: string[]): Promise<{ proc: ChildProcess; dir: string }> {
    const dir = join(tmpDir('svc-hang-mnt-'), 'ws');
    mkdirSync(dir);
    const proc = spawn(process.execPath, [BIN.fsMount, ...args, 'mount', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
    const m = { proc, dir };
    mounts.push(m);
    let out = '';
    let err = '';
    proc.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    proc.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    await waitFor(() => out.includes(`mounted on ${dir}`), 20_000).catch((e) => {
      throw new Error(`${(e as Error).message}\nstdout: ${out}\nstderr: ${err}`);
    });
    return m;
  }

  const isMounted = (dir: string) =>
    readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .some((l) => l.split(' ')[4] === dir);

  it('SIGSTOP of the primary while mounted: cat of a file not read before returns the standby content within 5 s', async () => {
    const m = await mount(both());
    const name = fresh('fuse-failover.txt');
    // the mount's session to A is open and has answered
    expect((await run('cat', [join(m.dir, 's', 'who')])).stdout).toBe('A\n');
    stop(nodeA);
    try {
      const r = await run('cat', [join(m.dir, 's', name)]);
      process.stdout.write(`fs-hang: FUSE cat failed over in ${r.ms} ms\n`);
      expect(r).toMatchObject({ code: 0, stdout: `${name} from B\n` });
      expect(r.ms).toBeLessThan(BOUND_MS);
      // the mount stays on the standby: the next files come at once
      const again = await run('cat', [join(m.dir, 's', fresh('fuse-failover-2.txt'))]);
      expect(again).toMatchObject({ code: 0, stdout: 'fuse-failover-2.txt from B\n' });
      expect(again.ms).toBeLessThan(BOUND_MS);
    } finally {
      cont(nodeA);
    }
  }, 60_000);

  it('SIGSTOP of the only node: EIO within 5 s, every time; after SIGCONT the same mount serves again', async () => {
    const m = await mount(onlyA());
    expect((await run('cat', [join(m.dir, 's', 'who')])).stdout).toBe('A\n');
    const names = [fresh('fuse-only-1.txt'), fresh('fuse-only-2.txt'), fresh('fuse-only-3.txt')];
    stop(nodeA);
    try {
      for (const name of names.slice(0, 2)) {
        const r = await run('cat', [join(m.dir, 's', name)]);
        process.stdout.write(`fs-hang: FUSE cat got ${r.code === 0 ? 'content' : 'an error'} in ${r.ms} ms\n`);
        expect(r.code).not.toBe(0);
        expect(r.stderr).toContain('Input/output error');
        expect(r.ms).toBeLessThan(BOUND_MS);
      }
    } finally {
      cont(nodeA);
    }
    // no remount: the same process, still mounted, serves the node's files again by itself
    const t0 = Date.now();
    const back = await waitFor(
      async () => {
        const r = await run('cat', [join(m.dir, 's', names[2])]);
        return r.code === 0 ? r : undefined;
      },
      15_000,
      200,
    );
    process.stdout.write(`fs-hang: FUSE mount served again ${Date.now() - t0} ms after SIGCONT\n`);
    expect(back.stdout).toBe('fuse-only-3.txt from A\n');
    expect(m.proc.exitCode).toBeNull();
    expect(isMounted(m.dir)).toBe(true);
  }, 60_000);
});
