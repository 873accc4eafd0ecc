/**
 * e2e: the libfuse 3 binding (native/fuse3, libs/fuse3) with a small in-memory filesystem
 * written here against its Operations, mounted for real and used with ordinary tools: stat,
 * ls -l, cat, echo >, mv, rm, mkdir, rmdir, ln -s, truncate, touch -d with ns; readdirplus
 * (ls -l does no lookup per name); kernel notifications with 60 s entry and attribute timeouts,
 * and one waiting in the kernel for a lookup JS has not answered yet while the event loop runs;
 * forgets bringing every lookup count back to 0 after drop_caches; interrupts; flock and fcntl
 * locks; fallocate, lseek, copy_file_range; errors answered as errno; an unmount from outside, a
 * busy unmount, process.exit() with a mount; two mounts in one process.
 *
 * Nothing here touches the mount from the test's own thread (no fs.*Sync on it): the
 * filesystem answers on this event loop, so tools run as child processes.
 * Skipped, with the reason printed, where the binding is not built, /dev/fuse is missing or the
 * test does not run as root (drop_caches, and mount(2) without fusermount3).
 */
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chownSync, existsSync, mkdtempSync, readFileSync, rmdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import {
  Attr,
  AttrReply,
  CreateReply,
  DirEntry,
  DirEntryPlus,
  Entry,
  Forget,
  Fuse3Binding,
  FuseError,
  FuseSession,
  fuse3Unavailable,
  loadFuse3Binding,
  Lock,
  mount,
  OpenReply,
  Operations,
  ReleaseInfo,
  RequestContext,
  ROOT_INO,
  SETATTR,
  SetattrValues,
  Statfs,
  UnmountedInfo,
  WriteInfo,
} from '@svc/fuse3';

const run = promisify(execFile);
const reason = fuse3Unavailable() ?? (process.getuid?.() === 0 ? null : 'not root (the test drops the page cache and mounts with mount(2))');
if (reason) process.stdout.write(`fuse3 binding e2e tests skipped: ${reason}\n`);
const describeFuse3 = reason ? describe.skip : describe;

const S_IFMT = 0o170000;
const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const S_IFLNK = 0o120000;
const TIMEOUT = 60;

/** A time in ns since the epoch, with ns resolution. */
const EPOCH_NS = BigInt(Date.now()) * 1_000_000n - process.hrtime.bigint();
const nowNs = () => EPOCH_NS + process.hrtime.bigint();

interface Node {
  ino: number;
  mode: number;
  nlink: number;
  uid: number;
  gid: number;
  data: Buffer;
  target: string;
  children: Map<string, number>;
  atimeNs: bigint;
  mtimeNs: bigint;
  ctimeNs: bigint;
  xattrs: Map<string, Buffer>;
  /** The kernel's references (entries given minus forgets). */
  lookups: number;
}

/**
 * An in-memory filesystem with explicit lookup counts: every entry handed out (lookup, create,
 * mkdir, mknod, symlink, link, readdirplus) counts one, forget takes them back; an inode without
 * names is dropped when its count reaches 0. Counts the calls of each operation.
 */
class MemFs implements Operations {
  readonly nodes = new Map<number, Node>();
  readonly calls: Record<string, number> = {};
  readonly interrupted: number[] = [];
  readonly locks: { op: string; fh: number; owner: bigint; lock?: Lock; sleep?: boolean; flockOp?: number }[] = [];
  /** Inodes whose reads wait until interrupted. */
  readonly hanging = new Set<number>();
  /** Names whose lookups wait until the test releases them (name → release). */
  readonly slowLookups = new Map<string, (() => void) | null>();
  /** Reads waiting (request id → fail). */
  private readonly waiting = new Map<number, (e: Error) => void>();
  private readonly handles = new Map<number, { ino: number; names?: string[] }>();
  private nextIno = ROOT_INO + 1;
  private nextFh = 1;
  forgotten = 0;
  /** The context of the last mkdir. */
  mkdirCtx: RequestContext | null = null;
  /** Request ids of the reads, in order. */
  readIds: number[] = [];
  /** The largest write request seen, bytes. */
  maxWrite = 0;
  initialised = false;
  destroyed = false;

  constructor(readonly timeout = TIMEOUT) {
    this.nodes.set(ROOT_INO, this.node(ROOT_INO, S_IFDIR | 0o755, 0, 0));
    this.nodes.get(ROOT_INO)!.nlink = 2;
  }

  private count(op: string): void {
    this.calls[op] = (this.calls[op] ?? 0) + 1;
  }

  private node(ino: number, mode: number, uid: number, gid: number): Node {
    const t = nowNs();
    return {
      ino,
      mode,
      nlink: 1,
      uid,
      gid,
      data: Buffer.alloc(0),
      target: '',
      children: new Map(),
      atimeNs: t,
      mtimeNs: t,
      ctimeNs: t,
      xattrs: new Map(),
      lookups: 0,
    };
  }

  get(ino: number): Node {
    const n = this.nodes.get(ino);
    if (!n) throw new FuseError('ENOENT', `no inode ${ino}`);
    return n;
  }

  private dir(ino: number): Node {
    const n = this.get(ino);
    if ((n.mode & S_IFMT) !== S_IFDIR) throw new FuseError('ENOTDIR');
    return n;
  }

  /**
   * Adds `name` in `parent` directly (a change made "elsewhere", not through the kernel);
   * `touch`: the directory's mtime changes (the kernel resets its cached listing when it sees that).
   */
  add(parent: number, name: string, mode: number, data = '', touch = true): Node {
    const p = this.dir(parent);
    const n = this.node(this.nextIno++, mode, 0, 0);
    n.data = Buffer.from(data);
    if ((mode & S_IFMT) === S_IFDIR) {
      n.nlink = 2;
      p.nlink++;
    }
    this.nodes.set(n.ino, n);
    p.children.set(name, n.ino);
    if (touch) p.mtimeNs = p.ctimeNs = nowNs();
    return n;
  }

