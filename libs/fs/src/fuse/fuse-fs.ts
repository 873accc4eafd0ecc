/**
 * The FUSE layer of `svc-fs-mount mount` (issue 4 item 4): fuse-native operations on top of
 * the WorkspaceRouter (failover included), with the caches a FUSE user expects:
 *
 * - attribute cache (TTL `attrTtlMs`), filled by getattr and by readdir (readdirp returns
 *   attributes, so `ls -l`, `find` and `git status` cost one round trip per directory);
 * - directory-entry cache (same TTL) and a negative-lookup cache for ENOENT;
 * - read-ahead for sequential reads (1 MiB requests, several in flight);
 * - write-behind for sequential writes (coalesced into 1 MiB requests, flushed on
 *   flush/fsync/release, errors reported there);
 *
 * all invalidated by `acheron.e_fs_inval*` pushes (router `inval`/`inval_dir` events), by
 * topology changes and failovers, and by this mount's own mutations.
 */
import { Attr, Errno, FsError, OpenFlags, StatFs } from '@svc/protocol';
import type { WorkspaceRouter } from '../router/workspace-router';

/** Options of {@link FuseFs}. */
export interface FuseFsOptions {
  /** Attribute / entry cache lifetime, ms (default 1000). */
  attrTtlMs?: number;
  /** Refuse every mutation with EROFS. */
  readOnly?: boolean;
  /** Bytes fetched ahead of a sequential reader (default 8 MiB). */
  readAheadBytes?: number;
  /** Size of one read-ahead or write-behind request, bytes (default 1 MiB). */
  chunkBytes?: number;
}

/** The stat object fuse-native expects (times in ms). */
export interface FuseStat {
  mode: number;
  uid: number;
  gid: number;
  size: number;
  nlink: number;
  ino: number;
  blksize: number;
  blocks: number;
  atime: number;
  mtime: number;
  ctime: number;
}

type Cb<T = void> = (err: number, value?: T, extra?: unknown) => void;

/** Converts a router attribute (ns times) to a fuse-native stat (ms times). */
export function toFuseStat(a: Attr): FuseStat {
  return {
    mode: a.m,
    uid: a.u,
    gid: a.g,
    size: a.sz,
    nlink: a.n || 1,
    ino: a.id,
    blksize: 4096,
    blocks: Math.ceil(a.sz / 512),
    atime: Math.floor(a.at / 1e6),
    mtime: Math.floor(a.mt / 1e6),
    ctime: Math.floor(a.ct / 1e6),
  };
}

/** The negative errno fuse-native wants for a failure (EIO for anything unknown). */
export function fuseErrno(e: unknown): number {
  if (e instanceof FsError || (typeof e === 'object' && e !== null && typeof (e as { errno?: unknown }).errno === 'number')) {
    const n = (e as { errno: number }).errno;
    return -Math.abs(n);
  }
  return -Errno.EIO;
}

function parentOf(path: string): string {
  const i = path.lastIndexOf('/');
  return i <= 0 ? '/' : path.slice(0, i);
}

function join(dir: string, name: string): string {
  return dir === '/' ? `/${name}` : `${dir}/${name}`;
}

interface Expiring<T> {
  value: T;
  expires: number;
}

/** Read-ahead and write-behind state of one open file. */
class OpenState {
  /** Next offset a sequential reader would ask for. */
  nextRead = 0;
  /** Prefetched chunks by offset. */
  readonly chunks = new Map<number, Promise<{ data: Buffer; eof: boolean }>>();
  /** Pending write-behind data. */
  pending: Buffer[] = [];
  pendingOff = 0;
  pendingLen = 0;
  /** Background writes not yet acknowledged. */
  readonly inflight = new Set<Promise<void>>();
  /** First error of a background write, reported at the next write/flush/release. */
  error: unknown = null;

  constructor(
    /** Workspace path; follows renames. */
    public path: string,
    readonly writable: boolean,
  ) {}

  /** True while written data has not reached the node. */
  get dirty(): boolean {
    return this.pendingLen > 0 || this.inflight.size > 0;
  }
}

/**
 * fuse-native operations over a WorkspaceRouter; see module documentation. Create it, then
 * pass {@link FuseFs.ops} to `new Fuse(mountpoint, ops, options)`.
 */
