/**
 * FsService: the FS operations of docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)" on the node's exports, without transport.
 *
 * It owns what is common to every export: node ids ({@link NodeTable}), per-session handles
 * and seen nodes ({@link FsSession}), read-only enforcement, limits (`max_read`/`max_write`
 * 1 MiB, readdirp page size), attribute records and invalidation events. The filesystem work and
 * its confinement belong to each export's {@link FsBackend}.
 *
 * Errors: {@link FsError} with Linux errno numbers (ENOENT for an unknown or stale node id,
 * EBADF for an unknown handle, EINVAL for a bad argument, EROFS on a read-only export, EXDEV
 * for a rename across exports, plus whatever the backend reports).
 */
import { Injectable, OnModuleDestroy } from '@nestjs/common';
import { hostname } from 'node:os';
import {
  Attr,
  Cred,
  DirAttrReply,
  DirEntry,
  Errno,
  FileType,
  FS_PROTO,
  FS_PROTOCOL,
  FsError,
  FsPayload,
  FsReply,
  GetlkReply,
  LockPayload,
  FALLOCATE_MODES,
  FEATURE_NAME_MAX,
  FS_FEATURES,
  HELLO_MAX_FEATURES,
  isRegularFileMode,
  MAX_READ,
  MAX_WRITE,
  NodeKind,
  OpenFlags,
  OpenReadReply,
  PREFETCH_DEFAULT_MAX_FILE,
  PREFETCH_DEFAULT_MAX_TOTAL,
  PREFETCH_MAX_FILE,
  PREFETCH_MAX_NAMES,
  PREFETCH_MAX_TOTAL,
  PrefetchEntry,
  ProtocolError,
  RENAME_EXCHANGE,
  RENAME_NOREPLACE,
  secretsEqual,
  SYMLINK_MAX,
  wantsWrite,
  WriteThen,
} from '@svc/protocol';
import type { FsAttrChanges, FsStat } from './fs-backend';
import { validateName } from './local/confine';
import { ExportRegistry, FsExport } from './export-registry';
import { FsMetrics } from './fs-metrics';
import { FsNodeOptions } from './fs-options';
import { FsSession, FsSessionService, OpenHandle } from './fs-session';
import { InvalidationService } from './invalidation.service';
import { FsNode, identityOf, NodeTable } from './node-table';

/** readdirp page size: default and bounds (entries). */
export const READDIRP_DEFAULT_MAX = 256;
export const READDIRP_MAX = 1024;

/** The errno of a failure (EIO for anything that is not an FsError). */
function errnoOf(e: unknown): number {
  return e instanceof FsError ? (e.errno ?? Errno.EIO) : Errno.EIO;
}

/** The wire attr of `node` with what the backend reported (`st`); `posix`: with the `posix` extension's members (`rd`). */
function wireAttr(node: FsNode, st: FsStat, posix: boolean): Attr {
  return {
    id: node.id,
    k: st.kind,
    m: st.mode,
    n: st.nlink,
    u: st.uid,
    g: st.gid,
    sz: st.size,
    at: st.atimeNs,
    mt: st.mtimeNs,
    ct: st.ctimeNs,
    gen: node.gen,
    ...(st.rdev && posix ? { rd: st.rdev } : {}),
  };
}

/** Default permission bits of `create` and `mkdir`. */
const DEFAULT_FILE_MODE = 0o644;
const DEFAULT_DIR_MODE = 0o755;

@Injectable()
export class FsService implements OnModuleDestroy {
  constructor(
    private readonly options: FsNodeOptions,
    private readonly registry: ExportRegistry,
    private readonly table: NodeTable,
    private readonly sessions: FsSessionService,
    private readonly inval: InvalidationService,
    private readonly metrics: FsMetrics,
  ) {}

  async onModuleDestroy(): Promise<void> {
    await this.sessions.closeAll();
    await this.registry.close();
  }

  // ---- hello (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)") -------------------------------------------------------------

  /**
   * Checks an `acheron.t_fs_hello` payload `{protocol, proto, auth_token?, binary?, features?}`.
   * @returns the `acheron.r_fs_hello` payload; `caps.binary_data` true when `binary` was asked
   *   for; `caps.features` the extensions asked for that this node grants (docs/protocol.md "FS extensions"
   *   "Extensions", docs/protocol.md "FS extensions"; unknown names are ignored)
   * @throws ProtocolError `protocol_mismatch` (errno 71 EPROTO) for another protocol or proto;
   *   `invalid_payload` (errno 22) when `features` is not an array of at most 64 strings of at
   *   most 64 characters; FsError EACCES `AuthMissing: ...` / `AuthFailed: ...` when FS session
   *   auth is on and the token is absent / does not match (compared in constant time, never logged)
   */
  hello(payload: Record<string, unknown>): FsReply<'hello'> {
    const { protocol, proto } = payload;
    if (protocol !== FS_PROTOCOL) {
      throw new ProtocolError('protocol_mismatch', `acheron.t_fs_hello protocol must be "${FS_PROTOCOL}" (got ${JSON.stringify(protocol ?? null)})`);
    }
    if (proto !== FS_PROTO) {
      throw new ProtocolError('protocol_mismatch', `acheron.t_fs_hello proto must be ${FS_PROTO} (got ${JSON.stringify(proto ?? null)})`);
    }
    const expected = this.options.authToken;
    if (expected !== null || this.options.authRequired) {
      const token = payload.auth_token;
      if (token === undefined || token === null || token === '') {
        throw new FsError(Errno.EACCES, 'AuthMissing: this FS node requires auth_token in acheron.t_fs_hello');
      }
      if (expected === null) throw new FsError(Errno.EACCES, 'AuthFailed: this FS node is not paired with its control plane yet');
      if (typeof token !== 'string' || !secretsEqual(token, expected)) throw new FsError(Errno.EACCES, 'AuthFailed: auth_token does not match');
    }
    const features = this.grant(payload.features);
    return {
      protocol: FS_PROTOCOL,
      proto: FS_PROTO,
      node: { name: this.options.nodeName || hostname(), os: process.platform, ver: this.options.version },
      caps: {
        readdirp: true,
        symlink: true,
        xattr: false,
        locks: features.includes('posix'),
        statfs: true,
        events: true,
        case_sensitive: true,
        max_read: MAX_READ,
        max_write: MAX_WRITE,
        binary_data: payload.binary === true,
        features,
      },
    };
  }

