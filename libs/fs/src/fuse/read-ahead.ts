/**
 * Read-ahead of the FUSE layer: a sequential reader of an open file is served
 * from aligned chunks (1 MiB by default) fetched ahead, several in flight, tolerant of the
 * kernel's concurrent, slightly out-of-order read-ahead requests; any other read goes to the
 * node as asked.
 */
import type { WorkspaceRouter } from '../router/workspace-router';

/** One chunk fetched (or being fetched) ahead of a reader. */
type Chunk = Promise<{ data: Buffer; eof: boolean }>;

/** Read-ahead state of one open file (one FUSE file handle). */
export class ReadAheadState {
  /**
   * End of the stream a sequential reader is consuming (bytes): reads near it are served from
   * aligned chunks fetched ahead. The kernel sends read-ahead requests concurrently, so they
   * arrive slightly out of order: "near" is a window, not an exact offset.
   */
  head = 0;
  /** Size of the file as learnt from a short chunk (no chunk is fetched at or past it). */
  eofAt = Infinity;
  /** Size of the file when it was opened (bytes; Infinity when unknown): read-ahead stops there, reads do not. */
  sizeHint = Infinity;
  /** Prefetched chunks by offset (multiples of the chunk size). */
  readonly chunks = new Map<number, Chunk>();
  /** Counts the resets: a chunk fetched before one says nothing of where the file ends now. */
  generation = 0;

  /** Forgets what was read ahead; `written`: the file changed (through this handle or elsewhere), so its size is unknown now. */
  reset(written = false): void {
    this.chunks.clear();
    this.eofAt = Infinity;
    this.generation++;
    if (written) this.sizeHint = Infinity;
  }
}

/** Reads through router file handles with read-ahead. */
export class ReadAhead {
  /**
   * @param chunk bytes per request
   * @param readAhead bytes requested ahead of a sequential reader; also the window (bytes)
   *   around the stream head within which a read counts as sequential
   */
  constructor(
    private readonly router: Pick<WorkspaceRouter, 'read'>,
    private readonly chunk: number,
    private readonly readAhead: number,
  ) {}

  /**
   * `len` bytes at byte offset `pos` of router handle `fh` into `buf`. A reader near the
   * stream head of `state` (sequential, possibly a little out of order) is served from aligned
   * chunks of `chunk` bytes, with `readAhead` bytes requested ahead once the file proved
   * longer than one chunk; any other read goes to the node as asked and moves the head there.
   * @returns bytes copied (fewer than `len` only at the end of the file)
   * @throws the router's read error (EBADF, EIO, ...)
   */
  async read(state: ReadAheadState, fh: number, buf: Buffer, len: number, pos: number): Promise<number> {
    if (Math.abs(pos - state.head) > this.readAhead) {
      state.reset();
      const { data } = await this.router.read(fh, pos, len);
      data.copy(buf);
      state.head = pos + data.length;
      return data.length;
    }
    let copied = 0;
    while (copied < len) {
      const at = pos + copied;
      if (at >= state.eofAt) break;
      const base = at - (at % this.chunk);
      const { data } = await this.fetch(fh, state, base);
      const from = at - base;
      if (from >= data.length) break;
      copied += data.copy(buf, copied, from, Math.min(data.length, from + (len - copied)));
      if (data.length < this.chunk) break;
    }
    const end = pos + copied;
    if (end > state.head) state.head = end;
    // Keep one chunk behind the head for requests that arrive late; drop the rest.
    for (const off of state.chunks.keys()) if (off + 2 * this.chunk <= state.head) state.chunks.delete(off);
    // (fetch handles a failure itself: dropped from the map, reported to the reader that waits for it.)
    const limit = Math.min(state.eofAt, Math.max(state.sizeHint, state.head), state.head + this.readAhead);
    for (let off = state.head - (state.head % this.chunk); off < limit; off += this.chunk) if (!state.chunks.has(off)) void this.fetch(fh, state, off);
    return copied;
  }

  /** The chunk at `off` (aligned), from the read-ahead map or a new request. */
  private fetch(fh: number, state: ReadAheadState, off: number): Chunk {
    let p = state.chunks.get(off);
    if (!p) {
      const generation = state.generation;
      p = this.router.read(fh, off, this.chunk).then((r) => {
        if (r.data.length < this.chunk && state.generation === generation) state.eofAt = Math.min(state.eofAt, off + r.data.length);
        return r;
      });
      p.catch(() => {
        if (state.chunks.get(off) === p) state.chunks.delete(off);
      });
      state.chunks.set(off, p);
    }
    return p;
  }
}
