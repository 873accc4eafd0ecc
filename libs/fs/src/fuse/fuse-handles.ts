/**
 * The open-file table of the FUSE layer: FUSE file handles -> {@link OpenState}
 * (workspace path, router handle, read-ahead and write-behind state), and lazy read-only
 * opens: a file this mount opened for reading before, whose attributes still match that
 * open's {@link openProof}, is opened on the node only when a read reaches it. A read-only
 * open asks the router for the file's first bytes (the `open_read` extension): all of a file
 * the attributes say is small, else one chunk. A file served from prefetched content
 * ({@link OpenState.content}) is never opened on the node.
 */
import { Errno, FsError, OpenFlags } from '@svc/protocol/wire';
import type { WorkspaceRouter } from '../router/workspace-router';
import { FuseCaches, openProof } from './fuse-caches';
import { ReadAheadState } from './read-ahead';
import { WriteBehindState } from './write-behind';

/** Node handle, read-ahead and write-behind state of one open file (one FUSE file handle). */
export class OpenState {
  /** The router's handle once the file is open on the node (at once for writers, lazily for readers). */
  fh: number | null = null;
  /** The node open in progress of a lazy reader. */
  opening: Promise<number> | null = null;
  /** The whole file, from prefetched content: reads are answered from it, the node is never asked. */
  content: Buffer | null = null;
  /** A read of this handle has begun (the prefetch policy hears of the first one). */
  readStarted = false;
  readonly reads = new ReadAheadState();
  readonly writes: WriteBehindState;
  /**
   * The node id of the file this handle stands for (the kernel inode's file; 0: any). A node
   * open that finds another file at the path (the name was replaced meanwhile) fails ESTALE
   * instead of reading that other file under this handle.
   */
  expectId = 0;
  /** The kernel inode the handle was opened on (0: not known). */
  ino = 0;
  /** Reads in progress. */
  busy = 0;

  /**
   * @param path workspace path; follows renames
   * @param flags open flags (Linux O_* bits) for the node open
   * @param nodeHandle opens this file on the node (see {@link FuseHandles.nodeHandle})
   */
  constructor(
    public path: string,
    readonly writable: boolean,
    readonly flags: number,
    nodeHandle: (s: OpenState) => Promise<number>,
  ) {
    // O_APPEND: the node appends each write at the end it sees, so they must reach it in order.
    this.writes = new WriteBehindState(() => this.fh ?? nodeHandle(this), (flags & OpenFlags.O_APPEND) !== 0);
  }
}

/** Largest FUSE file handle number handed out (then numbering starts again at 1, skipping those in use). */
export const MAX_FH = 2 ** 31 - 1;

/** FUSE file handles of one mount. */
export class FuseHandles {
  private readonly files = new Map<number, OpenState>();
  /** The same states by path (the FUSE operations look a file's handles up on every read and write). */
  private readonly byPath = new Map<string, Set<OpenState>>();
  private nextFh = 1;

  /**
   * @param openReadBytes most bytes a read-only open asks to bring along (one read-ahead chunk)
   */
  constructor(
    private readonly router: Pick<WorkspaceRouter, 'open' | 'release' | 'dropOpenData'>,
    private readonly caches: FuseCaches,
    private readonly openReadBytes = 1024 * 1024,
  ) {}

  /** A new, not yet registered, state for `path` (see {@link add}). */
  state(path: string, writable: boolean, flags: number): OpenState {
    return new OpenState(path, writable, flags, (s) => this.nodeHandle(s));
  }

  /** Registers `state` under a new FUSE file handle: a number from 1 to 2^31 - 1 not in use. */
  add(state: OpenState): number {
    let fh: number;
    do {
      fh = this.nextFh;
      this.nextFh = this.nextFh >= MAX_FH ? 1 : this.nextFh + 1;
    } while (this.files.has(fh));
    this.files.set(fh, state);
    this.index(state);
    return fh;
  }

  private index(state: OpenState): void {
    let set = this.byPath.get(state.path);
    if (!set) this.byPath.set(state.path, (set = new Set()));
    set.add(state);
  }

  private unindex(state: OpenState): void {
    const set = this.byPath.get(state.path);
    if (!set) return;
    set.delete(state);
    if (set.size === 0) this.byPath.delete(state.path);
  }

  /** The open states of the file at `path` (none: an empty list). */
  ofPath(path: string): Iterable<OpenState> {
    return this.byPath.get(path) ?? [];
  }

  /** The state of FUSE handle `fd`, if open. */
  get(fd: number): OpenState | undefined {
    return this.files.get(fd);
  }

  /** Unregisters FUSE handle `fd`. */
  delete(fd: number): void {
    const state = this.files.get(fd);
    if (!state) return;
    this.files.delete(fd);
    this.unindex(state);
  }

  /** Open FUSE handles. */
  get size(): number {
    return this.files.size;
  }

  /** Every open state. */
  values(): IterableIterator<OpenState> {
    return this.files.values();
  }

