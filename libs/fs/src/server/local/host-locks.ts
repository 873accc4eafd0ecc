/**
 * The node's own locks on the files of its local exports, standing for the locks its lock table
 * grants to sessions ({@link HostLocks}), so that processes on the node's machine that lock those
 * files directly (fcntl, lockf, flock) take part with every mount.
 *
 * Per file the node holds one open file description of its own (opened again through the
 * `/proc/self/fd` link of a session's descriptor, read-write where it may, else read-only) and
 * on it, for byte-range locks, open file description locks (fcntl F_OFD_SETLK) over the union
 * of the table's locks (a write lock over each byte any owner write-locks, a read lock where
 * owners only read-lock), and, for flock, flock(2) exclusive when any owner holds it so, else
 * shared. To Linux the node is one more process: a local process's conflicting lock makes a
 * session's request wait or fail, and a session's lock makes a local process's wait or fail.
 *
 * What cannot be mirrored is left to the table alone, never refused: a write lock on a file
 * the node could open only read-only, a filesystem without such locks (every errno but EAGAIN
 * is taken as "granted"). Deadlocks through a local process are not detected. F_GETLK through
 * a mount reports the sessions' locks only.
 */
import { closeSync, constants as C, openSync } from 'node:fs';
import type { HostLocks, LockKind, LockRange } from '../lock-table';
import type { PosixNative } from './posix-native';

/** 0 none, 1 read, 2 write. */
type Level = 0 | 1 | 2;

/** A piece of a union: [start, end) at one level above 0. */
interface Piece {
  start: number;
  end: number;
  level: Level;
}

const EAGAIN = 11;

const levelOf = (type: 'rd' | 'wr'): Level => (type === 'wr' ? 2 : 1);

/**
 * The union of `held` as sorted, non-overlapping pieces: over each byte the highest level of
 * the ranges covering it, adjacent pieces of one level merged.
 */
export function unionOf(held: readonly LockRange[]): Piece[] {
  const cuts = new Set<number>();
  for (const h of held) {
    cuts.add(h.start);
    cuts.add(h.end);
  }
  const points = [...cuts].sort((a, b) => a - b);
  const out: Piece[] = [];
  for (let i = 0; i + 1 < points.length; i++) {
    const [start, end] = [points[i], points[i + 1]];
    let level: Level = 0;
    for (const h of held) if (h.start <= start && end <= h.end) level = Math.max(level, levelOf(h.type)) as Level;
    if (level === 0) continue;
    const last = out[out.length - 1];
    if (last && last.end === start && last.level === level) last.end = end;
    else out.push({ start, end, level });
  }
  return out;
}

/** The level of `pieces` over [start, end) (which lies within one piece or none). */
function levelAt(pieces: readonly Piece[], start: number): Level {
  for (const p of pieces) if (p.start <= start && start < p.end) return p.level;
  return 0;
}

/** Where `from` and `to` differ: [start, end) with both levels, in order. */
export function changes(from: readonly Piece[], to: readonly Piece[]): Array<{ start: number; end: number; from: Level; to: Level }> {
  const cuts = new Set<number>();
  for (const p of [...from, ...to]) {
    cuts.add(p.start);
    cuts.add(p.end);
  }
  const points = [...cuts].sort((a, b) => a - b);
  const out: Array<{ start: number; end: number; from: Level; to: Level }> = [];
  for (let i = 0; i + 1 < points.length; i++) {
    const [start, end] = [points[i], points[i + 1]];
    const a = levelAt(from, start);
    const b = levelAt(to, start);
    if (a !== b) out.push({ start, end, from: a, to: b });
  }
  return out;
}

/** One file's description and what is held on it. */
interface HostFile {
  fd: number;
  posix: Piece[];
  flock: Level;
}

/** @see module documentation */
export class LocalHostLocks implements HostLocks {
  private readonly files = new Map<number, HostFile>();

  constructor(private readonly native: PosixNative) {}

