/**
 * Starting the built programs as real processes, for the e2e tests and the benches that drive
 * whole programs (bench/faults.bench.ts); temporary directories and free ports for them.
 */
import { ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

/**
 * The repository root: the nearest directory above this file with a package.json (this file
 * runs from test/support/ under ts-jest and from dist/test/support/ once built).
 */
function repositoryRoot(): string {
  for (let dir = __dirname; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) throw new Error(`no package.json above ${__dirname}`);
  }
}

/** The repository root, an absolute path. */
export const ROOT = repositoryRoot();
/** The built programs: absolute paths of their `main.js` under dist/ (`npm run build` makes them). */
export const BIN = {
  svc: join(ROOT, 'dist/src/main.js'),
  control: join(ROOT, 'dist/apps/svc-control/src/main.js'),
  fsNode: join(ROOT, 'dist/apps/svc-fs-node/src/main.js'),
  fsMount: join(ROOT, 'dist/apps/svc-fs-mount/src/main.js'),
};

/** The directories {@link tmpDir} made, not removed yet. */
const tmpDirs: string[] = [];
/** A new temporary directory `<OS temp dir>/<prefix>XXXXXX`, removed by {@link cleanupTmp}. */
export function tmpDir(prefix = 'svc-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tmpDirs.push(dir);
  return dir;
}
/** Removes every directory {@link tmpDir} made (call in afterAll). */
export function cleanupTmp(): void {
  for (const d of tmpDirs.splice(0)) rmSync(d, { recursive: true, force: true });
}