  /** Removes `name` from `parent` directly (`touch` as for {@link add}). */
  remove(parent: number, name: string, touch = true): Node {
    const p = this.dir(parent);
    const n = this.get(p.children.get(name) ?? -1);
    p.children.delete(name);
    if (touch) p.mtimeNs = p.ctimeNs = nowNs();
    n.nlink -= (n.mode & S_IFMT) === S_IFDIR ? 2 : 1;
    this.maybeDrop(n);
    return n;
  }

  /** The path's node, resolved directly. */
  at(path: string): Node {
    let n = this.get(ROOT_INO);
    for (const part of path.split('/').filter(Boolean)) n = this.get(n.children.get(part) ?? -1);
    return n;
  }

  attr(n: Node): Attr {
    const size = (n.mode & S_IFMT) === S_IFLNK ? Buffer.byteLength(n.target) : n.data.length;
    return {
      ino: n.ino,
      mode: n.mode,
      nlink: n.nlink,
      uid: n.uid,
      gid: n.gid,
      size,
      blocks: Math.ceil(size / 512),
      atimeNs: n.atimeNs,
      mtimeNs: n.mtimeNs,
      ctimeNs: n.ctimeNs,
    };
  }

  /** An entry handed to the kernel: one more lookup. */
  private entry(n: Node): Entry {
    n.lookups++;
    return { ino: n.ino, attr: this.attr(n), entryTimeout: this.timeout, attrTimeout: this.timeout };
  }

  private maybeDrop(n: Node): void {
    if (n.nlink <= 0 && n.lookups <= 0 && n.ino !== ROOT_INO) this.nodes.delete(n.ino);
  }

  /** The sum of the kernel's references over all inodes. */
  totalLookups(): number {
    let t = 0;
    for (const n of this.nodes.values()) t += n.lookups;
    return t;
  }

  init(): void {
    this.initialised = true;
  }

  destroy(): void {
    this.destroyed = true;
  }

  interrupt(ctx: RequestContext): void {
    this.count('interrupt');
    this.interrupted.push(ctx.id);
    this.waiting.get(ctx.id)?.(new FuseError('EINTR'));
  }

  async lookup(parent: number, name: string): Promise<Entry> {
    this.count('lookup');
    if (this.slowLookups.has(name)) await new Promise<void>((resolve) => this.slowLookups.set(name, resolve));
    const ino = this.dir(parent).children.get(name);
    if (ino === undefined) return { ino: 0, entryTimeout: this.timeout, attrTimeout: 0 }; // cached as absent
    const entry = this.entry(this.get(ino));
    if (name === 'bad') return { ...entry, attr: { ...entry.attr!, mode: 'not a number' as unknown as number } }; // refused by the binding
    return entry;
  }

  forget(list: Forget[]): void {
    this.count('forget');
    for (const { ino, nlookup } of list) {
      const n = this.nodes.get(ino);
      if (!n) continue;
      n.lookups -= nlookup;
      this.forgotten += nlookup;
      this.maybeDrop(n);
    }
  }

  async getattr(ino: number): Promise<AttrReply> {
    this.count('getattr');
    return { attr: this.attr(this.get(ino)), attrTimeout: this.timeout };
  }

  async setattr(ino: number, toSet: number, v: SetattrValues): Promise<AttrReply> {
    this.count('setattr');
    const n = this.get(ino);
    const t = nowNs();
    if (toSet & SETATTR.MODE) n.mode = (n.mode & S_IFMT) | (v.mode & 0o7777);
    if (toSet & SETATTR.UID) n.uid = v.uid;
    if (toSet & SETATTR.GID) n.gid = v.gid;
    if (toSet & SETATTR.SIZE) {
      const d = Buffer.alloc(v.size);
      n.data.copy(d, 0, 0, Math.min(v.size, n.data.length));
      n.data = d;
      n.mtimeNs = t;
    }
    if (toSet & SETATTR.ATIME) n.atimeNs = toSet & SETATTR.ATIME_NOW ? t : v.atimeNs;
    if (toSet & SETATTR.MTIME) n.mtimeNs = toSet & SETATTR.MTIME_NOW ? t : v.mtimeNs;
    n.ctimeNs = toSet & SETATTR.CTIME ? v.ctimeNs : t;
    return { attr: this.attr(n), attrTimeout: this.timeout };
  }

  async readlink(ino: number): Promise<string> {
    this.count('readlink');
    return this.get(ino).target;
  }

  private create1(parent: number, name: string, mode: number, ctx: RequestContext): Node {
    const p = this.dir(parent);
    if (p.children.has(name)) throw new FuseError('EEXIST');
    const n = this.add(parent, name, mode);
    n.uid = ctx.uid;
    n.gid = ctx.gid;
    return n;
  }

  async mknod(parent: number, name: string, mode: number, _rdev: number, ctx: RequestContext): Promise<Entry> {
    this.count('mknod');
    return this.entry(this.create1(parent, name, mode, ctx));
  }

  async mkdir(parent: number, name: string, mode: number, ctx: RequestContext): Promise<Entry> {
    this.count('mkdir');
    this.mkdirCtx = ctx;
    return this.entry(this.create1(parent, name, S_IFDIR | (mode & 0o7777), ctx));
  }

  async unlink(parent: number, name: string): Promise<void> {
    this.count('unlink');
    const n = this.get(this.dir(parent).children.get(name) ?? -1);
    if ((n.mode & S_IFMT) === S_IFDIR) throw new FuseError('EISDIR');
    this.remove(parent, name);
  }

  async rmdir(parent: number, name: string): Promise<void> {
    this.count('rmdir');
    const n = this.dir(this.dir(parent).children.get(name) ?? -1);
    if (n.children.size > 0) throw new FuseError('ENOTEMPTY');
    this.remove(parent, name);
    this.get(parent).nlink--;
  }

  async symlink(parent: number, name: string, target: string, ctx: RequestContext): Promise<Entry> {
    this.count('symlink');
    const n = this.create1(parent, name, S_IFLNK | 0o777, ctx);
    n.target = target;
    return this.entry(n);
  }