  /**
   * The extensions granted for a hello's `features`: those named that this node offers
   * ({@link FsNodeOptions.features}, default all), in {@link FS_FEATURES} order.
   * @throws ProtocolError `invalid_payload` for a malformed list
   */
  private grant(asked: unknown): string[] {
    if (asked === undefined) return [];
    if (!Array.isArray(asked) || asked.length > HELLO_MAX_FEATURES || !asked.every((f) => typeof f === 'string' && f.length <= FEATURE_NAME_MAX)) {
      throw new ProtocolError(
        'invalid_payload',
        `features must be an array of at most ${HELLO_MAX_FEATURES} extension names (strings of at most ${FEATURE_NAME_MAX} characters)`,
      );
    }
    const offered = this.options.features ?? FS_FEATURES;
    return offered.filter((f) => asked.includes(f));
  }

  // ---- helpers ---------------------------------------------------------------------------

  /**
   * The live node `id`.
   * @throws FsError ENOENT for an unknown or stale id
   */
  private node(id: number): FsNode {
    const node = this.table.get(id);
    if (!node) throw new FsError(Errno.ENOENT, `unknown or stale node id ${id}`);
    return node;
  }

  /** The attribute record of `node` from `st`; the session is now known to have seen it. */
  private attr(session: FsSession, node: FsNode, st: FsStat): Attr {
    this.table.observe(node, st);
    session.seen.add(node.id);
    // Every name of a file with several (hard links) is handed out under one id.
    const shown = this.table.linkPrimary(node, st);
    if (shown !== node) {
      this.table.observe(shown, st);
      session.seen.add(shown.id);
    }
    return wireAttr(shown, st, session.features.has('posix'));
  }

  /** {@link attr} of entry `name` of `dir`, just made by this node for `session` with attributes `st`. */
  private madeAttr(session: FsSession, dir: FsNode, name: string, st: FsStat): Attr {
    const node = this.table.child(dir, name);
    const attr = this.attr(session, node, st);
    node.madeHere = true;
    return attr;
  }

  /**
   * The `dir_attr` members of the reply to `session`'s entry operation in `dir` (and `oldDir`,
   * a rename's other directory): their attributes read after the operation. Empty when the
   * session was not granted `dir_attr`; a directory that cannot be read now is left out (the
   * client then asks for it). Never rejects.
   */
  private async dirAttrs(session: FsSession, dir: FsNode, oldDir?: FsNode): Promise<DirAttrReply> {
    if (!session.features.has('dir_attr')) return {};
    const read = async (d: FsNode): Promise<Attr | undefined> => {
      if (!d.live) return undefined;
      try {
        const st = await this.registry.of(d).backend.getattr(d.path());
        // The change is this node's own, told in this reply and pushed to the other sessions: a
        // directory this node made stays as made for its watch's report in its parent.
        const made = d.madeHere;
        const attr = this.attr(session, d, st);
        d.madeHere = made && st.kind === 2;
        return attr;
      } catch {
        return undefined;
      }
    };
    const [dirAttr, oldDirAttr] = await Promise.all([read(dir), oldDir && oldDir !== dir ? read(oldDir) : undefined]);
    const out: DirAttrReply = {};
    if (dirAttr) out.dir_attr = dirAttr;
    if (oldDirAttr) out.old_dir_attr = oldDirAttr;
    return out;
  }

  /**
   * The attributes of entry `name` of `dir`, just renamed there by this node for `session`, for
   * the reply's `attr` (the `dir_attr` extension; undefined without it, or when the entry cannot
   * be read now). The name then counts as made here ({@link FsNode.madeHere}): the reply tells
   * the session, the pushes of the rename tell the others. Never rejects.
   */
  private async movedAttr(session: FsSession, dir: FsNode, name: string): Promise<Attr | undefined> {
    if (!session.features.has('dir_attr') || !dir.live) return undefined;
    try {
      const st = await this.registry.of(dir).backend.lookup(dir.path(), name);
      const node = this.table.child(dir, name);
      const attr = this.attr(session, node, st);
      node.madeHere = true;
      node.madeIdentity = st.kind === 1 ? identityOf(st) : null;
      return attr;
    } catch {
      return undefined;
    }
  }

  /**
   * Watches directory `made`, just made by this node for a session, before the reply: what the
   * session's client then learns of it (its own entries, names it finds missing) is kept
   * coherent by pushes from the start, before any lookup in it sets the watch up. An entry
   * that appeared between the mkdir and the watch is pushed after the reply (a push before it
   * would reach the client before it knows the directory). Never rejects.
   */
  private async watchMade(made: FsNode): Promise<void> {
    await this.inval.watchDir(made);
    try {
      if ((await this.registry.of(made).backend.readdir(made.path())).length === 0) return;
    } catch {
      // gone or unreadable already: the sessions hear of it as of any change
    }
    setImmediate(() => {
      if (!made.live) return;
      this.inval.dirChanged(made);
      this.inval.nodeChanged(made, 'attr');
    });
  }

  private writable(exp: FsExport): void {
    if (exp.ro) throw new FsError(Errno.EROFS, `export ${exp.name} is read-only`);
  }

  /**
   * A directory argument: its node and export.
   * @throws FsError ESTALE for an unknown or stale id (the directory is gone; sessions without
   *   the `dir_estale` extension are answered ENOENT, see FsEndpointProfile)
   */
  private dir(id: number): { dir: FsNode; exp: FsExport } {
    const dir = this.table.get(id);
    if (!dir) throw new FsError(Errno.ESTALE, `unknown or stale directory id ${id}`);
    return { dir, exp: this.registry.of(dir) };
  }

  /**
   * The owner of an object `session` makes with `cred`: the caller, on a session granted `posix`
   * whose export applies the caller's identity (`caps.identity: "caller"`, a node running as
   * root); else none (the node's user owns it).
   */
  private owner(session: FsSession, exp: FsExport, cred: Cred | undefined): Cred | undefined {
    return cred && session.features.has('posix') && exp.backend.caps.identity === 'caller' ? { uid: cred.uid, gid: cred.gid } : undefined;
  }

  /**
   * Entries of `dir` changed by this node for `by`: events for the directory, reported in the
   * reply's `dir_attr` ({@link dirAttrs}); its watch is set up in the background.
   */
  private entriesChanged(dir: FsNode, by: FsSession): void {
    this.inval.dirChanged(dir, by, true);
    this.inval.nodeChanged(dir, 'attr', by, true);
    void this.inval.watchDir(dir);
  }

