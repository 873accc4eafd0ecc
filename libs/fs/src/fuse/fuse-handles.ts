/**
 * The open-file table of the FUSE layer (issue 4 item 4): FUSE file handles -> {@link OpenState}
 * (workspace path, router handle, read-ahead and write-behind state), and lazy read-only
 * opens: a file this mount opened for reading before, whose attributes still match that
 * open's {@link openProof}, is opened on the node only when a read reaches it.
 */
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
  readonly reads = new ReadAheadState();
  readonly writes: WriteBehindState;

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
    this.writes = new WriteBehindState(() => this.fh ?? nodeHandle(this));
  }
}

/** FUSE file handles of one mount. */
export class FuseHandles {
  private readonly files = new Map<number, OpenState>();
  private nextFh = 1;

  constructor(
    private readonly router: Pick<WorkspaceRouter, 'open' | 'release'>,
    private readonly caches: FuseCaches,
  ) {}

  /** A new, not yet registered, state for `path` (see {@link add}). */
  state(path: string, writable: boolean, flags: number): OpenState {
    return new OpenState(path, writable, flags, (s) => this.nodeHandle(s));
  }

  /** Registers `state` under a new FUSE file handle. */
  add(state: OpenState): number {
    const fh = this.nextFh++;
    this.files.set(fh, state);
    return fh;
  }

  /** The state of FUSE handle `fd`, if open. */
  get(fd: number): OpenState | undefined {
    return this.files.get(fd);
  }

  /** Unregisters FUSE handle `fd`. */
  delete(fd: number): void {
    this.files.delete(fd);
  }

  /** Every open state. */
  values(): IterableIterator<OpenState> {
    return this.files.values();
  }

  /** Open files follow a rename of `src` (a file or a directory above them) to `dest`. */
  renamed(src: string, dest: string): void {
    for (const s of this.files.values()) {
      if (s.path === src) s.path = dest;
      else if (s.path.startsWith(`${src}/`)) s.path = dest + s.path.slice(src.length);
    }
  }

  /**
   * The router handle of an open file, opening it on the node first when that was deferred.
   * A successful read-only open records the {@link openProof} of the file's cached attributes.
   * @throws the router's open error (ENOENT, EACCES, ...), which also drops the proof
   */
  nodeHandle(state: OpenState): Promise<number> {
    if (state.fh !== null) return Promise.resolve(state.fh);
    if (!state.opening) {
      const path = state.path;
      const before = state.writable ? undefined : this.caches.cachedAttr(path);
      state.opening = this.router.open(path, state.flags).then(
        ({ fh }) => {
          state.fh = fh;
          state.opening = null;
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
    const lazy = [...this.files.values()].filter((s) => s.fh === null && s.path === path);
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
