/**
 * Invalidation events (docs/protocol.md "FS extensions"): `acheron.e_fs_inval` `{node, what, gen}` and
 * `acheron.e_fs_inval_dir` `{dir, dir_gen}`, pushed (without a tag) to every session that was
 * given that node, after this node's own mutations and for changes made on disk by anyone.
 *
 * On-disk changes come from one non-recursive directory watch (Node's `fs.watch`, inotify on
 * Linux) per directory that a session has used as a parent (lookup, readdirp, create, mkdir,
 * symlink, unlink, rmdir, rename). Every node a session was given has such a parent, so the
 * watched set covers exactly what sessions can have cached, and costs nothing for the parts of
 * an export nobody looks at. (Node's recursive `fs.watch` was tried first: on Linux it stops
 * reporting changes below a directory once that directory is renamed. chokidar v4 reports
 * them, but scans and watches the whole export at start: ~3 s and ~120 MB for 15,000 files.)
 *
 * Coalescing: raw watch events are gathered for {@link RAW_WINDOW_MS} and each changed entry is
 * stat'ed once; pushes are gathered for {@link FLUSH_WINDOW_MS}, one per node per window
 * (`attr` + `data` -> `data`, anything + `all` -> `all`).
 *
 * Origin: a change made through a session's request is queued with that session as its origin.
 * A push whose every change since the last one came from the receiving session carries
 * `own: true` when the session was granted `inval_own`, so its client can skip what its own
 * handling of the reply already did. Changes of different origins (or from the disk) in one
 * window make a push without `own`.
 *
 * Reported: a change whose queuing session hears of it in its request's reply (a directory's
 * entries and attributes after an entry operation, with the `dir_attr` extension; the entries
 * it removed) is not pushed to that session at all when it was granted `dir_attr`, unless a
 * change the reply does not report joins it in the same window.
 */
import { Injectable, Logger, OnModuleDestroy } from '@nestjs/common';
import { FS_INVAL_DIR_EVENT, FS_INVAL_EVENT, InvalDirEvent, InvalEvent } from '@svc/protocol';
import { Errno, FsError } from '@svc/protocol/wire';
import type { FsStat, FsWatchEvent } from './fs-backend';
import { ExportRegistry } from './export-registry';
import { FsSession, FsSessionService } from './fs-session';
import { FsNode, identityOf, NodeTable } from './node-table';

/** How long raw watch events are gathered before the changed entries are stat'ed, ms. */
export const RAW_WINDOW_MS = 25;
/** How long pushes are gathered before they are sent, ms. */
export const FLUSH_WINDOW_MS = 20;

type What = InvalEvent['what'];

/** Where a queued change came from: the session whose request made it, or null (several, or the disk). */
type Origin = FsSession | null;

/** The origin of two changes merged into one push. */
function mergeOrigin(a: Origin | undefined, b: Origin): Origin {
  return a === undefined || a === b ? b : null;
}

/** A watch that could not be set up: remembered so it is not retried for every request. */
const NO_WATCH = { close: () => undefined };

function merge(a: What | undefined, b: What): What {
  if (!a || a === b) return b;
  if (a === 'all' || b === 'all') return 'all';
  return 'data';
}

@Injectable()
export class InvalidationService implements OnModuleDestroy {
  private readonly log = new Logger('InvalidationService');
  private pendingNodes = new Map<number, { what: What; gen: number; by: Origin; reported: Origin }>();
  private pendingDirs = new Map<number, { dirGen: number; by: Origin; reported: Origin }>();
  /** Ids forgotten by the node table: dropped from the sessions' seen sets after their last push. */
  private pendingForgotten: number[] = [];
  private flushTimer: NodeJS.Timeout | null = null;
  /** Raw events per watched directory: per entry name, its merged type and the seq of its latest event. */
  private raw = new Map<FsNode, Map<string, { type: FsWatchEvent['type']; seq: number }>>();
  /** Counts raw watch events; orders them against the set-up of watches. */
  private rawSeq = 0;
  /** For each live watch, {@link rawSeq} when its set-up began (it sees every change after that). */
  private readonly watchSeq = new WeakMap<object, number>();
  private rawTimer: NodeJS.Timeout | null = null;
  private processing = false;
  private stopped = false;
  /** Watches being set up. */
  private readonly watching = new Map<FsNode, Promise<void>>();
  /** Entry operations of this node in progress, per directory and name (see {@link entryOp}). */
  private readonly entryOps = new Map<FsNode, Map<string, number>>();
  /** Directories whose entries an operation of this node is changing, with their counts (see {@link dirOp}). */
  private readonly dirOps = new Map<FsNode, number>();

