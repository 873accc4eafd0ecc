/**
 * The fuse-native operations table of the FUSE layer: each operation over the
 * router, the caches, the open-file table, read-ahead and write-behind, answered through the
 * poller. Mutations keep the caches coherent with what this mount did.
 */
import { Attr, Errno, FsError, NodeKind, OpenFlags, StatFs } from '@svc/protocol/wire';
import type { WorkspaceRouter } from '../router/workspace-router';
import { FuseCaches, openProof } from './fuse-caches';
import { FuseHandles, OpenState } from './fuse-handles';
import type { FuseInodes } from './fuse-inodes';
import { Cb, FusePoller } from './fuse-poller';
import { FuseStat, fuseErrno, fuseTimeUnitNs, toFuseStat } from './fuse-stat';
import type { ListAhead } from './list-ahead';
import { PrefetchPolicy } from './prefetch-policy';
import { ReadAhead } from './read-ahead';
import { WriteBehind } from './write-behind';

/** fuse-native's utimens argument for UTIME_OMIT (scripts/fuse-native-build.cjs: high word 0xFFFFFFFE). */
export const FUSE_UTIME_OMIT = 0xfffffffe * 2 ** 32;
/** fuse-native's utimens argument for UTIME_NOW (high word 0xFFFFFFFF). */
export const FUSE_UTIME_NOW = 0xffffffff * 2 ** 32;

/**
 * A time as fuse-native's utimens hands it (since the epoch, in {@link fuseTimeUnitNs} units) in ns
 * since the epoch; undefined for {@link FUSE_UTIME_OMIT} (leave that time as it is), the mount's
 * clock for {@link FUSE_UTIME_NOW}.
 */
export function fuseTimeNs(t: number): number | undefined {
  if (t === FUSE_UTIME_OMIT) return undefined;
  if (t === FUSE_UTIME_NOW) return Date.now() * 1e6;
  return Math.round(t * fuseTimeUnitNs());
}

/** The open(2) flags a FUSE create passes to the node's create (the access mode and what acts on the node). */
const CREATE_FLAGS = OpenFlags.O_ACCMODE | OpenFlags.O_EXCL | OpenFlags.O_TRUNC | OpenFlags.O_APPEND | OpenFlags.O_DSYNC | OpenFlags.O_SYNC;

/** The parts {@link FuseOperations} works with. */
export interface FuseOperationsParts {
  router: WorkspaceRouter;
  caches: FuseCaches;
  handles: FuseHandles;
  reads: ReadAhead;
  writes: WriteBehind;
  poller: FusePoller;
  /** Starts prefetch batches as readers go through a directory. */
  prefetch: PrefetchPolicy;
  /** Lists directories ahead of a recursive walk (default: none). */
  listAhead?: Pick<ListAhead, 'onList'>;
  /** Inode numbers reported by getattr (default: the node ids). */
  inodes?: Pick<FuseInodes, 'of'>;
  /** Refuse every mutation with EROFS. */
  readOnly: boolean;
}

/** The FUSE operations of one mount; {@link table} is what fuse-native is given. */
export class FuseOperations {
  private readonly router: WorkspaceRouter;
  private readonly caches: FuseCaches;
  private readonly handles: FuseHandles;
  private readonly reads: ReadAhead;
  private readonly writes: WriteBehind;
  private readonly poller: FusePoller;
  private readonly prefetch: PrefetchPolicy;
  private readonly listAhead: Pick<ListAhead, 'onList'>;
  private readonly readOnly: boolean;
  private readonly inodes: Pick<FuseInodes, 'of'>;

  constructor(parts: FuseOperationsParts) {
    this.prefetch = parts.prefetch;
    this.listAhead = parts.listAhead ?? { onList: () => undefined };
    this.inodes = parts.inodes ?? { of: (_path, id) => id };
    this.router = parts.router;
    this.caches = parts.caches;
    this.handles = parts.handles;
    this.reads = parts.reads;
    this.writes = parts.writes;
    this.poller = parts.poller;
    this.readOnly = parts.readOnly;
  }

