/**
 * Helpers for e2e tests that drive real tools through real FUSE mounts of a workspace: run a
 * program without blocking the test process, skip a case whose tools are not installed, start
 * `svc-fs-mount mount` processes (every one recorded in {@link started}, for afterAll).
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, cleanupTmp, killAll, tmpDir, waitFor } from '../support/processes';
import { fuseUnavailable, killMount } from './fs-mount';
import type { Workspace } from './workspace';

const installed = new Map<string, boolean>();

/** True when `tool` is a command found on the PATH (`command -v`); the answer is kept per tool. */
export function has(tool: string): boolean {
  if (!installed.has(tool)) {
    let found = true;
    try {
      execFileSync('sh', ['-c', 'command -v "$1"', 'sh', tool], { stdio: 'ignore', timeout: 5000 });
    } catch {
      found = false;
    }
    installed.set(tool, found);
  }
  return installed.get(tool)!;
}

/** Why FUSE mounts cannot be tested here ({@link fuseUnavailable}), asked once; null when they can. */
let fuseReason: string | null | undefined;
function fuseSkipReason(): string | null {
  if (fuseReason === undefined) fuseReason = fuseUnavailable();
  return fuseReason;
}

/**
 * `it`, or `it.skip` when one of `tools` is not installed; the skip is printed as
 * `<suite> e2e: skipped "<name>": <tools> not installed`, unless FUSE is unavailable (then the
 * whole suite is skipped and says so itself).
 * @param suite the suite's short name, for the skip message (e.g. `exact-writes`)
 * @param tools commands the case runs (looked up on the PATH)
 * @param timeoutMs the case's timeout, ms
 */
export function itWith(suite: string, tools: string[], name: string, fn: () => Promise<void>, timeoutMs: number): void {
  const missing = tools.filter((t) => !has(t));
  if (missing.length > 0 && !fuseSkipReason()) {
    process.stdout.write(`${suite} e2e: skipped "${name}": ${missing.join(', ')} not installed\n`);
    it.skip(name, fn, timeoutMs);
    return;
  }
  it(name, fn, timeoutMs);
}

/** How a program {@link run} started ended, and what it printed. */
export interface Ran {
  /** Exit code; null when it was ended by a signal or could not be started. */
  code: number | null;
  signal: NodeJS.Signals | null;
  /** True when {@link run} killed it after its timeout. */
  timedOut: boolean;
  stdout: string;
  /** Standard error; the spawn error's message is appended when it could not be started. */
  stderr: string;
}

/**
 * Runs a program to completion without blocking the test process (its own process group,
 * killed with SIGKILL after `timeoutMs`).
 * @param options.cwd working directory
 * @param options.env variables added to this process's environment
 * @param options.input bytes or text written to standard input, which is then closed (default: nothing)
 * @param options.timeoutMs ms before the whole process group is killed (default 60,000)
 */
export function run(
  cmd: string,
  args: string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv; input?: Buffer | string; timeoutMs?: number } = {},
): Promise<Ran> {
  return new Promise((resolve) => {
    const env = options.env ? { ...process.env, ...options.env } : undefined;
    const proc = spawn(cmd, args, { cwd: options.cwd, env, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    proc.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    proc.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-proc.pid!, 'SIGKILL');
      } catch {
        proc.kill('SIGKILL');
      }
    }, options.timeoutMs ?? 60_000);
    proc.once('error', (e) => {
      clearTimeout(timer);
      resolve({ code: null, signal: null, timedOut, stdout, stderr: `${stderr}${e.message}` });
    });
    proc.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, timedOut, stdout, stderr });
    });
    proc.stdin.on('error', () => undefined);
    proc.stdin.end(options.input ?? '');
  });
}

/** The last `n` characters of `s` (default 2,000), with `...` before them when `s` is longer. */
export const tail = (s: string, n = 2000) => (s.length > n ? `...${s.slice(-n)}` : s);

/** The standard output of a run that must succeed (exit code 0); otherwise an error with its output. */
export function ok(r: Ran, what: string): string {
  if (r.code !== 0) {
    const how = r.timedOut ? 'was killed after its timeout' : `exited with ${r.code ?? r.signal}`;
    throw new Error(`${what} ${how}\nstdout: ${tail(r.stdout)}\nstderr: ${tail(r.stderr)}`);
  }
  return r.stdout;
}

/** `python3 -c script ...args` with {@link run}; `timeoutMs` default 60,000. */
export const python = (script: string, args: string[], timeoutMs = 60_000) => run('python3', ['-c', script, ...args], { timeoutMs });

/** A `svc-fs-mount mount` process {@link startMount} started. */
export interface Mount {
  /** The mount point (absolute path, `<temp dir>/ws`). */
  dir: string;
  proc: ChildProcess;
  /** The file its standard output and standard error go to. */
  log: string;
}

/** Every mount process started, also one that never said it was mounted: end them in afterAll (killMount). */
export const started: Mount[] = [];

/**
 * `svc-fs-mount ... mount <dir>` of workspace `ws` with the options of fuse.e2e-spec, on a new
 * mount point; its output goes to `<logDir>/<name>.log`, so a mount logging while a test waits
 * can never block on a full pipe; `extraArgs` are options of `mount` (e.g. `--allow-other`).
 * Resolves once it says it is mounted (within 20 s).
 * @throws Error with its output when it did not say so in time
 */
export async function startMount(ws: Pick<Workspace, 'mountArgs'>, logDir: string, name: string, extraArgs: string[] = []): Promise<Mount> {
  const dir = join(tmpDir(`${name}-`), 'ws');
  mkdirSync(dir);
  const log = join(logDir, `${name}.log`);
  const fd = openSync(log, 'a');
  const proc = spawn(process.execPath, [BIN.fsMount, ...ws.mountArgs, 'mount', ...extraArgs, dir], { stdio: ['ignore', fd, fd] });
  closeSync(fd);
  started.push({ dir, proc, log });
  await waitFor(() => readFileSync(log, 'utf8').includes(`mounted on ${dir}`), 20_000).catch((e) => {
    throw new Error(`${(e as Error).message}\n${name} output: ${readFileSync(log, 'utf8')}`);
  });
  return { dir, proc, log };
}

/**
 * Ends what a mount suite started, for its afterAll: every mount in {@link started} (unmounted
 * lazily), the workspace `ws`, every process, and the temporary directories.
 */
export async function endMounts(ws: Workspace | undefined): Promise<void> {
  for (const m of started.splice(0)) killMount(m.proc, m.dir);
  ws?.close();
  await killAll();
  cleanupTmp();
}