  constructor(
    private readonly registry: ExportRegistry,
    private readonly table: NodeTable,
    private readonly sessions: FsSessionService,
  ) {}

  /**
   * Node `node` changed (`what`): bumps its generation and queues an `e_fs_inval`, for the other
   * names of its file too (hard links).
   * @param by the session whose request made the change; null (default): found on disk
   * @param reported the reply to `by`'s request reports this change of `node` itself (not of its
   *   other names): a session granted `dir_attr` is not sent it (see the module documentation)
   */
  nodeChanged(node: FsNode, what: What, by: Origin = null, reported = false): void {
    // A change through one name of a file with several is a change of every name.
    for (const n of [node, ...this.table.otherNames(node)]) {
      n.gen++;
      const prev = this.pendingNodes.get(n.id);
      const told = reported && n === node ? by : null;
      this.pendingNodes.set(n.id, { what: merge(prev?.what, what), gen: n.gen, by: mergeOrigin(prev?.by, by), reported: mergeOrigin(prev?.reported, told) });
    }
    this.scheduleFlush();
  }

  /**
   * The entries of directory `dir` changed: bumps its entry generation and queues an `e_fs_inval_dir`.
   * @param by as {@link nodeChanged}
   * @param reported as {@link nodeChanged}
   */
  dirChanged(dir: FsNode, by: Origin = null, reported = false): void {
    dir.dirGen++;
    const prev = this.pendingDirs.get(dir.id);
    this.pendingDirs.set(dir.id, { dirGen: dir.dirGen, by: mergeOrigin(prev?.by, by), reported: mergeOrigin(prev?.reported, reported ? by : null) });
    this.scheduleFlush();
  }

  /**
   * Runs `fn`, this node's change on disk of `entries` (directory and name: create, unlink,
   * rename, ...), whose caller updates the node table as soon as it resolves (in the same
   * microtask run, before any other I/O callback). While it runs, the watch's reports of those
   * names wait for the next batch: the disk may already show what the table does not yet.
   */
  async entryOp<T>(entries: ReadonlyArray<readonly [FsNode, string]>, fn: () => Promise<T>): Promise<T> {
    for (const [dir, name] of entries) {
      let names = this.entryOps.get(dir);
      if (!names) this.entryOps.set(dir, (names = new Map<string, number>()));
      names.set(name, (names.get(name) ?? 0) + 1);
    }
    try {
      return await fn();
    } finally {
      for (const [dir, name] of entries) {
        const names = this.entryOps.get(dir);
        const n = (names?.get(name) ?? 1) - 1;
        if (n > 0) names!.set(name, n);
        else {
          names?.delete(name);
          if (names?.size === 0) this.entryOps.delete(dir);
        }
      }
    }
  }

  /**
   * Runs `fn`, an operation of this node that changes the entries of directories `dirs` and
   * reads their attributes after that for its reply (`dir_attr`). While it runs, the watch's
   * report of each of those directories in its own parent waits for the next batch: the
   * directory's attributes on disk may be ahead of what this node recorded of them.
   */
  async dirOp<T>(dirs: readonly FsNode[], fn: () => Promise<T>): Promise<T> {
    for (const d of dirs) this.dirOps.set(d, (this.dirOps.get(d) ?? 0) + 1);
    try {
      return await fn();
    } finally {
      for (const d of dirs) {
        const n = (this.dirOps.get(d) ?? 1) - 1;
        if (n > 0) this.dirOps.set(d, n);
        else this.dirOps.delete(d);
      }
    }
  }