  /** The fuse-native stat of `path` with attributes `attr`, with the mount's inode number. */
  private stat(path: string, attr: Attr): FuseStat {
    return toFuseStat(attr, this.inodes.of(path, attr.id));
  }

  /** @throws FsError EROFS on a read-only mount */
  private refuseWrite(): void {
    if (this.readOnly) throw new FsError(Errno.EROFS);
  }

  /**
   * FUSE open. Writers (and O_TRUNC) are opened on the node at once, so EROFS/EACCES/ENOENT
   * come back here. A reader is served from prefetched content (no round trip, never opened on
   * the node) when the content was read with the identity of the file's cached attributes,
   * waiting for a batch in flight that brings it; else opened lazily (no round trip) when this
   * mount opened the same file for reading before and its cached attributes still match that
   * open's {@link openProof}; otherwise at once, which records the proof.
   * @returns the FUSE file handle
   * @throws FsError EROFS (read-only mount), the router's open error
   */
  private async open(path: string, flags: number): Promise<number> {
    const writable = (flags & OpenFlags.O_ACCMODE) !== OpenFlags.O_RDONLY || (flags & OpenFlags.O_TRUNC) !== 0;
    if (writable) this.refuseWrite();
    // One order per file: what this mount wrote through other handles reaches the node before
    // the open reads anything (open_read, prefetched content) or truncates.
    await this.flushPath(path);
    const state = this.handles.state(path, writable, flags & ~OpenFlags.O_CREAT);
    const attr = writable ? undefined : this.caches.cachedAttr(path);
    if (attr) state.reads.sizeHint = attr.sz;
    if (!writable) void this.prefetch.opened(path);
    if (attr?.k === NodeKind.FILE) state.content = await this.prefetched(path, attr);
    if (!state.content && (!attr || attr.k !== NodeKind.FILE || this.caches.proofOf(path) !== openProof(attr))) await this.handles.nodeHandle(state);
    const fh = this.handles.add(state);
    if (writable) this.caches.forget(path);
    return fh;
  }

  /**
   * The prefetched content of `path` for attributes `attr`, taken from the store (waiting for a
   * batch in flight that brings it); records the open proof (the node read it). Null: none.
   */
  private async prefetched(path: string, attr: Attr): Promise<Buffer | null> {
    const contents = this.caches.contents;
    let data = contents.take(path, attr);
    if (!data) {
      const batch = contents.pending(path);
      if (!batch) return null;
      await batch.done;
      // The attributes again: the batch may have been overtaken by a change.
      const now = this.caches.cachedAttr(path);
      data = now ? contents.take(path, now) : undefined;
    }
    if (!data) return null;
    this.caches.recordProof(path, openProof(attr));
    return data;
  }

  /**
   * FUSE read: `len` bytes at byte offset `pos` into `buf`, after sending this handle's
   * pending writes: from the prefetched content of the handle, else through read-ahead
   * (opening the file on the node if that was deferred). The first read of a read-only handle
   * tells the prefetch policy.
   * @returns bytes copied (fewer than `len` only at the end of the file)
   * @throws FsError EBADF (unknown handle), a pending write's error, the router's error
   */
  private async read(fd: number, buf: Buffer, len: number, pos: number): Promise<number> {
    const state = this.handles.get(fd);
    if (!state) throw new FsError(Errno.EBADF);
    if (!state.readStarted) {
      state.readStarted = true;
      // The policy plans after this read is answered.
      if (!state.writable) void this.prefetch.onRead(state.path);
    }
    if (state.content) return pos >= state.content.length ? 0 : state.content.copy(buf, 0, pos, Math.min(state.content.length, pos + len));
    // One order per file: the writes of every handle of this file reach the node first.
    await this.flushPath(state.path);
    if (state.writes.error) await this.writes.flush(state.writes);
    const fh = state.fh ?? (await this.handles.nodeHandle(state));
    return this.reads.read(state.reads, fh, buf, len, pos);
  }