  /** Forgets `node` (removed by this node for `by`) with its subtree and tells the sessions that saw them. */
  private removed(node: FsNode | undefined, by: FsSession): void {
    if (!node) return;
    // The other names of its file (hard links) lost a link: their nlink and ctime moved.
    const others = this.table.otherNames(node);
    const gone = this.table.forget(node);
    // The session removed them: it needs no push of that.
    for (const n of gone) this.inval.nodeChanged(n, 'all', by, true);
    // A name whose id the file keeps (node itself, now at another of its names) included.
    for (const n of [node, ...others]) if (n.live) this.inval.nodeChanged(n, 'attr', by);
    this.inval.release(gone);
  }

  // ---- operations (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)") --------------------------------------------------------

  /** `exports` -> `{exports:[{name, root, ro, desc, source_kind, caps}]}`; the roots count as seen. */
  exports(session: FsSession): FsReply<'exports'> {
    const list = this.registry.list();
    for (const e of list) session.seen.add(e.root);
    return { exports: list };
  }

  /** `lookup` `node`=dir `{name}` -> `{attr}` of the entry (a symlink is reported, not followed). */
  async lookup(session: FsSession, dirId: number, name: string): Promise<FsReply<'lookup'>> {
    validateName(name);
    const { dir, exp } = this.dir(dirId);
    // Watched even when the name is missing: a client caching the negative answer needs the
    // `e_fs_inval_dir` when it appears.
    const [st] = await Promise.all([exp.backend.lookup(dir.path(), name), this.inval.watchDir(dir)]);
    return { attr: this.attr(session, this.table.child(dir, name), st) };
  }

  /** `getattr` `node` -> `{attr}` (a symlink's own attributes). */
  async getattr(session: FsSession, id: number): Promise<FsReply<'getattr'>> {
    const node = this.node(id);
    const st = await this.registry.of(node).backend.getattr(node.path());
    return { attr: this.attr(session, node, st) };
  }

  /**
   * `setattr` `node` `{mode?, uid?, gid?, sz?, at?, mt?}` -> `{attr}`; never follows a final
   * symlink (mode on a symlink: ENOTSUP; sz: ELOOP).
   * @throws FsError EROFS on a read-only export
   */
  async setattr(session: FsSession, id: number, changes: FsPayload<'setattr'>): Promise<FsReply<'setattr'>> {
    const node = this.node(id);
    const exp = this.registry.of(node);
    this.writable(exp);
    const c: FsAttrChanges = { mode: changes.mode, uid: changes.uid, gid: changes.gid, size: changes.sz, atimeNs: changes.at, mtimeNs: changes.mt };
    const st = await exp.backend.setattr(node.path(), c);
    this.inval.nodeChanged(node, c.size !== undefined ? 'data' : 'attr', session);
    await this.inval.flushNow(session);
    return { attr: this.attr(session, node, st) };
  }

  /** `truncate` `node` `{sz}` -> `{attr}` (bytes; does not follow a final symlink). */
  truncate(session: FsSession, id: number, size: number): Promise<FsReply<'truncate'>> {
    return this.setattr(session, id, { sz: size });
  }

  /**
   * `readdirp` `node`=dir `{cookie, max}` -> `{ents:[{name, attr}], next, eof, dir_gen}`.
   * Entries are sorted by name and never include `.` or `..`. `cookie` 0 takes a new snapshot of
   * the names; later pages continue in that snapshot (every name present at cookie 0 and still
   * there is returned exactly once). `max` is clamped to 1..1024 (default 256).
   */
  async readdirp(session: FsSession, dirId: number, cookie: number, max: number | undefined): Promise<FsReply<'readdirp'>> {
    const { dir, exp } = this.dir(dirId);
    const path = dir.path();
    const limit = Math.min(READDIRP_MAX, Math.max(1, max ?? READDIRP_DEFAULT_MAX));
    let names = cookie === 0 ? undefined : session.listings.get(dir.id);
    if (!names) {
      names = (await exp.backend.readdir(path)).filter((n) => n !== '.' && n !== '..').sort();
      if (cookie === 0) this.table.observe(dir, await exp.backend.getattr(path));
      session.keepListing(dir.id, names);
    }
    const start = Math.min(cookie, names.length);
    const page = names.slice(start, start + limit);
    const stats = page.length > 0 ? await exp.backend.lookupMany(path, page) : [];
    const ents: DirEntry[] = [];
    page.forEach((name, i) => {
      const st = stats[i];
      if (st) ents.push({ name, attr: this.attr(session, this.table.child(dir, name), st) });
    });
    const next = start + page.length;
    const eof = next >= names.length;
    if (eof) session.listings.delete(dir.id);
    session.seen.add(dir.id);
    await this.inval.watchDir(dir);
    return { ents, next, eof, dir_gen: dir.dirGen };
  }

  /**
   * `open` `node` `{flags}` -> `{h, caps:{rd, wr}, gen}`. O_CREAT/O_EXCL are ignored (use
   * `create`); a final symlink is followed only inside the export (else EACCES).
   * @throws FsError EROFS for write flags on a read-only export; EMFILE past the per-session limit
   */
  async open(session: FsSession, id: number, flags: number): Promise<FsReply<'open'>> {
    const node = this.node(id);
    const exp = this.registry.of(node);
    if (wantsWrite(flags)) this.writable(exp);
    const { file, stat } = await exp.backend.open(node.path(), flags & ~(OpenFlags.O_CREAT | OpenFlags.O_EXCL));
    this.table.observe(node, stat);
    session.seen.add(node.id);
    let h: number;
    try {
      h = session.addHandle(node, file);
    } catch (e) {
      await file.close().catch(() => undefined);
      throw e;
    }
    if (flags & OpenFlags.O_TRUNC) {
      this.inval.nodeChanged(node, 'data', session);
      await this.inval.changedBy(node, session);
    }
    return { h, caps: { rd: file.readable, wr: file.writable }, gen: node.gen };
  }

