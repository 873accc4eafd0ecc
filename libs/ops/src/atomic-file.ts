/**
 * Durable whole-file replacement: write a temporary file next to the target, fsync it, rename
 * it over the target, fsync the directory. A crash at any instant leaves the old or the new
 * content, never a mix (used for the control plane's snapshot and the node's credentials).
 */
import { closeSync, constants as fsc, fsyncSync, openSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { open, rename, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';

let counter = 0;

/**
 * Durably replaces `path` with `data`.
 * @param mode permission bits of the new file (default 0600)
 * @throws the system error (`ENOSPC`, `EACCES`, ...); the temporary file is removed and the
 *   old content is untouched
 */
export async function writeFileAtomic(path: string, data: string | Uint8Array, mode = 0o600): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}-${++counter}`;
  try {
    const fh = await open(tmp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_TRUNC, mode);
    try {
      await fh.writeFile(data);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (e) {
    await unlink(tmp).catch(() => undefined);
    throw e;
  }
  const dir = await open(dirname(path), 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}

/**
 * {@link writeFileAtomic}, synchronous: for start-up paths that run before the event loop
 * matters (the role token file, written once at first start and on `control.auth_rotate`).
 * @param mode permission bits of the new file (default 0600)
 * @throws the system error; the temporary file is removed and the old content is untouched
 */
export function writeFileAtomicSync(path: string, data: string | Uint8Array, mode = 0o600): void {
  const tmp = `${path}.tmp-${process.pid}-${++counter}`;
  try {
    const fd = openSync(tmp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_TRUNC, mode);
    try {
      writeFileSync(fd, data);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  } catch (e) {
    try {
      unlinkSync(tmp);
    } catch {
      /* not created */
    }
    throw e;
  }
  const dir = openSync(dirname(path), 'r');
  try {
    fsyncSync(dir);
  } finally {
    closeSync(dir);
  }
}
