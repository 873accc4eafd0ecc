/**
 * The open-file table of the workspace router: router file handles (`fh`) ->
 * mount, path, endpoint and remote handle; open/create, read/write/fsync/release on them, and
 * the transparent re-open of a read-only handle on the next candidate when its session died.
 *
 * With the `open_read` extension (docs/protocol.md "FS extensions") a read-only open brings the
 * file's first bytes along: reads of them are answered from memory, and a file that came back
 * whole is closed by the node at once (its handle here has no node handle, `closed`), so a small
 * file costs one round trip and no close. A read at or past the end of what came back (the file
 * may have grown) opens it on the node again. The node's `e_fs_inval` (`data`/`all`) for the
 * file drops the bytes kept for its open handles.
 */
import { FramedData, framedBytes } from '@svc/client';
import { Cred, Errno, FsError, FsPayload, GetlkReply, LockPayload, WriteThen } from '@svc/protocol/wire';
import { readChunks, writeChunks } from './chunked-io';
import type { ActiveEndpoint, MountRoutes, OpContext } from './failover';
import { Attr, OpenFlags } from './fs-types';
import type { EndpointSession } from './endpoint-pool';
import { withNode } from './path-walk';
import { isEndpointFailure } from './router-errors';

/**
 * What the node did with a write that carried {@link WriteThen} ({@link OpenFiles.writeThen}):
 * `done` false when `then` was not done; else `attr` (after `then.set`) or `error` (FsError of
 * the step of `then` that failed; the bytes are written).
 */
export interface WriteThenResult {
  done: boolean;
  attr?: Attr;
  error?: FsError;
}

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
  /** The node's handle on `active` (0 while `closed`). */
  h: number;
  reopening: Promise<void> | null;
  /** Node id of the file on `active` (0 when unknown: created files). */
  node: number;
  /** The first bytes of the file, sent with the open (open_read); null when none or dropped. */
  first: { data: Buffer; eof: boolean } | null;
  /** The node closed its handle already (the whole file came with the open): reads past `first` re-open it. */
  closed: boolean;
  /** The session on which locks were taken through this handle (they live and die with it), null when none. */
  lockedOn?: EndpointSession | null;
}

/** Default bytes a read-only open brings along with `open_read` (128 KiB: one kernel read-ahead). */
export const DEFAULT_OPEN_READ_BYTES = 128 * 1024;

/** What {@link OpenFiles.openOn} opened. */
interface Opened {
  active: ActiveEndpoint;
  h: number;
  node: number;
  attr?: Attr;
  first: OpenFile['first'];
  closed: boolean;
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

  /**
   * @param openReadBytes default bytes a read-only open brings along when the node granted
   *   `open_read` (0: plain opens)
   */
  constructor(
    private readonly routes: Pick<MountRoutes, 'withMount' | 'endpointFailed' | 'route' | 'maxAttempts' | 'deadline' | 'extendDeadline' | 'byDeadline'>,
    private readonly openReadBytes = DEFAULT_OPEN_READ_BYTES,
  ) {}

  /** Session keys of every open file's endpoint (to keep them in the pool). */
  sessionKeys(): string[] {
    return [...this.files.values()].filter((f) => !f.closed).map((f) => f.active.session.key);
  }

  /**
   * The node pushed that the content of node `node` (on session `s`) changed: the first bytes
   * kept for its open handles are dropped, so reads go to the node again.
   */
  dataChanged(s: EndpointSession, node: number): void {
    for (const f of this.files.values()) if (f.first && f.node === node && f.active.session === s) f.first = null;
  }

  /**
   * The file of handle `fh` is being written through another handle of this client: the first
   * bytes kept for `fh` are dropped, so its reads go to the node. Unknown handles are ignored.
   */
  dropFirst(fh: number): void {
    const f = this.files.get(fh);
    if (f) f.first = null;
  }

  /** Forgets every handle (the router closed). */
  clear(): void {
    this.files.clear();
  }

