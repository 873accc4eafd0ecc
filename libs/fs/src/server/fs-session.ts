/**
 * Per-session FS state (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): the session's open handles (closed when it ends), the
 * node ids it was given (for invalidation pushes), whether it negotiated the binary data path
 * and which extensions it was granted, and its directory listings in progress (readdirp paging).
 */
import { Injectable, Logger } from '@nestjs/common';
import { Errno, FsError, INVAL_ACK_WAIT_MS } from '@svc/protocol';
import type { FsOpenFile } from './fs-backend';
import type { FsNode } from './node-table';
import { LockTable } from './lock-table';
import { LocalHostLocks } from './local/host-locks';
import { loadPosixNative } from './local/posix-native';

/** Most handles one session may hold open at once (more: EMFILE). */
export const MAX_HANDLES_PER_SESSION = 4096;
/** Most directory listings one session keeps for paging (least recently started dropped first). */
const MAX_LISTINGS_PER_SESSION = 64;

/** One open handle `h` of a session. */
export interface OpenHandle {
  readonly h: number;
  /** The node opened (its id stays valid while the node lives). */
  readonly node: FsNode;
  readonly file: FsOpenFile;
  /** Lock owners (keys of the node's {@link LockTable}) that took POSIX locks through this handle; they go when it closes. */
  readonly posixOwners: Set<string>;
  /** Lock owners that took `flock` locks through this handle (open file descriptions); they go when it closes. */
  readonly flockOwners: Set<string>;
}

/** Sends a push to the session's peer: `type` e.g. `acheron.e_fs_inval`. */
export type PushFn = (type: string, payload: unknown) => void;

/** The FS state of one session; see module documentation. */
export class FsSession {
  /** Open handles by `h`. */
  readonly handles = new Map<number, OpenHandle>();
  /** Ids of the nodes handed to this session. */
  readonly seen = new Set<number>();
  /** Sorted entry names of directory listings in progress, by directory node id. */
  readonly listings = new Map<number, string[]>();
  private nextHandle = 1;
  closed = false;

  constructor(
    /** Session id (for logs). */
    readonly id: string,
    /** True when the binary data path was negotiated. */
    readonly binary: boolean,
    /** Push to the peer. */
    readonly push: PushFn,
    /** FS extensions granted in the hello (docs/protocol.md "FS extensions"). */
    readonly features: ReadonlySet<string> = new Set(),
  ) {}

  /**
   * Registers an open file as a new handle.
   * @returns the handle number (u64, below 2^53)
   * @throws FsError EMFILE when the session holds {@link MAX_HANDLES_PER_SESSION} handles
   */
  addHandle(node: FsNode, file: FsOpenFile): number {
    if (this.closed) throw new FsError(Errno.EBADF, 'the session is closed');
    if (this.handles.size >= MAX_HANDLES_PER_SESSION) throw new FsError(Errno.EMFILE, `a session may hold at most ${MAX_HANDLES_PER_SESSION} open handles`);
    const h = this.nextHandle++;
    this.handles.set(h, { h, node, file, posixOwners: new Set(), flockOwners: new Set() });
    return h;
  }

  /**
   * The handle `h`.
   * @throws FsError EBADF when unknown or closed
   */
  handle(h: number): OpenHandle {
    const handle = this.handles.get(h);
    if (!handle) throw new FsError(Errno.EBADF, `unknown handle ${h}`);
    return handle;
  }

  // ---- acknowledged pushes (the `inval_ack` extension) ----

  /** True when the session acknowledges its invalidation pushes (`inval_ack` granted). */
  get acks(): boolean {
    return this.features.has('inval_ack');
  }

  /** Number of the last push sent (`seq`), and the highest the peer acknowledged. */
  pushSeq = 0;
  ackedSeq = 0;
  /** The peer missed an ack deadline and has not caught up since: mutations do not wait for it. */
  lagging = false;
  private readonly ackWaiters: Array<{ seq: number; done: () => void }> = [];

  /** The `seq` for the next invalidation push. */
  nextPushSeq(): number {
    return ++this.pushSeq;
  }

