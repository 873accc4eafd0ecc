/**
 * The lock table of an FS node: POSIX byte-range locks (fcntl F_SETLK/F_SETLKW/F_GETLK) and BSD
 * whole-file locks (flock(2)) on the files the node serves, for every session of every client, so
 * that locks taken through different mounts exclude each other as locks of processes on one Linux
 * machine do. The two kinds are independent: a posix lock never conflicts with a flock.
 *
 * Posix locks belong to an owner and cover byte ranges; a request by an owner replaces that
 * owner's locks over the requested range (upgrade, downgrade, split, merge of adjacent ranges of
 * the same type), as fcntl does. A flock belongs to an owner (an open file description) and
 * covers the whole file; a request by an owner that holds one first releases it (flock
 * conversion is not atomic). Waiting requests queue per file in arrival order and are granted
 * when they no longer conflict with the held locks; queued requests never block new ones.
 *
 * Without a {@link HostLocks}, the table is pure state: no I/O, no timers. With one, every lock
 * the table grants is first taken on the node's machine too (the union of the table's locks of
 * a file, as one more owner there), so that processes on that machine that lock the file
 * directly take part: a request they conflict with is EAGAIN, or waits (retried every
 * {@link HOST_RETRY_MS}) until they let go; and what the table releases is let go there. Owners
 * and sessions are opaque strings chosen by the caller.
 */
import { Errno, FsError, type LockKind, type LockType } from '@svc/protocol';

export type { LockKind, LockType };

/** How often a wait that only a lock held on the node's machine blocks is tried again, ms. */
export const HOST_RETRY_MS = 20;

/** A range of a lock: [start, end) bytes, end exclusive (Infinity: to the end of the file; a flock is [0, Infinity)). */
export interface LockRange {
  type: 'rd' | 'wr';
  start: number;
  end: number;
}

/**
 * The locks of the node's own on its machine that stand for the table's (see the module
 * documentation). Per file and kind it holds the union of `held`: over each byte, a write lock
 * where any owner holds one, else a read lock where any does.
 */
export interface HostLocks {
  /**
   * Takes on the node's machine what the union of `held` needs beyond what is held there for
   * `node` and `kind`, without waiting; lets nothing go.
   * @returns false when a process there holds a conflicting lock (then nothing changed)
   */
  grow(node: number, kind: LockKind, held: readonly LockRange[]): boolean;
  /** Makes the locks held there for `node` and `kind` the union of `held` (after a release: lets go what is no longer held). */
  fit(node: number, kind: LockKind, held: readonly LockRange[]): void;
  /** The table holds no lock and no wait on `node` any more: lets the file go. */
  forget(node: number): void;
}

/** A lock request (or, for `test`, the lock asked about). */
export interface LockRequest {
  /** Node id of the file. */
  node: number;
  kind: LockKind;
  type: LockType;
  /** First byte, >= 0. Ignored for flock (whole file). */
  start: number;
  /** Length in bytes, >= 0; 0 = to the end of the file (infinity). Ignored for flock (whole file). */
  len: number;
  /** Lock owner (opaque; the caller makes it unique per session). */
  owner: string;
  /** Session that takes the lock; `releaseSession` releases it. */
  session: string;
  /** Process id of the caller, only reported back in `LockConflict`. */
  pid?: number;
}

/** A held lock that conflicts with a request (F_GETLK answer). `len` 0 = to the end of the file; a flock reports start 0, len 0. */
export interface LockConflict {
  type: 'rd' | 'wr';
  /** First byte. */
  start: number;
  /** Length in bytes; 0 = to the end of the file. */
  len: number;
  owner: string;
  session: string;
  pid?: number;
}

/** A held lock: range [start, end), end exclusive (Infinity = to the end; a flock is [0, Infinity)). */
interface Held {
  type: 'rd' | 'wr';
  start: number;
  end: number;
  owner: string;
  session: string;
  pid?: number;
}

/** A validated request: like `Held`, with any type. */
interface Want extends Omit<Held, 'type'> {
  node: number;
  kind: LockKind;
  type: LockType;
}

/** A queued request. */
interface Waiter extends Want {
  type: 'rd' | 'wr';
  id: string | undefined;
  resolve(): void;
  reject(err: FsError): void;
}

/** Locks and waiters of one file; `sessions` = the sessions indexed for it in `LockTable.bySession`. */
interface NodeLocks {
  posix: Held[];
  flock: Held[];
  waiters: Waiter[];
  sessions: Set<string>;
  /** A waiter the table would grant waits for a lock held on the node's machine (tried again by the retry timer). */
  hostBlocked: boolean;
}

