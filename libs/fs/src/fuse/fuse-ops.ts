/**
 * The libfuse 3 low-level operations of the FUSE layer: the kernel names files by inode
 * ({@link InodeTable}: kernel inode -> workspace path, lookup counts), and each operation runs
 * over the router, the caches, the open-file table, read-ahead and write-behind, answered
 * through the poller (EINTR on interrupt, ETIMEDOUT from the watchdog). Mutations keep the
 * caches coherent with what this mount did; the kernel's own caches are kept coherent with
 * what others did by {@link FuseFs} (pushes become kernel invalidations).
 */
import type {
  AttrReply,
  CreateReply,
  DirEntry,
  DirEntryPlus,
  Entry,
  Forget,
  Lock,
  OpenReply,
  Operations,
  RequestContext,
  SetattrValues,
  ReleaseInfo,
  Statfs,
  WriteInfo,
} from '@svc/fuse3';
import { FuseError, SETATTR } from '@svc/fuse3';
import { Attr, type Cred, Errno, FileType, FsError, type LockKind, NodeKind, OpenFlags, RENAME_EXCHANGE, RENAME_NOREPLACE, SetAttr } from '@svc/protocol/wire';
import { joinPath } from '../router/paths';
import type { WorkspaceRouter } from '../router/workspace-router';
import { FuseCaches, Listing, openProof } from './fuse-caches';
import { FuseHandles, OpenState } from './fuse-handles';
import type { FuseInodes } from './fuse-inodes';
import { F_RDLCK, F_UNLCK, F_WRLCK, FuseLocks, LOCK_EX, LOCK_NB, LOCK_SH, lockRange, lockTypeOf } from './fuse-locks';
import { FusePoller } from './fuse-poller';
import { toKernelAttr } from './fuse-stat';
import { InodeEntry, InodeTable, ROOT_INO } from './inode-table';
import { NegativeEntries } from './negative-entries';
import type { ListAhead } from './list-ahead';
import { PrefetchPolicy } from './prefetch-policy';
import { ReadAhead } from './read-ahead';
import { WriteBehind } from './write-behind';

/** The open(2) flags a FUSE create passes to the node's create (the access mode and what acts on the node). */
const CREATE_FLAGS = OpenFlags.O_ACCMODE | OpenFlags.O_EXCL | OpenFlags.O_TRUNC | OpenFlags.O_APPEND | OpenFlags.O_DSYNC | OpenFlags.O_SYNC;

/** The extended attribute of a file's capabilities, which the kernel reads before each write. */
const SECURITY_CAPABILITY = 'security.capability';
/**
 * Extended attributes the mount does not carry (EOPNOTSUPP, answered here): POSIX ACLs (the
 * kernel checks the mode bits the mount presents, not ACLs) and SELinux labels (a label of the
 * node's machine means nothing on this one). `ls -l` asks for them of every file it lists.
 */
const NOT_CARRIED = new Set(['system.posix_acl_access', 'system.posix_acl_default', 'security.selinux']);

/** @throws FsError ENOTSUP for an extended attribute the mount does not carry ({@link NOT_CARRIED}) */
function carried(name: string): void {
  if (NOT_CARRIED.has(name)) throw new FsError(Errno.ENOTSUP, `${name} is not carried through the mount`);
}
/** Largest extended attribute value or name list asked of a node, bytes (XATTR_SIZE_MAX). */
const XATTR_SIZE_MAX = 65536;

/** Bytes of a readdir entry before its name (`FUSE_NAME_OFFSET`), and of a readdirplus entry (`FUSE_NAME_OFFSET_DIRENTPLUS`). */
const DIRENT_HEAD = 24;
const DIRENTPLUS_HEAD = 152;

/** Bytes a directory entry named `name` takes in the kernel's buffer (8-byte aligned). */
function direntBytes(head: number, name: string): number {
  return (head + Buffer.byteLength(name) + 7) & ~7;
}

/** The caller of a FUSE request, for a node that makes objects the caller's. */
function credOf(ctx: RequestContext): Cred {
  return { uid: ctx.uid, gid: ctx.gid };
}

/**
 * Read-only opens the binding answers without asking the operations ({@link FuseSession.fastOpen}):
 * `fh` is the file handle such opens carry; `allow` lets the opens of an inode be answered so,
 * `deny` stops it (before anything acts on a change of the inode).
 */
export interface FastOpens {
  readonly fh: number;
  allow(ino: number): void;
  deny(ino: number): void;
  /** The flushes and releases of such opens of `ino` come to the operations (`on`: locks were taken through them), or not. */
  locks(ino: number, on: boolean): void;
  /** The kernel's getxattr of `security.capability` for `ino` is answered by the binding (`none`: the file has none), or comes to the operations. */
  caps?(ino: number, none: boolean): void;
}

/** Most inodes opened by the binding whose reads this mount serves at once (each may hold a node handle). */
export const MAX_FAST_STATES = 32;

/** The parts {@link FuseOperations} works with. */
export interface FuseOperationsParts {
  router: WorkspaceRouter;
  caches: FuseCaches;
  handles: FuseHandles;
  reads: ReadAhead;
  writes: WriteBehind;
  poller: FusePoller;
  /** Kernel inodes and their lookup counts. */
  inodes: InodeTable;
  /** Starts prefetch batches as readers go through a directory. */
  prefetch: PrefetchPolicy;
  /** Lists directories ahead of a recursive walk (default: none). */
  listAhead?: Pick<ListAhead, 'onList'>;
  /** The `st_ino` numbers stat reports (default: the node ids). */
  stIno?: Pick<FuseInodes, 'of'>;
  /** How long the kernel may keep entries and attributes, seconds. */
  kernelTtlS: number;
  /** Resolves once the kernel invalidations of an inode in progress are done (undefined: none). */
  kernelSettled?: (ino: number) => Promise<void> | undefined;
  /** The kernel drops the attributes it holds of an inode (not its pages); resolves once it did. */
  invalAttr?: (ino: number) => Promise<void>;
  /** Refuse every mutation with EROFS. */
  readOnly: boolean;
  /** Who files of a node that owns everything itself are shown as owned by (default: this process's uid and gid). */
  owner?: Cred;
  /** Read-only opens the binding answers itself (default: none). */
  fastOpens?: FastOpens;
}