  /**
   * `open` with the `open_read` extension (docs/protocol.md "FS extensions"): opens like
   * {@link open}, then reads up to `len` bytes (clamped to max_read, 1 MiB) at offset 0. With
   * `closeAtEof`, a file that came back whole (`eof`) is closed at once and `h` is 0. A
   * directory is opened without reading (`n`/`eof` absent). The attr is that of the opened file
   * (its fstat, taken before the read: data newer than the attr can be, older cannot).
   * @param into where to read (at least `min(len, 1 MiB)` bytes); the returned data is a view of it
   * @returns the reply payload (without the bytes) and the bytes read
   * @throws FsError EINVAL for an O_WRONLY open; what {@link open} and `read` throw (the
   *   handle is closed again when the read fails)
   */
  async openRead(
    session: FsSession,
    id: number,
    flags: number,
    len: number,
    closeAtEof: boolean,
    into?: Buffer,
  ): Promise<{ reply: OpenReadReply; data: Buffer }> {
    if ((flags & OpenFlags.O_ACCMODE) === OpenFlags.O_WRONLY) throw new FsError(Errno.EINVAL, 'read needs an open for reading (O_RDONLY or O_RDWR)');
    const node = this.node(id);
    const exp = this.registry.of(node);
    if (wantsWrite(flags)) this.writable(exp);
    const { file, stat } = await exp.backend.open(node.path(), flags & ~(OpenFlags.O_CREAT | OpenFlags.O_EXCL));
    const done = async (reply: OpenReadReply, data: Buffer) => {
      if (flags & OpenFlags.O_TRUNC) {
        this.inval.nodeChanged(node, 'data', session);
        await this.inval.changedBy(node, session);
      }
      return { reply, data };
    };
    try {
      const attr = this.attr(session, node, stat);
      const caps = { rd: file.readable, wr: file.writable };
      if (stat.kind === NodeKind.DIR) return done({ h: session.addHandle(node, file), caps, gen: node.gen, attr }, Buffer.alloc(0));
      const want = Math.min(len, MAX_READ);
      if (into && into.length < want) throw new RangeError(`read buffer holds ${into.length} bytes; ${want} needed`);
      const buf = into ? into.subarray(0, want) : Buffer.allocUnsafe(want);
      const n = want > 0 ? await file.read(buf, 0) : 0;
      this.metrics.bytesRead.inc(n);
      const eof = n < want;
      const data = buf.subarray(0, n);
      if (closeAtEof && eof) {
        await file.close();
        return done({ h: 0, caps, gen: node.gen, attr, n, eof, closed: true }, data);
      }
      return done({ h: session.addHandle(node, file), caps, gen: node.gen, attr, n, eof }, data);
    } catch (e) {
      await file.close().catch(() => undefined);
      throw e;
    }
  }

  /**
   * `prefetch` `node`=dir `{names, max_file?, max_total?}` (the `prefetch` extension,
   * docs/protocol.md "FS extensions"): reads the regular files `names` of the directory, each
   * opened as `open` would (confined, with the node's permissions) but never through a symlink.
   * Entries come back in request order: with data (`attr`, `n`), skipped (`attr`, `skip`:
   * `size` above `max_file`, `total` once `max_total` is used up (every later file too),
   * `changed` when its size moved while it was read), or failed (`errno`: EINVAL/ENAMETOOLONG
   * for a bad name, ENOENT, ELOOP for a symlink, EISDIR, EACCES for a special file or a file the
   * node may not read). The directory is watched before anything is read, so a later change is
   * pushed (`e_fs_inval`) to this session, which now counts every returned node as seen.
   * @param maxFile bytes per file (default 64 KiB, clamped to 1 MiB)
   * @param maxTotal bytes of data in the reply (default 1 MiB, clamped to 4 MiB)
   * @returns the entries and the data of those that carry some, in entry order
   * @throws FsError EINVAL (more than 1024 names), ENOTSUP (an export whose reads act, e.g. a
   *   terminal), ENOENT/ENOTDIR/EACCES for the directory itself
   */
  async prefetch(
    session: FsSession,
    dirId: number,
    names: readonly string[],
    maxFile?: number,
    maxTotal?: number,
  ): Promise<{ files: PrefetchEntry[]; data: Buffer[] }> {
    if (names.length > PREFETCH_MAX_NAMES) throw new FsError(Errno.EINVAL, `names holds ${names.length} names; at most ${PREFETCH_MAX_NAMES}`);
    const { dir, exp } = this.dir(dirId);
    const readSmallFiles = exp.backend.readSmallFiles?.bind(exp.backend);
    if (!readSmallFiles) throw new FsError(Errno.ENOTSUP, `export ${exp.name} does not serve prefetch`);
    const fileCap = Math.min(maxFile ?? PREFETCH_DEFAULT_MAX_FILE, PREFETCH_MAX_FILE);
    let budget = Math.min(maxTotal ?? PREFETCH_DEFAULT_MAX_TOTAL, PREFETCH_MAX_TOTAL);
    const path = dir.path();
    // Watched before anything is read: a change made after the read is pushed.
    await this.inval.watchDir(dir);
    const files: PrefetchEntry[] = names.map((name) => ({ name }));
    const valid: number[] = [];
    names.forEach((name, i) => {
      try {
        validateName(name);
        valid.push(i);
      } catch (e) {
        files[i].errno = errnoOf(e);
      }
    });
    const stats =
      valid.length > 0
        ? await exp.backend.lookupMany(
            path,
            valid.map((i) => names[i]),
          )
        : [];
    session.seen.add(dir.id);
    const reads: Array<{ i: number; reserved: number }> = [];
    let exhausted = false;
    valid.forEach((i, k) => {
      const st = stats[k];
      const entry = files[i];
      if (!st) entry.errno = Errno.ENOENT;
      else if (st.kind === NodeKind.SYMLINK) entry.errno = Errno.ELOOP;
      else if (st.kind === NodeKind.DIR) entry.errno = Errno.EISDIR;
      else if (!isRegularFileMode(st.mode)) entry.errno = Errno.EACCES;
      else {
        entry.attr = this.attr(session, this.table.child(dir, names[i]), st);
        if (st.size > fileCap) entry.skip = 'size';
        else if (exhausted || st.size > budget) {
          exhausted = true;
          entry.skip = 'total';
        } else {
          budget -= st.size;
          reads.push({ i, reserved: st.size });
        }
      }
    });
    const data = new Array<Buffer | undefined>(names.length);
    const results =
      reads.length > 0
        ? await readSmallFiles(
            path,
            reads.map(({ i }) => names[i]),
            reads.map(({ reserved }) => reserved),
          )
        : [];
    reads.forEach(({ i }, k) => {
      const r = results[k];
      const entry = files[i];
      if ('error' in r) {
        delete entry.attr;
        delete entry.skip;
        entry.errno = errnoOf(r.error);
        return;
      }
      const { stat } = r;
      if (stat.kind !== NodeKind.FILE || !isRegularFileMode(stat.mode)) {
        delete entry.attr;
        entry.errno = stat.kind === NodeKind.DIR ? Errno.EISDIR : Errno.EACCES;
        return;
      }
      entry.attr = this.attr(session, this.table.child(dir, names[i]), stat);
      // Grown past what was counted for it (not read: the batch stays within max_total), or
      // changed between its attributes and its read.
      if (r.data === null || r.data.length !== stat.size) {
        entry.skip = 'changed';
        if (r.data) this.metrics.bytesRead.inc(r.data.length);
        return;
      }
      this.metrics.bytesRead.inc(r.data.length);
      entry.n = r.data.length;
      data[i] = r.data;
    });
    return { files, data: data.filter((d): d is Buffer => d !== undefined) };
  }

