/**
 * Write-behind of the FUSE layer: sequential writes to an open file are
 * gathered into chunks (1 MiB by default) sent in the background, 4 in flight, without copying
 * them again (the frame header is completed in room left in front of each block); flushed on
 * flush/fsync/release, where the errors of background writes are reported. The last chunk of a
 * file may carry what comes after it (an fsync, new times: {@link WriteBehind.sendThen}).
 */
import { BINARY_HEADER_ROOM, Errno, FsError, WriteThen } from '@svc/protocol/wire';
import type { BufferPool } from '../buffer-pool';
import type { WorkspaceRouter, WriteThenResult } from '../router/workspace-router';

/** Background writes allowed in flight per open file. */
const MAX_INFLIGHT = 4;

/** Write-behind state of one open file (one FUSE file handle). */
export class WriteBehindState {
  /**
   * Write-behind data not sent yet: `pendingLen` bytes for byte offset `pendingOff`, gathered
   * in `block` after {@link BINARY_HEADER_ROOM} free bytes (the request frame is completed there).
   */
  block: Buffer | null = null;
  pendingOff = 0;
  pendingLen = 0;
  /** Background writes not yet acknowledged. */
  readonly inflight = new Set<Promise<void>>();
  /** First error of a background write, reported at the next write/flush/release. */
  error: unknown = null;

  /**
   * @param handle the router handle of the file: a number once open, else a promise that opens
   *   it on the node (lazy opens)
   */
  constructor(
    readonly handle: () => number | Promise<number>,
    /** Send one write at a time, in order (a handle opened with O_APPEND: the node appends each where the file ends then). */
    readonly serial = false,
  ) {}

  /** True while written data has not reached the node. */
  get dirty(): boolean {
    return this.pendingLen > 0 || this.inflight.size > 0;
  }

  /** The error of a background write not reported yet, cleared (null when none). */
  takeError(): unknown {
    if (!this.error) return null;
    const e = this.error;
    this.error = null;
    return e;
  }
}

/** Writes through router file handles with write-behind. */
export class WriteBehind {
  /**
   * @param blocks pool of blocks of {@link BINARY_HEADER_ROOM} + `chunk` bytes
   * @param chunk bytes per request
   */
  constructor(
    private readonly router: Pick<WorkspaceRouter, 'write' | 'writeThen'>,
    private readonly blocks: BufferPool,
    private readonly chunk: number,
  ) {}

  /**
   * Takes `data` for byte offset `pos`: copied into the pending chunk (the caller may reuse
   * `data`'s memory once this resolves), each full chunk sent in the background; a write that
   * does not continue the pending chunk sends it (and waits for every background write)
   * first. Waits while 4 writes are in flight.
   * @returns when `data` is taken; errors of the background writes come from {@link flush}
   * @throws the first background write error when it shows up here (via a flush)
   */
  async write(state: WriteBehindState, data: Buffer, pos: number): Promise<void> {
    if (state.pendingLen > 0 && pos !== state.pendingOff + state.pendingLen) await this.flush(state);
    for (let taken = 0; taken < data.length;) {
      if (state.pendingLen === 0) state.pendingOff = pos + taken;
      state.block ??= this.blocks.acquire();
      const n = data.copy(state.block, BINARY_HEADER_ROOM + state.pendingLen, taken, taken + Math.min(data.length - taken, this.chunk - state.pendingLen));
      state.pendingLen += n;
      taken += n;
      if (state.pendingLen >= this.chunk) this.sendPending(state);
    }
    const most = state.serial ? 1 : MAX_INFLIGHT;
    while (state.inflight.size >= most) await Promise.race(state.inflight);
  }

  /**
   * Sends pending data and waits for all background writes.
   * @throws the first error of a background write (then cleared), e.g. FsError EIO (short write), ENOSPC
   */
  async flush(state: WriteBehindState): Promise<void> {
    await this.settle(state);
    const e = state.takeError();
    // eslint-disable-next-line @typescript-eslint/only-throw-error -- rethrows what a background write threw, as it was
    if (e) throw e;
  }

  /**
   * Sends pending data and waits for all background writes, leaving their error (if any) to be
   * reported to the handle's own next write, flush, fsync or release.
   */
  async settle(state: WriteBehindState): Promise<void> {
    this.sendPending(state);
    while (state.inflight.size > 0) await Promise.all(state.inflight);
  }

  /**
   * True when the pending chunk of `state` is all it has to send: bytes pending, no write in
   * flight, no error waiting to be reported ({@link sendThen} applies).
   */
  onlyPending(state: WriteBehindState): boolean {
    return state.pendingLen > 0 && state.inflight.size === 0 && state.error === null;
  }

  /**
   * Sends the pending chunk of `state` with `then` for the node to do once it is written, in one
   * request (the `write_then` extension), and waits for it. Callers check {@link onlyPending}
   * first; otherwise this is {@link settle} and `then` is not done.
   * @returns what the node did: `done` false when `then` was not done (the node does not grant
   *   the extension, it wrote fewer bytes, or the write failed: its error then waits in `state`
   *   for the handle's next write, flush, fsync or release, as a background write's does);
   *   else `attr` after `then.set`, or `error` of the failed step of `then`
   */
  async sendThen(state: WriteBehindState, then: WriteThen): Promise<WriteThenResult> {
    const block = state.block;
    if (!this.onlyPending(state) || !block) {
      await this.settle(state);
      return { done: false };
    }
    const len = state.pendingLen;
    const off = state.pendingOff;
    state.block = null;
    state.pendingLen = 0;
    const p = (async (): Promise<WriteThenResult> => {
      const h = state.handle();
      const fh = typeof h === 'number' ? h : await h;
      const r = await this.router.writeThen(fh, off, { buf: block, len }, then);
      if (r) return r;
      const n = await this.router.write(fh, off, { buf: block, len });
      if (n !== len) throw new FsError(Errno.EIO, 'short write');
      return { done: false };
    })()
      .catch((e): WriteThenResult => {
        state.error ??= e;
        return { done: false };
      })
      .finally(() => this.blocks.release(block));
    const tracked = p.then(() => undefined);
    state.inflight.add(tracked);
    try {
      return await p;
    } finally {
      state.inflight.delete(tracked);
    }
  }

  /** Sends the pending chunk in the background; its block goes back to the pool once the node answered. */
  private sendPending(state: WriteBehindState): void {
    const block = state.block;
    if (!block || state.pendingLen === 0) return;
    const len = state.pendingLen;
    const off = state.pendingOff;
    state.block = null;
    state.pendingLen = 0;
    // A serial state sends after the writes already in flight are answered.
    const before = state.serial && state.inflight.size > 0 ? Promise.allSettled([...state.inflight]) : null;
    const p = (async () => {
      if (before) await before;
      const h = state.handle();
      const fh = typeof h === 'number' ? h : await h;
      const n = await this.router.write(fh, off, { buf: block, len });
      if (n !== len) throw new FsError(Errno.EIO, 'short write');
    })()
      .catch((e) => {
        state.error ??= e;
      })
      .finally(() => this.blocks.release(block));
    state.inflight.add(p);
    void p.finally(() => state.inflight.delete(p));
  }
}