  async rename(parent: number, name: string, newParent: number, newName: string, flags: number): Promise<void> {
    this.count('rename');
    const from = this.dir(parent);
    const to = this.dir(newParent);
    const ino = from.children.get(name);
    if (ino === undefined) throw new FuseError('ENOENT');
    const existing = to.children.get(newName);
    if (existing !== undefined && flags & 1) throw new FuseError('EEXIST');
    if (existing !== undefined && existing !== ino) this.remove(newParent, newName);
    from.children.delete(name);
    to.children.set(newName, ino);
    from.mtimeNs = to.mtimeNs = nowNs();
  }

  async link(ino: number, newParent: number, newName: string): Promise<Entry> {
    this.count('link');
    const n = this.get(ino);
    const p = this.dir(newParent);
    if (p.children.has(newName)) throw new FuseError('EEXIST');
    p.children.set(newName, ino);
    n.nlink++;
    return this.entry(n);
  }

  private openFile(ino: number): OpenReply {
    const fh = this.nextFh++;
    this.handles.set(fh, { ino });
    return { fh, keepCache: true, directIo: this.hanging.has(ino) };
  }

  async open(ino: number, flags: number): Promise<OpenReply> {
    this.count('open');
    const n = this.get(ino);
    if (flags & 0o1000) n.data = Buffer.alloc(0); // O_TRUNC
    return this.openFile(ino);
  }

  read(ino: number, _fh: number, offset: number, size: number, ctx: RequestContext): Promise<Buffer> {
    this.count('read');
    this.readIds.push(ctx.id);
    if (this.hanging.has(ino)) return new Promise((_resolve, reject) => this.waiting.set(ctx.id, reject)); // answered when interrupted
    return Promise.resolve(this.get(ino).data.subarray(offset, offset + size));
  }

  async write(ino: number, _fh: number, offset: number, data: Buffer, _info: WriteInfo): Promise<number> {
    this.count('write');
    this.maxWrite = Math.max(this.maxWrite, data.length);
    const n = this.get(ino);
    if (offset + data.length > n.data.length) {
      const d = Buffer.alloc(offset + data.length);
      n.data.copy(d);
      n.data = d;
    }
    data.copy(n.data, offset);
    n.mtimeNs = n.ctimeNs = nowNs();
    return data.length;
  }

  async flush(): Promise<void> {
    this.count('flush');
  }

  async release(_ino: number, fh: number, info: ReleaseInfo): Promise<void> {
    this.count('release');
    if (info.flockRelease) this.locks.push({ op: 'release', fh, owner: info.lockOwner });
    this.handles.delete(fh);
  }

  async fsync(): Promise<void> {
    this.count('fsync');
  }

  async opendir(ino: number): Promise<OpenReply> {
    this.count('opendir');
    const fh = this.nextFh++;
    this.handles.set(fh, { ino, names: [...this.dir(ino).children.keys()].sort() });
    return { fh, cacheReaddir: true, keepCache: true };
  }

  /** The open directory's names, with `.` and `..`, from `offset` on (offset i + 1 follows name i). */
  private listing(fh: number, offset: number): { name: string; ino: number | null; next: number }[] {
    const h = this.handles.get(fh);
    if (!h?.names) throw new FuseError('EBADF');
    const all = ['.', '..', ...h.names];
    const out: { name: string; ino: number | null; next: number }[] = [];
    for (let i = offset; i < all.length; i++) out.push({ name: all[i], ino: i < 2 ? null : (this.get(h.ino).children.get(all[i]) ?? null), next: i + 1 });
    return out.filter((e) => e.name === '.' || e.name === '..' || e.ino !== null);
  }

  async readdir(ino: number, fh: number, offset: number): Promise<DirEntry[]> {
    this.count('readdir');
    return this.listing(fh, offset).map((e) => ({ name: e.name, ino: e.ino ?? ino, mode: e.ino ? this.get(e.ino).mode : S_IFDIR, nextOffset: e.next }));
  }

  async readdirplus(ino: number, fh: number, offset: number): Promise<DirEntryPlus[]> {
    this.count('readdirplus');
    return this.listing(fh, offset).map((e) =>
      e.ino === null ? { name: e.name, ino, mode: S_IFDIR, nextOffset: e.next } : { name: e.name, entry: this.entry(this.get(e.ino)), nextOffset: e.next },
    );
  }

  async releasedir(_ino: number, fh: number): Promise<void> {
    this.count('releasedir');
    this.handles.delete(fh);
  }

  async statfs(): Promise<Statfs> {
    this.count('statfs');
    return { bsize: 4096, blocks: 1000, bfree: 500, bavail: 500, files: 100, ffree: 100 - this.nodes.size };
  }

  async setxattr(ino: number, name: string, value: Buffer): Promise<void> {
    this.count('setxattr');
    this.get(ino).xattrs.set(name, Buffer.from(value));
  }

  async getxattr(ino: number, name: string): Promise<Buffer> {
    this.count('getxattr');
    if (name === 'user.boom') throw new Error('boom');
    const v = this.get(ino).xattrs.get(name);
    if (!v) throw new FuseError('ENODATA');
    return v;
  }

  async listxattr(ino: number): Promise<string[]> {
    this.count('listxattr');
    return [...this.get(ino).xattrs.keys()];
  }

  async removexattr(ino: number, name: string): Promise<void> {
    this.count('removexattr');
    if (!this.get(ino).xattrs.delete(name)) throw new FuseError('ENODATA');
  }

  async create(parent: number, name: string, mode: number, flags: number, ctx: RequestContext): Promise<CreateReply> {
    this.count('create');
    const existing = this.dir(parent).children.get(name);
    if (existing !== undefined) {
      if (flags & 0o200) throw new FuseError('EEXIST'); // O_EXCL
      return { entry: this.entry(this.get(existing)), open: this.openFile(existing) };
    }
    const n = this.create1(parent, name, S_IFREG | (mode & 0o7777), ctx);
    return { entry: this.entry(n), open: this.openFile(n.ino) };
  }