  /**
   * `create` `node`=dir `{name, mode, flags}` -> `{attr, h}`: creates a regular file with exactly
   * the permission bits `mode` (default 0644), or opens an existing one unless O_EXCL (EEXIST);
   * never through a symlink at `name` (ELOOP).
   * @throws FsError EROFS on a read-only export
   */
  async create(session: FsSession, dirId: number, name: string, mode: number | undefined, flags: number | undefined, cred?: Cred): Promise<FsReply<'create'>> {
    validateName(name);
    const { dir, exp } = this.dir(dirId);
    this.writable(exp);
    const f = flags ?? OpenFlags.O_RDWR;
    return this.inval.dirOp([dir], async () => {
      const { file, stat, created } = await this.inval.entryOp([[dir, name]], () =>
        exp.backend.create(dir.path(), name, mode ?? DEFAULT_FILE_MODE, f, this.owner(session, exp, cred)),
      );
      const child = this.table.child(dir, name);
      const attr = this.attr(session, child, stat);
      child.madeHere = created;
      child.madeIdentity = created ? identityOf(stat) : null;
      let h: number;
      try {
        h = session.addHandle(child, file);
      } catch (e) {
        await file.close().catch(() => undefined);
        throw e;
      }
      if (created) this.entriesChanged(dir, session);
      else if (f & OpenFlags.O_TRUNC) this.inval.nodeChanged(child, 'data', session);
      await this.inval.watchDir(dir);
      const [dirs] = await Promise.all([created ? this.dirAttrs(session, dir) : {}, this.inval.flushNow(session)]);
      return { attr, h, ...dirs };
    });
  }

  /**
   * `read` `h` `{off, len}` -> the bytes at `off` (at most `len`, clamped to 1 MiB) and `eof`
   * (fewer bytes than asked for: the end of the file was reached).
   * @param into where to read (at least `min(len, 1 MiB)` bytes long); the returned `data` is
   *   then a view of it. Default: a new buffer.
   * @throws FsError EBADF (unknown handle, or not opened for reading), EISDIR
   */
  async read(session: FsSession, h: number, off: number, len: number, into?: Buffer): Promise<{ data: Buffer; eof: boolean }> {
    const handle = session.handle(h);
    if (!handle.file.readable) throw new FsError(Errno.EBADF, `handle ${h} is not open for reading`);
    const want = Math.min(len, MAX_READ);
    if (into && into.length < want) throw new RangeError(`read buffer holds ${into.length} bytes; ${want} needed`);
    const buf = into ? into.subarray(0, want) : Buffer.allocUnsafe(want);
    const n = want > 0 ? await handle.file.read(buf, off) : 0;
    this.metrics.bytesRead.inc(n);
    return { data: n === want ? buf : buf.subarray(0, n), eof: n < want };
  }

  /**
   * `write` `h` `{off}` with `data` (decoded `data_b64`, or the bytes of a binary frame) ->
   * `{n}`. With the `write_then` extension granted, `then` is done once all the bytes are
   * written ({@link writeThen}); a session without it has `set`/`sync` ignored.
   * @throws FsError EINVAL (more than 1 MiB), EBADF (unknown handle, or not opened for writing)
   */
  async write(session: FsSession, h: number, off: number, data: Buffer, then?: WriteThen): Promise<FsReply<'write'>> {
    if (data.length > MAX_WRITE) throw new FsError(Errno.EINVAL, `write data is ${data.length} bytes; max_write is ${MAX_WRITE}`);
    const handle = session.handle(h);
    if (!handle.file.writable) throw new FsError(Errno.EBADF, `handle ${h} is not open for writing`);
    const n = await handle.file.write(data, off);
    this.metrics.bytesWritten.inc(n);
    if (handle.node.live) {
      this.inval.nodeChanged(handle.node, 'data', session);
      await this.inval.changedBy(handle.node, session);
    }
    if (n !== data.length || (then?.set === undefined && !then?.sync) || !session.features.has('write_then')) return { n };
    return { n, ...(await this.writeThen(session, h, handle.node.id, then)) };
  }

  /**
   * What a `write` carries after its bytes (the `write_then` extension): `set` as
   * {@link setattr} on node `id` (the handle's), then `sync` as {@link fsync} on handle `h`.
   * @returns `{attr}` after `set`, `{}` after `sync` alone, or the failed step's
   *   `{then_errno, then_message}` (ESTALE is ENOENT for a session without `dir_estale`)
   */
  private async writeThen(session: FsSession, h: number, id: number, then: WriteThen): Promise<Omit<FsReply<'write'>, 'n'>> {
    try {
      const attr = then.set !== undefined ? (await this.setattr(session, id, then.set)).attr : undefined;
      if (then.sync) await this.fsync(session, h);
      return attr ? { attr } : {};
    } catch (e) {
      let errno = errnoOf(e);
      if (errno === Errno.ESTALE && !session.features.has('dir_estale')) errno = Errno.ENOENT;
      return { then_errno: errno, then_message: e instanceof FsError ? e.message : 'internal error' };
    }
  }

  /** `fsync` `h` -> `{}`. @throws FsError EBADF */
  async fsync(session: FsSession, h: number): Promise<FsReply<'fsync'>> {
    await session.handle(h).file.sync();
    await this.inval.flushNow(session);
    return {};
  }

  /**
   * `close` `h` -> `{}`; the handle is gone even when closing reports an error, and so are the
   * locks taken through it (the POSIX locks of each owner that locked through it, its `flock`s).
   * @throws FsError EBADF
   */
  async close(session: FsSession, h: number): Promise<FsReply<'close'>> {
    const handle = session.handle(h);
    session.handles.delete(h);
    this.releaseLocks(handle);
    await handle.file.close();
    await this.inval.flushNow(session);
    return {};
  }

  // ---- links, special files and extended attributes (the `posix` extension) ---------------

