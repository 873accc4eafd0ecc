/**
 * One process per state directory (docs/operations.md "State": a second `svc` on the same directory
 * waits as a standby): `<state-dir>/state.lock`, created exclusively, holding the owner's pid
 * and host. A lock left by a dead process on this host is taken over.
 */
import { constants as fsc } from 'node:fs';
import { mkdir, open, readFile, unlink } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';

interface LockInfo {
  pid: number;
  hostname: string;
  started_at_ms: number;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The lock of one state directory. */
export class StateDirLock {
  readonly file: string;
  private held = false;

  /** @param dir the state directory (created 0700 by {@link acquire} when missing) */
  constructor(private readonly dir: string) {
    this.file = join(dir, 'state.lock');
  }

  /**
   * Takes the lock, waiting (polling every 250 ms) while another live process holds it.
   * @param onWait called once when the lock is busy, with a description of the holder
   * @param once when true, does not wait: returns false if busy
   * @returns true once held
   */
  async acquire(onWait: (holder: string) => void, once = false): Promise<boolean> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const mine: LockInfo = { pid: process.pid, hostname: hostname(), started_at_ms: Date.now() };
    let warned = false;
    for (;;) {
      try {
        const fh = await open(this.file, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o600);
        try {
          await fh.writeFile(JSON.stringify(mine));
          await fh.sync();
        } finally {
          await fh.close();
        }
        this.held = true;
        return true;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      }
      const holder = await this.holder();
      const stale =
        holder === null || typeof holder.pid !== 'number' || (holder.hostname === mine.hostname && (holder.pid === process.pid || !isAlive(holder.pid)));
      if (stale) {
        await unlink(this.file).catch(() => undefined);
        continue;
      }
      if (once) return false;
      if (!warned) {
        warned = true;
        onWait(`pid ${holder.pid} on ${holder.hostname} (lock ${this.file}; remove it only if that process is gone)`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /** Releases the lock if this process holds it. */
  async release(): Promise<void> {
    if (!this.held) return;
    this.held = false;
    const holder = await this.holder();
    if (holder?.pid === process.pid) await unlink(this.file).catch(() => undefined);
  }

  private async holder(): Promise<LockInfo | null> {
    try {
      return JSON.parse(await readFile(this.file, 'utf8')) as LockInfo;
    } catch {
      return null; // torn, unreadable or gone: treated as stale
    }
  }
}
