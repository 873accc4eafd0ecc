/**
 * Starting, timing and stopping programs, for every bench: the built `svc`, `svc-fs-node` and
 * `svc-fs-mount` (their paths: `BIN` of test/support/processes.ts) and the commands a bench runs
 * beside them. Everything listens on and connects to 127.0.0.1 only.
 */
import { ChildProcess, spawn } from 'node:child_process';
import { closeSync, existsSync, openSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { BIN, sleep } from '../test/support/processes';

/** Writes one line to stderr (the benches' progress log; their figures go to stdout). */
export function log(text: string): void {
  process.stderr.write(`${text}\n`);
}

/**
 * The words of the environment variable `name` (split at white space), e.g. extra Node.js flags
 * from `BENCH_SERVER_NODE_ARGS='--cpu-prof --cpu-prof-dir=/tmp/p'`.
 * @returns [] when it is unset or blank
 */
export function envWords(name: string): string[] {
  return (process.env[name] ?? '').split(/\s+/).filter(Boolean);
}

/**
 * Waits for `proc` to exit. Never rejects.
 * @param ms how long to wait, ms
 * @returns its exit code (-1 when killed by a signal; at once when it already exited), or null when it still runs after `ms`
 */
export function exitOf(proc: ChildProcess, ms: number): Promise<number | null> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve(proc.exitCode ?? -1);
  return new Promise((res) => {
    const t = setTimeout(() => res(null), ms);
    proc.once('exit', (c) => {
      clearTimeout(t);
      res(c ?? -1);
    });
  });
}

/**
 * Stops `proc` when it still runs: SIGTERM, then SIGKILL when it has not exited after `graceMs`
 * (and waits up to 2 s more for that). Never rejects.
 * @param graceMs how long SIGTERM may take, ms
 */
export async function stopProcess(proc: ChildProcess, graceMs: number): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  proc.kill('SIGTERM');
  if ((await exitOf(proc, graceMs)) === null) {
    proc.kill('SIGKILL');
    await exitOf(proc, 2000);
  }
}

/** How {@link startUntil} starts a Node.js program. */
export interface StartOptions {
  /** Extra Node.js flags before the program, e.g. `--cpu-prof`. */
  nodeFlags?: string[];
  /** Give up (stop the program and reject) when the pattern has not appeared after this many ms; default: wait as long as it runs. */
  timeoutMs?: number;
  /**
   * The program's stderr: `inherit` writes it to this process's stderr as it comes (`stderr()`
   * then gives ''); a number keeps that many of its last characters for `stderr()` and the
   * errors. Default 65,536: enough for a crash's stack, bounded for a long-running server.
   */
  stderr?: 'inherit' | number;
  /** Holds the process from its spawn to its exit (so a clean-up can stop it). */
  track?: Set<ChildProcess>;
}

/** A program {@link startUntil} started. */
export interface Started {
  proc: ChildProcess;
  /** What the pattern matched on stdout. */
  match: RegExpExecArray;
  /** The end of what it wrote to stderr so far (kept up to date while it runs; '' when inherited). */
  stderr: () => string;
}

/**
 * Starts a Node.js program (`process.execPath` with `args`, environment `process.env` plus `env`)
 * and waits until `pattern` appears on its stdout.
 * @throws Error (rejects) when the program exits before, or, with `options.timeoutMs`, when the pattern does not appear in time (the program is then stopped)
 */
export function startUntil(args: string[], pattern: RegExp, env: NodeJS.ProcessEnv = {}, options: StartOptions = {}): Promise<Started> {
  const keep = options.stderr ?? 65_536;
  const proc = spawn(process.execPath, [...(options.nodeFlags ?? []), ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', keep === 'inherit' ? 'inherit' : 'pipe'],
  });
  const track = options.track;
  if (track) {
    track.add(proc);
    proc.once('exit', () => track.delete(proc));
  }
  let out = '';
  let err = '';
  if (keep !== 'inherit') proc.stderr!.setEncoding('utf8').on('data', (d: string) => (err = (err + d).slice(-keep)));
  return new Promise((res, rej) => {
    const timer =
      options.timeoutMs === undefined
        ? null
        : setTimeout(() => {
            void stopProcess(proc, 2000);
            rej(new Error(`${args[0]} did not print ${pattern} within ${options.timeoutMs} ms: ${err.trim()}`));
          }, options.timeoutMs);
    proc.stdout!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = pattern.exec(out);
      if (m) {
        if (timer) clearTimeout(timer);
        res({ proc, match: m, stderr: () => err });
      }
    });
    proc.once('exit', (c, signal) => {
      if (timer) clearTimeout(timer);
      rej(new Error(`${args[0]} exited ${c ?? signal}: ${err.trim()}`));
    });
  });
}

/**
 * Starts a built server program (`svc`, `svc-fs-node`; `args` begin with its script and should
 * hold `--port 0`) and waits for its `listening on <url>` line ({@link startUntil}).
 * @returns the process, the URL it serves (`ws://127.0.0.1:PORT/...`) and its stderr so far
 * @throws Error (rejects) as {@link startUntil}
 */
export async function startListening(
  args: string[],
  env: NodeJS.ProcessEnv = {},
  options: StartOptions = {},
): Promise<{ proc: ChildProcess; url: string; stderr: () => string }> {
  const { proc, match, stderr } = await startUntil(args, /listening on (\S+)/, env, options);
  return { proc, url: match[1], stderr };
}