  /**
   * Opens `t` on its mount. Opening read-only is idempotent (retried on the next candidate);
   * with write flags the open is a mutation (EIO if the endpoint failed while it was in flight).
   * A read-only open on a node that granted `open_read` asks for the first `readBytes` bytes
   * (clamped by the node to max_read) and lets the node close a file that came back whole.
   * @param flags Linux O_* bits ({@link OpenFlags})
   * @param readBytes bytes to bring along (default the constructor's `openReadBytes`; 0: none)
   * @returns the router handle, the node id of the file opened, and its attr when the node sent it (open_read)
   * @throws FsError ENOENT, EACCES, EROFS, EIO, MountUnavailableError
   */
  async open(t: FileTarget, flags: number, readBytes = this.openReadBytes): Promise<{ fh: number; id: number; attr?: Attr }> {
    const readOnly = (flags & OpenFlags.O_ACCMODE) === OpenFlags.O_RDONLY && (flags & (OpenFlags.O_TRUNC | OpenFlags.O_CREAT)) === 0;
    const o = await this.routes.withMount(t.mountPath, (a, ctx) => this.openOn(a, ctx, t.rel, flags, readOnly, readOnly ? readBytes : 0));
    return { fh: this.add(t, flags, readOnly, o), id: o.node, attr: o.attr };
  }

  /**
   * Creates (or, without O_EXCL, opens) `name` in directory `parentRel` of the mount: a
   * mutation (EIO if in flight when the endpoint failed).
   * @param mode permission bits
   * @param flags O_* bits; O_CREAT is added
   * @param cred the caller, sent to a node that granted `posix` (it may make the file the caller's)
   * @throws FsError EEXIST (O_EXCL), ENOENT (parent), EROFS, EIO, MountUnavailableError
   */
  async create(
    t: FileTarget & { parentRel: string; name: string },
    mode: number,
    flags: number,
    cred?: Cred,
  ): Promise<{ fh: number; attr: Attr; active: ActiveEndpoint; dir: number; dirAttr?: Attr }> {
    const { active, h, attr, dir, dirAttr } = await this.routes.withMount(t.mountPath, async (a, ctx) =>
      withNode(a, t.parentRel, async (p) => {
        ctx.committed = true;
        const payload = { name: t.name, mode, flags: flags | OpenFlags.O_CREAT };
        const res = await a.session.client.request('create', { node: p.id }, cred && a.session.client.has('posix') ? { ...payload, cred } : payload);
        a.cache.set(t.rel, res.attr.id);
        return { active: a, h: res.h, attr: res.attr, dir: p.id, dirAttr: res.dir_attr };
      }),
    );
    return { fh: this.add(t, flags, false, { active, h, node: attr.id, first: null, closed: false }), attr, active, dir, dirAttr };
  }

  /** Adds a file opened on the node (`o`) to the table under a new router handle, which it returns. */
  private add(t: FileTarget, flags: number, readOnly: boolean, o: Omit<Opened, 'attr'>): number {
    const fh = this.nextFh++;
    this.files.set(fh, {
      fh,
      path: t.path,
      mountPath: t.mountPath,
      rel: t.rel,
      flags,
      readOnly,
      active: o.active,
      h: o.h,
      reopening: null,
      node: o.node,
      first: o.first,
      closed: o.closed,
    });
    return fh;
  }

  /**
   * Reads up to `len` bytes at byte offset `off` (split into `max_read` requests in flight).
   * A read-only handle whose session died is re-opened on the next candidate transparently.
   * @returns the bytes (shorter than `len` only at end of file) and whether EOF was reached
   * @throws FsError EBADF (unknown handle), EIO (session lost on a writable handle)
   */
  async read(fh: number, off: number, len: number): Promise<{ data: Buffer; eof: boolean }> {
    const f = this.file(fh);
    const first = f.first;
    // Served from the bytes of the open: a read that starts inside them (or at 0 of a file that came back whole).
    if (first && (off < first.data.length || (first.eof && off === 0))) {
      const end = off + len;
      const kept = first.data.subarray(off, Math.min(end, first.data.length));
      if (end <= first.data.length || first.eof) return { data: kept, eof: first.eof && kept.length < len };
      // The rest of the range lies past what came with the open.
      const rest = await this.readNode(f, first.data.length, end - first.data.length);
      return { data: Buffer.concat([kept, rest.data]), eof: rest.eof };
    }
    if (f.closed) {
      try {
        await this.ensureOpen(f);
      } catch (e) {
        // Removed since: the file as it was opened ended there.
        if (first?.eof && off >= first.data.length && e instanceof FsError && e.errno === Errno.ENOENT) return { data: Buffer.alloc(0), eof: true };
        throw e;
      }
    }
    return this.readNode(f, off, len);
  }

