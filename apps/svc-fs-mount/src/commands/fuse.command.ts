/**
 * `svc-fs-mount [global options] mount MOUNTPOINT [--daemon] [--allow-other] [--attr-ttl-ms N]
 * [--cache-ttl-ms N] [--poll-us N] [--read-only] [--metrics-port N]` (option-table.ts): the
 * workspace as a real filesystem through FUSE (libfuse 3's low-level API through our binding,
 * @svc/fuse3), on the same WorkspaceRouter as the other commands (failover included). Runs in the foreground until SIGINT/SIGTERM, then unmounts, or until the mount
 * point is unmounted from outside (`fusermount3 -u`, `umount`: seen at once, or within
 * {@link UNMOUNT_CHECK_MS}), then ends; `--daemon` detaches and prints the pid once the mount
 * is up. A stale mount point left by a crashed run is detected and cleaned with a message.
 *
 * Exit codes: 0 after a clean unmount; 2 when FUSE is unavailable (the binding not built,
 * no /dev/fuse), the mount point is unusable, or the workspace cannot be opened.
 */
import { execFile, spawn } from 'node:child_process';
import { constants as fsc, existsSync, readFileSync } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { Option, SubCommand } from 'nest-commander';
import { DEBIAN_PACKAGES, FuseSession, fuse3Unavailable } from '../../../../libs/fuse3/src';
import { FuseFs } from '../../../../libs/fs/src/fuse/fuse-fs';
import { useDataPathGc } from '../../../../libs/ops/src/data-path-gc';
import { mountRegistry, serveMetrics } from '../mount-metrics';
import { UsageError } from '../mount-options';
import { FUSE_MAX_POLL_US, FUSE_MAX_TTL_MS, FUSE_MOUNT_DEFAULTS, MOUNT_OPTIONS } from '../option-table';
import { commanderOption } from '../../../../libs/ops/src/option-specs';
import { MountCommand } from './base.command';

/** Runs a program (fusermount, umount) and waits for it; child_process is loaded on first use. */
const run = (file: string, args: string[]) => promisify(execFile)(file, args);

/** How often the foreground mount checks that its mount point is still mounted, ms. */
export const UNMOUNT_CHECK_MS = 1000;

/**
 * Checks that a FUSE mount can be made here: /dev/fuse and our libfuse 3 binding (native/fuse3,
 * built by `npm ci`).
 * @throws UsageError naming what to install when something is missing
 */
export function checkFuse(): void {
  if (!existsSync('/dev/fuse'))
    throw new UsageError(
      `FUSE is not available here: /dev/fuse is missing (load the fuse module, or give a container --device /dev/fuse); mounting needs the Debian packages ${DEBIAN_PACKAGES}`,
    );
  const why = fuse3Unavailable();
  if (why) throw new UsageError(`FUSE support is not built: ${why}`);
}

/** True when `dir` is a mount point according to /proc/self/mountinfo. */
function isMountPoint(dir: string): boolean {
  try {
    return readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .some((line) => line.split(' ')[4]?.replace(/\\040/g, ' ') === dir);
  } catch {
    return false;
  }
}

/**
 * Checks the mount point; cleans a stale FUSE mount (ENOTCONN: its process died).
 * @returns a message when a stale mount was cleaned
 * @throws UsageError when it is not a usable empty directory or is mounted by a live process
 */
export async function prepareMountPoint(dir: string): Promise<string | null> {
  let cleaned: string | null = null;
  try {
    await stat(dir);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== 'ENOTCONN' && code !== 'EIO') throw new UsageError(`mount point ${dir}: ${code === 'ENOENT' ? 'does not exist' : code}`);
    await run('fusermount3', ['-uz', dir]).catch(async () => run('umount', ['-l', dir]));
    cleaned = `cleaned a stale FUSE mount at ${dir} left by a crashed run`;
  }
  const st = await stat(dir);
  if (!st.isDirectory()) throw new UsageError(`mount point ${dir} is not a directory`);
  if (isMountPoint(dir)) throw new UsageError(`${dir} is already a mount point (unmount it first: fusermount -u ${dir})`);
  await access(dir, fsc.W_OK).catch(() => {
    throw new UsageError(`mount point ${dir} is not writable by this user`);
  });
  return cleaned;
}

/**
 * The value of an integer option of `mount`, from 0 to `max`.
 * @throws UsageError `<flag> must be an integer from 0 to <max>`
 */
function intOption(v: string, flag: string, max: number): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > max) throw new UsageError(`${flag} must be an integer from 0 to ${max}`);
  return n;
}

@SubCommand({
  name: 'mount',
  arguments: '<mountpoint>',
  description: 'mount the workspace with FUSE; stays in the foreground until SIGINT/SIGTERM (--daemon detaches)',
})
export class FuseMountCommand extends MountCommand {
  @Option(commanderOption(MOUNT_OPTIONS.daemon))
  parseDaemon(): boolean {
    return true;
  }

  @Option(commanderOption(MOUNT_OPTIONS.allowOther))
  parseAllowOther(): boolean {
    return true;
  }

  @Option(commanderOption(MOUNT_OPTIONS.attrTtl))
  parseTtl(v: string): number {
    return intOption(v, '--attr-ttl-ms', FUSE_MAX_TTL_MS);
  }

  @Option(commanderOption(MOUNT_OPTIONS.cacheTtl))
  parseCacheTtl(v: string): number {
    return intOption(v, '--cache-ttl-ms', FUSE_MAX_TTL_MS);
  }

  @Option(commanderOption(MOUNT_OPTIONS.pollUs))
  parsePoll(v: string): number {
    return intOption(v, '--poll-us', FUSE_MAX_POLL_US);
  }