  /**
   * Gives the host the file of node `node` through `fd`, a session's descriptor of it: the first
   * time, the host opens its own description of the file through `/proc/self/fd/<fd>`. A file
   * it cannot open is left to the table alone.
   */
  attach(node: number, fd: number): void {
    if (this.files.has(node)) return;
    for (const mode of [C.O_RDWR, C.O_RDONLY]) {
      try {
        const own = openSync(`/proc/self/fd/${fd}`, mode | C.O_NONBLOCK | C.O_NOCTTY);
        this.files.set(node, { fd: own, posix: [], flock: 0 });
        return;
      } catch {
        /* next mode, or none */
      }
    }
  }

  /** Files held open for their locks (for tests and metrics). */
  get size(): number {
    return this.files.size;
  }

  grow(node: number, kind: LockKind, held: readonly LockRange[]): boolean {
    const f = this.files.get(node);
    if (!f) return true;
    if (kind === 'flock') {
      const want = unionOf(held).reduce<Level>((l, p) => Math.max(l, p.level) as Level, 0);
      if (want <= f.flock) return true;
      if (this.set(f.fd, 1, want, 0, Infinity) === EAGAIN) {
        // A failed flock conversion lets the old lock go (Linux): take it back.
        if (f.flock !== 0) this.set(f.fd, 1, f.flock, 0, Infinity);
        return false;
      }
      f.flock = want;
      return true;
    }
    const target = unionOf(held);
    const raised: Array<{ start: number; end: number; from: Level; to: Level }> = [];
    for (const c of changes(f.posix, target)) {
      if (c.to <= c.from) continue;
      if (this.set(f.fd, 0, c.to, c.start, c.end) === EAGAIN) {
        for (const r of raised) this.set(f.fd, 0, r.from, r.start, r.end);
        return false;
      }
      raised.push(c);
    }
    // What is held now: the higher of the two over each byte.
    f.posix = unionOf([...toRanges(f.posix), ...toRanges(target)]);
    return true;
  }

  fit(node: number, kind: LockKind, held: readonly LockRange[]): void {
    const f = this.files.get(node);
    if (!f) return;
    const target = unionOf(held);
    if (kind === 'flock') {
      const want = target.reduce<Level>((l, p) => Math.max(l, p.level) as Level, 0);
      if (want !== f.flock && this.set(f.fd, 1, want, 0, Infinity) !== EAGAIN) f.flock = want;
    } else {
      let now = f.posix;
      for (const c of changes(f.posix, target)) {
        if (this.set(f.fd, 0, c.to, c.start, c.end) === EAGAIN) continue;
        now = unionOf([
          ...toRanges(now).flatMap((r) => cut(r, c.start, c.end)),
          ...(c.to ? [{ type: c.to === 2 ? 'wr' : 'rd', start: c.start, end: c.end } as const] : []),
        ]);
      }
      f.posix = now;
    }
  }

  forget(node: number): void {
    const f = this.files.get(node);
    if (!f) return;
    this.files.delete(node);
    // Closing the description lets go of whatever is still held on it.
    try {
      closeSync(f.fd);
    } catch {
      /* closed */
    }
  }

  /** One lock call; returns 0 or the errno (EAGAIN: held elsewhere; any other: cannot be mirrored, taken as done). */
  private set(fd: number, kind: 0 | 1, level: Level, start: number, end: number): number {
    const rc = this.native.hostLock(fd, kind, level, start, end === Infinity ? 0 : end - start);
    return rc === EAGAIN ? EAGAIN : 0;
  }
}

/** Pieces as lock ranges. */
function toRanges(pieces: readonly Piece[]): LockRange[] {
  return pieces.map((p) => ({ type: p.level === 2 ? 'wr' : 'rd', start: p.start, end: p.end }));
}

/** `r` without [start, end). */
function cut(r: LockRange, start: number, end: number): LockRange[] {
  if (r.end <= start || end <= r.start) return [r];
  const out: LockRange[] = [];
  if (r.start < start) out.push({ ...r, end: start });
  if (end < r.end) out.push({ ...r, start: end });
  return out;
}