  /** True while an operation of this node on entry `name` of `dir`, or one changing the entries of that entry (a directory), is in progress. */
  private entryBusy(dir: FsNode, name: string): boolean {
    if (this.entryOps.get(dir)?.has(name)) return true;
    const child = this.dirOps.size > 0 ? this.table.peek(dir, name) : undefined;
    return child !== undefined && this.dirOps.has(child);
  }

  /**
   * Makes sure directory `dir` is watched (once; a failure is not retried). Resolves when the
   * watch is in place, so a change made after the caller's reply is seen; never rejects.
   */
  watchDir(dir: FsNode): Promise<void> {
    if (dir.watch || !dir.live || this.stopped) return Promise.resolve();
    const pending = this.watching.get(dir);
    if (pending) return pending;
    const backend = this.registry.of(dir).backend;
    if (!backend.watch) {
      dir.watch = NO_WATCH;
      return Promise.resolve();
    }
    const since = this.rawSeq;
    const done = backend
      .watch(dir.path(), (event) => this.onRaw(dir, event))
      .then((watch) => {
        if (watch && (!dir.live || this.stopped)) watch.close();
        else {
          dir.watch = watch ?? NO_WATCH;
          if (watch) this.watchSeq.set(watch, since);
        }
      })
      .catch(() => {
        dir.watch = NO_WATCH;
      })
      .finally(() => this.watching.delete(dir));
    this.watching.set(dir, done);
    return done;
  }

  /**
   * Stops watching forgotten nodes; after the next flush (which still tells the sessions that
   * saw them) their ids leave every session's seen set, so a session that lives through many
   * `rm -rf build && make` cycles does not keep every id it was ever given.
   */
  release(nodes: Iterable<FsNode>): void {
    for (const n of nodes) {
      n.watch?.close();
      n.watch = null;
      this.pendingForgotten.push(n.id);
    }
    if (this.pendingForgotten.length > 0) this.scheduleFlush();
  }

  onModuleDestroy(): void {
    this.stopped = true;
    if (this.flushTimer) clearTimeout(this.flushTimer);
    if (this.rawTimer) clearTimeout(this.rawTimer);
  }

  // ---- pushes ---------------------------------------------------------------------------

  /**
   * Sends every queued push now instead of at the end of the coalescing window, and resolves
   * once every other session has acknowledged every push sent to it so far (sessions granted
   * `inval_ack`; see {@link FsSession.pushesAcked} for the deadline). Awaited before the reply
   * to a mutation that is a commit point for other clients (close, fsync, rename, create, ...):
   * the mutating client hears that its operation returned only after the other clients have
   * dropped what they cached of what it changed, so an open on another mount that follows the
   * close is never answered from that mount's old caches. Never rejects.
   * @param mutator the session whose mutation this is (not waited for: it knows its own changes)
   */
  flushNow(mutator: FsSession): Promise<void> {
    if (this.flushTimer) {
      clearTimeout(this.flushTimer);
      this.flush(mutator);
    }
    let waits: Promise<void>[] | null = null;
    for (const session of this.sessions.all()) {
      if (session === mutator || !session.acks || session.ackedSeq >= session.pushSeq) continue;
      (waits ??= []).push(session.pushesAcked());
    }
    return waits ? Promise.all(waits).then(() => undefined) : Promise.resolve();
  }

  /**
   * After a change of `node` made through `mutator` that is not itself a commit point (a write,
   * an open with O_TRUNC): when another session that acknowledges pushes was given the node, the
   * queued pushes go now and this resolves once they are acknowledged ({@link flushNow}), so the
   * writer's close(2), whose flush waits for its writes, returns only after those sessions
   * dropped what they cached of the file. Otherwise the pushes keep their coalescing window and
   * this resolves at once. Never rejects.
   */
  changedBy(node: FsNode, mutator: FsSession): Promise<void> {
    for (const session of this.sessions.all()) {
      if (session !== mutator && session.acks && !session.lagging && session.seen.has(node.id)) return this.flushNow(mutator);
    }
    return Promise.resolve();
  }

  private scheduleFlush(): void {
    if (this.flushTimer || this.stopped) return;
    this.flushTimer = setTimeout(() => this.flush(null), FLUSH_WINDOW_MS);
    this.flushTimer.unref();
  }