  async getlk(_ino: number, fh: number, owner: bigint, lock: Lock): Promise<Lock> {
    this.count('getlk');
    this.locks.push({ op: 'getlk', fh, owner, lock });
    return { ...lock, type: 2 }; // F_UNLCK: no conflict
  }

  async setlk(_ino: number, fh: number, owner: bigint, lock: Lock, sleep: boolean): Promise<void> {
    this.count('setlk');
    this.locks.push({ op: 'setlk', fh, owner, lock, sleep });
  }

  async flock(_ino: number, fh: number, owner: bigint, op: number): Promise<void> {
    this.count('flock');
    this.locks.push({ op: 'flock', fh, owner, flockOp: op });
  }

  async fallocate(ino: number, _fh: number, mode: number, offset: number, length: number): Promise<void> {
    this.count('fallocate');
    const n = this.get(ino);
    if (mode !== 0) throw new FuseError('EOPNOTSUPP');
    if (offset + length > n.data.length) {
      const d = Buffer.alloc(offset + length);
      n.data.copy(d);
      n.data = d;
    }
  }

  async lseek(ino: number, _fh: number, offset: number, whence: number): Promise<number> {
    this.count('lseek');
    const size = this.get(ino).data.length;
    if (offset >= size) throw new FuseError('ENXIO');
    return whence === 3 ? offset : size; // SEEK_DATA: no holes here; SEEK_HOLE: the end
  }

  async copyFileRange(inoIn: number, _fhIn: number, offIn: number, inoOut: number, _fhOut: number, offOut: number, length: number): Promise<number> {
    this.count('copyFileRange');
    const chunk = this.get(inoIn).data.subarray(offIn, offIn + length);
    const out = this.get(inoOut);
    if (offOut + chunk.length > out.data.length) {
      const d = Buffer.alloc(offOut + chunk.length);
      out.data.copy(d);
      out.data = d;
    }
    chunk.copy(out.data, offOut);
    return chunk.length;
  }
}

/** A shell command's standard output (the command runs as a child process). */
async function sh(cmd: string): Promise<string> {
  return (await run('sh', ['-c', cmd], { encoding: 'utf8' })).stdout;
}

/** The exit status and output of a shell command that may fail. */
async function shTry(cmd: string): Promise<{ code: number; out: string }> {
  try {
    return { code: 0, out: await sh(cmd) };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: err.code ?? -1, out: `${err.stdout ?? ''}${err.stderr ?? ''}` };
  }
}

const mounted = (dir: string) =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === dir);

