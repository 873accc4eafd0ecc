/**
 * What the FUSE benches (bench/fuse.bench.ts, bench/mutations.bench.ts) share: starting the built
 * `svc-fs-node` and the `svc-fs-mount ... mount` FUSE mount ({@link startFsNode}, {@link SvcPeer}),
 * the sshfs peer on a private loopback sshd ({@link SshfsPeer}), and the process, mount and
 * timing helpers around them.
 *
 * The sshfs peer: a private `sshd` on a free loopback port (throwaway config, host key, client key
 * and `AuthorizedKeysFile` in a temp dir; `UsePAM no`, `StrictModes no`, `Subsystem sftp
 * internal-sftp`; `/run/sshd` is created when missing, for privilege separation) and an sshfs
 * mount of an export directory through it with
 *   `sshfs -f -p PORT -o IdentityFile=KEY,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,
 *    BatchMode=yes,LogLevel=ERROR USER@127.0.0.1:EXPORT MNT`
 * i.e. sshfs's defaults for everything that affects speed (its own caches on, no kernel_cache);
 * `-f` only keeps sshfs in the foreground as the bench's child, BatchMode/LogLevel only stop ssh
 * from prompting or chattering. When `sshfs` or `sshd` is missing it installs them with `apt-get
 * install -y sshfs openssh-server` when running as root; otherwise it says why there is no peer.
 *
 * Everything listens on and connects to 127.0.0.1 only.
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { closeSync, copyFileSync, existsSync, mkdirSync, openSync, readFileSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { userInfo } from 'node:os';
import { join, resolve } from 'node:path';
import { fuse3Unavailable } from '../libs/fuse3/src/binding';

const ROOT = resolve(__dirname, '..', '..');
/** The built `svc-fs-node` program. */
export const FS_NODE_JS = join(ROOT, 'dist/apps/svc-fs-node/src/main.js');
/** The built `svc-fs-mount` program. */
export const FS_MOUNT_JS = join(ROOT, 'dist/apps/svc-fs-mount/src/main.js');

/** Writes one line to stderr (the benches' progress log; their figures go to stdout). */
export function log(text: string): void {
  process.stderr.write(`${text}\n`);
}

/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Why FUSE cannot be used here: no /dev/fuse, the libfuse 3 binding not built, or no fusermount3.
 * @returns the reason (a phrase), or null when FUSE is usable; never throws
 */
export function fuseUnavailable(): string | null {
  const why = fuse3Unavailable();
  if (why) return why;
  try {
    execFileSync('fusermount3', ['-V'], { stdio: 'ignore' });
  } catch {
    return 'fusermount3 is missing (Debian: apt-get install fuse3)';
  }
  return null;
}

/**
 * Which build of the libfuse 3 binding the mounts load (its path and build time: figures
 * depend on that build). Never throws.
 * @returns a phrase, e.g. `/x/native/fuse3/build/Release/svc_fuse3.node of 2026-01-01T00:00:00.000Z`
 */
export function fuseBindingBuild(): string {
  const built = join(ROOT, 'native', 'fuse3', 'build', 'Release', 'svc_fuse3.node');
  try {
    return `${built} of ${statSync(built).mtime.toISOString()}`;
  } catch (e) {
    return `unknown (${(e as Error).message.split('\n')[0]})`;
  }
}

/**
 * Whether `dir` (an absolute path, no trailing slash) is a mount point, from /proc/self/mountinfo.
 * @throws Error when /proc/self/mountinfo cannot be read
 */
export function mounted(dir: string): boolean {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === dir);
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
  /** Give up (kill the program and reject) when `pattern` has not appeared after this many ms; default: wait as long as it runs. */
  timeoutMs?: number;
}

/**
 * Starts a Node.js program (`process.execPath` with `args`, environment `process.env` plus `env`)
 * and waits until `pattern` appears on its stdout.
 * @returns the running process, the match, and the last 64 KiB it wrote to stderr (kept up to date while it runs)
 * @throws Error (rejects) when the program exits before, or, with `options.timeoutMs`, when the pattern does not appear in time (the program is then killed)
 */