  /**
   * `fgetattr` `h` -> `{attr}`: the attributes of the open file of `h`, also once its name was
   * removed or replaced (nlink then tells), as fstat(2) gives them.
   * @throws FsError EBADF, ENOTSUP (a backend that cannot tell)
   */
  async fgetattr(session: FsSession, h: number): Promise<FsReply<'fgetattr'>> {
    const handle = session.handle(h);
    if (!handle.file.stat) throw new FsError(Errno.ENOTSUP, 'this export cannot tell the attributes of an open file');
    const st = await handle.file.stat();
    return { attr: wireAttr(handle.node, st, true) };
  }

  /**
   * `ftruncate` `h` `{sz}` -> `{attr}`: sets the size of the open file of `h` to `sz` bytes
   * (ftruncate(2): the open's write access decides, not the file's mode now; also once its name
   * was removed), and pushes the change to the other sessions as `truncate` would.
   * @throws FsError EBADF (unknown handle), EINVAL (not open for writing), EROFS, ENOTSUP (a
   *   backend that cannot), EFBIG, ENOSPC
   */
  async ftruncate(session: FsSession, h: number, size: number): Promise<FsReply<'ftruncate'>> {
    const handle = session.handle(h);
    this.writable(this.registry.of(handle.node));
    if (!handle.file.truncate) throw new FsError(Errno.ENOTSUP, 'this export cannot truncate an open file');
    const st = await handle.file.truncate(size);
    this.inval.nodeChanged(handle.node, 'data', session);
    await this.inval.flushNow(session);
    return { attr: wireAttr(handle.node, st, true) };
  }

  /**
   * `fallocate` `h` `{mode?, off, len}` -> `{attr}`: fallocate(2) of `len` bytes at `off`
   * (bytes) through the open file of `h`, with `mode` one of FALLOCATE_MODES (default 0:
   * allocate, the size grows to cover the range); the change is pushed as a write's is.
   * @throws FsError EBADF (unknown handle, or not open for writing), EINVAL (`len` 0),
   *   ENOTSUP (another mode, or the export's filesystem has none), EROFS, ENOSPC, EFBIG
   */
  async fallocate(session: FsSession, h: number, mode: number, offset: number, length: number): Promise<FsReply<'fallocate'>> {
    const handle = session.handle(h);
    this.writable(this.registry.of(handle.node));
    if (!FALLOCATE_MODES.includes(mode)) throw new FsError(Errno.ENOTSUP, `fallocate mode ${mode} is not supported`);
    if (length <= 0) throw new FsError(Errno.EINVAL, 'fallocate needs a length above 0');
    if (!handle.file.allocate) throw new FsError(Errno.ENOTSUP, 'this export cannot allocate space');
    const st = await handle.file.allocate(mode, offset, length);
    this.inval.nodeChanged(handle.node, 'data', session);
    await this.inval.flushNow(session);
    return { attr: wireAttr(handle.node, st, true) };
  }

  /**
   * `mknod` `node`=dir `{name, mode, rdev}` -> `{attr}`: a FIFO, socket, device or regular file
   * with the type and permission bits of `mode`.
   * @throws FsError EINVAL (a directory or symlink type), EEXIST, EPERM (the backend makes none,
   *   or a device the node's user may not make), EROFS
   */
  async mknod(session: FsSession, dirId: number, name: string, mode: number, rdev: number, cred?: Cred): Promise<FsReply<'mknod'>> {
    validateName(name);
    const type = mode & FileType.S_IFMT;
    if (![FileType.S_IFIFO, FileType.S_IFSOCK, FileType.S_IFCHR, FileType.S_IFBLK, FileType.S_IFREG, 0].includes(type)) {
      throw new FsError(Errno.EINVAL, `mknod makes FIFOs, sockets, devices and regular files (mode ${mode.toString(8)})`);
    }
    const { dir, exp } = this.dir(dirId);
    this.writable(exp);
    if (!exp.backend.mknod) throw new FsError(Errno.EPERM, 'this export makes no special files');
    return this.inval.dirOp([dir], async () => {
      const st = await this.inval.entryOp([[dir, name]], () =>
        exp.backend.mknod!(dir.path(), name, type === 0 ? mode | FileType.S_IFREG : mode, rdev, this.owner(session, exp, cred)),
      );
      const attr = this.madeAttr(session, dir, name, st);
      this.entriesChanged(dir, session);
      const [dirs] = await Promise.all([this.dirAttrs(session, dir), this.inval.flushNow(session)]);
      return { attr, ...dirs };
    });
  }

  /**
   * `link` `node` `{new_parent, new_name}` -> `{attr}` (nlink counted): another name of a
   * non-directory in the same export.
   * @throws FsError EPERM (a directory, or the backend has no hard links), EXDEV (another export), EEXIST, EROFS
   */
  async link(session: FsSession, id: number, newParentId: number, newName: string): Promise<FsReply<'link'>> {
    validateName(newName, 'new_name');
    const node = this.node(id);
    const exp = this.registry.of(node);
    const { dir, exp: toExp } = this.dir(newParentId);
    if (exp !== toExp) throw new FsError(Errno.EXDEV, 'link across exports');
    this.writable(exp);
    if (!exp.backend.link) throw new FsError(Errno.EPERM, 'this export has no hard links');
    return this.inval.dirOp([dir], async () => {
      const st = await this.inval.entryOp([[dir, newName]], () => exp.backend.link!(node.path(), dir.path(), newName));
      // The existing name first: the new one is handed out under its id.
      this.table.linkPrimary(node, st);
      const attr = this.attr(session, this.table.child(dir, newName), st);
      // The other name's nlink and ctime moved.
      this.inval.nodeChanged(node, 'attr', session);
      this.entriesChanged(dir, session);
      const [dirs] = await Promise.all([this.dirAttrs(session, dir), this.inval.flushNow(session)]);
      return { attr, ...dirs };
    });
  }

  /** The export of node `id` and its backend's xattr method `op`. @throws FsError ENOTSUP when the backend has none */
  private xattrs<K extends 'getxattr' | 'setxattr' | 'listxattr' | 'removexattr'>(
    id: number,
    op: K,
  ): { node: FsNode; exp: FsExport; fn: NonNullable<FsExport['backend'][K]> } {
    const node = this.node(id);
    const exp = this.registry.of(node);
    const fn = exp.backend[op];
    if (!fn) throw new FsError(Errno.ENOTSUP, 'this export has no extended attributes');
    return { node, exp, fn: fn.bind(exp.backend) as NonNullable<FsExport['backend'][K]> };
  }

