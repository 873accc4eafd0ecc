/**
 * The locks of the FUSE layer: `fcntl` byte-range locks (getlk/setlk, per kernel lock owner) and
 * `flock` locks (per open file description) are held by the node that serves the file, in one
 * table for every client (the `posix` extension), so two mounts exclude each other as two
 * processes on one machine do. This mount remembers, per inode, which lock owners took locks
 * through which open state, to release them when their owner closes the file (FUSE flush: a
 * POSIX lock goes with any close of its owner) or the open file description ends (FUSE release:
 * its `flock`). The node releases them too when the handle closes or the session ends.
 *
 * Locks taken through the binding's own read-only opens (one file handle for all of them) go
 * through one open state per inode kept for that purpose; while it holds locks, the binding
 * sends those opens' flushes and releases here.
 *
 * Before a lock is released, this mount's pending writes of the file reach the node (and the
 * node's pushes for them reach the other clients): what was written under a lock is what the
 * next holder reads. A lock is answered once the kernel invalidations the node pushed before
 * the grant are done, so the new holder does not read pages the previous holder replaced.
 */
import { Errno, FsError, type GetlkReply, type LockKind, type LockType } from '@svc/protocol/wire';
import type { WorkspaceRouter } from '../router/workspace-router';
import type { OpenState } from './fuse-handles';

/** `F_RDLCK`, `F_WRLCK`, `F_UNLCK` of fcntl(2) locks. */
export const F_RDLCK = 0;
export const F_WRLCK = 1;
export const F_UNLCK = 2;
/** flock(2) operations. */
export const LOCK_SH = 1;
export const LOCK_EX = 2;
export const LOCK_NB = 4;
export const LOCK_UN = 8;

/** The lock type of fcntl lock type `t`. @throws FsError EINVAL for another value */
export function lockTypeOf(t: number): LockType {
  if (t === F_RDLCK) return 'rd';
  if (t === F_WRLCK) return 'wr';
  if (t === F_UNLCK) return 'un';
  throw new FsError(Errno.EINVAL, `unknown lock type ${t}`);
}

/** The wire range of a kernel lock range (`len` 0: to the end); a range past 2^53 bytes runs to the end. @throws FsError EINVAL */
export function lockRange(start: number, len: number): { start: number; len: number } {
  if (!Number.isSafeInteger(start) || start < 0) throw new FsError(Errno.EINVAL, `lock start ${start} is out of range`);
  if (!Number.isSafeInteger(len) || len < 0 || start + len > Number.MAX_SAFE_INTEGER) return { start, len: 0 };
  return { start, len };
}

/** The wire name of kernel lock owner `owner`. */
function ownerName(owner: bigint): string {
  return owner.toString(16);
}

/** What this mount holds on one inode: the open state each owner's locks were taken through. */
interface InodeLocks {
  posix: Map<string, OpenState>;
  flock: Map<string, OpenState>;
  /** The state of the locks taken through the binding's opens (null: none). */
  fast: OpenState | null;
  /** Lock requests in progress on the inode (its lock state stays while there are some). */
  pending: number;
}

/** What {@link FuseLocks} works with. */
export interface FuseLocksParts {
  router: Pick<WorkspaceRouter, 'lock' | 'getlk'>;
  /** The router handle of `s`, opening it on the node first when that was deferred. */
  nodeHandle(s: OpenState): Promise<number>;
  /** Sends this mount's pending writes of `path` to the node and waits for them. */
  flushPath(path: string): Promise<void>;
  /** Resolves once the kernel invalidations of inode `ino` in progress are done (undefined: none). */
  kernelSettled(ino: number): Promise<void> | undefined;
  /** A new open state for locks through the binding's opens of inode `ino` (read-only, never evicted). */
  fastState(ino: number): OpenState;
  /** Closes the node handle of a state made by {@link fastState}. */
  closeState(s: OpenState): Promise<void>;
  /** The binding sends the flushes and releases of its opens of `ino` here (`on`), or answers them itself. */
  fastLocks(ino: number, on: boolean): void;
}

/** The locks of one FUSE mount; see module documentation. */
export class FuseLocks {
  private readonly held = new Map<number, InodeLocks>();

  constructor(private readonly parts: FuseLocksParts) {}

  /** Inodes on which this mount holds (or may hold) locks. */
  get size(): number {
    return this.held.size;
  }

  /** The open state locks on `ino` go through: `state`, or for the binding's opens (`state` null) the inode's lock state. */
  private through(ino: number, state: OpenState | null): OpenState {
    const h = this.entry(ino);
    h.pending++;
    if (state) return state;
    h.fast ??= this.parts.fastState(ino);
    return h.fast;
  }