export class FuseFs {
  private readonly ttl: number;
  private readonly readOnly: boolean;
  private readonly readAhead: number;
  private readonly chunk: number;
  private readonly attrs = new Map<string, Expiring<Attr>>();
  private readonly missing = new Map<string, number>();
  private readonly dirs = new Map<string, Expiring<string[]>>();
  private readonly files = new Map<number, OpenState>();

  constructor(
    private readonly router: WorkspaceRouter,
    options: FuseFsOptions = {},
  ) {
    this.ttl = options.attrTtlMs ?? 1000;
    this.readOnly = options.readOnly ?? false;
    this.chunk = options.chunkBytes ?? 1024 * 1024;
    this.readAhead = options.readAheadBytes ?? 8 * this.chunk;
    router.on('inval', (e: { paths: string[] }) => e.paths.forEach((p) => this.forget(p)));
    router.on('inval_dir', (e: { paths: string[] }) => e.paths.forEach((p) => this.forgetDir(p)));
    router.on('topology', () => this.forgetAll());
    router.on('failover', () => this.forgetAll());
  }

  /** Drops every cached attribute, entry and negative lookup. */
  forgetAll(): void {
    this.attrs.clear();
    this.missing.clear();
    this.dirs.clear();
  }

  /** Drops what is cached about `path` and its parent's listing. */
  forget(path: string): void {
    this.attrs.delete(path);
    this.missing.delete(path);
    this.dirs.delete(path);
    this.dirs.delete(parentOf(path));
  }

  /** Drops everything cached at or below `path` (a renamed or removed directory). */
  private forgetTree(path: string): void {
    this.forget(path);
    const prefix = `${path}/`;
    for (const map of [this.attrs, this.missing, this.dirs] as Array<Map<string, unknown>>) {
      for (const p of map.keys()) if (p.startsWith(prefix)) map.delete(p);
    }
  }

  /** Drops the listing of `dir` and the negative lookups below it. */
  private forgetDir(dir: string): void {
    this.dirs.delete(dir);
    this.attrs.delete(dir);
    const prefix = dir === '/' ? '/' : `${dir}/`;
    for (const p of this.missing.keys()) if (p.startsWith(prefix)) this.missing.delete(p);
  }

  private remember(path: string, attr: Attr, now = Date.now()): void {
    this.attrs.set(path, { value: attr, expires: now + this.ttl });
    this.missing.delete(path);
  }

  private async attrOf(path: string): Promise<Attr> {
    const now = Date.now();
    const hit = this.attrs.get(path);
    if (hit && hit.expires > now) return hit.value;
    const miss = this.missing.get(path);
    if (miss !== undefined && miss > now) throw new FsError(Errno.ENOENT);
    // A fresh listing of the parent that lacks the name is as good as a failed lookup.
    const parent = this.dirs.get(parentOf(path));
    if (parent && parent.expires > now && path !== '/' && !parent.value.includes(path.slice(path.lastIndexOf('/') + 1))) {
      throw new FsError(Errno.ENOENT);
    }
    try {
      const attr = await this.router.getattr(path);
      this.remember(path, attr);
      return attr;
    } catch (e) {
      if (e instanceof FsError && e.errno === Errno.ENOENT) this.missing.set(path, Date.now() + this.ttl);
      throw e;
    }
  }

  private refuseWrite(): void {
    if (this.readOnly) throw new FsError(Errno.EROFS);
  }

  /** Runs an async operation and answers fuse-native's callback (0/value, or -errno). */
  private run<T>(cb: Cb<T>, fn: () => Promise<T>, fallback?: T): void {
    fn().then(
      (v) => cb(0, v),
      (e) => cb(fuseErrno(e), fallback),
    );
  }

  /**
   * Like {@link run} for read and write, whose fuse-native callback takes the byte count as its
   * first argument (a negative errno on failure).
   */
  private runCount(cb: (result: number) => void, fn: () => Promise<number>): void {
    fn().then(
      (n) => cb(n),
      (e) => cb(fuseErrno(e)),
    );
  }

  // ---- read-ahead and write-behind ---------------------------------------------------

  private fetch(fh: number, state: OpenState, off: number): Promise<{ data: Buffer; eof: boolean }> {
    let p = state.chunks.get(off);
    if (!p) {
      p = this.router.read(fh, off, this.chunk);
      p.catch(() => state.chunks.delete(off));
      state.chunks.set(off, p);
    }
    return p;
  }

