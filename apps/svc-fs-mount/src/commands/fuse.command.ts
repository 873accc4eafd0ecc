/**
 * `svc-fs-mount [global options] mount MOUNTPOINT [--daemon] [--allow-other] [--attr-ttl-ms N]
 * [--cache-ttl-ms N] [--poll-us N] [--read-only]` (option-table.ts): the workspace as a real filesystem through FUSE
 * (fuse-native, libfuse2), on the same WorkspaceRouter as the other commands (failover
 * included). Runs in the foreground until SIGINT/SIGTERM, then unmounts, or until the mount
 * point is unmounted from outside (`fusermount -u`, `umount`: seen within
 * {@link UNMOUNT_CHECK_MS}), then ends; `--daemon` detaches and prints the pid once the mount
 * is up. A stale mount point left by a crashed run is detected and cleaned with a message.
 *
 * Exit codes: 0 after a clean unmount; 2 when FUSE is unavailable (fuse-native not installed,
 * no /dev/fuse), the mount point is unusable, or the workspace cannot be opened.
 */
import { execFile, spawn } from 'node:child_process';
import { constants as fsc, existsSync, readFileSync } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { Option, SubCommand } from 'nest-commander';
import { FuseFs, setFuseTimeUnitNs } from '../../../../libs/fs/src/fuse/fuse-fs';
import { useDataPathGc } from '../../../../libs/ops/src/data-path-gc';
import { UsageError } from '../mount-options';
import { FUSE_MAX_POLL_US, FUSE_MAX_TTL_MS, FUSE_MOUNT_DEFAULTS, MOUNT_OPTIONS } from '../option-table';
import { commanderOption } from '../../../../libs/ops/src/option-specs';
import { MountCommand } from './base.command';

/** Runs a program (fusermount, umount) and waits for it; child_process is loaded on first use. */
const run = (file: string, args: string[]) => promisify(execFile)(file, args);

/** How often the foreground mount checks that its mount point is still mounted, ms. */
export const UNMOUNT_CHECK_MS = 1000;

/** What installs FUSE support, for messages. */
const FUSE_PACKAGES = 'the optional npm package fuse-native (npm install fuse-native) and libfuse2 with fusermount (Debian: apt-get install libfuse2 fuse3)';

interface FuseInstance {
  mount(cb: (err: Error | null) => void): void;
  unmount(cb: (err: Error | null) => void): void;
}
type FuseConstructor = new (mnt: string, ops: object, opts: Record<string, unknown>) => FuseInstance;

/**
 * Loads fuse-native.
 * @throws UsageError naming what to install when it or /dev/fuse is missing
 */