  /**
   * `getxattr` `node` `{name, size}` -> `{n}` (the value's length, bytes) and, when `size` > 0,
   * `value_b64`. @throws FsError ERANGE (`size` smaller than the value), ENODATA, ENOTSUP
   */
  async getxattr(id: number, name: string, size: number): Promise<FsReply<'getxattr'>> {
    const { node, fn } = this.xattrs(id, 'getxattr');
    const value = await fn(node.path(), name);
    if (size === 0) return { n: value.length };
    if (value.length > size) throw new FsError(Errno.ERANGE, `the value of ${name} is ${value.length} bytes; ${size} asked for`);
    return { n: value.length, value_b64: value.toString('base64') };
  }

  /** `setxattr` `node` `{name, value_b64, flags}` -> `{}`. @throws FsError EEXIST, ENODATA, ENOTSUP, EPERM, EROFS, EINVAL */
  async setxattr(session: FsSession, id: number, name: string, value: Buffer, flags: number): Promise<FsReply<'setxattr'>> {
    const { node, exp, fn } = this.xattrs(id, 'setxattr');
    this.writable(exp);
    await fn(node.path(), name, value, flags);
    this.inval.nodeChanged(node, 'attr', session);
    await this.inval.flushNow(session);
    return {};
  }

  /**
   * `listxattr` `node` `{size}` -> `{n}` (bytes of the NUL-terminated names) and, when `size` >
   * 0, `names`. @throws FsError ERANGE, ENOTSUP
   */
  async listxattr(id: number, size: number): Promise<FsReply<'listxattr'>> {
    const { node, fn } = this.xattrs(id, 'listxattr');
    const names = await fn(node.path());
    const n = names.reduce((sum, x) => sum + Buffer.byteLength(x) + 1, 0);
    if (size === 0) return { n };
    if (n > size) throw new FsError(Errno.ERANGE, `the attribute names take ${n} bytes; ${size} asked for`);
    return { n, names };
  }

  /** `removexattr` `node` `{name}` -> `{}`. @throws FsError ENODATA, ENOTSUP, EROFS */
  async removexattr(session: FsSession, id: number, name: string): Promise<FsReply<'removexattr'>> {
    const { node, exp, fn } = this.xattrs(id, 'removexattr');
    this.writable(exp);
    await fn(node.path(), name);
    this.inval.nodeChanged(node, 'attr', session);
    await this.inval.flushNow(session);
    return {};
  }

  // ---- locks (the `posix` extension) ----------------------------------------------------

  /** The key of lock owner `owner` of `session` in the node's lock table. */
  private static lockOwner(session: FsSession, owner: string): string {
    return `${session.id}\u0000${owner}`;
  }

  /** Releases the locks taken through `handle` (it closed). */
  private releaseLocks(handle: OpenHandle): void {
    const locks = this.sessions.locks;
    for (const owner of handle.posixOwners) locks.releaseOwnerKind(handle.node.id, owner, 'posix');
    for (const owner of handle.flockOwners) locks.releaseOwnerKind(handle.node.id, owner, 'flock');
  }

  /**
   * `lock` `h` {@link LockPayload} -> `{}` once the lock is taken, changed or released on the file
   * of `h`, in the node's one lock table for every session. A waiting request (`wait`) can be
   * cancelled with `lock_cancel` and the request's `tag`.
   * @param tag the request's tag (the id of its wait)
   * @throws FsError EAGAIN (a conflict, without `wait`), EDEADLK, EINTR (cancelled, or the
   *   session ended), EBADF (unknown handle, or closed while the request waited), EINVAL (range)
   */
  async lock(session: FsSession, h: number, p: LockPayload, tag: number | null): Promise<FsReply<'lock'>> {
    const handle = session.handle(h);
    const owner = FsService.lockOwner(session, p.owner);
    const wait = p.wait === true && p.type !== 'un';
    const req = { node: handle.node.id, kind: p.kind, type: p.type, start: p.start ?? 0, len: p.len ?? 0, owner, session: session.id, pid: p.pid };
    const fd = handle.file.descriptor;
    if (fd !== undefined && p.type !== 'un') this.sessions.hostLocks?.attach(handle.node.id, fd);
    await this.sessions.locks.lock(req, wait, wait && tag !== null ? `${session.id}\u0000${tag}` : undefined);
    if (p.type === 'un') return {};
    if (session.handles.get(h) !== handle) {
      // The handle closed while the request waited: what it was granted goes with it.
      this.sessions.locks.lock({ ...req, type: 'un' }, false).catch(() => undefined);
      throw new FsError(Errno.EBADF, `handle ${h} was closed while the lock waited`);
    }
    (p.kind === 'posix' ? handle.posixOwners : handle.flockOwners).add(owner);
    return {};
  }

  /**
   * `getlk` `h` `{kind, type, start, len, owner}` -> the first lock of another owner that would
   * conflict with it (`owner_here` and `pid` when this session holds it), or `{type: "un"}`.
   * @throws FsError EBADF, EINVAL
   */
  getlk(session: FsSession, h: number, p: FsPayload<'getlk'>): GetlkReply {
    const handle = session.handle(h);
    const c = this.sessions.locks.test({
      node: handle.node.id,
      kind: p.kind,
      type: p.type,
      start: p.start ?? 0,
      len: p.len ?? 0,
      owner: FsService.lockOwner(session, p.owner),
      session: session.id,
    });
    if (!c) return { type: 'un' };
    const prefix = FsService.lockOwner(session, '');
    if (c.session !== session.id || !c.owner.startsWith(prefix)) return { type: c.type, start: c.start, len: c.len };
    return { type: c.type, start: c.start, len: c.len, owner_here: c.owner.slice(prefix.length), ...(c.pid !== undefined ? { pid: c.pid } : {}) };
  }

  /** `lock_cancel` `{tag}` -> `{}`: the waiting `lock` of this session sent with `tag` answers EINTR (nothing when it is not waiting). */
  lockCancel(session: FsSession, tag: number): FsReply<'lock_cancel'> {
    this.sessions.locks.cancel(`${session.id}\u0000${tag}`);
    return {};
  }

  /** `unlink` `node`=dir `{name}` -> `{}` (a directory: EISDIR). @throws FsError EROFS on a read-only export */
  async unlink(session: FsSession, dirId: number, name: string): Promise<FsReply<'unlink'>> {
    validateName(name);
    const { dir, exp } = this.dir(dirId);
    this.writable(exp);
    return this.inval.dirOp([dir], async () => {
      await this.inval.entryOp([[dir, name]], () => exp.backend.unlink(dir.path(), name));
      this.removed(this.table.peek(dir, name), session);
      this.entriesChanged(dir, session);
      const [dirs] = await Promise.all([this.dirAttrs(session, dir), this.inval.flushNow(session)]);
      return dirs;
    });
  }