  @Option(commanderOption(MOUNT_OPTIONS.metricsPort))
  parseMetricsPort(v: string): number {
    return intOption(v, '--metrics-port', 65535);
  }

  @Option(commanderOption(MOUNT_OPTIONS.readOnly))
  parseReadOnly(): boolean {
    return true;
  }

  async run(
    [arg]: string[],
    options: {
      daemon?: boolean;
      allowOther?: boolean;
      attrTtlMs?: number;
      cacheTtlMs?: number;
      pollUs?: number;
      readOnly?: boolean;
      metricsPort?: number;
    } = {},
  ): Promise<void> {
    const mountpoint = resolve(arg);
    if (options.daemon) return this.detach();
    // The mount is a data path: its GC setting, now that the program is loaded (see the module).
    useDataPathGc();
    if (process.env.SVC_FS_MOUNT_DETACHED === '1') {
      // Detached by --daemon: the parent stops reading our output once the mount is up.
      process.stdout.on('error', () => undefined);
      process.stderr.on('error', () => undefined);
    }
    let cleaned: string | null;
    try {
      checkFuse();
      cleaned = await prepareMountPoint(mountpoint);
    } catch (e) {
      this.out.report(e, null);
      return;
    }
    if (cleaned) process.stderr.write(`svc-fs-mount: ${cleaned}\n`);
    await this.session.run(this.command, null, async (router) => {
      const fs = new FuseFs(router, {
        kernelTtlMs: options.attrTtlMs ?? FUSE_MOUNT_DEFAULTS.attrTtlMs,
        cacheTtlMs: options.cacheTtlMs ?? FUSE_MOUNT_DEFAULTS.cacheTtlMs,
        pollUs: options.pollUs ?? FUSE_MOUNT_DEFAULTS.pollUs,
        readOnly: options.readOnly === true,
      });
      let session: FuseSession;
      try {
        session = await fs.mount(mountpoint, { allowOther: options.allowOther === true });
      } catch (e) {
        throw new UsageError(`cannot mount on ${mountpoint}: ${(e as Error).message}`);
      }
      let metrics: Server | null = null;
      if (options.metricsPort !== undefined) {
        try {
          metrics = await serveMetrics(mountRegistry(fs), options.metricsPort);
        } catch (e) {
          await session.unmount().catch(() => undefined);
          throw new UsageError(`cannot serve metrics on 127.0.0.1:${options.metricsPort}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
        }
        process.stdout.write(`metrics on http://127.0.0.1:${(metrics.address() as AddressInfo).port}/metrics\n`);
      }
      process.stdout.write(`mounted on ${mountpoint}\n`);
      const how = await new Promise<'signal' | 'outside'>((res) => {
        const stop = (why: 'signal' | 'outside') => {
          process.off('SIGINT', onSignal);
          process.off('SIGTERM', onSignal);
          clearInterval(check);
          res(why);
        };
        const onSignal = () => stop('signal');
        // The session reports an unmount from outside; the check covers a lazy unmount that the
        // kernel finishes only once the mount is idle.
        void session.ended.then((info) => stop(info.reason === 'unmount' ? 'signal' : 'outside'));
        const check = setInterval(() => {
          if (!isMountPoint(mountpoint)) stop('outside');
        }, UNMOUNT_CHECK_MS);
        process.on('SIGINT', onSignal);
        process.on('SIGTERM', onSignal);
      });
      if (how === 'signal') await this.unmount(session, mountpoint);
      else await session.unmount().catch(() => undefined);
      metrics?.close();
      process.stdout.write(how === 'signal' ? `unmounted ${mountpoint}\n` : `${mountpoint} was unmounted from outside; stopping\n`);
    });
  }

  /**
   * Unmounts; when busy, retries for 2 s, then detaches lazily (the kernel finishes when idle).
   * Nothing to do when it was unmounted from outside meanwhile.
   */
  private async unmount(session: FuseSession, mountpoint: string): Promise<void> {
    for (let i = 0; i < 10; i++) {
      if (!isMountPoint(mountpoint)) break;
      if (
        !(await run('fusermount3', ['-u', mountpoint]).then(
          () => true,
          () => false,
        ))
      )
        await new Promise((r) => setTimeout(r, 200));
    }
    if (isMountPoint(mountpoint)) {
      await run('fusermount3', ['-uz', mountpoint]).catch(() => undefined);
      process.stderr.write(`svc-fs-mount: ${mountpoint} was busy; detached it lazily\n`);
    }
    await session.unmount().catch(() => undefined);
  }

  /** `--daemon`: runs the same command without `--daemon` in the background; prints its pid once mounted. */
  private async detach(): Promise<void> {
    const args = process.argv.slice(1).filter((a) => a !== '--daemon');
    const child = spawn(process.execPath, args, { detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, SVC_FS_MOUNT_DETACHED: '1' } });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    const mounted = await new Promise<boolean>((res) => {
      const timer = setTimeout(() => res(false), 30_000);
      child.stdout.on('data', () => {
        if (out.includes('mounted on ')) {
          clearTimeout(timer);
          res(true);
        }
      });
      child.once('exit', () => {
        clearTimeout(timer);
        res(false);
      });
    });
    if (!mounted) {
      process.stderr.write(err || 'svc-fs-mount: the background mount did not start\n');
      child.kill('SIGTERM');
      process.exitCode = 2;
      return;
    }
    if (err) process.stderr.write(err);
    child.stdout.destroy();
    child.stderr.destroy();
    child.unref();
    process.stdout.write(`${child.pid}\n`);
  }
}
