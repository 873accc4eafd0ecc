import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Errno, FsError } from '@svc/protocol';
import { HOST_RETRY_MS, LockRequest, LockTable } from '../lock-table';
import { changes, LocalHostLocks, unionOf } from './host-locks';
import { loadPosixNative, posixNativeUnavailable } from './posix-native';

describe('unionOf and changes', () => {
  it('gives over each byte the highest lock, merging neighbours of one level', () => {
    expect(
      unionOf([
        { type: 'rd', start: 0, end: 10 },
        { type: 'wr', start: 5, end: 15 },
        { type: 'rd', start: 15, end: 20 },
        { type: 'rd', start: 30, end: Infinity },
      ]),
    ).toEqual([
      { start: 0, end: 5, level: 1 },
      { start: 5, end: 15, level: 2 },
      { start: 15, end: 20, level: 1 },
      { start: 30, end: Infinity, level: 1 },
    ]);
    expect(unionOf([])).toEqual([]);
  });

  it('lists the ranges where two unions differ, with both levels', () => {
    const from = unionOf([{ type: 'wr', start: 0, end: 10 }]);
    const to = unionOf([
      { type: 'rd', start: 5, end: 20 },
      { type: 'wr', start: 0, end: 2 },
    ]);
    expect(changes(from, to)).toEqual([
      { start: 2, end: 5, from: 2, to: 0 },
      { start: 5, end: 10, from: 2, to: 1 },
      { start: 10, end: 20, from: 0, to: 1 },
    ]);
  });
});

const native = loadPosixNative();
const why = posixNativeUnavailable();
if (why) process.stdout.write(`host lock tests skipped: ${why}\n`);
(native ? describe : describe.skip)("the node's own locks on its machine (LockTable with LocalHostLocks)", () => {
  let dir: string;
  let file: string;
  /** The session's descriptor of the file (what the node's handle holds). */
  let sessionFd: number;
  /** A process on the node's machine: another open file description, whose locks conflict with the node's. */
  let localFd: number;
  let host: LocalHostLocks;
  let table: LockTable;
  const NODE = 7;
  const req = (over: Partial<LockRequest>): LockRequest => ({ node: NODE, kind: 'posix', type: 'wr', start: 0, len: 10, owner: 'a', session: 's', ...over });
  const local = (kind: 0 | 1, type: 0 | 1 | 2, start = 0, len = 0) => native!.hostLock(localFd, kind, type, start, len);
  /** A lock request as FsService makes it: the host is given the session's descriptor first. */
  const lock = (r: LockRequest, wait: boolean, waitId?: string) => {
    host.attach(NODE, sessionFd);
    return table.lock(r, wait, waitId);
  };
  const errnoOf = async (p: Promise<unknown>) =>
    p.then(
      () => 0,
      (e: FsError) => e.errno,
    );

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-hostlocks-'));
    file = join(dir, 'f');
    writeFileSync(file, 'x'.repeat(100));
    sessionFd = openSync(file, 'r+');
    localFd = openSync(file, 'r+');
    host = new LocalHostLocks(native!);
    table = new LockTable(host);
  });
  afterEach(() => {
    closeSync(sessionFd);
    closeSync(localFd);
    rmSync(dir, { recursive: true, force: true });
  });

  it("holds a session's byte-range lock on the machine, lets it go on unlock and closes its descriptor", async () => {
    await lock(req({ start: 0, len: 10 }), false);
    await lock(req({ owner: 'b', type: 'rd', start: 20, len: 5 }), false);
    expect(local(0, 2, 5, 1)).toBe(Errno.EAGAIN);
    expect(local(0, 1, 20, 1)).toBe(0);
    expect(local(0, 2, 22, 1)).toBe(Errno.EAGAIN);
    expect(local(0, 0)).toBe(0);
    expect(local(0, 2, 10, 10)).toBe(0);
    expect(local(0, 0)).toBe(0);
    // A downgrade to read lets a local reader in, not a writer.
    await lock(req({ type: 'rd', start: 0, len: 10 }), false);
    expect(local(0, 1, 0, 10)).toBe(0);
    expect(local(0, 2, 0, 10)).toBe(Errno.EAGAIN);
    expect(local(0, 0)).toBe(0);
    table.releaseOwner(NODE, 'a');
    table.releaseOwner(NODE, 'b');
    expect(local(0, 2)).toBe(0);
    expect(host.size).toBe(0);
  });

  it("refuses (EAGAIN) or holds back a request a local process's lock conflicts with, and grants it once that goes", async () => {
    expect(local(0, 2, 0, 50)).toBe(0);
    expect(await errnoOf(lock(req({ start: 40, len: 20 }), false))).toBe(Errno.EAGAIN);
    // Nothing was taken by the refused request: a range beside it is still free for the local process.
    expect(local(0, 2, 50, 10)).toBe(0);
    expect(local(0, 0, 50, 10)).toBe(0);
    let granted = false;
    const waiting = lock(req({ start: 40, len: 20 }), true, 'w1').then(() => (granted = true));
    await new Promise((r) => setTimeout(r, HOST_RETRY_MS * 3));
    expect(granted).toBe(false);
    expect(local(0, 0)).toBe(0);
    await waiting;
    expect(local(0, 2, 45, 1)).toBe(Errno.EAGAIN);
    // A request another session's lock conflicts with is the table's: it takes nothing on the machine.
    expect(await errnoOf(lock(req({ owner: 'b', start: 0, len: 100 }), false))).toBe(Errno.EAGAIN);
    expect(local(0, 2, 0, 40)).toBe(0);
  });

  it('does the same for flock, shared and exclusive', async () => {
    expect(local(1, 1)).toBe(0);
    await lock(req({ kind: 'flock', type: 'rd' }), false);
    expect(await errnoOf(lock(req({ kind: 'flock', type: 'wr', owner: 'b' }), false))).toBe(Errno.EAGAIN);
    expect(local(1, 0)).toBe(0);
    table.releaseOwnerKind(NODE, 'a', 'flock');
    await lock(req({ kind: 'flock', type: 'wr', owner: 'b' }), false);
    expect(local(1, 1)).toBe(Errno.EAGAIN);
    table.releaseOwnerKind(NODE, 'b', 'flock');
    expect(local(1, 2)).toBe(0);
    expect(host.size).toBe(0);
  });
});