  /** `rmdir` `node`=dir `{name}` -> `{}` (ENOTDIR, ENOTEMPTY). @throws FsError EROFS on a read-only export */
  async rmdir(session: FsSession, dirId: number, name: string): Promise<FsReply<'rmdir'>> {
    validateName(name);
    const { dir, exp } = this.dir(dirId);
    this.writable(exp);
    return this.inval.dirOp([dir], async () => {
      await this.inval.entryOp([[dir, name]], () => exp.backend.rmdir(dir.path(), name));
      this.removed(this.table.peek(dir, name), session);
      this.entriesChanged(dir, session);
      const [dirs] = await Promise.all([this.dirAttrs(session, dir), this.inval.flushNow(session)]);
      return dirs;
    });
  }

  /** `mkdir` `node`=dir `{name, mode}` -> `{attr}` (exactly `mode`, default 0755). @throws FsError EROFS, EEXIST */
  async mkdir(session: FsSession, dirId: number, name: string, mode: number | undefined, cred?: Cred): Promise<FsReply<'mkdir'>> {
    validateName(name);
    const { dir, exp } = this.dir(dirId);
    this.writable(exp);
    return this.inval.dirOp([dir], async () => {
      const st = await this.inval.entryOp([[dir, name]], () => exp.backend.mkdir(dir.path(), name, mode ?? DEFAULT_DIR_MODE, this.owner(session, exp, cred)));
      const attr = this.madeAttr(session, dir, name, st);
      this.entriesChanged(dir, session);
      await this.watchMade(this.table.child(dir, name));
      const [dirs] = await Promise.all([this.dirAttrs(session, dir), this.inval.flushNow(session)]);
      return { attr, ...dirs };
    });
  }

  /**
   * `symlink` `node`=dir `{name, target}` -> `{attr}`. The target is stored as given (like
   * POSIX, it may point anywhere); following it is always confined.
   * @throws FsError EINVAL (empty or NUL in target), ENAMETOOLONG (over 4095 bytes), EROFS
   */
  async symlink(session: FsSession, dirId: number, name: string, target: string, cred?: Cred): Promise<FsReply<'symlink'>> {
    validateName(name);
    if (target.length === 0 || target.includes('\0')) throw new FsError(Errno.EINVAL, 'target must be non-empty text without NUL');
    if (Buffer.byteLength(target, 'utf8') > SYMLINK_MAX) throw new FsError(Errno.ENAMETOOLONG, `target is longer than ${SYMLINK_MAX} bytes`);
    const { dir, exp } = this.dir(dirId);
    this.writable(exp);
    return this.inval.dirOp([dir], async () => {
      const st = await this.inval.entryOp([[dir, name]], () => exp.backend.symlink(dir.path(), name, target, this.owner(session, exp, cred)));
      const attr = this.madeAttr(session, dir, name, st);
      this.entriesChanged(dir, session);
      const [dirs] = await Promise.all([this.dirAttrs(session, dir), this.inval.flushNow(session)]);
      return { attr, ...dirs };
    });
  }

  /** `readlink` `node` -> `{target}` (the stored text; EINVAL when not a symlink). */
  async readlink(id: number): Promise<FsReply<'readlink'>> {
    const node = this.node(id);
    if (node.parent === null) throw new FsError(Errno.EINVAL, 'not a symlink');
    return { target: await this.registry.of(node).backend.readlink(node.path()) };
  }

  /**
   * `rename` `{old_parent, old_name, new_parent, new_name}` -> `{}`. The moved node keeps its id,
   * and so does everything below a moved directory; a replaced destination is forgotten.
   * @throws FsError EXDEV (the two directories are in different exports), EROFS, EINVAL
   */
  async rename(session: FsSession, oldParentId: number, oldName: string, newParentId: number, newName: string, flags = 0): Promise<FsReply<'rename'>> {
    validateName(oldName, 'old_name');
    validateName(newName, 'new_name');
    if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE) || flags === (RENAME_NOREPLACE | RENAME_EXCHANGE))
      throw new FsError(Errno.EINVAL, `invalid rename flags ${flags}`);
    if (flags !== 0 && !session.features.has('posix')) throw new FsError(Errno.EINVAL, 'rename flags need the posix extension');
    const { dir: from, exp } = this.dir(oldParentId);
    const { dir: to, exp: toExp } = this.dir(newParentId);
    if (exp !== toExp) throw new FsError(Errno.EXDEV, 'rename across exports');
    this.writable(exp);
    return this.inval.dirOp([from, to], async () => {
      await this.inval.entryOp(
        [
          [from, oldName],
          [to, newName],
        ],
        () => exp.backend.rename(from.path(), oldName, to.path(), newName, flags),
      );
      const moved = this.table.peek(from, oldName);
      if (flags & RENAME_EXCHANGE) {
        // Each file keeps its node id under the other's name.
        const other = this.table.peek(to, newName);
        if (moved && other) this.table.exchange(moved, other);
        else if (moved) this.table.move(moved, to, newName);
        else if (other) this.table.move(other, from, oldName);
        for (const n of [moved, other]) if (n) this.inval.nodeChanged(n, 'attr', session);
      } else if (moved) {
        const replaced = this.table.peek(to, newName);
        const others = replaced && replaced !== moved ? this.table.otherNames(replaced) : [];
        const gone = this.table.move(moved, to, newName);
        for (const n of [replaced, ...others]) if (n?.live && n !== moved) this.inval.nodeChanged(n, 'attr', session);
        for (const n of gone) this.inval.nodeChanged(n, 'all', session);
        this.inval.release(gone);
        this.inval.nodeChanged(moved, 'attr', session);
      } else if (from !== to || oldName !== newName) {
        this.removed(this.table.peek(to, newName), session);
      }
      this.entriesChanged(from, session);
      if (to !== from) this.entriesChanged(to, session);
      const [dirs, attr] = await Promise.all([
        this.dirAttrs(session, to, from),
        flags & RENAME_EXCHANGE ? undefined : this.movedAttr(session, to, newName),
        this.inval.flushNow(session),
      ]);
      return attr ? { ...dirs, attr } : dirs;
    });
  }

  /** `statfs` `node` -> `{bsize, frsize, blocks, bfree, bavail, files, ffree, namemax}` of the filesystem holding the node. */
  async statfs(id: number): Promise<FsReply<'statfs'>> {
    const node = this.node(id);
    return this.registry.of(node).backend.statfs(node.path());
  }
}
