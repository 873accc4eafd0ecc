import { Errno, FsError } from '@svc/protocol';
import { LockRequest, LockTable, LockType } from './lock-table';

/** A posix request on node 1 (or `node`) by `owner` of session `session`. */
function px(owner: string, type: LockType, start: number, len: number, session = 's1', node = 1, pid?: number): LockRequest {
  return { node, kind: 'posix', type, start, len, owner, session, ...(pid === undefined ? {} : { pid }) };
}

/** A flock request on node 1 (or `node`). */
function fl(owner: string, type: LockType, session = 's1', node = 1): LockRequest {
  return { node, kind: 'flock', type, start: 0, len: 0, owner, session };
}

/** Follows a promise: `state` is 'pending', 'ok', or the errno it rejected with. */
function track(p: Promise<void>): { state: 'pending' | 'ok' | number } {
  const t: { state: 'pending' | 'ok' | number } = { state: 'pending' };
  p.then(
    () => (t.state = 'ok'),
    (err: FsError) => (t.state = err.toErrno()),
  );
  return t;
}

/** Lets resolved promises run their callbacks. */
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

async function errnoOf(p: Promise<void>): Promise<number | 'ok'> {
  try {
    await p;
    return 'ok';
  } catch (err) {
    return (err as FsError).toErrno();
  }
}