  private async read(fh: number, buf: Buffer, len: number, pos: number): Promise<number> {
    const state = this.files.get(fh);
    if (!state) throw new FsError(Errno.EBADF);
    await this.flushWrites(fh, state);
    const sequential = pos === state.nextRead;
    state.nextRead = pos + len;
    if (!sequential) {
      state.chunks.clear();
      const { data } = await this.router.read(fh, pos, len);
      data.copy(buf);
      return data.length;
    }
    // Sequential: serve from aligned chunks and keep `readAhead` bytes requested ahead.
    let copied = 0;
    while (copied < len) {
      const at = pos + copied;
      const base = at - (at % this.chunk);
      const { data, eof } = await this.fetch(fh, state, base);
      const from = at - base;
      if (from >= data.length) break;
      copied += data.copy(buf, copied, from, Math.min(data.length, from + (len - copied)));
      if (eof && base + data.length <= pos + copied) break;
    }
    const end = pos + len;
    for (const off of state.chunks.keys()) if (off + this.chunk <= pos) state.chunks.delete(off);
    const first = end - (end % this.chunk);
    for (let off = first; off < end + this.readAhead; off += this.chunk) void this.fetch(fh, state, off).catch(() => undefined);
    return copied;
  }

  private async write(fh: number, data: Buffer, pos: number): Promise<number> {
    this.refuseWrite();
    const state = this.files.get(fh);
    if (!state) throw new FsError(Errno.EBADF);
    if (state.error) {
      const e = state.error;
      state.error = null;
      throw e;
    }
    state.chunks.clear();
    if (state.pendingLen > 0 && pos !== state.pendingOff + state.pendingLen) await this.flushWrites(fh, state);
    if (state.pendingLen === 0) state.pendingOff = pos;
    // fuse-native reuses `data`'s memory after the callback: keep a copy.
    state.pending.push(Buffer.from(data));
    state.pendingLen += data.length;
    if (state.pendingLen >= this.chunk) this.sendPending(fh, state);
    while (state.inflight.size >= 4) await Promise.race(state.inflight);
    this.forget(state.path);
    return data.length;
  }

  private sendPending(fh: number, state: OpenState): void {
    if (state.pendingLen === 0) return;
    const data = Buffer.concat(state.pending, state.pendingLen);
    const off = state.pendingOff;
    state.pending = [];
    state.pendingLen = 0;
    const p = (async () => {
      for (let done = 0; done < data.length; ) {
        const n = await this.router.write(fh, off + done, data.subarray(done, done + this.chunk));
        if (n <= 0) throw new FsError(Errno.EIO, 'short write');
        done += n;
      }
    })().catch((e) => {
      state.error ??= e;
    });
    state.inflight.add(p);
    void p.finally(() => state.inflight.delete(p));
  }

  /** Sends pending writes and waits for all background writes; throws the first error. */
  private async flushWrites(fh: number, state: OpenState): Promise<void> {
    this.sendPending(fh, state);
    while (state.inflight.size > 0) await Promise.all(state.inflight);
    if (state.error) {
      const e = state.error;
      state.error = null;
      throw e;
    }
  }

  private async flushPath(path: string): Promise<void> {
    for (const [fh, s] of this.files) if (s.path === path && s.dirty) await this.flushWrites(fh, s);
  }

  // ---- fuse-native operations --------------------------------------------------------