export function startUntil(
  args: string[],
  pattern: RegExp,
  env: NodeJS.ProcessEnv = {},
  options: StartOptions = {},
): Promise<{ proc: ChildProcess; match: RegExpExecArray; stderr: () => string }> {
  const proc = spawn(process.execPath, [...(options.nodeFlags ?? []), ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  // The last 64 KiB: enough for a crash's stack, bounded for a long-running server.
  proc.stderr.setEncoding('utf8').on('data', (d: string) => (err = (err + d).slice(-65_536)));
  return new Promise((res, rej) => {
    const timer =
      options.timeoutMs === undefined
        ? null
        : setTimeout(() => {
            void stopProcess(proc, 2000);
            rej(new Error(`${args[0]} did not print ${pattern} within ${options.timeoutMs} ms: ${err.trim()}`));
          }, options.timeoutMs);
    proc.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = pattern.exec(out);
      if (m) {
        if (timer) clearTimeout(timer);
        res({ proc, match: m, stderr: () => err });
      }
    });
    proc.once('exit', (c) => {
      if (timer) clearTimeout(timer);
      rej(new Error(`${args[0]} exited ${c}: ${err.trim()}`));
    });
  });
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
  const { proc, match, stderr } = await startUntil(
    [FS_NODE_JS, '--port', '0', ...args],
    /listening on (\S+)/,
    { SVC_LOG_LEVEL: 'warn', SVC_FS_NODE_AUTH_TOKEN: '', ...env },
    options,
  );
  return { proc, url: match[1], stderr };
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
 * The median of `xs` (for an even count, the upper of the two middle values; the input is not changed).
 * @returns NaN for an empty array
 */
export function median(xs: number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
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

/**
 * Unmounts a FUSE mount point (nothing when it is none): `fusermount -u`, lazily (`-uz`) when that fails.
 * @throws Error only when /proc/self/mountinfo cannot be read (a failed unmount is ignored)
 */
export function fuseUnmount(dir: string): void {
  if (!mounted(dir)) return;
  try {
    execFileSync('fusermount', ['-u', dir], { stdio: 'ignore' });
  } catch {
    try {
      execFileSync('fusermount', ['-uz', dir], { stdio: 'ignore' });
    } catch {
      /* already gone */
    }
  }
}

/**
 * Waits until `dir` is (or, with `want` false, is no longer) a mount point, checking every 20 ms.
 * @param ms how long to wait, ms
 * @returns true once it is, false after `ms`
 * @throws Error (rejects) when /proc/self/mountinfo cannot be read
 */
export async function waitMounted(dir: string, want: boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (mounted(dir) !== want) {
    if (Date.now() > deadline) return false;
    await sleep(20);
  }
  return true;
}

/**
 * Drops the page cache (`sync; echo 3 > /proc/sys/vm/drop_caches`). Never throws.
 * @returns null when done, else why not (e.g. read-only /proc/sys in a container)
 */
export function dropCaches(): string | null {
  try {
    execFileSync('sync');
    writeFileSync('/proc/sys/vm/drop_caches', '3\n');
    return null;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code ?? (e as Error).message;
  }
}

/** One mount under test. */
export interface Peer {
  /** Name in the tables, e.g. `svc`, `svc TLS`, `sshfs`. */
  readonly name: string;
  /** Directory in the mount that shows the export's root. */
  readonly root: string;
  /** Unmounts (when mounted) and mounts again: nothing the mount cached survives. */
  remount(): Promise<void>;
  /** Unmounts and stops every process of the mount. */
  stop(): Promise<void>;
}

/** How {@link SvcPeer} runs `svc-fs-mount`. */
export interface SvcMountOptions {
  /** Extra arguments after `mount MNT`, e.g. `--poll-us 0`. */
  mountArgs?: string[];
  /** Extra Node.js flags for the mount process. */
  nodeFlags?: string[];
  /** How long a mount may take to start, ms; default: as long as the process runs. */
  timeoutMs?: number;
}

/**
 * The svc FUSE mount: a `svc-fs-mount --endpoint w=URL [extraArgs] mount MNT [mountArgs]` process
 * on the svc-fs-node at `url` (`wss://` with `extraArgs` `--tls-ca CA` for a TLS peer). The
 * export's root is `MNT/w`. Not mounted until {@link remount}.
 */
export class SvcPeer implements Peer {
  readonly root: string;
  private proc: ChildProcess | null = null;

  constructor(
    private readonly url: string,
    private readonly mnt: string,
    readonly name: string = 'svc',
    private readonly extraArgs: string[] = [],
    private readonly options: SvcMountOptions = {},
  ) {
    this.root = join(mnt, 'w');
  }

  /**
   * Stops the mount process (when running) and starts it again; resolves once it printed "mounted on".
   * @throws Error (rejects) when the mount process exits before that, or after `options.timeoutMs`
   */
  async remount(): Promise<void> {
    await this.stop();
    const m = await startUntil(
      [FS_MOUNT_JS, '--endpoint', `w=${this.url}`, ...this.extraArgs, 'mount', this.mnt, ...(this.options.mountArgs ?? [])],
      /mounted on /,
      { SVC_LOG_LEVEL: 'warn' },
      {
        nodeFlags: this.options.nodeFlags,
        timeoutMs: this.options.timeoutMs,
      },
    );
    this.proc = m.proc;
  }

  /** Stops the mount process (SIGTERM, SIGKILL after 5 s) and unmounts. Never rejects. */
  async stop(): Promise<void> {
    const p = this.proc;
    this.proc = null;
    if (p) await stopProcess(p, 5000);
    fuseUnmount(this.mnt);
  }
}

/** A private sshd on a loopback port and an sshfs mount of an export directory through it; see the module documentation. */
export class SshfsPeer implements Peer {
  readonly name = 'sshfs';
  readonly root: string;
  private sshfs: ChildProcess | null = null;
  private sshfsErr = '';

  private constructor(
    private readonly sshd: ChildProcess,
    private readonly port: number,
    private readonly dir: string,
    private readonly exp: string,
    private readonly mnt: string,
    private readonly createdRunSshd: boolean,
    /** sshfs's version, e.g. `3.7.3`. */
    readonly version: string,
  ) {
    this.root = mnt;
  }

  /**
   * Installs sshfs/openssh-server when missing (as root), starts sshd with its files in `dir`
   * (created; must not exist) and mounts `exp` on `mnt` (which shows `exp` at its root). The sshd
   * process is added to `processes`, so the caller can stop it even when this throws.
   * @returns the mounted peer, or why there is none (a sentence)
   * @throws Error when sshd or sshfs fail to start (10 s each) although installed
   */
  static async start(dir: string, exp: string, mnt: string, processes: Set<ChildProcess>): Promise<SshfsPeer | string> {
    if (!which('sshfs') || !which('sshd')) {
      if (process.getuid?.() !== 0)
        return `sshfs or sshd is missing and this bench is not root, so it cannot install them (apt-get install sshfs openssh-server)`;
      log('installing sshfs and openssh-server (apt-get install -y sshfs openssh-server)');
      const install = () =>
        execFileSync('apt-get', ['install', '-y', '-q', 'sshfs', 'openssh-server'], {
          stdio: ['ignore', 'ignore', 'inherit'],
          env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
        });
      try {
        install();
      } catch {
        try {
          execFileSync('apt-get', ['update', '-q'], { stdio: ['ignore', 'ignore', 'inherit'] });
          install();
        } catch (e) {
          return `installing sshfs and openssh-server failed (${(e as Error).message.split('\n')[0]})`;
        }
      }
      if (!which('sshfs') || !which('sshd')) return 'sshfs or sshd is still missing after apt-get install';
    }
    const sshdPath = which('sshd')!;
    const version =
      execFileSync('sshfs', ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).match(/SSHFS version (\S+)/)?.[1] ?? 'unknown';
    mkdirSync(dir, { mode: 0o700 });
    const keygen = (file: string) => execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'svc-bench', '-f', file], { stdio: 'ignore' });
    keygen(join(dir, 'host_key'));
    keygen(join(dir, 'client_key'));
    copyFileSync(join(dir, 'client_key.pub'), join(dir, 'authorized_keys'));
    const user = userInfo().username;
    // Privilege separation needs this directory (Debian creates it in the service's start script only).
    let createdRunSshd = false;
    if (process.getuid?.() === 0 && !existsSync('/run/sshd')) {
      mkdirSync('/run/sshd', { mode: 0o755, recursive: true });
      createdRunSshd = true;
    }
    const port = await freePort();
    const config = join(dir, 'sshd_config');
    writeFileSync(
      config,
      [
        `Port ${port}`,
        'ListenAddress 127.0.0.1',
        `HostKey ${join(dir, 'host_key')}`,
        `PidFile ${join(dir, 'sshd.pid')}`,
        `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
        `AllowUsers ${user}`,
        'PermitRootLogin prohibit-password',
        'PubkeyAuthentication yes',
        'PasswordAuthentication no',
        'KbdInteractiveAuthentication no',
        'UsePAM no',
        'StrictModes no',
        'Subsystem sftp internal-sftp',
        'LogLevel ERROR',
        '',
      ].join('\n'),
    );
    // -D: stays the bench's child; -e: logs to stderr.
    const sshd = spawn(sshdPath, ['-D', '-e', '-f', config], { stdio: ['ignore', 'ignore', 'pipe'] });
    processes.add(sshd);
    let sshdErr = '';
    sshd.stderr.setEncoding('utf8').on('data', (d: string) => (sshdErr += d));
    await waitForPort(port, 10_000, sshd, 'sshd', () => sshdErr);
    const peer = new SshfsPeer(sshd, port, dir, exp, mnt, createdRunSshd, version);
    try {
      await peer.remount();
    } catch (e) {
      await peer.stop();
      throw e;
    }
    return peer;
  }

  /** The sshfs command line (without the program name). */
  get args(): string[] {
    const options = [
      `IdentityFile=${join(this.dir, 'client_key')}`,
      'StrictHostKeyChecking=no',
      'UserKnownHostsFile=/dev/null',
      'BatchMode=yes',
      'LogLevel=ERROR',
    ];
    return ['-f', '-p', String(this.port), '-o', options.join(','), `${userInfo().username}@127.0.0.1:${this.exp}`, this.mnt];
  }

  /**
   * Unmounts (when mounted) and runs sshfs again; resolves once the mount point is mounted.
   * @throws Error (rejects) when sshfs exits first or has not mounted after 10 s
   */
  async remount(): Promise<void> {
    await this.unmount();
    const proc = spawn('sshfs', this.args, { stdio: ['ignore', 'ignore', 'pipe'] });
    this.sshfs = proc;
    this.sshfsErr = '';
    proc.stderr.setEncoding('utf8').on('data', (d: string) => (this.sshfsErr += d));
    const deadline = Date.now() + 10_000;
    while (!mounted(this.mnt)) {
      if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`sshfs exited ${proc.exitCode ?? proc.signalCode}: ${this.sshfsErr.trim()}`);
      if (Date.now() > deadline) {
        await this.unmount();
        throw new Error(`sshfs did not mount ${this.mnt} within 10 s: ${this.sshfsErr.trim()}`);
      }
      await sleep(20);
    }
  }

  private async unmount(): Promise<void> {
    const p = this.sshfs;
    this.sshfs = null;
    fuseUnmount(this.mnt);
    if (p && p.exitCode === null && p.signalCode === null) {
      // sshfs -f exits once unmounted (its ssh with it); a stuck one is killed.
      if ((await exitOf(p, 5000)) === null) {
        p.kill('SIGKILL');
        await exitOf(p, 2000);
      }
    }
  }

  /** Unmounts, stops sshfs and sshd (SIGTERM, SIGKILL after 3 s) and removes /run/sshd when it made it. Never rejects. */
  async stop(): Promise<void> {
    await this.unmount();
    await stopProcess(this.sshd, 3000);
    if (this.createdRunSshd) {
      try {
        rmdirSync('/run/sshd');
      } catch {
        /* in use or not empty: left */
      }
    }
  }
}