async function waitUntil(fn: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describeFuse3('libfuse 3 binding (libs/fuse3) with an in-memory filesystem', () => {
  let fs: MemFs;
  let session: FuseSession;
  let mnt: string;
  /** The binding's handle of `session` (for answering a request a second time). */
  let handle: ReturnType<Fuse3Binding['mount']>;
  const errors: { op: string; error: unknown }[] = [];

  beforeAll(async () => {
    mnt = mkdtempSync(join(tmpdir(), 'svc-fuse3-'));
    fs = new MemFs();
    const nativeMount = jest.spyOn(loadFuse3Binding(), 'mount');
    session = await mount(mnt, fs, { fsname: 'memfs', subtype: 'memfs', defaultPermissions: true, conn: { readdirplus: true, maxWrite: 1 << 20 } });
    handle = nativeMount.mock.results[0].value as typeof handle;
    nativeMount.mockRestore();
    session.on('operationError', (error, op) => errors.push({ op, error }));
  });

  afterAll(async () => {
    if (session) await session.unmount();
    if (mnt && !mounted(mnt)) rmdirSync(mnt);
  });

  it('mounts: init ran, the connection negotiated readdirplus and 1 MiB writes', () => {
    expect(fs.initialised).toBe(true);
    expect(mounted(mnt)).toBe(true);
    expect(session.conn!.maxWrite).toBe(1 << 20);
    expect(session.wants('READDIRPLUS')).toBe(true);
    expect(session.wants('READDIRPLUS_AUTO')).toBe(false);
    expect(session.wants('FLOCK_LOCKS')).toBe(true);
    expect(session.wants('POSIX_LOCKS')).toBe(true);
    expect(readFileSync('/proc/self/mountinfo', 'utf8')).toMatch(new RegExp(`${mnt} .* fuse\\.memfs memfs`));
  });

  it('stat, ls -l, cat, echo >, mv, rm, mkdir, rmdir, ln -s, truncate and touch -d with ns', async () => {
    await sh(`mkdir ${mnt}/d && echo hello > ${mnt}/d/a.txt && echo world >> ${mnt}/d/a.txt`);
    expect(await sh(`cat ${mnt}/d/a.txt`)).toBe('hello\nworld\n');
    expect(fs.at('d/a.txt').data.toString()).toBe('hello\nworld\n');
    expect(await sh(`stat -c '%F %s %a %h' ${mnt}/d/a.txt ${mnt}/d`)).toBe('regular file 12 644 1\ndirectory 0 755 2\n');
    expect(await sh(`ls -l ${mnt}/d`)).toMatch(/-rw-r--r-- 1 root root 12 .* a\.txt/);

    await sh(`mv ${mnt}/d/a.txt ${mnt}/d/b.txt`);
    expect(await sh(`ls ${mnt}/d`)).toBe('b.txt\n');
    await sh(`ln -s b.txt ${mnt}/d/link && ln ${mnt}/d/b.txt ${mnt}/d/hard`);
    expect(await sh(`readlink ${mnt}/d/link; cat ${mnt}/d/link; stat -c %h ${mnt}/d/b.txt`)).toBe('b.txt\nhello\nworld\n2\n');

    await sh(`truncate -s 5 ${mnt}/d/b.txt`);
    expect(await sh(`cat ${mnt}/d/b.txt; echo; stat -c %s ${mnt}/d/b.txt`)).toBe('hello\n5\n');
    await sh(`truncate -s 8 ${mnt}/d/b.txt`);
    expect(fs.at('d/b.txt').data).toEqual(Buffer.from('hello\0\0\0'));

    // times with ns: both, then mtime alone (atime UTIME_OMIT), then now (UTIME_NOW)
    await sh(`touch -d '2001-02-03 04:05:06.123456789 UTC' ${mnt}/d/b.txt`);
    expect(await sh(`stat -c '%x|%y' ${mnt}/d/b.txt`)).toBe('2001-02-03 04:05:06.123456789 +0000|2001-02-03 04:05:06.123456789 +0000\n');
    await sh(`touch -m -d '2011-12-13 14:15:16.987654321 UTC' ${mnt}/d/b.txt`);
    expect(await sh(`stat -c '%x|%y' ${mnt}/d/b.txt`)).toBe('2001-02-03 04:05:06.123456789 +0000|2011-12-13 14:15:16.987654321 +0000\n');
    expect(fs.at('d/b.txt').mtimeNs).toBe(1323785716987654321n);
    const before = nowNs();
    await sh(`touch ${mnt}/d/b.txt`);
    expect(fs.at('d/b.txt').mtimeNs).toBeGreaterThanOrEqual(before);
    expect(fs.at('d/b.txt').atimeNs).toBeGreaterThanOrEqual(before);

    await sh(`chmod 600 ${mnt}/d/b.txt`);
    expect(await sh(`stat -c %a ${mnt}/d/b.txt`)).toBe('600\n');

    await sh(`rm ${mnt}/d/b.txt ${mnt}/d/link ${mnt}/d/hard`);
    expect(await sh(`ls -A ${mnt}/d`)).toBe('');
    expect((await shTry(`rmdir ${mnt}`)).code).not.toBe(0);
    await sh(`mkdir ${mnt}/d/e && rmdir ${mnt}/d/e ${mnt}/d`);
    expect(await sh(`ls -A ${mnt}`)).toBe('');
    expect(await sh(`df --output=size ${mnt} | tail -1`)).toMatch(/4000/);
  });

  it('fallocate, lseek (SEEK_DATA, SEEK_HOLE) and copy_file_range reach the operations; the caller comes with each request', async () => {
    await sh(`printf 0123456789 > ${mnt}/src && fallocate -l 8192 ${mnt}/src`);
    expect(fs.at('src').data.length).toBe(8192);
    const py = [
      'import os',
      `src = os.open("${mnt}/src", os.O_RDONLY)`,
      `dst = os.open("${mnt}/dst", os.O_WRONLY | os.O_CREAT, 0o644)`,
      'print(os.lseek(src, 2, os.SEEK_DATA), os.lseek(src, 0, os.SEEK_HOLE), os.copy_file_range(src, dst, 10, 0, 0))',
    ].join('\n');
    expect((await run('python3', ['-c', py], { encoding: 'utf8' })).stdout).toBe('2 8192 10\n');
    expect(fs.at('dst').data.toString()).toBe('0123456789');
    expect([fs.calls.fallocate, fs.calls.lseek, fs.calls.copyFileRange]).toEqual([1, 2, 1]);

    const child = spawn('sh', ['-c', `umask 027; exec mkdir ${mnt}/ctx`]);
    await new Promise((resolve) => child.on('exit', resolve));
    expect(fs.mkdirCtx).toMatchObject({ uid: 0, gid: 0, pid: child.pid, umask: 0o027 });
    expect(await sh(`stat -c %a ${mnt}/ctx`)).toBe('750\n'); // the kernel applied the umask
    await sh(`rm -r ${mnt}/src ${mnt}/dst ${mnt}/ctx`);
  });

  it('writes and reads back 3 MiB in 1 MiB requests', async () => {
    await sh(`dd if=/dev/urandom of=${mnt}/big bs=1M count=3 status=none`);
    const data = fs.at('big').data;
    expect(data.length).toBe(3 << 20);
    expect(fs.maxWrite).toBe(1 << 20);
    expect(await sh(`sha256sum < ${mnt}/big`)).toBe(`${createHash('sha256').update(data).digest('hex')}  -\n`);
    await sh(`rm ${mnt}/big`);
  });

  it('ls -l goes through readdirplus: no lookup per name, and counts not taken are given back', async () => {
    const dir = fs.add(ROOT_INO, 'many', S_IFDIR | 0o755);
    for (let i = 0; i < 200; i++) fs.add(dir.ino, `file-with-a-longish-name-${String(i).padStart(4, '0')}`, S_IFREG | 0o644, `${i}`);
    await sh(`stat ${mnt}/many > /dev/null`);
    const lookups = fs.calls.lookup ?? 0;
    const plus = fs.calls.readdirplus ?? 0;
    const listing = await sh(`ls -l ${mnt}/many`);
    expect(listing.split('\n').filter((l) => l.startsWith('-rw-r--r--'))).toHaveLength(200);
    expect((fs.calls.lookup ?? 0) - lookups).toBe(0);
    // more than one request: some entries did not fit and were given back through forget
    expect((fs.calls.readdirplus ?? 0) - plus).toBeGreaterThan(1);
    expect(fs.calls.readdir ?? 0).toBe(0);
    for (const ino of dir.children.values()) expect(fs.get(ino).lookups).toBe(1);
  });

  it('with 60 s timeouts, notifyInvalInode, notifyInvalEntry and notifyDelete make changes made elsewhere visible at once', async () => {
    const dir = fs.add(ROOT_INO, 'n', S_IFDIR | 0o755);
    const f = fs.add(dir.ino, 'f', S_IFREG | 0o644, 'v1\n');
    fs.add(dir.ino, 'gone', S_IFREG | 0o644, 'x');
    expect(await sh(`cat ${mnt}/n/f; stat -c %s ${mnt}/n/f; ls ${mnt}/n; stat ${mnt}/n/late 2>&1 || true`)).toMatch(/^v1\n3\nf\ngone\n.*No such file/);

    // changed elsewhere (the directory's mtime kept, so that nothing but a notification resets
    // the kernel's cached listing): the kernel's caches (pages and size, listing, negative and
    // positive entries) still answer
    f.data = Buffer.from('version two\n');
    f.mtimeNs = nowNs();
    fs.add(dir.ino, 'late', S_IFREG | 0o644, 'late\n', false);
    const gone = fs.remove(dir.ino, 'gone', false);
    expect(await sh(`cat ${mnt}/n/f; ls ${mnt}/n; stat ${mnt}/n/late 2>&1 || true; stat -c %s ${mnt}/n/gone`)).toMatch(/^v1\nf\ngone\n.*No such file.*\n1\n$/s);

    expect(await session.notifyInvalInode(f.ino)).toBe(true);
    expect(await sh(`cat ${mnt}/n/f; stat -c %s ${mnt}/n/f`)).toBe('version two\n12\n');
    expect(await session.notifyInvalEntry(dir.ino, 'late')).toBe(true);
    expect(await session.notifyDelete(dir.ino, gone.ino, 'gone')).toBe(true);
    expect(await session.notifyInvalInode(dir.ino)).toBe(true);
    expect(await sh(`cat ${mnt}/n/late; ls ${mnt}/n; stat ${mnt}/n/gone 2>&1 || true`)).toMatch(/^late\nf\nlate\n.*No such file/);
    // nothing cached for an inode the kernel does not know
    expect(await session.notifyInvalInode(123_456)).toBe(false);
    expect(await session.notifyInvalEntry(dir.ino, 'never-looked-up')).toBe(false);
  });

  it('notifyExpireEntry makes the kernel look a name up again and keeps the working directory of a process in it; notifyInvalEntry drops it', async () => {
    const top = fs.add(ROOT_INO, 'cwd-top', S_IFDIR | 0o755);
    fs.add(top.ino, 'inner', S_IFDIR | 0o755);
    // A shell whose working directory is the entry prints its path after each notification.
    const script = [
      'import os, sys',
      `os.chdir(${JSON.stringify(`${mnt}/cwd-top/inner`)})`,
      'for _ in range(2):',
      '    sys.stdin.readline()',
      '    try:',
      '        print(os.getcwd(), flush=True)',
      '    except OSError as e:',
      '        print(os.strerror(e.errno), flush=True)',
    ].join('\n');
    // getcwd(2) itself (a shell's pwd may rebuild the path by walking `..`).
    const shell = spawn('python3', ['-c', script], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    shell.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    shell.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
    await new Promise((r) => setTimeout(r, 300));
    const lookups = fs.calls.lookup ?? 0;
    expect(await session.notifyExpireEntry(top.ino, 'inner')).toBe(true);
    shell.stdin.write('\n');
    await waitUntil(() => out.split('\n').length > 1, 5000, 'the first pwd');
    expect(out.split('\n')[0]).toBe(`${mnt}/cwd-top/inner`);
    // Expired: the next path walk through it asks again.
    await sh(`stat ${mnt}/cwd-top/inner`);
    expect(fs.calls.lookup ?? 0).toBeGreaterThan(lookups);
    expect(await session.notifyInvalEntry(top.ino, 'inner')).toBe(true);
    shell.stdin.end('\n');
    await new Promise((r) => shell.once('close', r));
    expect(out.split('\n')[1]).toBe('No such file or directory');
  });

  it('a notification waits in the kernel for a lookup in progress on the directory, without blocking the event loop', async () => {
    const dir = fs.add(ROOT_INO, 'L', S_IFDIR | 0o755);
    fs.add(dir.ino, 'other', S_IFREG | 0o644, 'o');
    await sh(`stat ${mnt}/L/other > /dev/null`);
    fs.slowLookups.set('slow', null);
    const lookups = fs.calls.lookup ?? 0;
    const stat = shTry(`stat -c %F ${mnt}/L/slow`);
    await waitUntil(() => (fs.calls.lookup ?? 0) > lookups, 5000, 'the lookup of slow');
    // the kernel holds L's lock for the lookup: the invalidation of an entry of L waits for it
    let done = false;
    const inval = session.notifyInvalEntry(dir.ino, 'other').then((r) => ((done = true), r));
    let ticks = 0;
    const timer = setInterval(() => ticks++, 10);
    await new Promise((r) => setTimeout(r, 300));
    clearInterval(timer);
    expect(done).toBe(false);
    expect(ticks).toBeGreaterThan(10); // the event loop ran meanwhile
    fs.slowLookups.get('slow')!(); // the lookup answers (ENOENT), the directory is unlocked
    fs.slowLookups.delete('slow');
    expect(await inval).toBe(true);
    expect((await stat).out).toMatch(/No such file/);
  });

  it('forgets after drop_caches bring every lookup count back to 0', async () => {
    await sh(`mkdir -p ${mnt}/x/y && echo z > ${mnt}/x/y/z && ls -lR ${mnt} > /dev/null`);
    expect(fs.totalLookups()).toBeGreaterThan(200);
    const forgotten = fs.forgotten;
    await sh('sync; echo 2 > /proc/sys/vm/drop_caches');
    await waitUntil(() => fs.totalLookups() === 0, 15_000, 'every lookup count at 0');
    expect(fs.forgotten - forgotten).toBeGreaterThan(200);
    expect(fs.calls.forget).toBeGreaterThan(0);
    // inodes without names are gone once forgotten
    expect([...fs.nodes.values()].filter((n) => n.nlink <= 0)).toEqual([]);
  });

  it('an interrupted read (SIGINT, SIGKILL) delivers the interrupt; its late answer is dropped', async () => {
    const binding = loadFuse3Binding();
    const replyErr = jest.spyOn(binding, 'replyErr');
    try {
      const slow = fs.add(ROOT_INO, 'slow', S_IFREG | 0o644, 'never read');
      fs.hanging.add(slow.ino);
      for (const signal of ['SIGINT', 'SIGKILL'] as const) {
        const reads = fs.calls.read ?? 0;
        const interrupts = fs.interrupted.length;
        const cat = spawn('cat', [join(mnt, 'slow')], { stdio: 'ignore' });
        const exited = new Promise<NodeJS.Signals | null>((resolve) => cat.on('exit', (_code, sig) => resolve(sig)));
        await waitUntil(() => (fs.calls.read ?? 0) > reads, 5000, 'the read to reach the filesystem');
        cat.kill(signal);
        expect(await exited).toBe(signal);
        await waitUntil(() => fs.interrupted.length > interrupts, 5000, 'the interrupt');
        const id = fs.interrupted[fs.interrupted.length - 1];
        // answered EINTR once; another answer of that request sends nothing
        await waitUntil(() => replyErr.mock.calls.some((c) => c[1] === id && c[2] === 4), 5000, 'the EINTR answer');
        expect(binding.replyErr(handle, id, 0)).toBe(false);
      }
      fs.remove(ROOT_INO, 'slow');
    } finally {
      replyErr.mockRestore();
    }
  });

  it('flock and fcntl locks reach the operations', async () => {
    await sh(`echo lock > ${mnt}/locked`);
    await sh(`flock -x ${mnt}/locked -c true && flock -s -n ${mnt}/locked -c true`);
    // LOCK_EX (waiting), LOCK_SH | LOCK_NB; the close releases them (release with flockRelease)
    expect(fs.locks.filter((l) => l.op === 'flock').map((l) => l.flockOp)).toEqual([2, 1 | 4]);
    // (the kernel sends the release after close(2) has returned)
    await waitUntil(() => fs.locks.filter((l) => l.op === 'release').length === 2, 5000, 'two releases with flockRelease');
    const py = [
      'import fcntl, struct, sys',
      `f = open("${mnt}/locked", "r+")`,
      'fcntl.lockf(f, fcntl.LOCK_EX, 10, 5)',
      'fcntl.lockf(f, fcntl.LOCK_UN, 10, 5)',
      'fcntl.lockf(f, fcntl.LOCK_SH | fcntl.LOCK_NB)',
      'r = fcntl.fcntl(f, fcntl.F_GETLK, struct.pack("hhxxxxqqixxxx", fcntl.F_WRLCK, 0, 0, 0, 0))',
      'print(struct.unpack("hhxxxxqqixxxx", r)[0])',
    ].join('\n');
    expect((await run('python3', ['-c', py], { encoding: 'utf8' })).stdout).toBe('2\n'); // F_UNLCK: no conflict
    const setlks = fs.locks.filter((l) => l.op === 'setlk');
    expect(setlks.map((l) => [l.lock!.type, l.lock!.start, l.lock!.len, l.sleep])).toEqual(
      expect.arrayContaining([
        [1, 5, 10, true], // F_WRLCK over bytes 5..14, waiting (F_SETLKW)
        [2, 5, 10, true], // F_UNLCK (lockf unlocks with F_SETLKW)
        [0, 0, 0, false], // F_RDLCK to the end of the file (len 0), F_SETLK
      ]),
    );
    expect(fs.locks.some((l) => l.op === 'getlk')).toBe(true);
    expect(new Set(setlks.map((l) => typeof l.owner))).toEqual(new Set(['bigint']));
    await sh(`rm ${mnt}/locked`);
  });

  it('xattrs; an operation that throws answers EIO and is reported; a reply of the wrong shape answers EIO', async () => {
    await sh(`touch ${mnt}/xa`);
    const py = (code: string) => run('python3', ['-c', `import os\np = "${mnt}/xa"\n${code}`], { encoding: 'utf8' }).then((r) => r.stdout);
    expect(await py('os.setxattr(p, "user.k", b"value")\nprint(os.getxattr(p, "user.k"), os.listxattr(p))')).toBe("b'value' ['user.k']\n");
    expect(await py('try:\n  os.getxattr(p, "user.none")\nexcept OSError as e:\n  print(e.errno)')).toBe('61\n'); // ENODATA
    expect(await py('try:\n  os.getxattr(p, "user.boom")\nexcept OSError as e:\n  print(e.errno)')).toBe('5\n'); // EIO
    expect(errors.find((e) => e.op === 'getxattr')?.error).toEqual(new Error('boom'));
    await py('os.removexattr(p, "user.k")');
    expect(await py('print(os.listxattr(p))')).toBe('[]\n');
    await sh(`rm ${mnt}/xa`);

    // a lookup answered with attributes that are not numbers: the binding refuses them (EIO), and
    // the lookup count of the entry the kernel never got is given back
    const bad = fs.add(ROOT_INO, 'bad', S_IFREG | 0o644);
    const r = await shTry(`stat ${mnt}/bad`);
    expect(r.code).not.toBe(0);
    expect(r.out).toMatch(/Input\/output error/);
    expect(errors.find((e) => e.op === 'lookup')?.error).toEqual(new TypeError('mode must be a non-negative integer (number or bigint)'));
    expect(bad.lookups).toBe(0);
    fs.remove(ROOT_INO, 'bad');
  });
});

describeFuse3('libfuse 3 binding: sessions', () => {
  const dirs: string[] = [];
  const mountpoint = () => {
    const d = mkdtempSync(join(tmpdir(), 'svc-fuse3-'));
    dirs.push(d);
    return d;
  };

  afterAll(() => {
    for (const d of dirs) if (!mounted(d)) rmdirSync(d);
  });

  it('reports an unmount from outside (fusermount3 -u) and ends without hanging', async () => {
    const dir = mountpoint();
    const fs = new MemFs();
    const session = await mount(dir, fs);
    const events: UnmountedInfo[] = [];
    session.on('unmounted', (i) => events.push(i));
    expect(await sh(`echo hi > ${dir}/f && cat ${dir}/f`)).toBe('hi\n');
    await run('fusermount3', ['-u', dir]);
    const info = await session.ended;
    expect(info).toEqual({ reason: 'external' });
    expect(events).toEqual([{ reason: 'external' }]);
    expect(fs.destroyed).toBe(true);
    expect(mounted(dir)).toBe(false);
    // the session is over: unmount resolves at once, notifications find nothing cached
    expect(await session.unmount()).toEqual({ reason: 'external' });
    expect(await session.notifyInvalInode(ROOT_INO)).toBe(false);
  });

  it('runs two mounts in one process (one with the writeback cache and a spinning loop thread, one reading requests with splice)', async () => {
    const [a, b] = [mountpoint(), mountpoint()];
    const [fa, fb] = [new MemFs(), new MemFs()];
    const [sa, sb] = await Promise.all([
      mount(a, fa, { conn: { writebackCache: true }, spinUs: 20 }),
      mount(b, fb, { conn: { spliceRead: true, spliceWrite: true, spliceMove: true } }),
    ]);
    try {
      expect([sa.wants('WRITEBACK_CACHE'), sb.wants('WRITEBACK_CACHE'), sb.wants('SPLICE_READ')]).toEqual([true, false, true]);
      await sh(`echo one > ${a}/f && echo two > ${b}/f && cp ${a}/f ${b}/g && head -c 300000 /dev/zero >> ${b}/g && truncate -s 4 ${b}/g`);
      expect(await sh(`cat ${a}/f ${b}/f ${b}/g; ls ${a}; ls ${b}`)).toBe('one\ntwo\none\nf\nf\ng\n');
      expect(fa.at('f').data.toString()).toBe('one\n');
      expect(fb.at('g').data.toString()).toBe('one\n');
    } finally {
      expect(await Promise.all([sa.unmount(), sb.unmount({ lazy: true })])).toEqual([{ reason: 'unmount' }, { reason: 'unmount' }]);
    }
    expect(mounted(a) || mounted(b)).toBe(false);
  });

  it('a busy mount is detached on unmount; requests still waiting get ENOTCONN', async () => {
    const dir = mountpoint();
    const fs = new MemFs();
    const binding = loadFuse3Binding();
    const nativeMount = jest.spyOn(binding, 'mount');
    const session = await mount(dir, fs);
    const handle = nativeMount.mock.results[0].value as ReturnType<Fuse3Binding['mount']>;
    nativeMount.mockRestore();
    const slow = fs.add(ROOT_INO, 'slow', S_IFREG | 0o644, 'x');
    fs.hanging.add(slow.ino);
    const cat = run('cat', [join(dir, 'slow')], { encoding: 'utf8' }).then(
      () => 'read',
      (e: { stderr: string }) => e.stderr,
    );
    await waitUntil(() => (fs.calls.read ?? 0) > 0, 5000, 'the read');
    expect(await session.unmount()).toEqual({ reason: 'unmount' });
    expect(await cat).toMatch(/Transport endpoint is not connected/);
    expect(mounted(dir)).toBe(false);
    // the read answered at the end cannot be answered again
    expect(binding.replyBuf(handle, fs.readIds[0], Buffer.from('late'))).toBe(false);
  });

  it('answers ENOSYS for an operation the filesystem does not implement', async () => {
    const dir = mountpoint();
    const fs = new MemFs();
    const session = await mount(dir, { lookup: (p, n) => fs.lookup(p, n), getattr: (i) => fs.getattr(i) });
    try {
      const r = await shTry(`mkdir ${dir}/x`);
      expect(r.code).not.toBe(0);
      expect(r.out).toMatch(/Function not implemented/);
    } finally {
      await session.unmount();
    }
  });

  it('closes a session still mounted at process.exit(): no dead mount is left behind', async () => {
    const dir = mountpoint();
    const lib = join(__dirname, '..', 'dist', 'libs', 'fuse3', 'src');
    const script = [
      `const { mount } = require(${JSON.stringify(lib)});`,
      'const now = BigInt(Date.now()) * 1000000n;',
      'const attr = { ino: 1, mode: 0o40755, nlink: 2, uid: 0, gid: 0, size: 0, atimeNs: now, mtimeNs: now, ctimeNs: now };',
      `mount(${JSON.stringify(dir)}, { getattr: async () => ({ attr, attrTimeout: 0 }) }).then(() => {`,
      `  require('node:child_process').execFile('stat', ['-c', '%i %F', ${JSON.stringify(dir)}], (e, out) => { process.stdout.write(out); process.exit(0); });`,
      '});',
    ].join('\n');
    expect((await run(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 20_000 })).stdout).toBe('1 directory\n');
    expect(mounted(dir)).toBe(false);
    expect(await sh(`ls -A ${dir}`)).toBe('');
  });

  it('mounts and unmounts through fusermount3 as a user other than root', async () => {
    if (!existsSync('/usr/bin/setpriv')) return void process.stdout.write('fuse3 binding e2e: non-root mount skipped: setpriv (util-linux) is missing\n');
    const dir = mountpoint();
    chownSync(dir, 65534, 65534);
    const lib = join(__dirname, '..', 'dist', 'libs', 'fuse3', 'src');
    const script = [
      `const { mount } = require(${JSON.stringify(lib)});`,
      'const now = BigInt(Date.now()) * 1000000n;',
      'const attr = { ino: 1, mode: 0o40755, nlink: 2, uid: 65534, gid: 65534, size: 0, atimeNs: now, mtimeNs: now, ctimeNs: now };',
      `mount(${JSON.stringify(dir)}, { getattr: async () => ({ attr, attrTimeout: 0 }) }).then((s) => {`,
      `  require('node:child_process').execFile('stat', ['-c', '%i %U', ${JSON.stringify(dir)}], async (e, out) => {`,
      '    process.stdout.write(`${process.getuid()} ${out}`);',
      '    process.stdout.write(JSON.stringify(await s.unmount()));',
      '  });',
      '});',
    ].join('\n');
    const r = await run('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, '-e', script], { encoding: 'utf8', timeout: 20_000 });
    expect(r.stdout).toBe('65534 1 nobody\n{"reason":"unmount"}');
    expect(mounted(dir)).toBe(false);
  });

  it('refuses a mount point that is not a directory, and unknown options, with the reason', async () => {
    await expect(mount('/nonexistent/dir', new MemFs())).rejects.toThrow(/mount point \/nonexistent\/dir: ENOENT/);
    await expect(mount(mountpoint(), new MemFs(), { options: ['no_such_option'] })).rejects.toThrow(/fuse_session_new: .*unknown option/);
  });
});