  /**
   * Sends the queued pushes. Those sent for the commit of `mutator` to the other sessions that
   * acknowledge pushes carry `seq` (the commit waits for their acks); the mutator's own, and all
   * of a flush at the end of the coalescing window (`mutator` null: nobody waits), carry none
   * and are not acknowledged. A push of changes that all came from the receiving session carries
   * `own` when it was granted `inval_own`, and is not sent when they were all reported to it and
   * it was granted `dir_attr`.
   */
  private flush(mutator: FsSession | null): void {
    this.flushTimer = null;
    const nodes = this.pendingNodes;
    const dirs = this.pendingDirs;
    const forgotten = this.pendingForgotten;
    this.pendingNodes = new Map();
    this.pendingDirs = new Map();
    this.pendingForgotten = [];
    for (const session of this.sessions.all()) {
      const acks = session.acks && mutator !== null && session !== mutator;
      const tellsOwn = session.features.has('inval_own');
      const toldInReply = session.features.has('dir_attr');
      for (const [id, { what, gen, by, reported }] of nodes) {
        if (!session.seen.has(id) || (reported === session && toldInReply)) continue;
        const ev: InvalEvent = { node: id, what, gen };
        if (by === session && tellsOwn) ev.own = true;
        else if (acks) ev.seq = session.nextPushSeq();
        session.push(FS_INVAL_EVENT, ev);
      }
      for (const [id, { dirGen, by, reported }] of dirs) {
        if (!session.seen.has(id) || (reported === session && toldInReply)) continue;
        const ev: InvalDirEvent = { dir: id, dir_gen: dirGen };
        if (by === session && tellsOwn) ev.own = true;
        else if (acks) ev.seq = session.nextPushSeq();
        session.push(FS_INVAL_DIR_EVENT, ev);
      }
      for (const id of forgotten) session.seen.delete(id);
    }
  }

  // ---- on-disk changes ------------------------------------------------------------------

  private onRaw(dir: FsNode, event: FsWatchEvent): void {
    if (this.stopped || !dir.live) return;
    let names = this.raw.get(dir);
    if (!names) {
      names = new Map();
      this.raw.set(dir, names);
    }
    const key = event.name ?? '';
    const type = names.get(key)?.type === 'rename' ? 'rename' : event.type;
    names.set(key, { type, seq: ++this.rawSeq });
    this.scheduleRaw();
  }

  private scheduleRaw(): void {
    if (this.rawTimer || this.stopped) return;
    this.rawTimer = setTimeout(() => void this.processRaw(), RAW_WINDOW_MS);
    this.rawTimer.unref();
  }

  private async processRaw(): Promise<void> {
    this.rawTimer = null;
    if (this.processing) return this.scheduleRaw();
    this.processing = true;
    const batch = this.raw;
    this.raw = new Map();
    try {
      for (const [dir, names] of batch) {
        if (!dir.live) continue;
        let entriesChanged = false;
        const unnamed = names.get('');
        if (unnamed) {
          // The watch is dead (the directory was removed, moved or replaced on disk), or the
          // change could not be named: everything about the directory may have changed.
          this.dropWatchOlderThan(dir, unnamed.seq);
          this.nodeChanged(dir, 'all');
        }
        for (const [name, { type, seq }] of names) {
          let kind = type;
          // What the look at the name found (null: nothing there), when there was one.
          let seen: FsStat | null | undefined;
          if (type === 'rename' && name !== '') {
            const { told, st } = await this.toldAlready(dir, name);
            if (told === 'busy') this.onRaw(dir, { type, name });
            if (told === true || told === 'busy') continue;
            // Still the file this node made under the name: only its content or attributes changed.
            if (told === 'same') kind = 'change';
            seen = st;
          }
          const child = name === '' ? undefined : this.table.peek(dir, name);
          if (kind === 'rename' || name === '') entriesChanged = true;
          if (child) await this.restat(child, kind, seq, seen);
        }
        if (entriesChanged) {
          this.dirChanged(dir);
          this.nodeChanged(dir, 'attr');
        }
      }
    } catch (e) {
      this.log.warn({ msg: 'processing on-disk changes failed', err: (e as Error).message });
    } finally {
      this.processing = false;
    }
  }