/**
 * Starts the built `svc-fs-node` on a free loopback port (`--port 0`, no auth token, log level
 * warn) with `args`, e.g. `['--export', 'work=/dir']`.
 * @param env extra environment, e.g. `{ SVC_METRICS_PORT: '9100' }`
 * @returns the process, the URL it serves (`ws://127.0.0.1:PORT/...`) and its stderr so far
 * @throws Error (rejects) when it exits before listening, or after `options.timeoutMs`
 */
export async function startFsNode(
  args: string[],
  env: NodeJS.ProcessEnv = {},
  options: StartOptions = {},
): Promise<{ proc: ChildProcess; url: string; stderr: () => string }> {
  return startListening([BIN.fsNode, '--port', '0', ...args], { SVC_LOG_LEVEL: 'warn', SVC_FS_NODE_AUTH_TOKEN: '', ...env }, options);
}

/** The admin role token {@link startBenchSvc} gives `svc`. */
export const BENCH_ADMIN_TOKEN = 'bench-admin-token-0123456789';
/** The user role token {@link startBenchSvc} gives `svc`. */
export const BENCH_USER_TOKEN = 'bench-user-token-0123456789';

/**
 * Starts the built `svc` on a free loopback port (`--port 0`) with the state directory
 * `stateDir`, the role tokens {@link BENCH_ADMIN_TOKEN} and {@link BENCH_USER_TOKEN}, log level
 * warn (its log written to this process's stderr unless `options.stderr` says otherwise) and the
 * Node.js flags of BENCH_SERVER_NODE_ARGS.
 * @param env more environment (e.g. `SVC_DATABASE_URL`), over the above
 * @returns the process and the URL it serves (`ws://127.0.0.1:PORT/`)
 * @throws Error (rejects) as {@link startUntil}
 */
export function startBenchSvc(
  stateDir: string,
  env: NodeJS.ProcessEnv = {},
  options: StartOptions = {},
): Promise<{ proc: ChildProcess; url: string; stderr: () => string }> {
  return startListening(
    [BIN.svc, '--port', '0', '--state-dir', stateDir],
    { SVC_ADMIN_TOKEN: BENCH_ADMIN_TOKEN, SVC_USER_TOKEN: BENCH_USER_TOKEN, SVC_LOG_LEVEL: 'warn', ...env },
    { nodeFlags: envWords('BENCH_SERVER_NODE_ARGS'), stderr: 'inherit', ...options },
  );
}

/** Where {@link timedRun} connects the command and how long it may take. */
export interface RunOptions {
  cwd?: string;
  /** File read as stdin; default: none. */
  stdin?: string;
  /** File written as stdout; default /dev/null. */
  stdout?: string;
  /** Kill the command (SIGKILL) and reject after this many ms; default: no limit. */
  timeoutMs?: number;
  /** Holds the command's process while it runs (so a clean-up can stop it). */
  track?: Set<ChildProcess>;
}

/**
 * Runs a command (not through a shell) with stdin/stdout connected to files (or ignored).
 * @returns its wall time in s, from spawn to exit
 * @throws Error (rejects) when it cannot start, exits non-zero (with its stderr), or outlasts `options.timeoutMs`
 */
export function timedRun(cmd: string, args: string[], options: RunOptions = {}): Promise<number> {
  return new Promise((res, rej) => {
    const inFd = options.stdin ? openSync(options.stdin, 'r') : 'ignore';
    const outFd = openSync(options.stdout ?? '/dev/null', 'w');
    const t0 = performance.now();
    const p = spawn(cmd, args, { cwd: options.cwd, stdio: [inFd, outFd, 'pipe'] });
    options.track?.add(p);
    if (typeof inFd === 'number') closeSync(inFd);
    closeSync(outFd);
    let err = '';
    let timedOut = false;
    const timer =
      options.timeoutMs === undefined
        ? null
        : setTimeout(() => {
            timedOut = true;
            p.kill('SIGKILL');
          }, options.timeoutMs);
    p.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
    p.once('error', (e) => {
      if (timer) clearTimeout(timer);
      options.track?.delete(p);
      rej(e);
    });
    p.once('exit', (code) => {
      if (timer) clearTimeout(timer);
      options.track?.delete(p);
      if (timedOut) rej(new Error(`${cmd} did not finish within ${options.timeoutMs} ms (killed): ${err.trim()}`));
      else if (code === 0) res((performance.now() - t0) / 1000);
      else rej(new Error(`${cmd} ${args.join(' ')} exited ${code}: ${err.trim()}`));
    });
  });
}

/**
 * Resolves once 127.0.0.1:`port` accepts a TCP connection.
 * @param ms how long to try, ms
 * @param stderr what `proc` wrote so far, for the error message
 * @throws Error (rejects) when `proc` exits first or after `ms`
 */
export async function waitForPort(port: number, ms: number, proc: ChildProcess, what: string, stderr: () => string): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`${what} exited ${proc.exitCode ?? proc.signalCode}: ${stderr().trim()}`);
    const ok = await new Promise<boolean>((res) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        res(true);
      });
      s.once('error', () => res(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`${what} does not accept connections on port ${port} after ${ms} ms: ${stderr().trim()}`);
    await sleep(50);
  }
}

/**
 * Path of an executable on PATH or in the sbin directories. Never throws.
 * @returns the path, or null when there is none
 */
export function which(name: string): string | null {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/sbin', '/usr/local/sbin']) {
    if (dir && existsSync(join(dir, name))) return join(dir, name);
  }
  return null;
}