  /** Reads from the node's handle of `f`, re-opening a read-only handle whose session died. */
  private async readNode(f: OpenFile, off: number, len: number): Promise<{ data: Buffer; eof: boolean }> {
    // One budget for the read, its re-open elsewhere and the retry (MountRoutes.withMount).
    let deadline = this.routes.deadline();
    if (f.closed) await this.ensureOpen(f, false, deadline);
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
   * Writes `input` at byte offset `off` through handle `fh` and has the node do `then` once all
   * of it is written, in one request (the `write_then` extension, docs/protocol.md "FS
   * extensions").
   * @returns null when that cannot be one request (the node did not grant `write_then`, the
   *   handle has no node handle, `input` is longer than `max_write`): nothing was sent. Else
   *   the node's answer: `done` false when it wrote fewer bytes than `input` (the rest is then
   *   written as {@link write} does, and `then` was not done); `attr` after `then.set`; `error`
   *   when a step of `then` failed after the bytes were written
   * @throws as {@link write}
   */
  async writeThen(fh: number, off: number, input: FramedData, then: WriteThen): Promise<WriteThenResult | null> {
    const f = this.file(fh);
    const client = f.active.session.client;
    if (f.closed || !client.has('write_then') || input.len > client.maxWrite) return null;
    try {
      const r = await client.writeThen(f.h, off, input, then);
      if (r.n < input.len) {
        if (r.n <= 0) throw new FsError(Errno.EIO, `${f.path}: the node wrote 0 bytes`);
        await writeChunks(client, f.h, f.path, off + r.n, framedBytes(input).subarray(r.n));
        return { done: false };
      }
      if (r.then_errno !== undefined) return { done: true, error: new FsError(r.then_errno, `${f.path}: ${r.then_message ?? 'failed after the write'}`) };
      return r.attr ? { done: true, attr: r.attr } : { done: true };
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
    if (f.closed) return;
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
    if (f.closed) return;
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

  /**
   * Takes, changes or releases a lock on the file of handle `fh` through the node that serves it
   * (`lock`, the `posix` extension). A waiting request is cancelled on the node when `signal`
   * aborts (it then rejects EINTR).
   * @throws FsError ENOLCK when locks taken through this handle were on a session that is gone
   *   (a failover or a lost session released them; reported once), or the node holds no locks;
   *   EAGAIN, EDEADLK, EINTR, EBADF from the node
   */
  async lock(fh: number, payload: LockPayload, signal?: AbortSignal): Promise<void> {
    const f = await this.lockable(fh);
    const session = f.active.session;
    let tag: number | null = null;
    const cancel = () => {
      if (tag !== null) void session.client.lockCancel(tag).catch(() => undefined);
    };
    signal?.addEventListener('abort', cancel, { once: true });
    try {
      await session.client.lock(f.h, payload, (t) => (tag = t));
    } catch (e) {
      if (isEndpointFailure(e)) throw new FsError(Errno.ENOLCK, `${f.path}: the session to ${session.url} was lost; locks taken through it are gone`);
      throw e;
    } finally {
      signal?.removeEventListener('abort', cancel);
    }
    if (payload.type !== 'un') f.lockedOn = session;
  }

  /**
   * The first lock of another owner that conflicts with `payload` on the file of handle `fh`
   * (`getlk`), or `{type: "un"}`.
   * @throws FsError as {@link lock}
   */
  async getlk(fh: number, payload: FsPayload<'getlk'>): Promise<GetlkReply> {
    const f = await this.lockable(fh);
    try {
      return await f.active.session.client.request('getlk', { h: f.h }, payload);
    } catch (e) {
      if (isEndpointFailure(e)) throw new FsError(Errno.ENOLCK, `${f.path}: the session to ${f.active.session.url} was lost`);
      throw e;
    }
  }

  /**
   * The attributes of the open file of handle `fh` from the node (`fgetattr`), also once its name
   * is gone.
   * @throws FsError EBADF, ENOTSUP (the node does not grant `posix`, or the handle's node handle
   *   is closed), EIO (its session was lost)
   */
  async fgetattr(fh: number): Promise<Attr> {
    const f = this.file(fh);
    const client = f.active.session.client;
    if (f.closed || !client.has('posix')) throw new FsError(Errno.ENOTSUP, `${f.path}: the node cannot tell the attributes of this open file`);
    try {
      return (await client.request('fgetattr', { h: f.h })).attr;
    } catch (e) {
      if (isEndpointFailure(e)) throw new FsError(Errno.EIO, `${f.path}: the session to ${f.active.session.url} was lost`);
      throw e;
    }
  }

  /**
   * Sets the size of the open file of handle `fh` to `size` bytes on the node (`ftruncate`):
   * allowed by the handle's write access whatever the file's mode now, also once its name is
   * gone.
   * @throws FsError EBADF, EINVAL (not open for writing), ENOTSUP (the node does not grant
   *   `posix`, or the handle's node handle is closed: truncate by path instead), EIO (its
   *   session was lost)
   */
  async ftruncate(fh: number, size: number): Promise<Attr> {
    const f = this.file(fh);
    const client = f.active.session.client;
    if (f.closed || !client.has('posix')) throw new FsError(Errno.ENOTSUP, `${f.path}: the node cannot truncate this open file`);
    try {
      return (await client.request('ftruncate', { h: f.h }, { sz: size })).attr;
    } catch (e) {
      if (isEndpointFailure(e)) {
        this.routes.endpointFailed(this.routes.route(f.mountPath), f.active, e);
        throw new FsError(Errno.EIO, `${f.path}: the session to ${f.active.session.url} was lost during a truncate`);
      }
      throw e;
    }
  }

  /**
   * fallocate(2) on the node through handle `fh` (`fallocate`; `mode` one of FALLOCATE_MODES,
   * `off` and `len` in bytes).
   * @throws FsError EBADF, ENOTSUP (the node does not grant `posix`, the handle's node handle is
   *   closed, or the mode or the node's filesystem has no such allocation), ENOSPC, EIO (its
   *   session was lost)
   */
  async fallocate(fh: number, mode: number, off: number, len: number): Promise<Attr> {
    const f = this.file(fh);
    const client = f.active.session.client;
    if (f.closed || !client.has('posix')) throw new FsError(Errno.ENOTSUP, `${f.path}: the node cannot allocate space for this open file`);
    try {
      return (await client.request('fallocate', { h: f.h }, { mode, off, len })).attr;
    } catch (e) {
      if (isEndpointFailure(e)) {
        this.routes.endpointFailed(this.routes.route(f.mountPath), f.active, e);
        throw new FsError(Errno.EIO, `${f.path}: the session to ${f.active.session.url} was lost during a fallocate`);
      }
      throw e;
    }
  }

  /** Handle `fh` with a node handle on a session that holds its locks. @throws FsError EBADF, ENOLCK */
  private async lockable(fh: number): Promise<OpenFile> {
    const f = this.file(fh);
    if (f.lockedOn && (f.lockedOn !== f.active.session || !f.lockedOn.isOpen)) {
      const gone = f.lockedOn;
      f.lockedOn = null;
      throw new FsError(Errno.ENOLCK, `${f.path}: the session to ${gone.url} that held this file's locks is gone (a failover moves no locks)`);
    }
    // The node closed it at the end of the file: a lock needs a node handle.
    if (f.closed) await this.ensureOpen(f);
    if (!f.active.session.client.has('posix'))
      throw new FsError(Errno.ENOLCK, `${f.path}: the node at ${f.active.session.url} holds no locks (no posix extension)`);
    return f;
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
    await this.ensureOpen(f, true, deadline);
  }

  /**
   * Opens `f` (read-only) on the node again: after its session died (`force`), or when the
   * node closed it at the end of the file (`closed`). Concurrent callers share one open.
   * @param deadline performance.now() time, ms, by which the re-open must end (the operation's budget)
   */
  private async ensureOpen(f: OpenFile, force = false, deadline = this.routes.deadline()): Promise<void> {
    if (!force && !f.closed) return;
    if (!f.reopening) {
      f.reopening = (async () => {
        const o = await this.routes.withMount(f.mountPath, (a, ctx) => this.openOn(a, ctx, f.rel, f.flags, true, 0), deadline);
        f.active = o.active;
        f.h = o.h;
        f.node = o.node;
        f.closed = false;
      })().finally(() => {
        f.reopening = null;
      });
    }
    await f.reopening;
  }

  /**
   * Opens `rel` on endpoint `a`: with `open_read` when `readBytes` > 0 and the node granted it
   * (the node closes a file that came back whole), else a plain `open`.
   */
  private openOn(a: ActiveEndpoint, ctx: OpContext, rel: string, flags: number, readOnly: boolean, readBytes: number): Promise<Opened> {
    return withNode(a, rel, async (w) => {
      if (!readOnly) ctx.committed = true;
      if (readOnly && readBytes > 0 && a.session.client.has('open_read')) {
        const { reply, data } = await a.session.client.openRead(w.id, flags, readBytes, true);
        const first = reply.n === undefined ? null : { data, eof: reply.eof === true };
        return { active: a, h: reply.h, node: w.id, attr: reply.attr, first, closed: reply.closed === true };
      }
      const r = await a.session.client.request('open', { node: w.id }, { flags });
      return { active: a, h: r.h, node: w.id, first: null, closed: false };
    });
  }
}