  /**
   * The file of `writer` is being written through it: every other handle of the file forgets
   * what it holds of the old content (prefetched content, read-ahead chunks, the bytes that
   * came with its open), so its next read goes to the node, after the write (see the FUSE
   * read's flush of the file's pending writes).
   */
  contentChanged(writer: OpenState): void {
    for (const s of this.ofPath(writer.path)) {
      if (s === writer) continue;
      s.content = null;
      s.reads.reset(true);
      if (s.fh !== null) this.router.dropOpenData(s.fh);
    }
  }

  /**
   * The file at `path` changed elsewhere (the node pushed it: another client, or the node's own
   * processes): every handle of it forgets what it holds of the old content (prefetched content,
   * read-ahead chunks, where the file ended), so its next read goes to the node.
   */
  changedElsewhere(path: string): void {
    for (const s of this.ofPath(path)) {
      s.content = null;
      s.reads.reset(true);
    }
  }

  /** Open files follow a rename with RENAME_EXCHANGE: those at or below `a` are now at `b`, and the other way round. */
  exchanged(a: string, b: string): void {
    const moved: Array<[OpenState, string]> = [];
    for (const s of this.files.values()) {
      for (const [from, to] of [
        [a, b],
        [b, a],
      ]) {
        if (s.path === from) moved.push([s, to]);
        else if (s.path.startsWith(`${from}/`)) moved.push([s, to + s.path.slice(from.length)]);
        else continue;
        break;
      }
    }
    for (const [s, path] of moved) {
      this.unindex(s);
      s.path = path;
      this.index(s);
    }
  }

  /** Open files follow a rename of `src` (a file or a directory above them) to `dest`. */
  renamed(src: string, dest: string): void {
    for (const s of this.files.values()) {
      let path: string;
      if (s.path === src) path = dest;
      else if (s.path.startsWith(`${src}/`)) path = dest + s.path.slice(src.length);
      else continue;
      this.unindex(s);
      s.path = path;
      this.index(s);
    }
  }

  /** An open state on kernel inode `ino` that has a node handle (a writer first), if any. */
  onInode(ino: number): OpenState | undefined {
    let found: OpenState | undefined;
    for (const s of this.files.values()) {
      if (s.ino !== ino || s.fh === null) continue;
      if (s.writable) return s;
      found ??= s;
    }
    return found;
  }

  /** True when a FUSE handle is open on kernel inode `ino`. */
  openOn(ino: number): boolean {
    for (const s of this.files.values()) if (s.ino === ino) return true;
    return false;
  }

  /**
   * The router handle of an open file, opening it on the node first when that was deferred.
   * A successful read-only open records the {@link openProof} of the file's cached attributes.
   * @throws the router's open error (ENOENT, EACCES, ...), which also drops the proof; FsError
   *   ESTALE when the node opened another file than {@link OpenState.expectId} (closed again)
   */
  nodeHandle(state: OpenState): Promise<number> {
    if (state.fh !== null) return Promise.resolve(state.fh);
    if (!state.opening) {
      const path = state.path;
      const before = state.writable ? undefined : this.caches.cachedAttr(path);
      // A file known to be small comes whole (one byte more than its size, so the node sees the end).
      const readBytes = state.writable ? 0 : before ? Math.min(this.openReadBytes, before.sz + 1) : this.openReadBytes;
      state.opening = this.router.open(path, state.flags, { readBytes }).then(
        ({ fh, id }) => {
          state.opening = null;
          if (state.expectId !== 0 && id !== state.expectId) {
            this.caches.dropProof(path);
            void this.router.release(fh).catch(() => undefined);
            throw new FsError(Errno.ESTALE, `${path}: replaced by another file`);
          }
          state.fh = fh;
          const now = this.caches.cachedAttr(path);
          if (before && now && openProof(before) === openProof(now)) this.caches.recordProof(path, openProof(now));
          return fh;
        },
        (e) => {
          state.opening = null;
          this.caches.dropProof(path);
          throw e;
        },
      );
    }
    return state.opening;
  }

  /**
   * Opens on the node every handle of `path` that was opened lazily, before this mount removes
   * or replaces the file: an open file stays readable after its name is gone (POSIX), which
   * only a node handle taken before can give. Errors are left to the reads.
   */
  async pinOpenHandles(path: string): Promise<void> {
    const lazy = [...this.files.values()].filter((s) => s.fh === null && s.content === null && s.path === path);
    await Promise.all(lazy.map((s) => this.nodeHandle(s).catch(() => undefined)));
  }

  /**
   * Closes the node handle of a released file: awaited for writers, in the background for readers.
   * @throws the router's release error of a writer (EIO: written data may be lost)
   */
  async closeNode(state: OpenState): Promise<void> {
    const fh = state.fh ?? (state.opening ? await state.opening.catch(() => null) : null);
    if (fh === null) return;
    if (state.writable) await this.router.release(fh);
    else void this.router.release(fh).catch(() => undefined);
  }
}