  /**
   * The peer acknowledged every push up to `seq` (`t_fs_ack`); a `seq` above the last push sent
   * is taken as the last push sent. Wakes the mutations waiting for it.
   */
  acked(seq: number): void {
    const upTo = Math.min(seq, this.pushSeq);
    if (upTo <= this.ackedSeq) return;
    this.ackedSeq = upTo;
    if (this.ackedSeq === this.pushSeq) this.lagging = false;
    for (let i = this.ackWaiters.length - 1; i >= 0; i--) {
      const w = this.ackWaiters[i];
      if (w.seq <= upTo) {
        this.ackWaiters.splice(i, 1);
        w.done();
      }
    }
  }

  /**
   * Resolves once the peer has acknowledged every push sent to it so far, at once when there is
   * nothing to wait for (no `inval_ack`, nothing unacknowledged, lagging or closed), or after
   * `timeoutMs`, which marks the session lagging. Never rejects.
   */
  pushesAcked(timeoutMs = INVAL_ACK_WAIT_MS): Promise<void> {
    const seq = this.pushSeq;
    if (!this.acks || this.closed || this.lagging || this.ackedSeq >= seq) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        const i = this.ackWaiters.indexOf(waiter);
        if (i >= 0) this.ackWaiters.splice(i, 1);
        if (this.ackedSeq < seq) this.lagging = true;
        resolve();
      }, timeoutMs);
      timer.unref();
      const waiter = {
        seq,
        done: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      this.ackWaiters.push(waiter);
    });
  }

  /** Wakes every mutation waiting for this session's acks (it ended). */
  endAckWaits(): void {
    for (const w of this.ackWaiters.splice(0)) w.done();
  }

  /** Remembers a directory listing for paging (bounded). */
  keepListing(dirId: number, names: string[]): void {
    this.listings.delete(dirId);
    if (this.listings.size >= MAX_LISTINGS_PER_SESSION) this.listings.delete(this.listings.keys().next().value as number);
    this.listings.set(dirId, names);
  }
}

/**
 * The FS sessions of this node: opened by a good hello, closed (with their handles) when the
 * connection ends.
 */
@Injectable()
export class FsSessionService {
  private readonly log = new Logger('FsSessionService');
  private readonly sessions = new Set<FsSession>();
  /**
   * The node's own locks on the files of its local exports, standing for the table's so that
   * processes on the node's machine take part (none without native/posix).
   */
  readonly hostLocks: LocalHostLocks | null = ((posix) => (posix ? new LocalHostLocks(posix) : null))(loadPosixNative());
  /** The locks of every session (the `posix` extension): one table for the node, released with their session. */
  readonly locks = new LockTable(this.hostLocks);

  /** Starts the FS state of a session after a good hello; `features`: the extensions granted. */
  open(id: string, binary: boolean, push: PushFn, features: readonly string[] = []): FsSession {
    const session = new FsSession(id, binary, push, new Set(features));
    this.sessions.add(session);
    return session;
  }

  /** Ends a session: releases its locks, cancels its lock waits (EINTR) and closes every handle it holds. */
  async close(session: FsSession): Promise<void> {
    if (session.closed) return;
    session.closed = true;
    session.endAckWaits();
    this.locks.releaseSession(session.id);
    this.sessions.delete(session);
    const handles = [...session.handles.values()];
    session.handles.clear();
    session.listings.clear();
    const results = await Promise.allSettled(handles.map((h) => h.file.close()));
    const failed = results.filter((r) => r.status === 'rejected').length;
    if (failed > 0) this.log.warn({ session: session.id, failed, msg: 'some handles failed to close at session end' });
  }

  /** Every open FS session. */
  all(): Iterable<FsSession> {
    return this.sessions;
  }

  /** Number of open FS sessions. */
  get size(): number {
    return this.sessions.size;
  }

  /** Open handles over all sessions. */
  openHandles(): number {
    let n = 0;
    for (const s of this.sessions) n += s.handles.size;
    return n;
  }

  /** Node ids handed to the open sessions, summed over sessions (their `seen` sets). */
  seenNodes(): number {
    let n = 0;
    for (const s of this.sessions) n += s.seen.size;
    return n;
  }

  /** Closes every session (shutdown). */
  async closeAll(): Promise<void> {
    await Promise.all([...this.sessions].map((s) => this.close(s)));
  }
}
