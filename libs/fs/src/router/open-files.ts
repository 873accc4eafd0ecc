/**
 * The open-file table of the workspace router (issue 3 item 7): router file handles (`fh`) ->
 * mount, path, endpoint and remote handle; open/create, read/write/fsync/release on them, and
 * the transparent re-open of a read-only handle on the next candidate when its session died.
 */
import { FramedData } from '@svc/client';
import { Errno, FsError } from '@svc/protocol/wire';
import { readChunks, writeChunks } from './chunked-io';
import type { ActiveEndpoint, MountRoutes, OpContext } from './failover';
import { Attr, OpenFlags } from './fs-types';
import { retryStale, walk } from './path-walk';
import { isEndpointFailure } from './router-errors';

/** An open file of the router: which mount/path, on which endpoint, with which remote handle. */
export interface OpenFile {
  fh: number;
  /** Workspace path. */
  path: string;
  mountPath: string;
  /** Export-relative path. */
  rel: string;
  /** Linux O_* bits it was opened with. */
  flags: number;
  /** Opened read-only (no O_TRUNC/O_CREAT): may be re-opened elsewhere after a failover. */
  readOnly: boolean;
  active: ActiveEndpoint;
  /** The node's handle on `active`. */
  h: number;
  reopening: Promise<void> | null;
}

/** Where a file is: workspace path, mount path and export-relative path. */
export interface FileTarget {
  path: string;
  mountPath: string;
  rel: string;
}

/** Router file handles over the mounts of {@link MountRoutes}. */
export class OpenFiles {
  private readonly files = new Map<number, OpenFile>();
  private nextFh = 1;

  constructor(private readonly routes: Pick<MountRoutes, 'withMount' | 'endpointFailed' | 'route' | 'maxAttempts' | 'deadline' | 'extendDeadline' | 'byDeadline'>) {}

  /** Session keys of every open file's endpoint (to keep them in the pool). */
  sessionKeys(): string[] {
    return [...this.files.values()].map((f) => f.active.session.key);
  }

  /** Forgets every handle (the router closed). */
  clear(): void {
    this.files.clear();
  }

  /**
   * Opens `t` on its mount. Opening read-only is idempotent (retried on the next candidate);
   * with write flags the open is a mutation (EIO if the endpoint failed while it was in flight).
   * @param flags Linux O_* bits ({@link OpenFlags})
   * @throws FsError ENOENT, EACCES, EROFS, EIO, MountUnavailableError
   */
  async open(t: FileTarget, flags: number): Promise<{ fh: number }> {
    const readOnly = (flags & OpenFlags.O_ACCMODE) === OpenFlags.O_RDONLY && (flags & (OpenFlags.O_TRUNC | OpenFlags.O_CREAT)) === 0;
    const { active, h } = await this.routes.withMount(t.mountPath, (a, ctx) => this.openOn(a, ctx, t.rel, flags, readOnly));
    const fh = this.nextFh++;
    this.files.set(fh, { fh, path: t.path, mountPath: t.mountPath, rel: t.rel, flags, readOnly, active, h, reopening: null });
    return { fh };
  }

  /**
   * Creates (or, without O_EXCL, opens) `name` in directory `parentRel` of the mount: a
   * mutation (EIO if in flight when the endpoint failed).
   * @param mode permission bits
   * @param flags O_* bits; O_CREAT is added
   * @throws FsError EEXIST (O_EXCL), ENOENT (parent), EROFS, EIO, MountUnavailableError
   */
  async create(t: FileTarget & { parentRel: string; name: string }, mode: number, flags: number): Promise<{ fh: number; attr: Attr }> {
    const { active, h, attr } = await this.routes.withMount(t.mountPath, async (a, ctx) =>
      retryStale(a, t.parentRel, async () => {
        const p = await walk(a, t.parentRel, true);
        ctx.committed = true;
        const res = await a.session.client.request<{ attr: Attr; h: number }>('create', { node: p.id }, { name: t.name, mode, flags: flags | OpenFlags.O_CREAT });
        a.cache.set(t.rel, res.attr.id);
        return { active: a, h: res.h, attr: res.attr };
      }),
    );
    const fh = this.nextFh++;
    this.files.set(fh, { fh, path: t.path, mountPath: t.mountPath, rel: t.rel, flags, readOnly: false, active, h, reopening: null });
    return { fh, attr };
  }