  /** The operations object for fuse-native. */
  get ops(): Record<string, (...args: never[]) => void> {
    const f = this;
    const R = this.router;
    return {
      init: (cb: Cb) => cb(0),
      statfs: (path: string, cb: Cb<StatFs>) =>
        f.run(cb, async () => {
          const s = await R.statfs(path);
          return { ...s, favail: s.ffree, fsid: 0, flag: 0, namemax: s.namemax } as StatFs;
        }),
      // Written data still in the write-behind buffer must count in the size a reader sees.
      getattr: (path: string, cb: Cb<FuseStat>) =>
        f.run(cb, async () => {
          await f.flushPath(path);
          return toFuseStat(await f.attrOf(path));
        }),
      fgetattr: (path: string, _fd: number, cb: Cb<FuseStat>) =>
        f.run(cb, async () => {
          await f.flushPath(path);
          return toFuseStat(await f.attrOf(path));
        }),
      access: (path: string, _mode: number, cb: Cb) => f.run(cb, async () => void (await f.attrOf(path))),
      readdir: (path: string, cb: (err: number, names?: string[], stats?: FuseStat[]) => void) => {
        R.readdirAll(path).then(
          (entries) => {
            const now = Date.now();
            const names = entries.map((e) => e.name);
            for (const e of entries) f.remember(join(path, e.name), e.attr, now);
            f.dirs.set(path, { value: names, expires: now + f.ttl });
            cb(0, names, entries.map((e) => toFuseStat(e.attr)));
          },
          (e) => cb(fuseErrno(e)),
        );
      },
      open: (path: string, flags: number, cb: Cb<number>) =>
        f.run(cb, async () => {
          const writable = (flags & OpenFlags.O_ACCMODE) !== OpenFlags.O_RDONLY || (flags & OpenFlags.O_TRUNC) !== 0;
          if (writable) f.refuseWrite();
          if (flags & OpenFlags.O_TRUNC) await f.flushPath(path);
          const { fh } = await R.open(path, flags & ~OpenFlags.O_CREAT);
          f.files.set(fh, new OpenState(path, writable));
          if (writable) f.forget(path);
          return fh;
        }),
      create: (path: string, mode: number, cb: Cb<number>) =>
        f.run(cb, async () => {
          f.refuseWrite();
          const { fh, attr } = await R.create(path, mode & 0o7777, OpenFlags.O_RDWR | OpenFlags.O_CREAT);
          f.files.set(fh, new OpenState(path, true));
          f.forget(path);
          f.remember(path, attr);
          return fh;
        }),
      read: (_path: string, fd: number, buf: Buffer, len: number, pos: number, cb: (n: number) => void) => f.runCount(cb, () => f.read(fd, buf, len, pos)),
      write: (_path: string, fd: number, buf: Buffer, len: number, pos: number, cb: (n: number) => void) => f.runCount(cb, () => f.write(fd, buf.subarray(0, len), pos)),
      flush: (_path: string, fd: number, cb: Cb) =>
        f.run(cb, async () => {
          const s = f.files.get(fd);
          if (s) await f.flushWrites(fd, s);
        }),
      fsync: (_path: string, _datasync: boolean, fd: number, cb: Cb) =>
        f.run(cb, async () => {
          const s = f.files.get(fd);
          if (s) await f.flushWrites(fd, s);
          await R.fsync(fd);
        }),
      release: (path: string, fd: number, cb: Cb) =>
        f.run(cb, async () => {
          const s = f.files.get(fd);
          try {
            if (s) await f.flushWrites(fd, s);
          } finally {
            f.files.delete(fd);
            await R.release(fd);
            if (s?.writable) f.forget(path);
          }
        }),
      truncate: (path: string, size: number, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(path);
          f.remember(path, await R.truncate(path, size));
        }),
      ftruncate: (path: string, _fd: number, size: number, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(path);
          f.remember(path, await R.truncate(path, size));
        }),
      chmod: (path: string, mode: number, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          f.remember(path, await R.setattr(path, { mode: mode & 0o7777 }));
        }),
      chown: (path: string, uid: number, gid: number, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          f.remember(path, await R.setattr(path, { uid, gid }));
        }),
      utimens: (path: string, atime: number, mtime: number, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(path);
          f.remember(path, await R.setattr(path, { at: Math.round(atime * 1e6), mt: Math.round(mtime * 1e6) }));
        }),
      readlink: (path: string, cb: Cb<string>) => f.run(cb, () => R.readlink(path)),
      unlink: (path: string, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          await R.unlink(path);
          f.forget(path);
          f.missing.set(path, Date.now() + f.ttl);
        }),
      mkdir: (path: string, mode: number, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          const attr = await R.mkdir(path, mode & 0o7777);
          f.forget(path);
          f.remember(path, attr);
        }),
      rmdir: (path: string, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          await R.rmdir(path);
          f.forgetTree(path);
        }),
      rename: (src: string, dest: string, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          await f.flushPath(src);
          await R.rename(src, dest);
          f.forgetTree(src);
          f.forgetTree(dest);
          for (const s of f.files.values()) {
            if (s.path === src) s.path = dest;
            else if (s.path.startsWith(`${src}/`)) s.path = dest + s.path.slice(src.length);
          }
        }),
      symlink: (target: string, path: string, cb: Cb) =>
        f.run(cb, async () => {
          f.refuseWrite();
          const attr = await R.symlink(path, target);
          f.forget(path);
          f.remember(path, attr);
        }),
    };
  }
}