/** The FUSE operations of one mount (an {@link Operations} object for `mount` of @svc/fuse3). */
export class FuseOperations implements Operations {
  private readonly router: WorkspaceRouter;
  private readonly caches: FuseCaches;
  private readonly handles: FuseHandles;
  private readonly reads: ReadAhead;
  private readonly writes: WriteBehind;
  private readonly poller: FusePoller;
  private readonly inodes: InodeTable;
  private readonly prefetch: PrefetchPolicy;
  private readonly listAhead: Pick<ListAhead, 'onList'>;
  private readonly stIno: Pick<FuseInodes, 'of'>;
  private readonly ttl: number;
  private readonly readOnly: boolean;
  private readonly owner: Cred;
  private readonly kernelSettled: (ino: number) => Promise<void> | undefined;
  private readonly invalAttr: (ino: number) => Promise<void>;
  /** The attributes the kernel was last given for each inode it holds, with its path then (fstat of a file whose name moved on). */
  private readonly lastAttr = new Map<number, { attr: Attr; path: string }>();
  /** Names the kernel holds as not existing, by directory inode. */
  readonly negatives = new NegativeEntries();
  /** The listing each directory inode is being read from (readdir continues from an offset in it). */
  private readonly dirListings = new Map<number, Listing>();
  private readonly fast: FastOpens;
  /** The reads of the opens the binding answered, by inode, least recently used first. */
  private readonly fastStates = new Map<number, OpenState>();
  /** The locks this mount holds through the node (fcntl and flock). */
  readonly locks: FuseLocks;
  /**
   * Inodes known to have no `security.capability` (the node said so, or this mount created the
   * file); dropped by a push for the inode and by this mount's own xattr, owner or mode changes.
   */
  private readonly noCaps = new Set<number>();