  /**
   * True when what the watch reports of entry `name` of `dir` is what every session was told
   * already by the replies and pushes of this node's own requests: the name is on disk as this
   * node made it ({@link FsNode.madeHere}, same kind, ctime, mtime and size), or it is neither
   * on disk nor in the node table (made and removed again between two looks, like git's
   * `index.lock`, or never handed out: nobody can hold anything of it). A directory this node
   * made stays as made through its own changes of the directory's entries (the reads of its
   * attributes for the replies' `dir_attr`): its watch, set up before the mkdir's reply, reports those.
   * 'same' when the name is still the file this node made there ({@link FsNode.madeIdentity}:
   * device, inode number and birth time) with other attributes, a file a session then wrote:
   * the directory's entries are as told, the file changed. 'busy' while an operation of this
   * node on the name, or on the entries of the directory of that name, is in progress
   * ({@link entryOp}, {@link dirOp}): the report is looked at again in the next batch.
   */
  private async toldAlready(dir: FsNode, name: string): Promise<{ told: boolean | 'same' | 'busy'; st?: FsStat | null }> {
    if (this.entryBusy(dir, name)) return { told: 'busy' };
    let st: FsStat | null = null;
    try {
      st = await this.registry.of(dir).backend.getattr([...dir.path(), name]);
    } catch (e) {
      if (!(e instanceof FsError && e.errno === Errno.ENOENT)) return { told: false };
    }
    if (this.entryBusy(dir, name)) return { told: 'busy' };
    const child = this.table.peek(dir, name);
    if (!child) return { told: st === null, st };
    if (st === null || st.kind !== child.kind) return { told: false, st };
    if (child.madeHere && st.ctimeNs === child.ctimeNs && st.mtimeNs === child.mtimeNs && st.size === child.size) return { told: true, st };
    const identity = child.madeIdentity !== null ? identityOf(st) : null;
    return { told: identity !== null && identity === child.madeIdentity ? 'same' : false, st };
  }

  /**
   * Closes the watch of `node` if its set-up began before raw event number `seq` (a watch set up
   * after the event already watches the directory as it is now, and is kept).
   */
  private dropWatchOlderThan(node: FsNode, seq: number): void {
    const watch = node.watch;
    if (!watch || (this.watchSeq.get(watch) ?? 0) >= seq) return;
    watch.close();
    node.watch = null;
  }

  /**
   * Finds out what happened to a known entry reported by a watch (`type`, raw event number
   * `seq`), and queues its event.
   * @param seen what a look at the entry's name in this batch found ({@link toldAlready}: its
   *   attributes, or null when nothing was there); undefined: it is looked at here
   */
  private async restat(node: FsNode, type: FsWatchEvent['type'], seq: number, seen?: FsStat | null): Promise<void> {
    const before = { kind: node.kind, mtimeNs: node.mtimeNs, size: node.size, identity: node.seenIdentity };
    let what: What;
    // Gone (or unreadable): anything about it may have changed.
    const st =
      seen !== undefined
        ? seen
        : await this.registry
            .of(node)
            .backend.getattr(node.path())
            .catch(() => null);
    // The name was added, removed or replaced in its parent, and now names another object (or
    // one whose identity cannot be told): anything about it may have changed, and a watch on
    // the directory of that name may be on an inode that is no longer there (its own "gone"
    // report can come late, or never when the new directory reuses the inode number). The
    // watch goes before the sessions hear of the change, so their next use watches what is
    // there now. A name made on disk and looked up before its report arrives still names the
    // object the sessions were told of: only its attributes are looked at.
    const replaced = type === 'rename' && (st === null || before.identity === null || identityOf(st) !== before.identity);
    if (replaced) this.dropWatchOlderThan(node, seq);
    if (st === null) what = 'all';
    else {
      this.table.observe(node, st);
      if (replaced || st.kind !== before.kind) what = 'all';
      else what = st.mtimeNs !== before.mtimeNs || st.size !== before.size ? 'data' : 'attr';
    }
    this.nodeChanged(node, what);
    if (what === 'all' && node.kind === 2) this.dirChanged(node);
  }
}