  /**
   * FUSE write: `data` at byte offset `pos`, through write-behind. Errors of the background
   * writes are reported by the next write, flush, fsync or release.
   * @returns bytes taken (all of `data`)
   * @throws FsError EROFS, EBADF, a background write's error
   */
  private async write(fd: number, data: Buffer, pos: number): Promise<number> {
    this.refuseWrite();
    const state = this.handles.get(fd);
    if (!state) throw new FsError(Errno.EBADF);
    const e = state.writes.takeError();
    // eslint-disable-next-line @typescript-eslint/only-throw-error -- rethrows what a background write threw, as it was
    if (e) throw e;
    state.reads.reset(true);
    // Other handles of the file must not answer reads from what they hold of its old content.
    this.handles.contentChanged(state);
    await this.writes.write(state.writes, data, pos);
    this.caches.forget(state.path);
    return data.length;
  }

  /**
   * Sends the pending writes of every handle of `path` and waits for them (before the file's
   * content, size, times or name is used): the one order per file that makes a read, getattr,
   * setattr, fsync, rename or unlink through any handle or path see every earlier write made
   * through this mount. A write's error stays with its handle, for that handle's next write,
   * flush, fsync or release to report (the writer learns of it, not whoever came next).
   */
  private async flushPath(path: string): Promise<void> {
    let dirty: OpenState[] | null = null;
    for (const s of this.handles.ofPath(path)) if (s.writes.dirty) (dirty ??= []).push(s);
    if (dirty) await Promise.all(dirty.map((s) => this.writes.settle(s.writes)));
  }

  /** A file created through this mount: registered writable with its router handle and open flags. */
  private created(path: string, routerFh: number, flags: number): number {
    const state: OpenState = this.handles.state(path, true, flags);
    state.fh = routerFh;
    return this.handles.add(state);
  }