  constructor(parts: FuseOperationsParts) {
    this.router = parts.router;
    this.caches = parts.caches;
    this.handles = parts.handles;
    this.reads = parts.reads;
    this.writes = parts.writes;
    this.poller = parts.poller;
    this.inodes = parts.inodes;
    this.prefetch = parts.prefetch;
    this.listAhead = parts.listAhead ?? { onList: () => undefined };
    this.stIno = parts.stIno ?? { of: (_path, id) => id };
    this.ttl = parts.kernelTtlS;
    this.kernelSettled = parts.kernelSettled ?? (() => undefined);
    this.invalAttr = parts.invalAttr ?? (() => Promise.resolve());
    this.readOnly = parts.readOnly;
    this.owner = parts.owner ?? { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
    this.fast = parts.fastOpens ?? { fh: -1, allow: () => undefined, deny: () => undefined, locks: () => undefined };
    this.locks = new FuseLocks({
      router: this.router,
      nodeHandle: (s) => this.handles.nodeHandle(s),
      flushPath: (path) => this.flushPath(path),
      kernelSettled: (ino) => this.kernelSettled(ino),
      fastState: (ino) => {
        const s = this.handles.state(this.pathOf(ino), false, OpenFlags.O_RDONLY);
        s.ino = ino;
        s.expectId = this.inodes.get(ino)?.fileId ?? 0;
        return s;
      },
      closeState: (s) => this.handles.closeNode(s),
      fastLocks: (ino, on) => this.fast.locks(ino, on),
    });
  }

  // ---- helpers ----

  /**
   * The workspace path of inode `ino`.
   * @throws FsError ESTALE when the kernel names an inode that no longer has a name here (its
   *   name was removed or now stands for another file): a path-based call then looks the path
   *   up again
   */
  private pathOf(ino: number): string {
    const p = this.inodes.pathOf(ino);
    if (p === null) throw new FsError(Errno.ESTALE);
    return p;
  }

  /**
   * True when `attr` may be another file than the one inode entry `e` stands for: another kind,
   * or another node id (id 0, a mount path answered as a synthetic directory while its node is
   * away, says nothing of identity).
   */
  private otherFile(e: InodeEntry, attr: Attr): boolean {
    if (e.type !== 0 && e.type !== (attr.m & FileType.S_IFMT)) return true;
    return e.fileId !== 0 && attr.id !== 0 && e.fileId !== attr.id;
  }

  /**
   * The attributes of inode `ino` whose name is gone or now another file: while a file handle is
   * open on it (fstat of an open file after an unlink or a rename over it, as on a local disk),
   * those it last had, with no link left.
   * @throws FsError ESTALE otherwise
   */
  private async detachedAttr(ino: number, fh: number | undefined): Promise<AttrReply> {
    const last = this.lastAttr.get(ino);
    if (!last || (fh === undefined && !this.handles.openOn(ino))) throw new FsError(Errno.ESTALE);
    // The node's fstat of the open file: its size and times move on after its name is gone.
    const open = (fh !== undefined ? this.handles.get(fh) : undefined) ?? this.handles.onInode(ino);
    if (open && open.fh !== null) {
      await this.flushPath(open.path);
      try {
        const attr = await this.router.fgetattr(open.fh);
        this.lastAttr.set(ino, { attr, path: last.path });
        return this.kernelAttr(last.path, attr);
      } catch (e) {
        if (!(e instanceof FsError && e.errno === Errno.ENOTSUP)) throw e;
      }
    }
    return this.kernelAttr(last.path, { ...last.attr, n: 0 });
  }

  /** The workspace path of `name` in directory inode `parent`. */
  private childPath(parent: number, name: string): string {
    return joinPath(this.pathOf(parent), name);
  }

  /**
   * The kernel's attributes of `path` with router attributes `attr`. A file of a node that owns
   * everything itself (`identity: node`) is presented as the mounting user's, as sshfs does, so
   * the kernel's permission checks give that user what the node's user has.
   */
  private kernelAttr(path: string, attr: Attr): AttrReply {
    const a = this.router.identityAt(path) === 'node' ? { ...attr, u: this.owner.uid, g: this.owner.gid } : attr;
    return { attr: toKernelAttr(a, this.stIno.of(path, attr.id)), attrTimeout: this.ttl };
  }

  /**
   * The entry the kernel is answered for `name` in `parent` (one lookup count taken): the
   * inode the kernel knows for the name, or a new one when there is none, or the name is now
   * another file (another node id: replaced by a rename) or of another type.
   */
  private entry(parent: number, name: string, path: string, attr: Attr): Entry {
    this.negatives.delete(parent, name);
    const known = this.inodes.child(parent, name);
    if (known && this.otherFile(known, attr)) this.detach(parent, name);
    const e: InodeEntry = this.inodes.lookup(parent, name);
    e.type = attr.m & FileType.S_IFMT;
    if (attr.id !== 0) this.inodes.setFileId(e, attr.id);
    this.sawAttr(e.ino, path, attr);
    return { ino: e.ino, ...this.kernelAttr(path, attr), entryTimeout: this.ttl };
  }

  /**
   * True when the name of inode entry `e` is now another file (another node id: replaced by a
   * rename, or of another type) than the one the kernel's inode stands for; the entry is then
   * detached, so the kernel's next lookup of the name gets a new inode, and ESTALE makes the
   * kernel look it up again (path-based calls retry on ESTALE).
   */
  private replaced(e: InodeEntry, attr: Attr): boolean {
    const other = this.otherFile(e, attr);
    if (other && e.parent) this.detach(e.parent.ino, e.name);
    return other;
  }

  /**
   * Opens of inode `ino` go through the operations again (its content or name is about to
   * change, or changed elsewhere), and the reads of the binding's opens of it start anew.
   */
  denyFast(ino: number): void {
    this.fast.deny(ino);
    const s = this.fastStates.get(ino);
    if (s) {
      this.fastStates.delete(ino);
      void this.handles.closeNode(s).catch(() => undefined);
    }
  }

  /** Removes the name `name` of directory `parent` from the inode table (its inode, if any, loses it). */
  private detach(parent: number, name: string): void {
    const e = this.inodes.child(parent, name);
    if (e) this.denyFast(e.ino);
    this.inodes.remove(parent, name);
  }

  /**
   * After the release of read-only handle `s`: lets the binding answer the next read-only opens
   * of its inode when this mount knows the file's content to be current (it opened the file on
   * the node, or read it whole, with the attributes it has now, the inode still stands for that
   * file, and no handle of this mount writes it). The kernel keeps its pages; the node's pushes
   * and this mount's own changes turn it off again ({@link denyFast}).
   */
  private allowFast(s: OpenState): void {
    if (s.writable || s.ino === 0 || s.expectId === 0) return;
    const e = this.inodes.get(s.ino);
    if (!e || e.fileId !== s.expectId || this.inodes.pathOf(s.ino) !== s.path) return;
    const attr = this.caches.cachedAttr(s.path);
    if (!attr || attr.k !== NodeKind.FILE || attr.id !== e.fileId || this.caches.proofOf(s.path) !== openProof(attr)) return;
    for (const other of this.handles.ofPath(s.path)) if (other.writable) return;
    this.fast.allow(s.ino);
  }

  /** The open state serving reads of the binding's opens of inode `ino`. @throws FsError ESTALE */
  private fastState(ino: number): OpenState {
    let s = this.fastStates.get(ino);
    if (s) {
      this.fastStates.delete(ino);
      this.fastStates.set(ino, s);
      return s;
    }
    const path = this.pathOf(ino);
    s = this.handles.state(path, false, OpenFlags.O_RDONLY);
    s.ino = ino;
    s.expectId = this.inodes.get(ino)?.fileId ?? 0;
    const attr = this.caches.cachedAttr(path);
    if (attr) s.reads.sizeHint = attr.sz;
    this.fastStates.set(ino, s);
    if (this.fastStates.size > MAX_FAST_STATES) {
      // The least recently used that no read is using.
      for (const [other, old] of this.fastStates) {
        if (old.busy > 0) continue;
        this.fastStates.delete(other);
        void this.handles.closeNode(old).catch(() => undefined);
        break;
      }
    }
    return s;
  }

  /**
   * Records the attributes the kernel is given for inode `ino`; when the file's identity, size
   * or times moved since, the binding's opens of it stop (what this mount read of it may be old).
   */
  private sawAttr(ino: number, path: string, attr: Attr): void {
    const last = this.lastAttr.get(ino)?.attr;
    if (last && (last.id !== attr.id || last.sz !== attr.sz || last.mt !== attr.mt || last.ct !== attr.ct)) this.denyFast(ino);
    this.lastAttr.set(ino, { attr, path });
  }

  /** @throws FsError EROFS on a read-only mount */
  private refuseWrite(): void {
    if (this.readOnly) throw new FsError(Errno.EROFS);
  }

  /**
   * Sends the pending writes of every handle of `path` and waits for them (before the file's
   * content, size, times or name is used): the one order per file that makes a read, getattr,
   * setattr, fsync, rename or unlink through any handle or path see every earlier write made
   * through this mount. A write's error stays with its handle, for that handle's next write,
   * flush, fsync or release to report (the writer learns of it, not whoever came next).
   * What is cached of the file's attributes when it had pending writes goes once they are
   * answered: it may have been read from the node before they landed.
   */
  private async flushPath(path: string): Promise<void> {
    let dirty: OpenState[] | null = null;
    for (const s of this.handles.ofPath(path)) if (s.writes.dirty) (dirty ??= []).push(s);
    if (!dirty) return;
    await Promise.all(dirty.map((s) => this.writes.settle(s.writes)));
    this.caches.forgetFile(path);
  }

  /**
   * The one handle of `path` with writes not sent yet, when its pending chunk is all there is to
   * send for the file (no other handle of it has any, none in flight, no error waiting): that
   * chunk may carry what comes next ({@link WriteBehind.sendThen}). Else null.
   */
  private soleWriter(path: string): OpenState | null {
    let found: OpenState | null = null;
    for (const s of this.handles.ofPath(path)) {
      if (!s.writes.dirty) continue;
      if (found || !this.writes.onlyPending(s.writes)) return null;
      found = s;
    }
    return found;
  }

  /** True when this mount has `path` open for writing (the kernel's size of it is then the one to keep). */
  private writing(path: string): boolean {
    for (const s of this.handles.ofPath(path)) if (s.writable) return true;
    return false;
  }

  /** The open state of FUSE handle `fh`. @throws FsError EBADF */
  private state(fh: number): OpenState {
    const s = this.handles.get(fh);
    if (!s) throw new FsError(Errno.EBADF);
    return s;
  }

  /** Closes a handle whose open was answered EINTR or ETIMEDOUT before it completed. */
  private readonly dropLateOpen = (fh: number): void => {
    const s = this.handles.get(fh);
    if (!s) return;
    this.handles.delete(fh);
    void this.handles.closeNode(s).catch(() => undefined);
  };

  // ---- the operations ----

  /** The kernel interrupted a request: it is answered EINTR. */
  interrupt(ctx: RequestContext): void {
    this.poller.interrupt(ctx.id);
  }

  /**
   * FUSE lookup. A name that does not exist is answered as a negative entry the kernel keeps
   * for the entry timeout ({@link negatives}; the pushes for the directory drop it), or ENOENT
   * when that table is full.
   */
  lookup(parent: number, name: string, ctx: RequestContext): Promise<Entry> {
    return this.poller.run('lookup', ctx.id, async () => {
      const path = this.childPath(parent, name);
      // The size the kernel is given counts what this mount wrote, as getattr's does: a lookup
      // of a file being written (its name dropped by a push) would otherwise cut it.
      await this.flushPath(path);
      let attr: Attr;
      try {
        attr = await this.caches.attrOf(path);
      } catch (e) {
        if (e instanceof FsError && e.errno === Errno.ENOENT && this.inodes.get(parent) && this.negatives.add(parent, name)) {
          return { ino: 0, entryTimeout: this.ttl, attrTimeout: 0 };
        }
        throw e;
      }
      return this.entry(parent, name, path, attr);
    });
  }

  forget(forgets: Forget[]): void {
    for (const f of forgets) {
      this.inodes.forget(f.ino, f.nlookup);
      if (!this.inodes.get(f.ino)) {
        this.denyFast(f.ino);
        this.capsUnknown(f.ino);
        this.negatives.take(f.ino);
        this.dirListings.delete(f.ino);
        this.lastAttr.delete(f.ino);
      }
    }
  }

  // Written data still in the write-behind buffer must count in the size a reader sees.
  getattr(ino: number, fh: number | undefined, ctx: RequestContext): Promise<AttrReply> {
    return this.poller.run('getattr', ctx.id, async () => {
      const path = this.inodes.pathOf(ino);
      if (path === null) return this.detachedAttr(ino, fh);
      // A file's pages and size go before its new attributes. Not a directory's: the kernel asks
      // for a directory's attributes while it holds the directory's lock (the permission check
      // of a create in it), and the notification queue may hold, before the directory's own
      // invalidation, an entry notification that waits for that lock.
      const e0 = this.inodes.get(ino);
      if (ino !== ROOT_INO && e0?.type !== FileType.S_IFDIR) await this.kernelSettled(ino);
      await this.flushPath(path);
      const attr = await this.caches.attrOf(path);
      const e = this.inodes.get(ino);
      if (e && this.replaced(e, attr)) return this.detachedAttr(ino, fh);
      this.sawAttr(ino, path, attr);
      return this.kernelAttr(path, attr);
    });
  }

  /**
   * What {@link getattr} of directory inode `ino` answers now without a request, when that is
   * its fresh cached attributes: the reply, or null (not a directory the kernel knows by a
   * path, nothing fresh cached, or the path now names another file). The binding may answer
   * the kernel's next getattr with it.
   */
  cachedDirAttr(ino: number): AttrReply | null {
    const e = this.inodes.get(ino);
    const path = this.inodes.pathOf(ino);
    if (!e || path === null || e.type !== FileType.S_IFDIR) return null;
    const attr = this.caches.cachedAttr(path);
    if (!attr || this.otherFile(e, attr)) return null;
    this.sawAttr(ino, path, attr);
    return this.kernelAttr(path, attr);
  }

  /**
   * setattr; a size given with a file handle (ftruncate(2)) goes through the node's handle of
   * that open, so the open's write access decides (not the file's mode now) and a file whose
   * name is gone is truncated too.
   */
  setattr(ino: number, toSet: number, v: SetattrValues, fh: number | undefined, ctx: RequestContext): Promise<AttrReply> {
    return this.poller.run('setattr', ctx.id, async () => {
      const named = this.inodes.pathOf(ino);
      this.refuseWrite();
      this.denyFast(ino);
      const open = fh !== undefined && toSet & SETATTR.SIZE ? this.handles.get(fh) : undefined;
      const viaHandle = open !== undefined && open.fh !== null ? open.fh : null;
      // A file whose name is gone: only ftruncate, through its handle.
      if (named === null && (viaHandle === null || (toSet & ~SETATTR.SIZE) !== 0)) throw new FsError(Errno.ESTALE);
      const path = named ?? open!.path;
      const change: SetAttr = {};
      if (toSet & SETATTR.MODE) change.mode = v.mode & 0o7777;
      if (toSet & SETATTR.UID) change.uid = v.uid;
      if (toSet & SETATTR.GID) change.gid = v.gid;
      if (toSet & SETATTR.ATIME) change.at = toSet & SETATTR.ATIME_NOW ? Date.now() * 1e6 : Number(v.atimeNs);
      if (toSet & SETATTR.MTIME) change.mt = toSet & SETATTR.MTIME_NOW ? Date.now() * 1e6 : Number(v.mtimeNs);
      const changes = Object.keys(change).length > 0;
      if (changes && (change.mode !== undefined || change.uid !== undefined || change.gid !== undefined)) this.caches.dropProof(path);
      // New times or mode after the data (tar, cp -p): the last chunk carries them, one request.
      const writer = changes && !(toSet & SETATTR.SIZE) && named !== null ? this.soleWriter(path) : null;
      if (writer) {
        const r = await this.writes.sendThen(writer.writes, { set: change });
        this.caches.forgetFile(path);
        if (r.error) throw r.error;
        if (r.attr) {
          this.caches.remember(path, r.attr);
          return this.kernelAttr(path, r.attr);
        }
      }
      await this.flushPath(path);
      let attr: Attr | undefined;
      if (toSet & SETATTR.SIZE) {
        attr = viaHandle !== null ? await this.ftruncate(viaHandle, v.size, named) : await this.router.truncate(path, v.size);
        // Handles of the file must not answer reads from what they hold of the old content.
        for (const s of this.handles.ofPath(path)) s.reads.reset(true);
        if (named === null) {
          this.lastAttr.set(ino, { attr, path });
          return this.kernelAttr(path, attr);
        }
      }
      if (changes) attr = await this.router.setattr(path, change);
      if (attr) this.caches.remember(path, attr);
      return this.kernelAttr(path, attr ?? (await this.caches.attrOf(path)));
    });
  }

  /**
   * ftruncate(2) through router handle `fh`; by path `named` when the node cannot (no `posix`).
   * @throws FsError as {@link WorkspaceRouter.ftruncate}; ESTALE when the node cannot and the name is gone
   */
  private async ftruncate(fh: number, size: number, named: string | null): Promise<Attr> {
    try {
      return await this.router.ftruncate(fh, size);
    } catch (e) {
      if (!(e instanceof FsError && e.errno === Errno.ENOTSUP)) throw e;
      if (named === null) throw new FsError(Errno.ESTALE);
      return this.router.truncate(named, size);
    }
  }

  readlink(ino: number, ctx: RequestContext): Promise<string> {
    return this.poller.run('readlink', ctx.id, () => this.router.readlink(this.pathOf(ino)));
  }

  mkdir(parent: number, name: string, mode: number, ctx: RequestContext): Promise<Entry> {
    return this.poller.run('mkdir', ctx.id, async () => {
      const path = this.childPath(parent, name);
      this.refuseWrite();
      const { attr, made } = await this.router.mkdir(path, mode & 0o7777, credOf(ctx));
      this.caches.entryAdded(path, attr);
      // Known empty: the names a program makes in it next are not looked up on the node.
      if (made) this.caches.madeEmptyDir(path);
      return this.entry(parent, name, path, attr);
    });
  }

  symlink(parent: number, name: string, target: string, ctx: RequestContext): Promise<Entry> {
    return this.poller.run('symlink', ctx.id, async () => {
      const path = this.childPath(parent, name);
      this.refuseWrite();
      const attr = await this.router.symlink(path, target, credOf(ctx));
      this.caches.entryAdded(path, attr);
      return this.entry(parent, name, path, attr);
    });
  }

  unlink(parent: number, name: string, ctx: RequestContext): Promise<void> {
    return this.poller.run('unlink', ctx.id, async () => {
      const path = this.childPath(parent, name);
      this.refuseWrite();
      await this.flushPath(path);
      await this.handles.pinOpenHandles(path);
      const gone = this.inodes.child(parent, name);
      await this.router.unlink(path);
      this.caches.entryRemoved(path);
      this.detach(parent, name);
      if (gone) await this.linksChanged(gone.ino, gone.fileId);
    });
  }

  /**
   * The link count of the file of node id `fileId` changed through the name of kernel inode
   * `ino`: the kernel inodes of its other names (hard links) drop their attributes before the
   * reply, so a stat right after the link or unlink sees the new count (the kernel updates only
   * the inode of the name it acted on, and the node's push comes later).
   */
  private async linksChanged(ino: number, fileId: number): Promise<void> {
    const others = this.inodes.sameFile(fileId, ino);
    for (const e of others) {
      const path = this.inodes.entryPath(e);
      if (path !== null) this.caches.forgetFile(path);
    }
    await Promise.all(others.map((e) => this.invalAttr(e.ino)));
  }

  rmdir(parent: number, name: string, ctx: RequestContext): Promise<void> {
    return this.poller.run('rmdir', ctx.id, async () => {
      const path = this.childPath(parent, name);
      this.refuseWrite();
      await this.router.rmdir(path);
      this.caches.entryRemoved(path, true);
      this.detach(parent, name);
    });
  }

  /**
   * FUSE rename; `flags` RENAME_NOREPLACE (EEXIST when the new name exists, atomically on the
   * node) or RENAME_EXCHANGE (the two names swap: inodes and open handles follow their files).
   */
  rename(parent: number, name: string, newParent: number, newName: string, flags: number, ctx: RequestContext): Promise<void> {
    return this.poller.run('rename', ctx.id, async () => {
      const src = this.childPath(parent, name);
      const dest = this.childPath(newParent, newName);
      this.refuseWrite();
      if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE) || flags === (RENAME_NOREPLACE | RENAME_EXCHANGE)) throw new FsError(Errno.EINVAL);
      for (const [dir, n] of [
        [parent, name],
        [newParent, newName],
      ] as const) {
        const e = this.inodes.child(dir, n);
        if (e) this.denyFast(e.ino);
      }
      await Promise.all([this.flushPath(src), this.flushPath(dest)]);
      if (!(flags & RENAME_EXCHANGE)) await this.handles.pinOpenHandles(dest);
      const before = this.caches.cachedAttr(src);
      const after = await this.router.rename(src, dest, flags);
      if (flags & RENAME_EXCHANGE) {
        this.caches.forgetTree(src);
        this.caches.forgetTree(dest);
        this.caches.entryChanged(src);
        this.caches.entryChanged(dest);
        this.handles.exchanged(src, dest);
        this.inodes.exchange(parent, name, newParent, newName);
      } else {
        this.caches.entryRenamed(src, dest, after, before);
        this.handles.renamed(src, dest);
        this.inodes.rename(parent, name, newParent, newName);
      }
    });
  }

  /** FUSE mknod: a FIFO, socket, device or regular file, made on the node (the `posix` extension; else ENOSYS). */
  mknod(parent: number, name: string, mode: number, rdev: number, ctx: RequestContext): Promise<Entry> {
    return this.poller.run('mknod', ctx.id, async () => {
      const path = this.childPath(parent, name);
      this.refuseWrite();
      const attr = await this.router.mknod(path, mode, rdev, credOf(ctx));
      this.caches.entryAdded(path, attr);
      return this.entry(parent, name, path, attr);
    });
  }

  /** FUSE link: `newName` in `newParent` becomes another name of inode `ino`'s file. */
  link(ino: number, newParent: number, newName: string, ctx: RequestContext): Promise<Entry> {
    return this.poller.run('link', ctx.id, async () => {
      const path = this.pathOf(ino);
      const dest = this.childPath(newParent, newName);
      this.refuseWrite();
      await this.flushPath(path);
      const attr = await this.router.link(path, dest);
      this.caches.forgetFile(path);
      this.caches.entryAdded(dest, attr);
      const reply = this.entry(newParent, newName, dest, attr);
      await this.linksChanged(reply.ino, attr.id);
      return reply;
    });
  }

  /**
   * FUSE getxattr: the value of `name` (ENODATA when absent, ENOTSUP where the node's filesystem
   * has none). The kernel asks for `security.capability` before every write to a file (to drop
   * it, as a write must): an inode known to have none is answered here ({@link noCaps}).
   */
  getxattr(ino: number, name: string, ctx: RequestContext): Promise<Buffer> {
    return this.poller.run('getxattr', ctx.id, async () => {
      carried(name);
      const caps = name === SECURITY_CAPABILITY;
      if (caps && this.noCaps.has(ino)) throw new FsError(Errno.ENODATA);
      try {
        const got = await this.router.getxattr(this.pathOf(ino), name, XATTR_SIZE_MAX);
        return got.value ?? Buffer.alloc(0);
      } catch (e) {
        if (caps && e instanceof FsError && (e.errno === Errno.ENODATA || e.errno === Errno.ENOTSUP)) this.hasNoCaps(ino);
        throw e;
      }
    });
  }

  /** The extended attributes of inode `ino` may have changed (a push, this mount's own change): what is known of them goes. */
  xattrsChanged(ino: number): void {
    this.capsUnknown(ino);
  }

  /** Inode `ino` is known to have no `security.capability`: the binding answers the kernel's asks for it. */
  private hasNoCaps(ino: number): void {
    if (this.noCaps.has(ino)) return;
    this.noCaps.add(ino);
    this.fast.caps?.(ino, true);
  }

  /** Whether inode `ino` has a `security.capability` is not known (any more): the kernel's asks come here. */
  private capsUnknown(ino: number): void {
    if (!this.noCaps.delete(ino)) return;
    this.fast.caps?.(ino, false);
  }

  /** FUSE setxattr; `flags` XATTR_CREATE or XATTR_REPLACE. */
  setxattr(ino: number, name: string, value: Buffer, flags: number, ctx: RequestContext): Promise<void> {
    return this.poller.run('setxattr', ctx.id, async () => {
      carried(name);
      const path = this.pathOf(ino);
      this.refuseWrite();
      this.xattrsChanged(ino);
      await this.router.setxattr(path, name, value, flags);
      this.caches.forgetFile(path);
    });
  }

  /** FUSE listxattr: the names of the file's extended attributes. */
  listxattr(ino: number, ctx: RequestContext): Promise<string[]> {
    return this.poller.run('listxattr', ctx.id, async () =>
      ((await this.router.listxattr(this.pathOf(ino), XATTR_SIZE_MAX)).names ?? []).filter((n) => !NOT_CARRIED.has(n)),
    );
  }

  /** FUSE removexattr. */
  removexattr(ino: number, name: string, ctx: RequestContext): Promise<void> {
    return this.poller.run('removexattr', ctx.id, async () => {
      carried(name);
      const path = this.pathOf(ino);
      this.refuseWrite();
      this.xattrsChanged(ino);
      await this.router.removexattr(path, name);
      this.caches.forgetFile(path);
    });
  }

  /**
   * FUSE open. Writers (and O_TRUNC) are opened on the node at once, so EROFS/EACCES/ENOENT
   * come back here. A reader is served from prefetched content (no round trip, never opened on
   * the node) when the content was read with the identity of the file's cached attributes,
   * waiting for a batch in flight that brings it; else opened lazily (no round trip) when this
   * mount opened the same file for reading before and its cached attributes still match that
   * open's {@link openProof}; otherwise at once, which records the proof. The kernel keeps the
   * file's pages across opens (the node's pushes drop them when the file changes); a reader's
   * close needs no flush.
   */
  open(ino: number, flags: number, ctx: RequestContext): Promise<OpenReply> {
    return this.poller.run(
      'open',
      ctx.id,
      async () => {
        const path = this.pathOf(ino);
        // What the kernel holds of the file (size, pages) must be dropped before it uses it again.
        await this.kernelSettled(ino);
        const writable = (flags & OpenFlags.O_ACCMODE) !== OpenFlags.O_RDONLY || (flags & OpenFlags.O_TRUNC) !== 0;
        if (writable) {
          this.refuseWrite();
          this.denyFast(ino);
        }
        // One order per file: what this mount wrote through other handles reaches the node before
        // the open reads anything (open_read, prefetched content) or truncates.
        await this.flushPath(path);
        const entry = this.inodes.get(ino);
        if (entry && entry.fileId !== 0 && this.replaced(entry, await this.caches.attrOf(path))) throw new FsError(Errno.ESTALE);
        const state = this.handles.state(path, writable, flags & ~OpenFlags.O_CREAT);
        state.ino = ino;
        // The node opens the file this inode stands for, or the open (or a lazy open's first
        // read) fails ESTALE: never another file's content under this inode's size and pages.
        state.expectId = entry?.fileId ?? 0;
        const attr = writable ? undefined : this.caches.cachedAttr(path);
        if (attr) state.reads.sizeHint = attr.sz;
        if (!writable) void this.prefetch.opened(path);
        if (attr?.k === NodeKind.FILE) state.content = await this.prefetched(path, attr);
        if (!state.content && (!attr || attr.k !== NodeKind.FILE || this.caches.proofOf(path) !== openProof(attr))) {
          try {
            await this.handles.nodeHandle(state);
          } catch (e) {
            if (e instanceof FsError && e.errno === Errno.ESTALE) {
              // The name was replaced and this mount had not heard yet: the kernel looks it up again.
              if (entry?.parent) this.inodes.remove(entry.parent.ino, entry.name);
              this.caches.forget(path);
            }
            throw e;
          }
        }
        const fh = this.handles.add(state);
        if (writable) {
          this.caches.forgetFile(path);
          if (flags & OpenFlags.O_TRUNC) for (const s of this.handles.ofPath(path)) s.reads.reset(true);
        }
        // Every close(2) flushes, readers' too: a POSIX lock taken through it goes with its owner's close.
        return { fh, keepCache: true };
      },
      (reply) => this.dropLateOpen(reply.fh),
    );
  }

  /**
   * The prefetched content of `path` for attributes `attr`, taken from the store (waiting for a
   * batch in flight that brings it); records the open proof (the node read it). Null: none.
   */
  private async prefetched(path: string, attr: Attr): Promise<Buffer | null> {
    const contents = this.caches.contents;
    let data = contents.take(path, attr);
    if (!data) {
      const batch = contents.pending(path);
      if (!batch) return null;
      await batch.done;
      // The attributes again: the batch may have been overtaken by a change.
      const now = this.caches.cachedAttr(path);
      data = now ? contents.take(path, now) : undefined;
    }
    if (!data) return null;
    this.caches.recordProof(path, openProof(attr));
    return data;
  }

  create(parent: number, name: string, mode: number, flags: number, ctx: RequestContext): Promise<CreateReply> {
    return this.poller.run(
      'create',
      ctx.id,
      async () => {
        const path = this.childPath(parent, name);
        this.refuseWrite();
        const known = this.inodes.child(parent, name);
        if (known) this.denyFast(known.ino);
        const open = flags & CREATE_FLAGS;
        if (open & OpenFlags.O_TRUNC) await this.flushPath(path);
        const { fh: routerFh, attr, made } = await this.router.create(path, mode & 0o7777, open | OpenFlags.O_CREAT, credOf(ctx));
        const state = this.handles.state(path, true, open);
        state.fh = routerFh;
        const fh = this.handles.add(state);
        this.caches.entryAdded(path, attr);
        const entry = this.entry(parent, name, path, attr);
        state.ino = entry.ino;
        state.expectId = attr.id;
        // A file made by this create (O_EXCL, or the reply says so: not an existing one opened) has no capabilities.
        if (open & OpenFlags.O_EXCL || made) this.hasNoCaps(entry.ino);
        return { entry, open: { fh, keepCache: true } };
      },
      (reply) => {
        this.inodes.forget(reply.entry.ino, 1);
        this.dropLateOpen(reply.open.fh);
      },
    );
  }

  /**
   * FUSE read: `size` bytes at byte offset `offset`, after sending the file's pending writes:
   * from the prefetched content of the handle, else through read-ahead (opening the file on the
   * node if that was deferred). The first read of a read-only handle tells the prefetch policy.
   * @returns the bytes (fewer than `size` only at the end of the file)
   */
  read(ino: number, fh: number, offset: number, size: number, ctx: RequestContext): Promise<Buffer> {
    return this.poller.run('read', ctx.id, async () => {
      const state = fh === this.fast.fh ? this.fastState(ino) : this.state(fh);
      state.busy++;
      try {
        return await this.readFrom(state, ino, fh, offset, size);
      } finally {
        state.busy--;
      }
    });
  }

  /** {@link read} from open state `state`. */
  private async readFrom(state: OpenState, ino: number, fh: number, offset: number, size: number): Promise<Buffer> {
    if (!state.readStarted) {
      state.readStarted = true;
      // The policy plans after this read is answered.
      if (!state.writable) void this.prefetch.onRead(state.path);
    }
    if (state.content) return state.content.subarray(Math.min(offset, state.content.length), Math.min(state.content.length, offset + size));
    // One order per file: the writes of every handle of this file reach the node first.
    await this.flushPath(state.path);
    if (state.writes.error) await this.writes.flush(state.writes);
    let routerFh: number;
    try {
      routerFh = state.fh ?? (await this.handles.nodeHandle(state));
    } catch (e) {
      // The binding's opens of a file that is gone or replaced: they go through open again.
      if (fh === this.fast.fh) this.denyFast(ino);
      throw e;
    }
    const buf = Buffer.allocUnsafe(size);
    const n = await this.reads.read(state.reads, routerFh, buf, size, offset);
    return buf.subarray(0, n);
  }

  /**
   * FUSE write: `data` at byte offset `offset`, through write-behind. Errors of the background
   * writes are reported by the next write, flush, fsync or release.
   * @returns bytes taken (all of `data`)
   */
  write(_ino: number, fh: number, offset: number, data: Buffer, _info: WriteInfo, ctx: RequestContext): Promise<number> {
    return this.poller.run('write', ctx.id, async () => {
      this.refuseWrite();
      const state = this.state(fh);
      if (state.ino !== 0) this.denyFast(state.ino);
      const e = state.writes.takeError();
      // eslint-disable-next-line @typescript-eslint/only-throw-error -- rethrows what a background write threw, as it was
      if (e) throw e;
      state.reads.reset(true);
      // Other handles of the file must not answer reads from what they hold of its old content.
      this.handles.contentChanged(state);
      await this.writes.write(state.writes, data, offset);
      this.caches.forgetFile(state.path);
      return data.length;
    });
  }

  /**
   * FUSE fallocate: every pending write of the file reaches the node first (a hole punched or a
   * range zeroed must not be overwritten by older data), then the node's handle of this open
   * allocates; the handles of the file drop what they read of it before.
   * @throws FsError EBADF, ENOTSUP (a mode the node does not take, or a node without `posix`), ENOSPC, EROFS
   */
  fallocate(_ino: number, fh: number, mode: number, offset: number, length: number, ctx: RequestContext): Promise<void> {
    return this.poller.run('fallocate', ctx.id, async () => {
      this.refuseWrite();
      if (fh === this.fast.fh) throw new FsError(Errno.EBADF);
      const s = this.state(fh);
      if (s.content) throw new FsError(Errno.EBADF);
      if (s.ino !== 0) this.denyFast(s.ino);
      await this.flushPath(s.path);
      await this.writes.flush(s.writes);
      await this.router.fallocate(s.fh ?? (await this.handles.nodeHandle(s)), mode, offset, length);
      s.reads.reset(true);
      this.handles.contentChanged(s);
      this.caches.forgetFile(s.path);
    });
  }

  /**
   * FUSE flush (each close(2) of a descriptor): the handle's pending writes reach the node
   * (their errors are reported here), then the POSIX locks of `lockOwner` on the file go.
   */
  flush(ino: number, fh: number, lockOwner: bigint, ctx: RequestContext): Promise<void> {
    return this.poller.run('flush', ctx.id, async () => {
      const s = fh === this.fast.fh ? undefined : this.handles.get(fh);
      try {
        if (s?.writes.dirty || s?.writes.error) await this.writes.flush(s.writes);
      } finally {
        await this.locks.closed(ino, lockOwner);
      }
    });
  }

  fsync(_ino: number, fh: number, _datasync: boolean, ctx: RequestContext): Promise<void> {
    return this.poller.run('fsync', ctx.id, async () => {
      // Opened read-only by the binding: nothing of this mount to sync.
      if (fh === this.fast.fh) return;
      const s = this.state(fh);
      // The handle's last chunk is all the file has to send: it carries the fsync, one request.
      if (!s.content && this.soleWriter(s.path) === s) {
        const r = await this.writes.sendThen(s.writes, { sync: true });
        this.caches.forgetFile(s.path);
        if (r.error) throw r.error;
        if (r.done) return;
      }
      // fsync(2) is of the file, whatever handle wrote: every handle's pending writes first.
      await this.flushPath(s.path);
      // Served from prefetched content: read-only, nothing to sync.
      if (s.content) return;
      await this.writes.flush(s.writes);
      await this.router.fsync(s.fh ?? (await this.handles.nodeHandle(s)));
    });
  }

  /**
   * FUSE release (the open file description ended): pending writes reach the node, its `flock`
   * goes, and the node handle is closed.
   */
  release(ino: number, fh: number, info: ReleaseInfo, ctx: RequestContext): Promise<void> {
    return this.poller.run('release', ctx.id, async () => {
      const flockOwner = info.flockRelease ? info.lockOwner : null;
      if (fh === this.fast.fh) return this.locks.released(ino, null, flockOwner);
      const s = this.handles.get(fh);
      if (!s) return;
      try {
        await this.writes.flush(s.writes);
      } finally {
        await this.locks.released(ino, s, flockOwner);
        this.handles.delete(fh);
        await this.handles.closeNode(s);
        if (s.writable) this.caches.forgetFile(s.path);
        else this.allowFast(s);
      }
    });
  }

  /**
   * Directories are not opened: the kernel then stops asking (`no_opendir`), keeps each
   * directory's entries in its cache across opens, and drops them when the directory changes
   * (this mount's own changes, or a push naming it).
   */
  opendir(): Promise<OpenReply> {
    return Promise.reject(new FuseError(Errno.ENOSYS));
  }

  /**
   * The listing of directory `ino` from entry `offset` on: offset 0 reads the listing (from the
   * cache while fresh) and keeps it for the calls that continue from a later offset.
   */
  private async listingAt(ino: number, offset: number): Promise<{ path: string; listing: Listing }> {
    const path = this.pathOf(ino);
    let listing = offset === 0 ? undefined : this.dirListings.get(ino);
    if (!listing) {
      listing = await this.caches.listing(path);
      this.dirListings.set(ino, listing);
      // After this listing was asked for (the walker's own one goes out first) and answered when cached.
      if (offset === 0) setImmediate(() => this.listAhead.onList(path));
    }
    return { path, listing };
  }

  /** The inode number and type bits of `.` and `..` of directory `ino`. */
  private dots(ino: number): Array<{ name: string; ino: number }> {
    const parent = this.inodes.get(ino)?.parent?.ino ?? ROOT_INO;
    return [
      { name: '.', ino },
      { name: '..', ino: parent },
    ];
  }

  readdir(ino: number, _fh: number, offset: number, size: number, ctx: RequestContext): Promise<DirEntry[]> {
    return this.poller.run('readdir', ctx.id, async () => {
      const { path, listing } = await this.listingAt(ino, offset);
      const out: DirEntry[] = [];
      let bytes = 0;
      const dots = this.dots(ino);
      for (let i = offset; i < listing.names.length + 2; i++) {
        const name = i < 2 ? dots[i].name : listing.names[i - 2];
        bytes += direntBytes(DIRENT_HEAD, name);
        if (bytes > size && out.length > 0) break;
        if (i < 2) out.push({ name, ino: dots[i].ino, mode: FileType.S_IFDIR, nextOffset: i + 1 });
        else {
          const a = listing.attrs[i - 2];
          out.push({ name, ino: this.stIno.of(joinPath(path, name), a.id), mode: a.m, nextOffset: i + 1 });
        }
      }
      return out;
    });
  }

  /**
   * As readdir, with each entry's attributes and inode (one lookup count each): `ls -l`, `find`
   * and `git status` then need no lookup per name. Only the entries that fit in `size` bytes
   * are made (the kernel asks again from the last one's offset).
   */
  readdirplus(ino: number, _fh: number, offset: number, size: number, ctx: RequestContext): Promise<DirEntryPlus[]> {
    return this.poller.run('readdirplus', ctx.id, async () => {
      const { path, listing } = await this.listingAt(ino, offset);
      const out: DirEntryPlus[] = [];
      let bytes = 0;
      const dots = this.dots(ino);
      for (let i = offset; i < listing.names.length + 2; i++) {
        const name = i < 2 ? dots[i].name : listing.names[i - 2];
        bytes += direntBytes(DIRENTPLUS_HEAD, name);
        if (bytes > size && out.length > 0) break;
        if (i < 2) out.push({ name, nextOffset: i + 1, ino: dots[i].ino, mode: FileType.S_IFDIR });
        else {
          const child = joinPath(path, name);
          const a = listing.attrs[i - 2];
          // The attributes as cached now (a change of the file since the listing drops them); a
          // file this mount writes, or one whose attributes are not cached: the kernel looks it up.
          const now = this.writing(child) ? undefined : this.caches.cachedAttr(child);
          if (!now) out.push({ name, nextOffset: i + 1, ino: this.stIno.of(child, a.id), mode: a.m });
          else out.push({ name, nextOffset: i + 1, entry: this.entry(ino, name, child, now) });
        }
      }
      return out;
    });
  }

  /** The open state lock requests through handle `fh` go through (null: the binding's opens). @throws FsError EBADF */
  private lockState(fh: number): OpenState | null {
    return fh === this.fast.fh ? null : this.state(fh);
  }

  /** F_GETLK: the first lock of another owner that conflicts with `lock`, or `F_UNLCK`; `pid` only for a holder of this mount. */
  getlk(ino: number, fh: number, lockOwner: bigint, lock: Lock, ctx: RequestContext): Promise<Lock> {
    return this.poller.run('getlk', ctx.id, async () => {
      if (lock.type === F_UNLCK) throw new FsError(Errno.EINVAL, 'F_GETLK with F_UNLCK');
      const got = await this.locks.test(ino, this.lockState(fh), 'posix', lockTypeOf(lock.type), lockRange(lock.start, lock.len), lockOwner);
      if (got.type === 'un') return { ...lock, type: F_UNLCK, pid: 0 };
      return { type: got.type === 'rd' ? 0 : 1, whence: 0, start: got.start, len: got.len, pid: got.pid ?? 0 };
    });
  }

  /**
   * F_SETLK / F_SETLKW (`sleep`): takes, changes or releases a POSIX lock of `lockOwner`, held by
   * the node for every client. A waiting request has no deadline; a signal cancels it (EINTR),
   * and a grant that comes after that is given back.
   */
  setlk(ino: number, fh: number, lockOwner: bigint, lock: Lock, sleep: boolean, ctx: RequestContext): Promise<void> {
    return this.setLock(ino, fh, lockOwner, 'posix', lock.type === F_UNLCK ? 'un' : sleep ? 'wait' : 'try', lock, ctx);
  }

  /** flock(2): `LOCK_SH`/`LOCK_EX` (waiting unless `LOCK_NB`) or `LOCK_UN` for the open file description `lockOwner`. */
  flock(ino: number, fh: number, lockOwner: bigint, op: number, ctx: RequestContext): Promise<void> {
    const type = op & LOCK_EX ? F_WRLCK : op & LOCK_SH ? F_RDLCK : F_UNLCK;
    const how = type === F_UNLCK ? 'un' : op & LOCK_NB ? 'try' : 'wait';
    return this.setLock(ino, fh, lockOwner, 'flock', how, { type, whence: 0, start: 0, len: 0, pid: 0 }, ctx);
  }

  /** {@link setlk} and {@link flock}: `how` a release, a try (EAGAIN on conflict) or a wait (untimed, cancelled by a signal). */
  private setLock(ino: number, fh: number, owner: bigint, kind: LockKind, how: 'un' | 'try' | 'wait', lock: Lock, ctx: RequestContext): Promise<void> {
    let state: OpenState | null = null;
    let range = { start: 0, len: 0 };
    const wait = how === 'wait';
    return this.poller.run(
      kind === 'posix' ? 'setlk' : 'flock',
      ctx.id,
      async () => {
        const type = lockTypeOf(lock.type);
        state = this.lockState(fh);
        range = lockRange(lock.start, lock.len);
        await this.locks.set(ino, state, kind, type, range, owner, wait, ctx.pid, wait ? ctx.signal : undefined);
      },
      // Granted after the caller was answered EINTR: given back.
      () => void this.locks.set(ino, state, kind, 'un', range, owner, false, ctx.pid).catch(() => undefined),
      wait,
    );
  }

  statfs(ino: number, ctx: RequestContext): Promise<Statfs> {
    return this.poller.run('statfs', ctx.id, async () => {
      const s = await this.router.statfs(this.inodes.pathOf(ino) ?? '/');
      return { ...s, favail: s.ffree };
    });
  }

  /** access(2): the file must exist; permissions are the node's to check on use. */
  access(ino: number, _mask: number, ctx: RequestContext): Promise<void> {
    return this.poller.run('access', ctx.id, async () => void (await this.caches.attrOf(this.pathOf(ino))));
  }
}
