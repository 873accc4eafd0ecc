/**
 * Default StateStore adapter: one snapshot file `<state-dir>/state.json`, replaced atomically
 * (write temp, fsync, rename, fsync dir), optionally AES-256-GCM encrypted with a fresh
 * 96-bit nonce per write (issue 2 item 8, SPEC.md "Authentication" 5), and a lock file so one
 * process owns the directory at a time.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import { mkdir, open, readdir, readFile, unlink } from 'node:fs/promises';
import { writeFileAtomic } from '@svc/ops';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { LoadedSnapshot, StateLoadError, StateStore } from './state-store.port';

const FORMAT = 'svc-control-state';
const AAD = Buffer.from(`${FORMAT}/1`);
const ALG = 'AES-256-GCM';

interface SnapshotFile {
  format: string;
  saved_at_ms: number;
  state?: unknown;
  encryption?: { alg: string; iv: string; tag: string };
  ciphertext?: string;
}

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

export class FileStateStore implements StateStore {
  readonly file: string;
  private readonly lockFile: string;
  private locked = false;

  /**
   * @param dir the state directory (created 0700 if missing)
   * @param key 32-byte AES-256 key, or null for a plaintext snapshot
   */
  constructor(
    private readonly dir: string,
    private readonly key: Buffer | null,
  ) {
    this.file = join(dir, 'state.json');
    this.lockFile = join(dir, 'state.lock');
  }

  describe(): string {
    return `${this.file}${this.key ? ' (AES-256-GCM encrypted)' : ''}`;
  }

  async acquire(onWait: (holder: string) => void): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const mine: LockInfo = { pid: process.pid, hostname: hostname(), started_at_ms: Date.now() };
    let warned = false;
    for (;;) {
      try {
        const fh = await open(this.lockFile, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o600);
        try {
          await fh.writeFile(JSON.stringify(mine));
          await fh.sync();
        } finally {
          await fh.close();
        }
        this.locked = true;
        break;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      }
      let holder: LockInfo | null = null;
      try {
        holder = JSON.parse(await readFile(this.lockFile, 'utf8')) as LockInfo;
      } catch {
        holder = null; // torn or unreadable lock: treat as stale
      }
      const stale =
        holder === null ||
        typeof holder.pid !== 'number' ||
        (holder.hostname === mine.hostname && (holder.pid === process.pid || !isAlive(holder.pid)));
      if (stale) {
        await unlink(this.lockFile).catch(() => undefined);
        continue;
      }
      if (!warned) {
        warned = true;
        onWait(`pid ${holder!.pid} on ${holder!.hostname} (lock ${this.lockFile}; remove it only if that process is gone)`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    // Leftovers of writes interrupted by a crash.
    for (const name of await readdir(this.dir)) {
      if (name.startsWith('state.json.tmp-')) await unlink(join(this.dir, name)).catch(() => undefined);
    }
  }

  async release(): Promise<void> {
    if (!this.locked) return;
    this.locked = false;
    try {
      const holder = JSON.parse(await readFile(this.lockFile, 'utf8')) as LockInfo;
      if (holder.pid === process.pid) await unlink(this.lockFile);
    } catch {
      /* already gone */
    }
  }

  async load(): Promise<LoadedSnapshot | null> {
    let text: string;
    try {
      text = await readFile(this.file, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw new StateLoadError(`cannot read ${this.file}: ${(e as Error).message}`);
    }
    let doc: SnapshotFile;
    try {
      doc = JSON.parse(text) as SnapshotFile;
    } catch (e) {
      throw new StateLoadError(
        `${this.file} is not a readable snapshot (${(e as Error).message}); it was left untouched. ` +
          'Restore it from a backup or move it away to start with an empty state.',
      );
    }
    if (typeof doc !== 'object' || doc === null || doc.format !== FORMAT) {
      throw new StateLoadError(`${this.file} is not a ${FORMAT} snapshot; it was left untouched`);
    }
    if (doc.encryption) {
      if (!this.key) {
        throw new StateLoadError(`${this.file} is encrypted; set SVC_CONTROL_STATE_KEY_HEX to the key it was written with`);
      }
      return { state: this.decrypt(doc), needsRewrite: false };
    }
    if (!('state' in doc)) throw new StateLoadError(`${this.file} has no state; it was left untouched`);
    return { state: doc.state, needsRewrite: this.key !== null };
  }

  async save(json: string): Promise<void> {
    const doc: SnapshotFile = { format: FORMAT, saved_at_ms: Date.now() };
    let body: string;
    if (this.key) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', this.key, iv);
      cipher.setAAD(AAD);
      const ct = Buffer.concat([cipher.update(json, 'utf8'), cipher.final()]);
      doc.encryption = { alg: ALG, iv: iv.toString('base64'), tag: cipher.getAuthTag().toString('base64') };
      doc.ciphertext = ct.toString('base64');
      body = JSON.stringify(doc);
    } else {
      // The state is embedded as already-serialised JSON (no second stringify).
      body = `${JSON.stringify(doc).slice(0, -1)},"state":${json}}`;
    }
    await writeFileAtomic(this.file, body);
  }

  private decrypt(doc: SnapshotFile): unknown {
    const enc = doc.encryption!;
    try {
      if (enc.alg !== ALG || typeof doc.ciphertext !== 'string') throw new Error('unsupported encryption header');
      const decipher = createDecipheriv('aes-256-gcm', this.key!, Buffer.from(enc.iv, 'base64'));
      decipher.setAAD(AAD);
      decipher.setAuthTag(Buffer.from(enc.tag, 'base64'));
      const plain = Buffer.concat([decipher.update(Buffer.from(doc.ciphertext, 'base64')), decipher.final()]);
      return JSON.parse(plain.toString('utf8'));
    } catch {
      throw new StateLoadError(
        `cannot decrypt ${this.file}: SVC_CONTROL_STATE_KEY_HEX is not the key it was written with, or the file is damaged; it was left untouched`,
      );
    }
  }
}