  private entry(ino: number): InodeLocks {
    let h = this.held.get(ino);
    if (!h) this.held.set(ino, (h = { posix: new Map(), flock: new Map(), fast: null, pending: 0 }));
    return h;
  }

  /**
   * Takes, changes or releases a lock of `kind` for kernel lock owner `owner` on inode `ino`,
   * through open state `state` (null: the binding's opens). A waiting request (`wait`) is
   * cancelled on the node when `signal` aborts.
   * @param range bytes, `len` 0 to the end (ignored for flock)
   * @param pid the caller's process id, reported by getlk to this mount
   * @throws FsError EAGAIN, EDEADLK, EINTR, ENOLCK, EBADF, EINVAL
   */
  async set(
    ino: number,
    state: OpenState | null,
    kind: LockKind,
    type: LockType,
    range: { start: number; len: number },
    owner: bigint,
    wait: boolean,
    pid: number,
    signal?: AbortSignal,
  ): Promise<void> {
    const s = this.through(ino, state);
    const name = ownerName(owner);
    try {
      // What was written under the lock reaches the node before another client can take it.
      if (type === 'un') await this.parts.flushPath(s.path);
      const fh = await this.parts.nodeHandle(s);
      await this.parts.router.lock(fh, { kind, type, start: range.start, len: range.len, owner: name, wait, pid }, signal);
      const h = this.entry(ino);
      const owners = kind === 'posix' ? h.posix : h.flock;
      if (type !== 'un') {
        owners.set(name, s);
        if (s === h.fast) this.parts.fastLocks(ino, true);
      } else if (kind === 'flock') owners.delete(name);
    } finally {
      this.done(ino);
    }
    if (type !== 'un') await this.parts.kernelSettled(ino);
  }

  /**
   * The first lock of another owner that conflicts with lock `type` of `owner` over `range` on
   * inode `ino` (through `state`; null: the binding's opens), or `{type: "un"}`.
   * @throws FsError ENOLCK, EBADF, EINVAL
   */
  async test(ino: number, state: OpenState | null, kind: LockKind, type: LockType, range: { start: number; len: number }, owner: bigint): Promise<GetlkReply> {
    const s = this.through(ino, state);
    try {
      const fh = await this.parts.nodeHandle(s);
      return await this.parts.router.getlk(fh, { kind, type, start: range.start, len: range.len, owner: ownerName(owner) });
    } finally {
      this.done(ino);
    }
  }

  /**
   * Lock owner `owner` closed a descriptor of inode `ino` (FUSE flush): its POSIX locks on the
   * file go, as close(2) releases them. No request when it holds none.
   * @throws FsError from the node's unlock
   */
  async closed(ino: number, owner: bigint): Promise<void> {
    const name = ownerName(owner);
    const s = this.held.get(ino)?.posix.get(name);
    if (!s) return;
    try {
      await this.set(ino, s, 'posix', 'un', { start: 0, len: 0 }, owner, false, 0);
    } finally {
      this.held.get(ino)?.posix.delete(name);
      this.tidy(ino);
    }
  }

  /**
   * An open file description of inode `ino` ended (FUSE release; `state` null: one of the
   * binding's opens): its `flock` (of `flockOwner`, when the kernel says it had one) goes, and
   * so does what this mount remembers of locks taken through `state` (the node releases those
   * when it closes the handle).
   */
  async released(ino: number, state: OpenState | null, flockOwner: bigint | null): Promise<void> {
    const h = this.held.get(ino);
    if (!h) return;
    if (flockOwner !== null) {
      const name = ownerName(flockOwner);
      const s = h.flock.get(name);
      if (s && (state === null || s === state)) await this.set(ino, s, 'flock', 'un', { start: 0, len: 0 }, flockOwner, false, 0).catch(() => undefined);
      h.flock.delete(name);
    }
    if (state)
      for (const owners of [h.posix, h.flock]) {
        for (const [name, s] of owners) if (s === state) owners.delete(name);
      }
    this.tidy(ino);
  }

  /** A lock request on `ino` ended. */
  private done(ino: number): void {
    const h = this.held.get(ino);
    if (h) h.pending--;
    this.tidy(ino);
  }

  /** Forgets inode `ino` when no lock is left on it and none is asked for, closing its lock state for the binding's opens. */
  private tidy(ino: number): void {
    const h = this.held.get(ino);
    if (!h || h.pending > 0) return;
    const uses = (s: OpenState | null) => s !== null && ([...h.posix.values()].includes(s) || [...h.flock.values()].includes(s));
    if (h.fast && !uses(h.fast)) {
      const s = h.fast;
      h.fast = null;
      this.parts.fastLocks(ino, false);
      void this.parts.closeState(s).catch(() => undefined);
    }
    if (h.posix.size === 0 && h.flock.size === 0 && !h.fast) this.held.delete(ino);
  }
}
