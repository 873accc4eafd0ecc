/**
 * What the FUSE benches (bench/fuse.bench.ts, bench/mutations.bench.ts, bench/fuse-latency.ts)
 * share: the `svc-fs-mount ... mount` FUSE mount ({@link SvcPeer}), the sshfs peer on a private
 * loopback sshd ({@link SshfsPeer}), the mount and page cache helpers around them, and the trees
 * they work on ({@link textTree}, {@link gitRepo}). The svc-fs-node they mount comes from
 * `startFsNode` (bench/programs.ts).
 *
 * The sshfs peer: a private `sshd` on a free loopback port (throwaway config, host key, client key
 * and `AuthorizedKeysFile` in a temp dir; `UsePAM no`, `StrictModes no`, `Subsystem sftp
 * internal-sftp`; `/run/sshd` is created when missing, for privilege separation) and an sshfs
 * mount of an export directory through it with
 *   `sshfs -f -p PORT -o IdentityFile=KEY,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,
 *    BatchMode=yes,LogLevel=ERROR USER@127.0.0.1:EXPORT MNT`
 * i.e. sshfs's defaults for everything that affects speed (its own caches on, no kernel_cache);
 * `-f` only keeps sshfs in the foreground as the bench's child, BatchMode/LogLevel only stop ssh
 * from prompting or chattering; a bench may add `-o` options after these (bench/posix.bench.ts:
 * `allow_other,default_permissions`, for pjdfstest's steps as other users). When `sshfs` or
 * `sshd` is missing it installs them with `apt-get install -y sshfs openssh-server` when running
 * as root; otherwise it says why there is no peer.
 *
 * Everything listens on and connects to 127.0.0.1 only.
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { fuse3Unavailable } from '../libs/fuse3/src/binding';
import { BIN, freePort, ROOT, sleep } from '../test/support/processes';
import { exitOf, log, startUntil, stopProcess, waitForPort, which } from './programs';

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
      [BIN.fsMount, '--endpoint', `w=${this.url}`, ...this.extraArgs, 'mount', this.mnt, ...(this.options.mountArgs ?? [])],
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
    /** More `-o` options after the defaults, e.g. `allow_other`. */
    private readonly options: readonly string[] = [],
  ) {
    this.root = mnt;
  }

  /**
   * Installs sshfs/openssh-server when missing (as root), starts sshd with its files in `dir`
   * (created; must not exist) and mounts `exp` on `mnt` (which shows `exp` at its root). The sshd
   * process is added to `processes`, so the caller can stop it even when this throws.
   * @param options more `-o` options of sshfs after the defaults (e.g. `allow_other`,
   *   `default_permissions`); default none
   * @returns the mounted peer, or why there is none (a sentence)
   * @throws Error when sshd or sshfs fail to start (10 s each) although installed
   */
  static async start(dir: string, exp: string, mnt: string, processes: Set<ChildProcess>, options: readonly string[] = []): Promise<SshfsPeer | string> {
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
    const peer = new SshfsPeer(sshd, port, dir, exp, mnt, createdRunSshd, version, options);
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
      ...this.options,
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

const WORDS = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon'.split(' ');

/** Writes `count` text files of about 1 KiB in directories of 100 below `root`; every 7th holds "needle". */
export function textTree(root: string, count: number, prefix = 'f'): void {
  let seed = 1;
  const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) % WORDS.length;
  for (let i = 0; i < count; i++) {
    const dir = join(root, `d${String(Math.floor(i / 100)).padStart(3, '0')}`);
    if (i % 100 === 0) mkdirSync(dir, { recursive: true });
    const lines = Array.from({ length: 15 }, () => Array.from({ length: 10 }, () => WORDS[rnd()]).join(' '));
    if (i % 7 === 0) lines.splice(5, 0, 'needle in the haystack');
    writeFileSync(join(dir, `${prefix}${String(i % 100).padStart(3, '0')}.txt`), `${lines.join('\n')}\n`);
  }
}

/** git with a fixed identity, and any directory trusted (the mounts may report other owners). */
export const GIT = ['-c', 'user.email=bench@example.com', '-c', 'user.name=bench', '-c', 'safe.directory=*'];

/** A git repository of `count` committed files at `dir`. */
export function gitRepo(dir: string, count: number): void {
  mkdirSync(dir, { recursive: true });
  textTree(dir, count, 'src');
  const git = (...args: string[]) => execFileSync('git', [...GIT, ...args], { cwd: dir, stdio: 'ignore' });
  git('init', '-q');
  git('add', '-A');
  git('commit', '-qm', 'bench');
}