const overlaps = (a: { start: number; end: number }, b: { start: number; end: number }): boolean => a.start < b.end && b.start < a.end;
const clash = (h: Held, w: Want): boolean => h.owner !== w.owner && (h.type === 'wr' || w.type === 'wr') && overlaps(h, w);

/** The lock table of a node. @see module documentation */
export class LockTable {
  private readonly nodes = new Map<number, NodeLocks>();
  /** session -> nodes where it holds a lock or waits. */
  private readonly bySession = new Map<string, Set<number>>();
  /** owner -> its queued posix waiters (the wait-for relation of deadlock detection). */
  private readonly posixWaitersByOwner = new Map<string, Set<Waiter>>();
  /** wait id -> queued waiter. */
  private readonly waitIds = new Map<string, Waiter>();
  /** Tries the waits blocked only on the node's machine again, while there are any. */
  private hostRetry: NodeJS.Timeout | null = null;

  /** @param host the node's own locks on its machine, kept as the union of the table's (none: the table alone) */
  constructor(private readonly host: HostLocks | null = null) {}

  /**
   * Takes, changes or releases a lock. Resolves when applied (the table already reflects it when a
   * request without a conflict returns). Without `wait`, a conflict rejects FsError EAGAIN at once.
   * With `wait`, the request queues (first come, first served) and resolves when granted; it
   * rejects EDEADLK (posix only) when waiting would close a cycle of owners waiting for each other
   * (owner A would wait for a lock of B while B waits, directly or transitively, for a lock of A),
   * and EINTR when cancelled (`cancel(waitId)` or `releaseSession`). `un` never waits and always
   * resolves. A flock request by an owner holding a flock of another type releases that one first.
   * @param waitId id to cancel this wait with (only used with `wait`); must be unique among current waits
   * @returns rejects FsError EINVAL (never throws) for a negative or non-integer start/len/node, start+len beyond
   *   Number.MAX_SAFE_INTEGER, an unknown kind/type, non-string owner/session, or a `waitId` already waiting
   */
  lock(req: LockRequest, wait: boolean, waitId?: string): Promise<void> {
    let want: Want;
    try {
      want = this.validate(req);
      if (wait && waitId !== undefined && this.waitIds.has(waitId)) throw new FsError(Errno.EINVAL, `wait id ${waitId} already waiting`);
    } catch (err) {
      return Promise.reject(err);
    }
    const entry = this.entry(want.node);
    if (want.kind === 'flock') {
      const own = entry.flock.find((h) => h.owner === want.owner);
      if (own?.type === want.type) return Promise.resolve();
      if (own) entry.flock.splice(entry.flock.indexOf(own), 1);
      if (want.type === 'un') {
        this.settle(want.node, entry);
        return Promise.resolve();
      }
      this.wake(entry);
    }
    const type = want.type;
    const free = type === 'un' || !this.conflicts(entry, want).length;
    const local = free && type !== 'un' && !this.hostGrow(entry, want);
    if (free && !local) {
      this.apply(entry, want);
      this.settle(want.node, entry);
      return Promise.resolve();
    }
    let err: FsError | null = null;
    if (!wait) err = new FsError(Errno.EAGAIN, `lock on node ${want.node} held by ${local ? "a process on the node's machine" : 'another owner'}`);
    else if (want.kind === 'posix' && this.wouldDeadlock(entry, want)) err = new FsError(Errno.EDEADLK, `waiting on node ${want.node} would deadlock`);
    if (err) {
      this.settle(want.node, entry);
      return Promise.reject(err);
    }
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = { ...want, type, id: waitId, resolve, reject };
      entry.waiters.push(w);
      if (local) entry.hostBlocked = true;
      if (w.id !== undefined) this.waitIds.set(w.id, w);
      if (w.kind === 'posix') {
        let set = this.posixWaitersByOwner.get(w.owner);
        if (!set) this.posixWaitersByOwner.set(w.owner, (set = new Set()));
        set.add(w);
      }
      this.settle(want.node, entry);
    });
  }

  /**
   * The first held lock of another owner that conflicts with `req` (lowest start for posix), or null
   * (F_GETLK answers F_UNLCK). Never changes anything.
   * @throws FsError EINVAL for a bad request (as `lock`) or type `un`
   */
  test(req: LockRequest): LockConflict | null {
    const want = this.validate(req);
    if (want.type === 'un') throw new FsError(Errno.EINVAL, 'lock test needs type rd or wr');
    const entry = this.nodes.get(want.node);
    const h = entry ? this.conflicts(entry, want)[0] : undefined;
    if (!h) return null;
    const c: LockConflict = { type: h.type, start: h.start, len: h.end === Infinity ? 0 : h.end - h.start, owner: h.owner, session: h.session };
    if (h.pid !== undefined) c.pid = h.pid;
    return c;
  }

  /** Cancels the wait `waitId`: its promise rejects FsError EINTR. @returns false when no such wait */
  cancel(waitId: string): boolean {
    const w = this.waitIds.get(waitId);
    if (!w) return false;
    const entry = this.nodes.get(w.node)!;
    entry.waiters.splice(entry.waiters.indexOf(w), 1);
    this.dropWaiter(w, new FsError(Errno.EINTR, 'lock wait cancelled'));
    this.settle(w.node, entry);
    return true;
  }

  /** Releases every posix lock of `owner` on `node` (a close(2) by that owner), then wakes waiters. */
  releaseOwner(node: number, owner: string): void {
    this.releaseOwnerKind(node, owner, 'posix');
  }

  /** Releases every lock of kind `kind` of `owner` on `node` (flock: at the release of an open file description), then wakes waiters. */
  releaseOwnerKind(node: number, owner: string, kind: LockKind): void {
    const entry = this.nodes.get(node);
    if (!entry) return;
    entry[kind] = entry[kind].filter((h) => h.owner !== owner);
    this.settle(node, entry);
  }

  /** Releases every lock and cancels (EINTR) every wait of `session` (the session ended), then wakes waiters. @returns the number of locks (ranges) released */
  releaseSession(session: string): number {
    let released = 0;
    for (const node of [...(this.bySession.get(session) ?? [])]) {
      const entry = this.nodes.get(node)!;
      for (const kind of ['posix', 'flock'] as const) {
        const kept = entry[kind].filter((h) => h.session !== session);
        released += entry[kind].length - kept.length;
        entry[kind] = kept;
      }
      const gone = entry.waiters.filter((w) => w.session === session);
      entry.waiters = entry.waiters.filter((w) => w.session !== session);
      for (const w of gone) this.dropWaiter(w, new FsError(Errno.EINTR, 'session ended'));
      this.settle(node, entry);
    }
    return released;
  }

  /** True when `session` holds any lock (of any kind) on `node`. */
  holds(session: string, node: number): boolean {
    const entry = this.nodes.get(node);
    return !!entry && (entry.posix.some((h) => h.session === session) || entry.flock.some((h) => h.session === session));
  }

  /** Figures for metrics: locks held (posix ranges plus flocks) and waits queued, over all files. */
  stats(): { held: number; waiting: number } {
    let held = 0;
    let waiting = 0;
    for (const e of this.nodes.values()) {
      held += e.posix.length + e.flock.length;
      waiting += e.waiters.length;
    }
    return { held, waiting };
  }

  private validate(req: LockRequest): Want {
    const bad = (what: string) => new FsError(Errno.EINVAL, `bad lock request: ${what}`);
    if (req.kind !== 'posix' && req.kind !== 'flock') throw bad('kind');
    if (req.type !== 'rd' && req.type !== 'wr' && req.type !== 'un') throw bad('type');
    if (!Number.isSafeInteger(req.node) || req.node < 0) throw bad('node');
    if (typeof req.owner !== 'string' || typeof req.session !== 'string') throw bad('owner/session');
    let start = 0;
    let end = Infinity;
    if (req.kind === 'posix') {
      if (!Number.isSafeInteger(req.start) || req.start < 0 || !Number.isSafeInteger(req.len) || req.len < 0) throw bad('start/len');
      if (req.start + req.len > Number.MAX_SAFE_INTEGER) throw bad('start+len');
      start = req.start;
      if (req.len) end = req.start + req.len;
    }
    const want: Want = { node: req.node, kind: req.kind, type: req.type, start, end, owner: req.owner, session: req.session };
    if (req.pid !== undefined) want.pid = req.pid;
    return want;
  }

  private entry(node: number): NodeLocks {
    let entry = this.nodes.get(node);
    if (!entry) this.nodes.set(node, (entry = { posix: [], flock: [], waiters: [], sessions: new Set(), hostBlocked: false }));
    return entry;
  }

  /** Held locks of other owners conflicting with `w` (posix: sorted by start). */
  private conflicts(entry: NodeLocks, w: Want): Held[] {
    return w.type === 'un' ? [] : entry[w.kind].filter((h) => clash(h, w));
  }

  /** Applies a request that has no conflict: replaces the owner's locks over its range. */
  private apply(entry: NodeLocks, w: Want): void {
    const held: Held = { type: w.type as 'rd' | 'wr', start: w.start, end: w.end, owner: w.owner, session: w.session };
    if (w.pid !== undefined) held.pid = w.pid;
    if (w.kind === 'flock') {
      entry.flock = entry.flock.filter((h) => h.owner !== w.owner);
      if (w.type !== 'un') entry.flock.push(held);
      return;
    }
    const next: Held[] = [];
    for (const h of entry.posix) {
      if (h.owner !== w.owner || !overlaps(h, held)) next.push(h);
      else {
        if (h.start < held.start) next.push({ ...h, end: held.start });
        if (h.end > held.end) next.push({ ...h, start: held.end });
      }
    }
    if (w.type !== 'un') {
      const adjacent = (h: Held) => h.owner === w.owner && h.type === held.type && (h.end === held.start || h.start === held.end);
      for (const h of next.filter(adjacent)) {
        held.start = Math.min(held.start, h.start);
        held.end = Math.max(held.end, h.end);
        next.splice(next.indexOf(h), 1);
      }
      next.push(held);
    }
    entry.posix = next.sort((a, b) => a.start - b.start);
  }

  /** True when `w` (by owner A) waiting for the owners it conflicts with would close a wait-for cycle back to A. */
  private wouldDeadlock(entry: NodeLocks, w: Want): boolean {
    const seen = new Set<string>();
    const todo = this.conflicts(entry, w).map((h) => h.owner);
    while (todo.length) {
      const owner = todo.pop()!;
      if (owner === w.owner) return true;
      if (seen.has(owner)) continue;
      seen.add(owner);
      for (const q of this.posixWaitersByOwner.get(owner) ?? []) {
        for (const h of this.conflicts(this.nodes.get(q.node)!, q)) todo.push(h.owner);
      }
    }
    return false;
  }

  /** Grants, in arrival order, every waiter that no longer conflicts (with the locks held, including those granted in the pass), until none is. */
  private wake(entry: NodeLocks): void {
    for (let granted = true; granted;) {
      granted = false;
      for (let i = 0; i < entry.waiters.length;) {
        const w = entry.waiters[i];
        if (this.conflicts(entry, w).length) {
          i++;
          continue;
        }
        if (!this.hostGrow(entry, w)) {
          entry.hostBlocked = true;
          i++;
          continue;
        }
        entry.waiters.splice(i, 1);
        this.apply(entry, w);
        this.dropWaiter(w, null);
        granted = true;
      }
    }
  }

  /** Forgets a waiter taken out of its node's queue and settles its promise (resolves when `err` is null). */
  private dropWaiter(w: Waiter, err: FsError | null): void {
    if (w.id !== undefined) this.waitIds.delete(w.id);
    const set = this.posixWaitersByOwner.get(w.owner);
    if (set?.delete(w) && !set.size) this.posixWaitersByOwner.delete(w.owner);
    if (err) w.reject(err);
    else w.resolve();
  }

  /** True when the node's machine grants what `w` adds to the locks of its kind (always, without a host). */
  private hostGrow(entry: NodeLocks, w: Want): boolean {
    if (!this.host || w.type === 'un') return true;
    return this.host.grow(w.node, w.kind, [...entry[w.kind], { type: w.type, start: w.start, end: w.end }]);
  }

  /** Tries the waits blocked on the node's machine again every {@link HOST_RETRY_MS} while there are any. */
  private retryHostLater(): void {
    if (this.hostRetry) return;
    this.hostRetry = setInterval(() => {
      let blocked = false;
      for (const [node, entry] of [...this.nodes]) {
        if (!entry.hostBlocked) continue;
        entry.hostBlocked = false;
        this.settle(node, entry, false);
        blocked ||= entry.hostBlocked;
      }
      if (!blocked && this.hostRetry) {
        clearInterval(this.hostRetry);
        this.hostRetry = null;
      }
    }, HOST_RETRY_MS);
    this.hostRetry.unref();
  }

  /** After a change on `node`: wakes its waiters, brings the session index up to date, forgets the node when empty. */
  private settle(node: number, entry: NodeLocks, retry = true): void {
    entry.hostBlocked = false;
    this.wake(entry);
    if (this.host) {
      this.host.fit(node, 'posix', entry.posix);
      this.host.fit(node, 'flock', entry.flock);
      if (entry.hostBlocked && retry) this.retryHostLater();
    }
    const now = new Set<string>();
    for (const x of [...entry.posix, ...entry.flock, ...entry.waiters]) now.add(x.session);
    for (const s of entry.sessions) {
      if (now.has(s)) continue;
      const set = this.bySession.get(s)!;
      set.delete(node);
      if (!set.size) this.bySession.delete(s);
    }
    for (const s of now) {
      if (entry.sessions.has(s)) continue;
      let set = this.bySession.get(s);
      if (!set) this.bySession.set(s, (set = new Set()));
      set.add(node);
    }
    entry.sessions = now;
    if (!now.size) {
      this.nodes.delete(node);
      this.host?.forget(node);
    }
  }
}