  /**
   * Reads up to `len` bytes at byte offset `off` (split into `max_read` requests in flight).
   * A read-only handle whose session died is re-opened on the next candidate transparently.
   * @returns the bytes (shorter than `len` only at end of file) and whether EOF was reached
   * @throws FsError EBADF (unknown handle), EIO (session lost on a writable handle)
   */
  async read(fh: number, off: number, len: number): Promise<{ data: Buffer; eof: boolean }> {
    const f = this.file(fh);
    // One budget for the read, its re-open elsewhere and the retry (MountRoutes.withMount).
    let deadline = this.routes.deadline();
    for (let attempt = 0; ; attempt++) {
      const active = f.active;
      try {
        const read = readChunks(active.session.client, f.h, off, len);
        // after a re-open elsewhere, the retry must be answered within the read's budget
        return await (attempt === 0 ? read : this.routes.byDeadline(read, deadline, f.path, { committed: false }));
      } catch (e) {
        if (!isEndpointFailure(e)) throw e;
        this.routes.endpointFailed(this.routes.route(f.mountPath), active, e);
        deadline = this.routes.extendDeadline(deadline, active);
        if (!f.readOnly) throw new FsError(Errno.EIO, `${f.path}: the session to ${active.session.url} was lost; the file must be opened again`);
        if (attempt >= this.routes.maxAttempts(f.mountPath)) throw new FsError(Errno.EIO, `${f.path}: ${e.message}`);
        await this.reopen(f, active, deadline);
      }
    }
  }

  /**
   * Writes `input` at byte offset `off` (split into `max_write` requests in flight). A write
   * whose session failed while it was in flight is EIO.
   * @returns bytes written (all of them unless an error is thrown)
   * @throws FsError EBADF, EIO, ENOSPC, EROFS
   */
  async write(fh: number, off: number, input: Uint8Array | FramedData): Promise<number> {
    const f = this.file(fh);
    try {
      return await writeChunks(f.active.session.client, f.h, f.path, off, input);
    } catch (e) {
      if (isEndpointFailure(e)) {
        this.routes.endpointFailed(this.routes.route(f.mountPath), f.active, e);
        throw new FsError(Errno.EIO, `${f.path}: the session to ${f.active.session.url} was lost during a write`);
      }
      throw e;
    }
  }

  /**
   * Flushes a handle to stable storage on the node.
   * @throws FsError EBADF, EIO
   */
  async fsync(fh: number): Promise<void> {
    const f = this.file(fh);
    try {
      await f.active.session.client.request('fsync', { h: f.h });
    } catch (e) {
      if (isEndpointFailure(e)) throw new FsError(Errno.EIO, `${f.path}: the session to ${f.active.session.url} was lost`);
      throw e;
    }
  }

  /**
   * Closes a handle. For a read-only handle a lost session is not an error; for a writable
   * one it is EIO (written data may be lost).
   * @throws FsError EBADF, EIO
   */
  async release(fh: number): Promise<void> {
    const f = this.file(fh);
    this.files.delete(fh);
    try {
      await f.active.session.client.request('close', { h: f.h });
    } catch (e) {
      if (isEndpointFailure(e)) {
        if (f.readOnly) return;
        throw new FsError(Errno.EIO, `${f.path}: the session to ${f.active.session.url} was lost before close`);
      }
      throw e;
    }
  }

  /** @throws FsError EBADF for an unknown handle */
  private file(fh: number): OpenFile {
    const f = this.files.get(fh);
    if (!f) throw new FsError(Errno.EBADF, `unknown file handle ${fh}`);
    return f;
  }

  /** Re-opens `f` (read-only) on the mount's next endpoint after `failed` failed; concurrent callers share one re-open. */
  private async reopen(f: OpenFile, failed: ActiveEndpoint, deadline: number): Promise<void> {
    if (f.active !== failed) return;
    if (!f.reopening) {
      f.reopening = (async () => {
        const { active, h } = await this.routes.withMount(f.mountPath, (a, ctx) => this.openOn(a, ctx, f.rel, f.flags, true), deadline);
        f.active = active;
        f.h = h;
      })().finally(() => {
        f.reopening = null;
      });
    }
    await f.reopening;
  }

  private openOn(a: ActiveEndpoint, ctx: OpContext, rel: string, flags: number, readOnly: boolean): Promise<{ active: ActiveEndpoint; h: number }> {
    return retryStale(a, rel, async () => {
      const w = await walk(a, rel, true);
      if (!readOnly) ctx.committed = true;
      const r = await a.session.client.request<{ h: number }>('open', { node: w.id }, { flags });
      return { active: a, h: r.h };
    });
  }
}