export function loadFuse(): FuseConstructor {
  if (!existsSync('/dev/fuse'))
    throw new UsageError(
      `FUSE is not available here: /dev/fuse is missing (load the fuse module, or give a container --device /dev/fuse); mounting needs ${FUSE_PACKAGES}`,
    );
  let Fuse: FuseConstructor;
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- an optional dependency, loaded only for a FUSE mount; its absence is reported
    Fuse = require('fuse-native') as FuseConstructor;
  } catch (e) {
    throw new UsageError(`FUSE support is not installed (${(e as Error).message.split('\n')[0]}): mounting needs ${FUSE_PACKAGES}`);
  }
  // Built by scripts/fuse-native-build.cjs: times cross in µs (else ms, as published).
  try {
    const binding = join(dirname(require.resolve('fuse-native')), 'build', 'Release', 'fuse.node');
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- the native binding, at a path known only at run time
    if ((require(binding) as { svc_time_unit_us?: number }).svc_time_unit_us === 1) setFuseTimeUnitNs(1e3);
  } catch {
    // the prebuilt binding: ms
  }
  type Signal = (err: number, fd?: number) => void;
  type CreateOp = (path: string, mode: number, flags: number | undefined, cb: Signal) => void;
  /**
   * fuse-native with `create` given the open(2) flags: fuse-native's own handler drops the
   * third argument that the patched C glue passes (scripts/fuse-native-build.cjs); with a
   * prebuilt binding there is none, and the operation receives undefined.
   */
  return class extends (Fuse as new (...args: ConstructorParameters<FuseConstructor>) => FuseInstance & { ops: { create: CreateOp } }) {
    _op_create(signal: Signal, path: string, mode: number, flags?: number): void {
      this.ops.create(path, mode, flags, (err, fd) => signal(err, fd));
    }
  };
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
    await run('fusermount', ['-uz', dir]).catch(async () => run('umount', ['-l', dir]));
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

  @Option(commanderOption(MOUNT_OPTIONS.readOnly))
  parseReadOnly(): boolean {
    return true;
  }

  async run(
    [arg]: string[],
    options: { daemon?: boolean; allowOther?: boolean; attrTtlMs?: number; cacheTtlMs?: number; pollUs?: number; readOnly?: boolean } = {},
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
    let Fuse: FuseConstructor;
    let cleaned: string | null;
    try {
      Fuse = loadFuse();
      cleaned = await prepareMountPoint(mountpoint);
    } catch (e) {
      this.out.report(e, null);
      return;
    }
    if (cleaned) process.stderr.write(`svc-fs-mount: ${cleaned}\n`);
    await this.session.run(this.command, null, async (router) => {
      const ttl = options.attrTtlMs ?? FUSE_MOUNT_DEFAULTS.attrTtlMs;
      const fs = new FuseFs(router, {
        attrTtlMs: ttl,
        cacheTtlMs: options.cacheTtlMs ?? FUSE_MOUNT_DEFAULTS.cacheTtlMs,
        pollUs: options.pollUs ?? FUSE_MOUNT_DEFAULTS.pollUs,
        readOnly: options.readOnly === true,
      });
      const fuse = new Fuse(mountpoint, fs.ops, {
        // `fsname` is passed through to libfuse's -o list: it also carries big_writes (128 KiB
        // writes instead of 4 KiB) which fuse-native has no option for.
        // use_ino: stat reports the mount's stable inode numbers (fuse-inodes.ts), so git's
        // index stays valid across remounts instead of re-hashing every file.
        fsname: 'svc,big_writes,use_ino',
        subtype: 'svc',
        allowOther: options.allowOther === true,
        // Strings: fuse-native drops a falsy number, which would leave libfuse's 1 s default for 0.
        attrTimeout: String(ttl / 1000),
        entryTimeout: String(ttl / 1000),
        // Keep a file's pages in the kernel across opens while its mtime and size are unchanged
        // (libfuse checks them at each open, through getattr: coherent with changes made on the
        // node as far as the attributes are); without it every open drops the cache.
        autoCache: true,
        // FuseFs answers ETIMEDOUT after 60 s itself, with one watchdog instead of a timer per operation.
        timeout: false,
        force: false,
        mkdir: false,
      });
      await new Promise<void>((res, rej) => fuse.mount((err) => (err ? rej(new UsageError(`cannot mount on ${mountpoint}: ${err.message}`)) : res())));
      process.stdout.write(`mounted on ${mountpoint}\n`);
      const how = await new Promise<'signal' | 'outside'>((res) => {
        const stop = (why: 'signal' | 'outside') => {
          process.off('SIGINT', onSignal);
          process.off('SIGTERM', onSignal);
          clearInterval(check);
          res(why);
        };
        const onSignal = () => stop('signal');
        const check = setInterval(() => {
          if (!isMountPoint(mountpoint)) stop('outside');
        }, UNMOUNT_CHECK_MS);
        process.on('SIGINT', onSignal);
        process.on('SIGTERM', onSignal);
      });
      if (how === 'signal') await this.unmount(fuse, mountpoint);
      process.stdout.write(how === 'signal' ? `unmounted ${mountpoint}\n` : `${mountpoint} was unmounted from outside; stopping\n`);
    });
  }

  /**
   * Unmounts; when busy, retries for 2 s, then detaches lazily (the kernel finishes when idle).
   * Nothing to do when it was unmounted from outside meanwhile.
   */
  private async unmount(fuse: FuseInstance, mountpoint: string): Promise<void> {
    for (let i = 0; i < 10; i++) {
      if (!isMountPoint(mountpoint)) return;
      const err = await new Promise<Error | null>((r) => fuse.unmount((e) => r(e)));
      if (!err && !isMountPoint(mountpoint)) return;
      await new Promise((r) => setTimeout(r, 200));
    }
    await run('fusermount', ['-uz', mountpoint]).catch(() => undefined);
    process.stderr.write(`svc-fs-mount: ${mountpoint} was busy; detached it lazily\n`);
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
