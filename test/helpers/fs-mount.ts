/**
 * Helpers for e2e tests of `svc-fs-mount` and the workspace router: start `svc-fs-node` on
 * real directories, run the built `svc-fs-mount` with binary-safe standard input and output.
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { BIN, Running, startProcess } from '../support/processes';
import { fuse3Unavailable } from '../../libs/fuse3/src/binding';

/**
 * Starts `svc-fs-node --port P --export ...` and waits for its listening line.
 * @param exports `name=path[:ro|:rw]` specs
 */
export function startFsNode(exports: string[], options: { port?: number; authToken?: string; name?: string } = {}): Promise<Running> {
  const args = ['--port', String(options.port ?? 0)];
  for (const e of exports) args.push('--export', e);
  if (options.authToken) args.push('--auth-token', options.authToken);
  if (options.name) args.push('--node-name', options.name);
  return startProcess(BIN.fsNode, args, { SVC_LOG_LEVEL: 'warn', SVC_FS_NODE_AUTH_TOKEN: '' });
}

/** The port of a `ws://HOST:PORT/...` URL. */
export function portOf(url: string): number {
  return Number(new URL(url).port);
}

export interface MountRun {
  code: number | null;
  /** Standard output (empty when `hashOnly`). */
  stdout: Buffer;
  /** SHA-256 (hex) and length of standard output. */
  sha256: string;
  bytes: number;
  stderr: string;
  /** Wall time, ms. */
  ms: number;
  /** Peak resident set size (VmHWM) last seen, bytes; 0 unless `peakRss` was asked for. */
  peakRssBytes: number;
}

/**
 * Runs `svc-fs-mount ...args` to completion.
 * @param options.stdinFile a file connected to standard input (binary-exact)
 * @param options.input bytes or text written to standard input
 * @param options.hashOnly do not keep standard output, only its SHA-256 and length
 * @param options.peakRss sample the process's peak RSS from /proc every 20 ms (Linux)
 */
export function runMount(
  args: string[],
  options: { stdinFile?: string; input?: Buffer | string; env?: NodeJS.ProcessEnv; timeoutMs?: number; hashOnly?: boolean; peakRss?: boolean } = {},
): Promise<MountRun> {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const fd = options.stdinFile ? openSync(options.stdinFile, 'r') : null;
    const proc = spawn(process.execPath, [BIN.fsMount, ...args], {
      env: { ...process.env, SVC_AUTH_TOKEN: '', SVC_FS_AUTH_TOKEN: '', SVC_PROJECT_TOKEN: '', SVC_URL: '', SVC_STATE_DIR: '/nonexistent', ...options.env },
      stdio: [fd ?? 'pipe', 'pipe', 'pipe'],
    });
    if (fd !== null) closeSync(fd);
    const hash = createHash('sha256');
    const chunks: Buffer[] = [];
    let bytes = 0;
    let stderr = '';
    proc.stdout!.on('data', (d: Buffer) => {
      hash.update(d);
      bytes += d.length;
      if (!options.hashOnly) chunks.push(d);
    });
    proc.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => proc.kill('SIGKILL'), options.timeoutMs ?? 30_000);
    let peakRssBytes = 0;
    const sampler = options.peakRss
      ? setInterval(() => {
          try {
            const kib = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${proc.pid}/status`, 'utf8'));
            if (kib) peakRssBytes = Math.max(peakRssBytes, Number(kib[1]) * 1024);
          } catch {
            /* exited */
          }
        }, 20)
      : null;
    proc.once('close', (code) => {
      clearTimeout(timer);
      if (sampler) clearInterval(sampler);
      resolve({ code, stdout: Buffer.concat(chunks), sha256: hash.digest('hex'), bytes, stderr, ms: Date.now() - t0, peakRssBytes });
    });
    if (proc.stdin) proc.stdin.end(options.input ?? '');
  });
}

/** SHA-256 (hex) of bytes. */
export function sha256(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/**
 * Why FUSE mounts cannot be tested here (no /dev/fuse, the libfuse 3 binding not built, no
 * fusermount3), or null when they can.
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

/** Ends a `svc-fs-mount mount` process a test started (SIGKILL) and lazily unmounts its mount point. */
export function killMount(proc: ChildProcess | undefined, mountpoint: string): void {
  if (proc && proc.exitCode === null) proc.kill('SIGKILL');
  try {
    execFileSync('fusermount3', ['-uz', mountpoint], { stdio: 'ignore' });
  } catch {
    /* not mounted */
  }
}