/** A program {@link startProcess} started, once it listens. */
export interface Running {
  proc: ChildProcess;
  /** The WebSocket URL printed on stdout. */
  url: string;
  /** Ops HTTP base URL (when SVC_METRICS_PORT was set), from the log. */
  opsUrl: string | null;
  stdout(): string;
  stderr(): string;
  /** Resolves with the exit code (or signal) when the process ends. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGTERM and wait. */
  stop(): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGKILL and wait. */
  kill(): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const running = new Set<ChildProcess>();

/** Kills every process started by the helpers (call in afterAll). */
export async function killAll(): Promise<void> {
  const all = [...running];
  await Promise.all(
    all.map(
      (p) =>
        new Promise<void>((r) => {
          if (p.exitCode !== null || p.signalCode !== null) return r();
          p.once('exit', () => r());
          p.kill('SIGKILL');
        }),
    ),
  );
}

/**
 * Spawns `node <script> ...args` and waits for its `listening on <url>` line.
 * @param user run it as this uid and gid (the test process must be root), without supplementary groups
 * @throws Error with the process's stderr when it exits first or does not listen in time
 */
export function startProcess(
  script: string,
  args: string[],
  env: NodeJS.ProcessEnv = {},
  timeoutMs = 20_000,
  user?: { uid: number; gid: number },
): Promise<Running> {
  const proc = spawn(process.execPath, [script, ...args], {
    env: { ...process.env, SVC_LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(user ? { uid: user.uid, gid: user.gid } : {}),
  });
  running.add(proc);
  let out = '';
  let err = '';
  proc.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  proc.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    proc.once('exit', (code, signal) => {
      running.delete(proc);
      r({ code, signal });
    }),
  );
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${script} did not listen within ${timeoutMs} ms\nstdout:${out}\nstderr:${err}`));
    }, timeoutMs);
    const check = () => {
      const m = /listening on (\S+)/.exec(out);
      if (!m) return;
      clearTimeout(timer);
      proc.stdout.off('data', check);
      const ops = /"msg":"ops endpoints listening","url":"([^"]+)"/.exec(err);
      resolvePromise({
        proc,
        url: m[1],
        opsUrl: ops ? ops[1] : null,
        stdout: () => out,
        stderr: () => err,
        exited,
        stop: () => {
          proc.kill('SIGTERM');
          return exited;
        },
        kill: () => {
          proc.kill('SIGKILL');
          return exited;
        },
      });
    };
    proc.stdout.on('data', check);
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`${script} exited (${code ?? signal}) before listening\nstdout:${out}\nstderr:${err}`));
    });
  });
}

/** The admin role token {@link startSvc} gives `svc`. */
export const ADMIN_TOKEN = 'test-admin-token-0123456789abcdef';
/** The user role token {@link startSvc} gives `svc`. */
export const USER_TOKEN = 'test-user-token-0123456789abcdef';

let storeEnv: (() => Promise<NodeJS.ProcessEnv>) | null = null;

/**
 * Makes every later {@link startSvc} without a `stateDir` run on the store `fn` names by its
 * environment (e.g. `SVC_DATABASE_URL` of a new PostgreSQL database); null: the embedded store.
 */
export function useStoreEnv(fn: (() => Promise<NodeJS.ProcessEnv>) | null): void {
  storeEnv = fn;
}

/** Starts `svc` on a free port with known role tokens; `stateDir` defaults to a fresh temp dir. */
export async function startSvc(options: { stateDir?: string; env?: NodeJS.ProcessEnv; args?: string[] } = {}): Promise<Running & { stateDir: string }> {
  const store = !options.stateDir && storeEnv ? await storeEnv() : {};
  const stateDir = options.stateDir ?? tmpDir('svc-state-');
  const r = await startProcess(BIN.svc, ['--port', '0', '--state-dir', stateDir, ...(options.args ?? [])], {
    SVC_ADMIN_TOKEN: ADMIN_TOKEN,
    SVC_USER_TOKEN: USER_TOKEN,
    ...store,
    ...options.env,
  });
  return { ...r, stateDir };
}

/**
 * Starts an `svc-fs-node` daemon of node `name` exporting `<dir>/work` (made when missing) as
 * `work`, against the control plane at `controlUrl`, keeping its state in `<dir>/state.json` (so
 * a restart is the same node), with the admin token ({@link ADMIN_TOKEN} as SVC_AUTH_TOKEN);
 * resolves once it listens.
 * @param args more flags (e.g. `--invite-token TOKEN` for the first start)
 * @param env more environment
 * @throws Error when the daemon exits before it listens
 */
export function startNodeDaemon(dir: string, controlUrl: string, name: string, args: string[] = [], env: NodeJS.ProcessEnv = {}): Promise<Running> {
  mkdirSync(join(dir, 'work'), { recursive: true });
  const flags = [
    '--port',
    '0',
    '--export',
    `work=${join(dir, 'work')}`,
    '--control-url',
    controlUrl,
    '--state-file',
    join(dir, 'state.json'),
    '--node-name',
    name,
  ];
  return startProcess(BIN.fsNode, [...flags, ...args], { SVC_AUTH_TOKEN: ADMIN_TOKEN, ...env });
}

/** Runs a CLI to completion. */
export function runCli(
  script: string,
  args: string[],
  options: { env?: NodeJS.ProcessEnv; input?: string; timeoutMs?: number } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolvePromise) => {
    const proc = spawn(process.execPath, [script, ...args], { env: { ...process.env, ...options.env }, stdio: ['pipe', 'pipe', 'pipe'] });
    running.add(proc);
    let stdout = '';
    let stderr = '';
    proc.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    proc.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => proc.kill('SIGKILL'), options.timeoutMs ?? 30_000);
    proc.once('exit', (code) => {
      clearTimeout(timer);
      running.delete(proc);
      resolvePromise({ code, stdout, stderr });
    });
    proc.stdin.end(options.input ?? '');
  });
}

/**
 * A free TCP port on 127.0.0.1 (free when asked; the caller binds it soon after).
 * @throws Error (rejects) when no port can be bound
 */
export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => res(port));
    });
  });
}

/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What is left of `T` once the falsy values are taken out: what `waitFor` can return. */
export type Truthy<T> = Exclude<T, false | 0 | 0n | '' | null | undefined>;

/** Polls `fn` until it returns a truthy value (resolved with it) or `timeoutMs` passes. */
export async function waitFor<T>(fn: () => T | Promise<T>, timeoutMs = 5000, intervalMs = 50): Promise<Truthy<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v as Truthy<T>;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms${last ? `: ${(last as Error).message}` : ''}`);
    await sleep(intervalMs);
  }
}