  /** The operations object for fuse-native (`new Fuse(mountpoint, ops, options)`). */
  table(): Record<string, (...args: never[]) => void> {
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- a short name, like R, C, H and P, for the operations below
    const f = this;
    const R = this.router;
    const C = this.caches;
    const H = this.handles;
    const P = this.poller;
    return {
      init: (cb: Cb) => cb(0),
      statfs: (path: string, cb: Cb<StatFs>) =>
        P.run(cb, async () => {
          const s = await R.statfs(path);
          return { ...s, favail: s.ffree, fsid: 0, flag: 0, namemax: s.namemax } as StatFs;
        }),
      // Written data still in the write-behind buffer must count in the size a reader sees.
      getattr: (path: string, cb: Cb<FuseStat>) =>
        P.run(cb, async () => {
          await f.flushPath(path);
          return f.stat(path, await C.attrOf(path));
        }),
      fgetattr: (path: string, _fd: number, cb: Cb<FuseStat>) =>
        P.run(cb, async () => {
          await f.flushPath(path);
          return f.stat(path, await C.attrOf(path));
        }),
      access: (path: string, _mode: number, cb: Cb) => P.run(cb, async () => void (await C.attrOf(path))),
      readdir: (path: string, done: (err: number, names?: string[], stats?: FuseStat[]) => void) => {
        const cb = P.guard(done, [-Errno.ETIMEDOUT]);
        C.listing(path).then(
          (l) => cb(0, l.names, l.stats),
          (e) => cb(fuseErrno(e)),
        );
        // After this listing was asked for (the walker's own one goes out first) and answered when cached.
        setImmediate(() => f.listAhead.onList(path));
      },
      open: (path: string, flags: number, cb: Cb<number>) => P.run(cb, () => f.open(path, flags)),
      // `flags`: the open(2) flags, from the patched fuse-native (scripts/fuse-native-build.cjs);
      // undefined with a prebuilt one, which hands create no flags (then O_RDWR, and O_EXCL and
      // O_APPEND are not honoured across clients).
      create: (path: string, mode: number, flags: number | undefined, cb: Cb<number>) =>
        P.run(cb, async () => {
          f.refuseWrite();
          const open = flags === undefined ? OpenFlags.O_RDWR : flags & CREATE_FLAGS;
          if (open & OpenFlags.O_TRUNC) await f.flushPath(path);
          const { fh: routerFh, attr } = await R.create(path, mode & 0o7777, open | OpenFlags.O_CREAT);
          const fh = f.created(path, routerFh, open);
          C.entryChanged(path);
          C.remember(path, attr);
          return fh;
        }),
      read: (_path: string, fd: number, buf: Buffer, len: number, pos: number, cb: (n: number) => void) => P.runCount(cb, () => f.read(fd, buf, len, pos)),
      write: (_path: string, fd: number, buf: Buffer, len: number, pos: number, cb: (n: number) => void) =>
        P.runCount(cb, () => f.write(fd, buf.subarray(0, len), pos)),
      flush: (_path: string, fd: number, cb: Cb) =>
        P.run(cb, async () => {
          const s = H.get(fd);
          if (s?.writes.dirty || s?.writes.error) await f.writes.flush(s.writes);
        }),
      fsync: (_path: string, _datasync: boolean, fd: number, cb: Cb) =>
        P.run(cb, async () => {
          const s = H.get(fd);
          if (!s) throw new FsError(Errno.EBADF);
          // fsync(2) is of the file, whatever handle wrote: every handle's pending writes first.
          await f.flushPath(s.path);
          // Served from prefetched content: read-only, nothing to sync.
          if (s.content) return;
          await f.writes.flush(s.writes);
          await R.fsync(s.fh ?? (await H.nodeHandle(s)));
        }),
      release: (path: string, fd: number, cb: Cb) =>
        P.run(cb, async () => {
          const s = H.get(fd);
          if (!s) return;
          try {
            await f.writes.flush(s.writes);
          } finally {
            H.delete(fd);
            await H.closeNode(s);
            if (s.writable) C.forget(path);
          }
        }),
      truncate: (path: string, size: number, cb: Cb) =>
        P.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(path);
          C.remember(path, await R.truncate(path, size));
        }),
      ftruncate: (path: string, _fd: number, size: number, cb: Cb) =>
        P.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(path);
          C.remember(path, await R.truncate(path, size));
        }),
      chmod: (path: string, mode: number, cb: Cb) =>
        P.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(path);
          C.dropProof(path);
          C.remember(path, await R.setattr(path, { mode: mode & 0o7777 }));
        }),
      chown: (path: string, uid: number, gid: number, cb: Cb) =>
        P.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(path);
          C.dropProof(path);
          C.remember(path, await R.setattr(path, { uid, gid }));
        }),
      // Times since the epoch in fuse-native's unit, or the UTIME_OMIT / UTIME_NOW marks (fuseTimeNs).
      utimens: (path: string, atime: number, mtime: number, cb: Cb) =>
        P.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(path);
          const at = fuseTimeNs(atime);
          const mt = fuseTimeNs(mtime);
          if (at === undefined && mt === undefined) return;
          C.remember(path, await R.setattr(path, { ...(at !== undefined && { at }), ...(mt !== undefined && { mt }) }));
        }),
      readlink: (path: string, cb: Cb<string>) => P.run(cb, () => R.readlink(path)),
      unlink: (path: string, cb: Cb) =>
        P.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(path);
          await H.pinOpenHandles(path);
          await R.unlink(path);
          C.entryChanged(path);
          C.markMissing(path);
        }),
      mkdir: (path: string, mode: number, cb: Cb) =>
        P.run(cb, async () => {
          f.refuseWrite();
          const attr = await R.mkdir(path, mode & 0o7777);
          C.entryChanged(path);
          C.remember(path, attr);
        }),
      rmdir: (path: string, cb: Cb) =>
        P.run(cb, async () => {
          f.refuseWrite();
          await R.rmdir(path);
          C.forgetTree(path);
          C.entryChanged(path);
        }),
      rename: (src: string, dest: string, cb: Cb) =>
        P.run(cb, async () => {
          f.refuseWrite();
          await Promise.all([f.flushPath(src), f.flushPath(dest)]);
          await H.pinOpenHandles(dest);
          await R.rename(src, dest);
          C.forgetTree(src);
          C.forgetTree(dest);
          C.entryChanged(src);
          C.entryChanged(dest);
          H.renamed(src, dest);
        }),
      symlink: (target: string, path: string, cb: Cb) =>
        P.run(cb, async () => {
          f.refuseWrite();
          const attr = await R.symlink(path, target);
          C.entryChanged(path);
          C.remember(path, attr);
        }),
    };
  }
}