describe('LockTable', () => {
  let t: LockTable;
  beforeEach(() => (t = new LockTable()));

  describe('posix', () => {
    it('lets two owners share a read lock and blocks a writer', async () => {
      await t.lock(px('A', 'rd', 0, 10), false);
      await t.lock(px('B', 'rd', 5, 10, 's2'), false);
      expect(t.stats()).toEqual({ held: 2, waiting: 0 });
      expect(t.test(px('C', 'rd', 0, 100))).toBeNull();
      expect(t.test(px('C', 'wr', 12, 1))).toEqual({ type: 'rd', start: 5, len: 10, owner: 'B', session: 's2' });
      expect(await errnoOf(t.lock(px('C', 'wr', 0, 1), false))).toBe(Errno.EAGAIN);
    });

    it('answers EAGAIN on a write conflict and reports the holder with its pid', async () => {
      await t.lock(px('A', 'wr', 0, 10, 's1', 1, 42), false);
      expect(await errnoOf(t.lock(px('B', 'rd', 9, 1, 's2'), false))).toBe(Errno.EAGAIN);
      expect(await errnoOf(t.lock(px('B', 'wr', 0, 0, 's2'), false))).toBe(Errno.EAGAIN);
      expect(t.test(px('B', 'rd', 3, 1))).toEqual({ type: 'wr', start: 0, len: 10, owner: 'A', session: 's1', pid: 42 });
      expect(t.test(px('A', 'wr', 0, 0))).toBeNull();
      expect(t.stats()).toEqual({ held: 1, waiting: 0 });
    });

    it('lets write locks on disjoint ranges coexist, and other files are independent', async () => {
      await t.lock(px('A', 'wr', 0, 10), false);
      await t.lock(px('B', 'wr', 10, 10, 's2'), false);
      await t.lock(px('C', 'wr', 0, 0, 's3', 2), false);
      expect(t.test(px('D', 'wr', 20, 0))).toBeNull();
      expect(t.test(px('D', 'rd', 9, 2))).toMatchObject({ owner: 'A' });
      expect(t.stats().held).toBe(3);
    });

    it('converts an own read lock to a write lock when alone', async () => {
      await t.lock(px('A', 'rd', 0, 10), false);
      await t.lock(px('A', 'wr', 0, 10), true);
      expect(t.test(px('B', 'rd', 0, 1))).toMatchObject({ type: 'wr', start: 0, len: 10, owner: 'A' });
      expect(t.stats().held).toBe(1);
    });

    it('a downgrade from write to read wakes a waiting reader of another owner', async () => {
      await t.lock(px('A', 'wr', 0, 10), false);
      const b = track(t.lock(px('B', 'rd', 2, 2, 's2'), true));
      await flush();
      expect(b.state).toBe('pending');
      await t.lock(px('A', 'rd', 0, 10), false);
      expect(t.stats()).toEqual({ held: 2, waiting: 0 });
      await flush();
      expect(b.state).toBe('ok');
      expect(t.test(px('C', 'wr', 3, 1))).toMatchObject({ type: 'rd' });
    });

    it('an unlock of the middle splits a range in two', async () => {
      await t.lock(px('A', 'wr', 0, 30), false);
      await t.lock(px('A', 'un', 10, 10), true);
      expect(t.stats().held).toBe(2);
      expect(t.test(px('B', 'wr', 0, 0))).toEqual({ type: 'wr', start: 0, len: 10, owner: 'A', session: 's1' });
      expect(t.test(px('B', 'wr', 10, 10))).toBeNull();
      expect(t.test(px('B', 'wr', 15, 0))).toEqual({ type: 'wr', start: 20, len: 10, owner: 'A', session: 's1' });
    });

    it('a lock of another type over the middle splits the own range around it', async () => {
      await t.lock(px('A', 'wr', 0, 0), false);
      await t.lock(px('A', 'rd', 10, 10), false);
      expect(t.stats().held).toBe(3);
      expect(t.test(px('B', 'rd', 10, 10))).toBeNull();
      expect(t.test(px('B', 'rd', 19, 5))).toEqual({ type: 'wr', start: 20, len: 0, owner: 'A', session: 's1' });
      expect(t.test(px('B', 'wr', 12, 1))).toMatchObject({ type: 'rd', start: 10, len: 10 });
    });

    it('merges adjacent and overlapping own ranges of the same type, not of another type', async () => {
      await t.lock(px('A', 'rd', 0, 10), false);
      await t.lock(px('A', 'rd', 10, 10), false);
      expect(t.test(px('B', 'wr', 0, 0))).toMatchObject({ start: 0, len: 20 });
      await t.lock(px('A', 'rd', 15, 10), false);
      expect(t.test(px('B', 'wr', 0, 0))).toMatchObject({ start: 0, len: 25 });
      await t.lock(px('A', 'wr', 25, 5), false);
      expect(t.stats().held).toBe(2);
      await t.lock(px('A', 'rd', 30, 0), false);
      expect(t.stats().held).toBe(3);
      expect(t.test(px('B', 'wr', 31, 1))).toMatchObject({ type: 'rd', start: 30, len: 0 });
    });

    it('len 0 runs to the end of the file', async () => {
      await t.lock(px('A', 'wr', 100, 0), false);
      expect(await errnoOf(t.lock(px('B', 'rd', Number.MAX_SAFE_INTEGER - 1, 1, 's2'), false))).toBe(Errno.EAGAIN);
      expect(t.test(px('B', 'rd', 2 ** 52, 1))).toMatchObject({ start: 100, len: 0 });
      expect(t.test(px('B', 'rd', 0, 100))).toBeNull();
      await t.lock(px('B', 'rd', 0, 100, 's2'), false);
      expect(t.stats().held).toBe(2);
    });

    it('grants waiters first come, first served', async () => {
      const order: string[] = [];
      await t.lock(px('A', 'wr', 0, 10), false);
      const b = t.lock(px('B', 'wr', 0, 10, 's2'), true).then(() => order.push('B'));
      const c = t.lock(px('C', 'wr', 5, 1, 's3'), true).then(() => order.push('C'));
      expect(t.stats()).toEqual({ held: 1, waiting: 2 });
      await t.lock(px('A', 'un', 0, 0), false);
      await b;
      await flush();
      expect(order).toEqual(['B']);
      expect(t.test(px('X', 'rd', 5, 1))).toMatchObject({ owner: 'B' });
      await t.lock(px('B', 'un', 0, 10), false);
      await c;
      expect(order).toEqual(['B', 'C']);
      expect(t.stats()).toEqual({ held: 1, waiting: 0 });
    });

    it('on release grants every compatible reader in order; a writer behind them keeps waiting', async () => {
      await t.lock(px('A', 'wr', 0, 10), false);
      const b = track(t.lock(px('B', 'rd', 0, 10, 's2'), true));
      const c = track(t.lock(px('C', 'rd', 0, 10, 's3'), true));
      const d = track(t.lock(px('D', 'wr', 0, 10, 's4'), true));
      t.releaseOwner(1, 'A');
      expect(t.stats()).toEqual({ held: 2, waiting: 1 });
      await flush();
      expect([b.state, c.state, d.state]).toEqual(['ok', 'ok', 'pending']);
      await t.lock(px('B', 'un', 0, 0), false);
      await flush();
      expect(d.state).toBe('pending');
      await t.lock(px('C', 'un', 0, 0), false);
      await flush();
      expect(d.state).toBe('ok');
    });

    it('checks new requests against held locks only, not against queued waiters', async () => {
      await t.lock(px('A', 'rd', 0, 10), false);
      const b = track(t.lock(px('B', 'wr', 0, 10, 's2'), true));
      await t.lock(px('C', 'rd', 0, 10, 's3'), false);
      expect(t.stats()).toEqual({ held: 2, waiting: 1 });
      await flush();
      expect(b.state).toBe('pending');
    });

    it('queues the same owner twice, each request on its own', async () => {
      await t.lock(px('A', 'wr', 0, 0), false);
      const b1 = track(t.lock(px('B', 'rd', 0, 5, 's2'), true));
      const b2 = track(t.lock(px('B', 'wr', 10, 5, 's2'), true));
      expect(t.stats().waiting).toBe(2);
      await t.lock(px('A', 'un', 0, 0), false);
      await flush();
      expect([b1.state, b2.state]).toEqual(['ok', 'ok']);
      expect(t.stats()).toEqual({ held: 2, waiting: 0 });
    });

    it('a waiter granted in a wake pass that downgrades its own lock lets an earlier waiter through', async () => {
      await t.lock(px('O', 'wr', 0, 5), false);
      await t.lock(px('P', 'wr', 5, 5, 's2'), false);
      const q = track(t.lock(px('Q', 'rd', 0, 5, 's3'), true));
      const o = track(t.lock(px('O', 'rd', 0, 10), true));
      await t.lock(px('P', 'un', 0, 0, 's2'), false);
      expect(t.stats()).toEqual({ held: 2, waiting: 0 });
      await flush();
      expect([q.state, o.state]).toEqual(['ok', 'ok']);
      expect(t.test(px('X', 'wr', 7, 1))).toMatchObject({ type: 'rd', start: 0, len: 10, owner: 'O' });
      expect(t.test(px('X', 'rd', 0, 0))).toBeNull();
    });

    it('an unlock never waits', async () => {
      await t.lock(px('A', 'wr', 0, 10), false);
      expect(await errnoOf(t.lock(px('B', 'un', 0, 10, 's2'), true))).toBe('ok');
      expect(t.stats()).toEqual({ held: 1, waiting: 0 });
    });
  });

  describe('deadlock detection', () => {
    it('rejects EDEADLK when A would wait for B that waits for A, leaving both unchanged', async () => {
      await t.lock(px('A', 'wr', 0, 1), false);
      await t.lock(px('B', 'wr', 1, 1, 's2'), false);
      const b = track(t.lock(px('B', 'wr', 0, 1, 's2'), true));
      expect(await errnoOf(t.lock(px('A', 'wr', 1, 1), true))).toBe(Errno.EDEADLK);
      expect(t.stats()).toEqual({ held: 2, waiting: 1 });
      expect(t.test(px('C', 'rd', 0, 1))).toMatchObject({ owner: 'A', start: 0, len: 1 });
      expect(t.test(px('C', 'rd', 1, 1))).toMatchObject({ owner: 'B', start: 1, len: 1 });
      await flush();
      expect(b.state).toBe('pending');
      await t.lock(px('A', 'un', 0, 0), false);
      await flush();
      expect(b.state).toBe('ok');
    });

    it('rejects EDEADLK for the second of two readers upgrading to write', async () => {
      await t.lock(px('A', 'rd', 0, 10), false);
      await t.lock(px('B', 'rd', 0, 10, 's2'), false);
      const a = track(t.lock(px('A', 'wr', 0, 10), true));
      expect(await errnoOf(t.lock(px('B', 'wr', 0, 10, 's2'), true))).toBe(Errno.EDEADLK);
      await t.lock(px('B', 'un', 0, 10, 's2'), false);
      await flush();
      expect(a.state).toBe('ok');
      expect(t.test(px('C', 'rd', 0, 1))).toMatchObject({ type: 'wr', owner: 'A' });
    });

    it('follows the wait-for relation transitively, across files', async () => {
      await t.lock(px('A', 'wr', 0, 1, 's1', 1), false);
      await t.lock(px('B', 'wr', 0, 1, 's2', 2), false);
      await t.lock(px('C', 'wr', 0, 1, 's3', 3), false);
      void t.lock(px('A', 'wr', 0, 1, 's1', 2), true).catch(() => undefined);
      void t.lock(px('B', 'wr', 0, 1, 's2', 3), true).catch(() => undefined);
      expect(await errnoOf(t.lock(px('C', 'wr', 0, 1, 's3', 1), true))).toBe(Errno.EDEADLK);
      expect(await errnoOf(t.lock(px('C', 'wr', 0, 1, 's3', 1), false))).toBe(Errno.EAGAIN);
      const d = track(t.lock(px('D', 'wr', 0, 1, 's4', 1), true));
      await flush();
      expect(d.state).toBe('pending');
      expect(t.stats()).toEqual({ held: 3, waiting: 3 });
    });

    it('does not apply to flock: two shared holders converting to exclusive do not deadlock', async () => {
      await t.lock(fl('A', 'rd'), false);
      await t.lock(fl('B', 'rd', 's2'), false);
      const a = track(t.lock(fl('A', 'wr'), true));
      const b = track(t.lock(fl('B', 'wr', 's2'), true));
      await flush();
      expect([a.state, b.state]).toEqual(['ok', 'pending']);
      t.releaseOwnerKind(1, 'A', 'flock');
      await flush();
      expect(b.state).toBe('ok');
    });
  });

  describe('cancel and release', () => {
    it('cancel rejects the wait with EINTR, leaves no lock, and the waiters behind proceed', async () => {
      await t.lock(px('A', 'wr', 0, 10), false);
      const b = track(t.lock(px('B', 'wr', 0, 10, 's2'), true, 'w1'));
      const c = track(t.lock(px('C', 'wr', 0, 10, 's3'), true, 'w2'));
      expect(t.cancel('w1')).toBe(true);
      expect(t.cancel('w1')).toBe(false);
      expect(t.cancel('nope')).toBe(false);
      await flush();
      expect(b.state).toBe(Errno.EINTR);
      expect(t.stats()).toEqual({ held: 1, waiting: 1 });
      expect(t.holds('s2', 1)).toBe(false);
      await t.lock(px('A', 'un', 0, 10), false);
      await flush();
      expect(c.state).toBe('ok');
      expect(t.test(px('X', 'rd', 0, 1))).toMatchObject({ owner: 'C' });
      expect(t.cancel('w2')).toBe(false);
    });

    it('a wait id can be used again once its wait is over', async () => {
      await t.lock(px('A', 'wr', 0, 10), false);
      const b = track(t.lock(px('B', 'wr', 0, 10, 's2'), true, 'w'));
      expect(await errnoOf(t.lock(px('C', 'wr', 0, 10, 's3'), true, 'w'))).toBe(Errno.EINVAL);
      t.releaseOwner(1, 'A');
      await flush();
      expect(b.state).toBe('ok');
      const c = track(t.lock(px('C', 'wr', 0, 10, 's3'), true, 'w'));
      expect(t.cancel('w')).toBe(true);
      await flush();
      expect(c.state).toBe(Errno.EINTR);
    });

    it('releaseSession releases its locks, cancels its waits with EINTR and wakes the others', async () => {
      await t.lock(px('A', 'wr', 0, 10, 's1', 1), false);
      await t.lock(px('A', 'rd', 20, 10, 's1', 1), false);
      await t.lock(fl('F', 'wr', 's1', 2), false);
      await t.lock(px('X', 'wr', 0, 0, 's2', 3), false);
      const own = track(t.lock(px('A', 'wr', 0, 1, 's1', 3), true));
      const other = track(t.lock(px('B', 'wr', 5, 20, 's2', 1), true));
      const otherFlock = track(t.lock(fl('G', 'rd', 's2', 2), true));
      expect(t.holds('s1', 1)).toBe(true);
      expect(t.holds('s1', 3)).toBe(false);
      expect(t.releaseSession('s1')).toBe(3);
      expect(t.releaseSession('s1')).toBe(0);
      await flush();
      expect([own.state, other.state, otherFlock.state]).toEqual([Errno.EINTR, 'ok', 'ok']);
      expect(t.holds('s1', 1)).toBe(false);
      expect(t.holds('s2', 1)).toBe(true);
      expect(t.stats()).toEqual({ held: 3, waiting: 0 });
      expect(t.releaseSession('s2')).toBe(3);
      expect(t.stats()).toEqual({ held: 0, waiting: 0 });
    });

    it('releaseOwner releases only the posix locks of that owner on that file', async () => {
      await t.lock(px('A', 'wr', 0, 10, 's1', 1), false);
      await t.lock(px('A', 'wr', 0, 10, 's1', 2), false);
      await t.lock(fl('A', 'wr', 's1', 1), false);
      await t.lock(px('O', 'rd', 20, 10, 's1', 1), false);
      const b = track(t.lock(px('B', 'wr', 0, 10, 's2', 1), true));
      t.releaseOwner(1, 'A');
      await flush();
      expect(b.state).toBe('ok');
      expect(t.test(px('C', 'rd', 0, 10, 's3', 2))).toMatchObject({ owner: 'A' });
      expect(t.test(fl('C', 'rd', 's3', 1))).toMatchObject({ owner: 'A', type: 'wr' });
      expect(t.test(px('C', 'wr', 20, 1, 's3', 1))).toMatchObject({ owner: 'O' });
      t.releaseOwnerKind(1, 'A', 'flock');
      expect(t.test(fl('C', 'wr', 's3', 1))).toBeNull();
      expect(t.stats().held).toBe(3);
      t.releaseOwner(9, 'A');
      expect(t.stats().held).toBe(3);
    });
  });

  describe('flock', () => {
    it('exclusive locks of two owners exclude each other; shared locks share', async () => {
      await t.lock(fl('A', 'wr'), false);
      expect(await errnoOf(t.lock(fl('B', 'wr', 's2'), false))).toBe(Errno.EAGAIN);
      expect(await errnoOf(t.lock(fl('B', 'rd', 's2'), false))).toBe(Errno.EAGAIN);
      expect(t.test(fl('B', 'rd'))).toEqual({ type: 'wr', start: 0, len: 0, owner: 'A', session: 's1' });
      await t.lock(fl('A', 'un'), false);
      await t.lock(fl('A', 'rd'), false);
      await t.lock(fl('B', 'rd', 's2'), false);
      expect(t.stats().held).toBe(2);
      expect(t.test(fl('C', 'wr'))).toMatchObject({ type: 'rd' });
    });

    it('converts an own lock: up when alone, down to let others share', async () => {
      await t.lock(fl('A', 'rd'), false);
      await t.lock(fl('A', 'wr'), false);
      expect(t.stats().held).toBe(1);
      expect(await errnoOf(t.lock(fl('B', 'rd', 's2'), false))).toBe(Errno.EAGAIN);
      const b = track(t.lock(fl('B', 'rd', 's2'), true));
      await t.lock(fl('A', 'rd'), false);
      await flush();
      expect(b.state).toBe('ok');
      expect(t.stats()).toEqual({ held: 2, waiting: 0 });
    });

    it('a request of the type already held changes nothing', async () => {
      await t.lock(fl('A', 'rd'), false);
      const b = track(t.lock(fl('B', 'wr', 's2'), true));
      await t.lock(fl('A', 'rd'), false);
      await flush();
      expect(b.state).toBe('pending');
      expect(t.test(fl('C', 'wr'))).toMatchObject({ owner: 'A', type: 'rd' });
    });

    it('a failed conversion loses the old lock (not atomic)', async () => {
      await t.lock(fl('A', 'rd'), false);
      await t.lock(fl('B', 'rd', 's2'), false);
      expect(await errnoOf(t.lock(fl('A', 'wr'), false))).toBe(Errno.EAGAIN);
      expect(t.stats().held).toBe(1);
      expect(t.holds('s1', 1)).toBe(false);
    });

    it('never conflicts with posix locks on the same file', async () => {
      await t.lock(px('A', 'wr', 0, 0), false);
      await t.lock(fl('B', 'wr', 's2'), false);
      expect(t.test(fl('C', 'rd'))).toMatchObject({ owner: 'B' });
      expect(t.test(px('C', 'rd', 0, 1))).toMatchObject({ owner: 'A' });
      t.releaseOwner(1, 'A');
      expect(t.test(fl('C', 'rd'))).toMatchObject({ owner: 'B' });
      expect(t.holds('s2', 1)).toBe(true);
    });
  });

  describe('validation and bookkeeping', () => {
    it('rejects bad requests with EINVAL and changes nothing', async () => {
      const bad: LockRequest[] = [
        px('A', 'wr', -1, 1),
        px('A', 'wr', 0, -1),
        px('A', 'wr', 0.5, 1),
        px('A', 'wr', 0, 1.5),
        px('A', 'wr', Number.MAX_SAFE_INTEGER, 1),
        px('A', 'wr', 0, Number.MAX_SAFE_INTEGER + 1),
        px('A', 'wr', 0, NaN),
        { ...px('A', 'wr', 0, 1), kind: 'lease' as never },
        { ...px('A', 'wr', 0, 1), type: 'ex' as never },
        { ...fl('A', 'wr'), type: 'sh' as never },
        px('A', 'wr', 0, 1, 's1', -1),
      ];
      for (const req of bad) {
        expect(await errnoOf(t.lock(req, false))).toBe(Errno.EINVAL);
        expect(await errnoOf(t.lock(req, true))).toBe(Errno.EINVAL);
        expect(() => t.test(req)).toThrow(FsError);
      }
      expect(() => t.test(px('A', 'un', 0, 1))).toThrow(expect.objectContaining({ errno: Errno.EINVAL }) as Error);
      expect(await errnoOf(t.lock(px('A', 'wr', Number.MAX_SAFE_INTEGER - 1, 1), false))).toBe('ok');
      expect(await errnoOf(t.lock(fl('B', 'wr', 's1', 1), false))).toBe('ok');
      expect(t.stats()).toEqual({ held: 2, waiting: 0 });
    });

    it('counts locks and waits, and is empty once everything is released', async () => {
      expect(t.stats()).toEqual({ held: 0, waiting: 0 });
      await t.lock(px('A', 'un', 0, 0), false);
      await t.lock(fl('A', 'un'), false);
      expect(t.stats()).toEqual({ held: 0, waiting: 0 });
      await t.lock(px('A', 'wr', 0, 10), false);
      await t.lock(px('A', 'wr', 20, 10), false);
      await t.lock(fl('F', 'wr'), false);
      const w1 = track(t.lock(px('B', 'rd', 0, 0, 's2'), true, 'x'));
      const w2 = track(t.lock(fl('G', 'rd', 's2'), true));
      expect(t.stats()).toEqual({ held: 3, waiting: 2 });
      expect(t.holds('s2', 1)).toBe(false);
      t.cancel('x');
      t.releaseOwnerKind(1, 'F', 'flock');
      expect(t.stats()).toEqual({ held: 3, waiting: 0 });
      await t.lock(px('A', 'un', 5, 20), false);
      expect(t.stats().held).toBe(3);
      t.releaseOwner(1, 'A');
      t.releaseOwnerKind(1, 'G', 'flock');
      expect(t.stats()).toEqual({ held: 0, waiting: 0 });
      expect(t.holds('s1', 1)).toBe(false);
      expect(t.releaseSession('s1')).toBe(0);
      await flush();
      expect([w1.state, w2.state]).toEqual([Errno.EINTR, 'ok']);
    });
  });
});
