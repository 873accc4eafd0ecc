import { EventEmitter } from 'node:events';
import { randomBytes } from 'node:crypto';
import { Attr, Errno, FsError, GetlkReply, LockPayload, OpenFlags, WriteThen } from '@svc/protocol/wire';
import { FramedData, framedBytes, isFramedData } from '@svc/client';
import type { WorkspaceRouter, WriteThenResult } from '../router/workspace-router';
import { FuseFs } from './fuse-fs';
import { AttrReply, DirEntryPlus, Entry, RequestContext, SETATTR, SetattrValues } from '@svc/fuse3';
import { ROOT_INO } from './inode-table';

const MIB = 1024 * 1024;
const KERNEL_READ = 128 * 1024;

function attr(id: number, size: number, ct = 1, kind: 1 | 2 = 1): Attr {
  return { id, k: kind, m: kind === 2 ? 0o40755 : 0o100644, n: 1, u: 0, g: 0, sz: size, at: 0, mt: ct, ct, gen: 1 };
}

/** A router double: one directory `/w` holding files with the given contents. */
class FakeRouter extends EventEmitter {
  readonly files = new Map<string, { data: Buffer; attr: Attr }>();
  readonly calls = { open: 0, read: [] as Array<[number, number]>, readdirAll: 0, getattr: 0, release: 0 };
  readonly writes: Array<{ off: number; data: Buffer; framed: boolean }> = [];
  writeError: Error | null = null;
  /** How long the write that arrives `n`th (from 0) waits before it is applied, ms. */
  writeDelayMs: (n: number) => number = () => 0;
  private writesArrived = 0;
  /** Router handle -> its file's path (writes are applied to that file's content). */
  private readonly paths = new Map<number, string>();
  /** Open flags of each create, in order. */
  readonly creates: number[] = [];
  private nextFh = 100;
  /** Open handles keep the file they opened, as a descriptor does. */
  private readonly handles = new Map<number, { data: Buffer }>();

  /** One mount path, `/w` (for the inode numbers). */
  readonly mountPaths = ['/w'];
  resolve(path: string) {
    return path === '/w' || path.startsWith('/w/')
      ? { kind: 'mount', path, mountPath: '/w', rel: path.slice(3) }
      : { kind: 'synthetic', path, children: ['w'] };
  }
  add(path: string, data: Buffer, ct = 1): void {
    this.files.set(path, { data, attr: attr(this.files.size + 10, data.length, ct) });
  }
  async getattr(path: string): Promise<Attr> {
    this.calls.getattr++;
    if (path === '/w') return attr(2, 0, 1, 2);
    const f = this.files.get(path);
    if (!f) throw new FsError(Errno.ENOENT);
    return f.attr;
  }
  async readdirAll(dir: string) {
    this.calls.readdirAll++;
    return [...this.files.entries()].filter(([p]) => p.startsWith(`${dir}/`)).map(([p, f]) => ({ name: p.slice(dir.length + 1), attr: f.attr }));
  }
  async open(path: string): Promise<{ fh: number; id: number }> {
    this.calls.open++;
    const f = this.files.get(path);
    if (!f) throw new FsError(Errno.ENOENT);
    const fh = this.nextFh++;
    this.handles.set(fh, f);
    this.paths.set(fh, path);
    return { fh, id: f.attr.id };
  }
  async create(path: string, _mode: number, flags: number): Promise<{ fh: number; attr: Attr }> {
    this.creates.push(flags);
    if (flags & OpenFlags.O_EXCL && this.files.has(path)) throw new FsError(Errno.EEXIST);
    this.add(path, Buffer.alloc(0));
    return { ...(await this.open(path)), attr: this.files.get(path)!.attr };
  }
  async read(fh: number, off: number, len: number): Promise<{ data: Buffer; eof: boolean }> {
    this.calls.read.push([off, len]);
    const { data } = this.handles.get(fh)!;
    const out = Buffer.from(data.subarray(off, off + len));
    await new Promise((r) => setImmediate(r));
    return { data: out, eof: off + out.length >= data.length && out.length < len };
  }
  async write(fh: number, off: number, input: Uint8Array | FramedData): Promise<number> {
    if (this.writeError) throw this.writeError;
    const data = Buffer.from(isFramedData(input) ? framedBytes(input) : input);
    const delay = this.writeDelayMs(this.writesArrived++);
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    this.writes.push({ off, data, framed: isFramedData(input) });
    // Applied to the file (the content every handle of it reads), as on the node.
    const f = this.files.get(this.paths.get(fh) ?? '');
    if (f) {
      const grown = Buffer.alloc(Math.max(f.data.length, off + data.length));
      f.data.copy(grown);
      data.copy(grown, off);
      f.data = grown;
      f.attr = { ...f.attr, sz: grown.length };
      for (const h of this.handles.values()) if (h === f) h.data = grown;
    }
    return data.length;
  }
  /** Whether the node grants `write_then` (else {@link writeThen} sends nothing and answers null). */
  grantsWriteThen = false;
  /** The writes that carried what follows them, and how many writes had arrived with them. */
  readonly carried: Array<{ then: WriteThen; writesBefore: number }> = [];
  fsyncs = 0;
  async writeThen(fh: number, off: number, input: FramedData, then: WriteThen): Promise<WriteThenResult | null> {
    if (!this.grantsWriteThen) return null;
    await this.write(fh, off, input);
    this.carried.push({ then, writesBefore: this.writes.length });
    return then.set ? { done: true, attr: this.files.get(this.paths.get(fh) ?? '')!.attr } : { done: true };
  }
  async fsync(): Promise<void> {
    this.fsyncs++;
  }
  dropOpenData(): void {}
  /** A node that cannot tell the attributes of an open file (the mount falls back to the last it saw). */
  async fgetattr(): Promise<Attr> {
    throw new FsError(Errno.ENOTSUP);
  }
  identityAt(): 'caller' | 'node' {
    return 'caller';
  }
  /** Lock requests, in order: the router handle, the payload, and how many writes had arrived before. */
  readonly lockCalls: Array<{ fh: number; payload: LockPayload; writesBefore: number }> = [];
  async lock(fh: number, payload: LockPayload): Promise<void> {
    this.lockCalls.push({ fh, payload, writesBefore: this.writes.length });
  }
  readonly xattrs = new Map<string, Map<string, Buffer>>();
  getxattrCalls = 0;
  async getxattr(path: string, name: string): Promise<{ n: number; value?: Buffer }> {
    this.getxattrCalls++;
    const v = this.xattrs.get(path)?.get(name);
    if (!v) throw new FsError(Errno.ENODATA);
    return { n: v.length, value: v };
  }
  async setxattr(path: string, name: string, value: Buffer): Promise<void> {
    if (!this.xattrs.has(path)) this.xattrs.set(path, new Map());
    this.xattrs.get(path)!.set(name, value);
  }
  async getlk(): Promise<GetlkReply> {
    return { type: 'wr', start: 0, len: 10, owner_here: '1', pid: 77 };
  }
  async rename(from: string, to: string): Promise<void> {
    const f = this.files.get(from);
    if (!f) throw new FsError(Errno.ENOENT);
    this.files.delete(from);
    this.files.set(to, f);
    for (const [fh, p] of this.paths) if (p === from) this.paths.set(fh, to);
  }
  readonly setattrs: Array<{ path: string; writesBefore: number }> = [];
  async setattr(path: string): Promise<Attr> {
    this.setattrs.push({ path, writesBefore: this.writes.length });
    return this.files.get(path)!.attr;
  }
  async release(): Promise<void> {
    this.calls.release++;
  }
  ackBarrier: (() => Promise<unknown>) | null = null;
  setAckBarrier(barrier: () => Promise<unknown>): void {
    this.ackBarrier = barrier;
  }
}

function setup(options: ConstructorParameters<typeof FuseFs>[1] = {}) {
  const router = new FakeRouter();
  const fs = new FuseFs(router as unknown as WorkspaceRouter, { pollUs: 0, ...options });
  const ops = fs.operations;
  let nextRequest = 1;
  const ctx = () => new RequestContext(nextRequest++, 0, 0, 0, 0);
  /** The kernel inode of `path`, known to the inode table without asking the router (as after a lookup). */
  const ino = (path: string): number => {
    let cur = ROOT_INO;
    for (const seg of path.split('/').filter(Boolean)) cur = fs.inodes.child(cur, seg)?.ino ?? fs.inodes.lookup(cur, seg).ino;
    return cur;
  };
  const parentOf = (path: string) => ({ parent: ino(path.slice(0, path.lastIndexOf('/')) || '/'), name: path.slice(path.lastIndexOf('/') + 1) });
  /** Calls an operation by path, as the kernel would by inode; file handles as numbers. */
  const call = async <T>(op: string, path: string, ...args: unknown[]): Promise<T> => {
    const c = ctx();
    switch (op) {
      case 'getattr':
        return (await ops.getattr(ino(path), undefined, c)) as T;
      case 'open':
        return (await ops.open(ino(path), args[0] as number, c)).fh as T;
      case 'lookup': {
        const { parent, name } = parentOf(path);
        return (await ops.lookup(parent, name, c)) as T;
      }
      case 'create': {
        const { parent, name } = parentOf(path);
        return (await ops.create(parent, name, args[0] as number, args[1] as number, c)).open.fh as T;
      }
      case 'flush':
        return (await ops.flush(ino(path), args[0] as number, 0n, c)) as T;
      case 'release':
        return (await ops.release(ino(path), args[0] as number, { flags: 0, flush: false, flockRelease: false, lockOwner: 0n }, c)) as T;
      case 'unlink': {
        const { parent, name } = parentOf(path);
        return (await ops.unlink(parent, name, c)) as T;
      }
      case 'rename': {
        const from = parentOf(path);
        const to = parentOf(args[0] as string);
        return (await ops.rename(from.parent, from.name, to.parent, to.name, 0, c)) as T;
      }
      case 'readdirplus':
        return (await ops.readdirplus(ino(path), 0, 0, 1 << 20, c)) as T;
      case 'readdir': {
        // The names readdirplus lists from offset 0 (past `.` and `..`), as the kernel reads a directory.
        const entries = await ops.readdirplus(ino(path), 0, 0, 1 << 20, c);
        return entries.map((e) => e.name).filter((n) => n !== '.' && n !== '..') as T;
      }
      case 'setattr':
        return (await ops.setattr(ino(path), args[0] as number, args[1] as SetattrValues, undefined, c)) as T;
      default:
        throw new Error(`no such operation in this test: ${op}`);
    }
  };
  /** read/write by path: the byte count. */
  const count = async (op: 'read' | 'write', path: string, fd: number, buf: Buffer, len: number, pos: number): Promise<number> => {
    if (op === 'write') return ops.write(ino(path), fd, pos, buf.subarray(0, len), { flags: 0, writepage: false }, ctx());
    const data = await ops.read(ino(path), fd, pos, len, ctx());
    data.copy(buf);
    return data.length;
  };
  return { router, fs, ops, call, count };
}

/** setattr values with only the times given (ns) meaningful. */
function times(atimeNs: bigint, mtimeNs: bigint): SetattrValues {
  return { mode: 0, uid: 0, gid: 0, size: 0, atimeNs, mtimeNs, ctimeNs: 0n };
}

describe('FuseFs read path', () => {
  it('reads a file byte-exact from 1 MiB chunks while the kernel reads arrive out of order', async () => {
    const { router, call, count } = setup();
    const data = randomBytes(3 * MIB + 123);
    router.add('/w/big', data);
    await call('getattr', '/w/big');
    const fd = await call<number>('open', '/w/big', OpenFlags.O_RDONLY);
    const out = Buffer.alloc(data.length);
    const pieces = Math.ceil(data.length / KERNEL_READ);
    for (let k = 0; k < pieces; k += 4) {
      // The kernel's read-ahead: a few requests in flight, answered in any order.
      const order = [k + 1, k, k + 3, k + 2].filter((i) => i < pieces);
      await Promise.all(
        order.map(async (i) => {
          const buf = Buffer.alloc(KERNEL_READ);
          const n = await count('read', '/w/big', fd, buf, KERNEL_READ, i * KERNEL_READ);
          buf.copy(out, i * KERNEL_READ, 0, n);
        }),
      );
    }
    expect(out.equals(data)).toBe(true);
    // Every byte fetched once, in aligned 1 MiB requests, nothing past the end.
    expect(router.calls.read.every(([off, len]) => off % MIB === 0 && len === MIB)).toBe(true);
    expect(new Set(router.calls.read.map(([off]) => off)).size).toBe(router.calls.read.length);
    expect(router.calls.read.length).toBe(4);
  });

  it('costs one request for a small file, and none past its end', async () => {
    const { router, call, count } = setup();
    router.add('/w/small', Buffer.from('x'.repeat(1000)));
    await call('getattr', '/w/small');
    const fd = await call<number>('open', '/w/small', OpenFlags.O_RDONLY);
    const buf = Buffer.alloc(KERNEL_READ);
    expect(await count('read', '/w/small', fd, buf, KERNEL_READ, 0)).toBe(1000);
    expect(await count('read', '/w/small', fd, buf, KERNEL_READ, 1000)).toBe(0);
    await new Promise((r) => setTimeout(r, 10));
    expect(router.calls.read).toEqual([[0, MIB]]);
  });
});

describe('FuseFs caches', () => {
  it('drops only what was learnt through the mount whose endpoint changed', async () => {
    const { router, call } = setup();
    router.add('/w/f', Buffer.from('hello'));
    await call('getattr', '/w/f');
    expect(router.calls.getattr).toBe(1);
    // another mount changed endpoint, or a failover elsewhere: /w stays cached
    router.emit('topology', { mountPaths: ['/w', '/x'], added: [], removed: [], changed: ['/x'] });
    router.emit('failover', { mount_path: '/x', from: 'a', to: 'b', cause: null });
    router.emit('unavailable', { mount_path: '/wx', cause: 'gone' });
    await call('getattr', '/w/f');
    expect(router.calls.getattr).toBe(1);
    // a reorder that kept the serving endpoint is no change either
    router.emit('topology', { mountPaths: ['/w', '/x'], added: [], removed: [], changed: [] });
    await call('getattr', '/w/f');
    expect(router.calls.getattr).toBe(1);
    // /w itself: its entries are fetched again
    router.emit('failover', { mount_path: '/w', from: 'a', to: 'b', cause: null });
    await call('getattr', '/w/f');
    expect(router.calls.getattr).toBe(2);
    router.emit('topology', { mountPaths: ['/w'], added: [], removed: ['/x'], changed: [] });
    await call('getattr', '/w/f');
    expect(router.calls.getattr).toBe(3);
  });

  it('opens a file for reading on the node again only when its attributes changed', async () => {
    const { router, call, count } = setup();
    router.add('/w/f', Buffer.from('hello'));
    await call('getattr', '/w/f');
    const a = await call<number>('open', '/w/f', OpenFlags.O_RDONLY);
    expect(router.calls.open).toBe(1);
    await call('release', '/w/f', a);
    // Opened before, attributes unchanged: no round trip until a read needs the node.
    const b = await call<number>('open', '/w/f', OpenFlags.O_RDONLY);
    expect(router.calls.open).toBe(1);
    const buf = Buffer.alloc(16);
    expect(await count('read', '/w/f', b, buf, 16, 0)).toBe(5);
    expect(router.calls.open).toBe(2);
    await call('release', '/w/f', b);
    // Changed on the node (the node's push names the path): opened at once again.
    router.files.get('/w/f')!.attr = attr(10, 5, 2);
    router.emit('inval', { paths: ['/w/f'] });
    await call('getattr', '/w/f');
    await call<number>('open', '/w/f', OpenFlags.O_RDONLY);
    expect(router.calls.open).toBe(3);
  });

  it('opens a lazily opened file on the node before this mount removes it, so it stays readable', async () => {
    const { router, call, count } = setup();
    router.add('/w/f', Buffer.from('kept'));
    await call('getattr', '/w/f');
    await call('release', '/w/f', await call<number>('open', '/w/f', OpenFlags.O_RDONLY));
    const fd = await call<number>('open', '/w/f', OpenFlags.O_RDONLY);
    expect(router.calls.open).toBe(1);
    (router as unknown as { unlink: (p: string) => Promise<void> }).unlink = async (p: string) => {
      expect(router.calls.open).toBe(2);
      router.files.delete(p);
    };
    await call('unlink', '/w/f');
    const buf = Buffer.alloc(8);
    expect(await count('read', '/w/f', fd, buf, 8, 0)).toBe(4);
    expect(buf.toString('utf8', 0, 4)).toBe('kept');
    expect(router.calls.open).toBe(2);
  });

  it('answers readdir from its listing until the directory changes', async () => {
    const { router, call } = setup();
    router.add('/w/a', Buffer.from('a'));
    router.add('/w/b', Buffer.from('b'));
    const ls = () => call<string[]>('readdir', '/w');
    expect(await ls()).toEqual(['a', 'b']);
    expect(await ls()).toEqual(['a', 'b']);
    expect(router.calls.readdirAll).toBe(1);
    // The listing gave the entries' attributes: no getattr round trip for them.
    await call('getattr', '/w/a');
    expect(router.calls.getattr).toBe(0);
    router.add('/w/c', Buffer.from('c'));
    router.emit('inval_dir', { paths: ['/w'] });
    expect(await ls()).toEqual(['a', 'b', 'c']);
    expect(router.calls.readdirAll).toBe(2);
  });
});

describe('FuseFs inode identity', () => {
  const c = () => new RequestContext(1000, 0, 0, 0, 0);

  it('gives a name that now stands for another file a new inode; the old one answers fstat while open (no link left), else ESTALE', async () => {
    const { router, fs, ops } = setup();
    router.add('/w/f', Buffer.from('one'));
    const w = (await ops.lookup(ROOT_INO, 'w', c())).ino;
    const old = await ops.lookup(w, 'f', c());
    const { fh } = await ops.open(old.ino, OpenFlags.O_RDONLY, c());
    // Replaced by a rename on the node: another node id under the same name.
    router.files.set('/w/f', { data: Buffer.from('two!'), attr: attr(99, 4) });
    router.emit('inval', { paths: ['/w/f'], what: 'all' });
    const fresh = await ops.lookup(w, 'f', c());
    expect(fresh.ino).not.toBe(old.ino);
    expect(fresh.attr?.size).toBe(4);
    const fstat = await ops.getattr(old.ino, undefined, c());
    expect(fstat.attr.size).toBe(3);
    expect(fstat.attr.nlink).toBe(0);
    await ops.release(old.ino, fh, { flags: 0, flush: false, flockRelease: false, lockOwner: 0n }, c());
    await expect(ops.getattr(old.ino, undefined, c())).rejects.toMatchObject({ errno: Errno.ESTALE });
    expect(fs.inodes.pathOf(fresh.ino)).toBe('/w/f');
  });

  it('keeps the inode of a mount path answered as a synthetic directory (id 0) while its node is away', async () => {
    const { router, ops } = setup();
    router.add('/w/f', Buffer.from('one'));
    const w = await ops.lookup(ROOT_INO, 'w', c());
    const f = await ops.lookup(w.ino, 'f', c());
    const real = router.getattr.bind(router);
    router.getattr = async (path: string) => (path === '/w' ? attr(0, 0, 1, 2) : real(path));
    router.emit('inval', { paths: ['/w'], what: 'all' });
    expect((await ops.lookup(ROOT_INO, 'w', c())).ino).toBe(w.ino);
    router.getattr = real;
    router.emit('inval', { paths: ['/w'], what: 'all' });
    expect((await ops.lookup(ROOT_INO, 'w', c())).ino).toBe(w.ino);
    expect((await ops.getattr(f.ino, undefined, c())).attr.size).toBe(3);
  });
});

describe('FuseFs write path', () => {
  it('gathers 128 KiB writes into 1 MiB framed requests, byte-exact', async () => {
    const { router, call, count } = setup();
    const fd = await call<number>('create', '/w/out', 0o644, OpenFlags.O_RDWR | OpenFlags.O_CREAT);
    const data = randomBytes(10 * KERNEL_READ + 777);
    for (let pos = 0; pos < data.length; pos += KERNEL_READ) {
      const piece = data.subarray(pos, Math.min(data.length, pos + KERNEL_READ));
      expect(await count('write', '/w/out', fd, Buffer.from(piece), piece.length, pos)).toBe(piece.length);
    }
    await call('flush', '/w/out', fd);
    const sorted = [...router.writes].sort((x, y) => x.off - y.off);
    expect(sorted.map((w) => [w.off, w.data.length])).toEqual([
      [0, MIB],
      [MIB, data.length - MIB],
    ]);
    expect(sorted.every((w) => w.framed)).toBe(true);
    expect(Buffer.concat(sorted.map((w) => w.data)).equals(data)).toBe(true);
  });

  it('reports a failed background write at flush', async () => {
    const { router, call, count } = setup();
    const fd = await call<number>('create', '/w/out', 0o644, OpenFlags.O_RDWR | OpenFlags.O_CREAT);
    router.writeError = new FsError(Errno.ENOSPC);
    await count('write', '/w/out', fd, Buffer.alloc(100), 100, 0);
    await expect(call('flush', '/w/out', fd)).rejects.toMatchObject({ errno: Errno.ENOSPC });
  });
});

describe('FuseFs one order per file', () => {
  it('a read through another handle sees what this mount wrote before, still pending in write-behind', async () => {
    const { router, call, count } = setup();
    const fd = await call<number>('create', '/w/pack', 0o644, OpenFlags.O_RDWR | OpenFlags.O_CREAT);
    const data = randomBytes(300 * 1024 + 41);
    for (let pos = 0; pos < data.length; pos += 64 * 1024) {
      const piece = data.subarray(pos, Math.min(data.length, pos + 64 * 1024));
      await count('write', '/w/pack', fd, Buffer.from(piece), piece.length, pos);
    }
    // Not flushed yet: a write-behind mount holds (part of) it.
    expect(router.writes.reduce((n, w) => n + w.data.length, 0)).toBeLessThan(data.length);
    const reader = await call<number>('open', '/w/pack', OpenFlags.O_RDONLY);
    const buf = Buffer.alloc(data.length + 100);
    const n = await count('read', '/w/pack', reader, buf, buf.length, 0);
    expect(n).toBe(data.length);
    expect(buf.subarray(0, n).equals(data)).toBe(true);
  });

  it('a lookup of a file with writes pending answers the size they make, as getattr does; readdirplus leaves the file to a lookup', async () => {
    const { router, call, count } = setup();
    const fd = await call<number>('create', '/w/grow', 0o644, OpenFlags.O_WRONLY | OpenFlags.O_CREAT);
    const data = randomBytes(MIB + 1000);
    for (let pos = 0; pos < data.length; pos += 128 * 1024) {
      const piece = data.subarray(pos, Math.min(data.length, pos + 128 * 1024));
      await count('write', '/w/grow', fd, Buffer.from(piece), piece.length, pos);
    }
    expect(router.files.get('/w/grow')!.data.length).toBeLessThan(data.length);
    // The kernel dropped the name (a push): the lookup it sends sets the inode's size.
    const entry = await call<Entry>('lookup', '/w/grow');
    expect(entry.attr?.size).toBe(data.length);
    expect(router.files.get('/w/grow')!.data.length).toBe(data.length);
    // A listing read while writes are pending: no attributes for the file being written (the
    // kernel keeps its own size of it, or looks it up).
    await count('write', '/w/grow', fd, Buffer.from('tail'), 4, data.length);
    const listed = await call<DirEntryPlus[]>('readdirplus', '/w');
    const grow = listed.find((e) => e.name === 'grow');
    expect(grow?.entry).toBeUndefined();
    expect(grow?.ino).toBeGreaterThan(0);
    const got = await call<AttrReply>('getattr', '/w/grow');
    expect(got.attr.size).toBe(data.length + 4);
  });

  it('a handle follows a rename of its file: a read of the new name sees its pending writes', async () => {
    const { call, count } = setup();
    const fd = await call<number>('create', '/w/old', 0o644, OpenFlags.O_RDWR | OpenFlags.O_CREAT);
    await count('write', '/w/old', fd, Buffer.from('pending'), 7, 0);
    await call('rename', '/w/old', '/w/new');
    await count('write', '/w/new', fd, Buffer.from(' bytes'), 6, 7);
    const reader = await call<number>('open', '/w/new', OpenFlags.O_RDONLY);
    const buf = Buffer.alloc(64);
    const n = await count('read', '/w/new', reader, buf, buf.length, 0);
    expect(buf.subarray(0, n).toString()).toBe('pending bytes');
  });

  it("a write's error goes to the writer's close, not to another handle that made it flush", async () => {
    const { router, call, count } = setup();
    const fd = await call<number>('create', '/w/full', 0o644, OpenFlags.O_WRONLY | OpenFlags.O_CREAT);
    router.writeError = new FsError(Errno.ENOSPC);
    await count('write', '/w/full', fd, Buffer.alloc(100), 100, 0);
    await call('getattr', '/w/full');
    const reader = await call<number>('open', '/w/full', OpenFlags.O_RDONLY);
    await count('read', '/w/full', reader, Buffer.alloc(10), 10, 0);
    await expect(call('flush', '/w/full', fd)).rejects.toMatchObject({ errno: Errno.ENOSPC });
  });

  it('a setattr of times comes after the pending writes, so no later flush moves mtime', async () => {
    const { router, call, count } = setup();
    const fd = await call<number>('create', '/w/t', 0o644, OpenFlags.O_WRONLY | OpenFlags.O_CREAT);
    await count('write', '/w/t', fd, Buffer.alloc(1000, 1), 1000, 0);
    expect(router.writes).toHaveLength(0);
    await call('setattr', '/w/t', SETATTR.ATIME | SETATTR.MTIME, times(1_000_000_000n, 2_000_000_000n));
    expect(router.setattrs).toEqual([{ path: '/w/t', writesBefore: 1 }]);
  });

  it('a setattr of times after writes rides on the last write when the node grants write_then', async () => {
    const { router, call, count } = setup();
    router.grantsWriteThen = true;
    const fd = await call<number>('create', '/w/t', 0o644, OpenFlags.O_WRONLY | OpenFlags.O_CREAT);
    await count('write', '/w/t', fd, Buffer.alloc(1000, 1), 1000, 0);
    await call('setattr', '/w/t', SETATTR.ATIME | SETATTR.MTIME, times(1_000_000_000n, 2_000_000_000n));
    expect({ setattrs: router.setattrs, carried: router.carried }).toEqual({
      setattrs: [],
      carried: [{ then: { set: { at: 1_000_000_000, mt: 2_000_000_000 } }, writesBefore: 1 }],
    });
    // Nothing pending: a setattr is its own request.
    await call('setattr', '/w/t', SETATTR.MTIME, times(0n, 3_000_000_000n));
    expect(router.setattrs).toEqual([{ path: '/w/t', writesBefore: 1 }]);
  });

  it('an fsync after writes rides on the last write; with two writing handles, or a write that failed, it does not', async () => {
    const { router, call, count, ops } = setup();
    router.grantsWriteThen = true;
    const fsync = (path: string, fd: number) => ops.fsync(0, fd, false, new RequestContext(900 + fd, 0, 0, 0, 0));
    const a = await call<number>('create', '/w/s', 0o644, OpenFlags.O_RDWR | OpenFlags.O_CREAT);
    await count('write', '/w/s', a, Buffer.from('saved'), 5, 0);
    await fsync('/w/s', a);
    expect({ carried: router.carried, fsyncs: router.fsyncs }).toEqual({ carried: [{ then: { sync: true }, writesBefore: 1 }], fsyncs: 0 });
    const b = await call<number>('open', '/w/s', OpenFlags.O_WRONLY);
    await count('write', '/w/s', a, Buffer.from('A'), 1, 0);
    await count('write', '/w/s', b, Buffer.from('B'), 1, 1);
    await fsync('/w/s', a);
    expect({ carried: router.carried.length, writes: router.writes.length, fsyncs: router.fsyncs }).toEqual({ carried: 1, writes: 3, fsyncs: 1 });
    router.writeError = new FsError(Errno.ENOSPC);
    await count('write', '/w/s', a, Buffer.from('full'), 4, 0);
    await expect(fsync('/w/s', a)).rejects.toMatchObject({ errno: Errno.ENOSPC });
    expect(router.fsyncs).toBe(1);
  });

  it('a setattr of one time (the other UTIME_OMIT) sets only that one', async () => {
    const { router, call } = setup();
    router.add('/w/x', Buffer.from('x'));
    const seen: object[] = [];
    router.setattr = async (path: string, a?: object) => {
      seen.push(a ?? {});
      return router.files.get(path)!.attr;
    };
    await call('setattr', '/w/x', SETATTR.MTIME, times(0n, 1_500_000_000_123_000_000n));
    await call('setattr', '/w/x', SETATTR.ATIME, times(1_400_000_000_000_000_000n, 0n));
    expect(seen).toEqual([{ mt: 1_500_000_000_123_000_000 }, { at: 1_400_000_000_000_000_000 }]);
  });

  it('create passes the open flags (O_EXCL, O_APPEND) to the node', async () => {
    const { router, call } = setup();
    router.add('/w/lock', Buffer.alloc(0));
    await expect(call('create', '/w/lock', 0o644, OpenFlags.O_WRONLY | OpenFlags.O_CREAT | OpenFlags.O_EXCL)).rejects.toMatchObject({ errno: Errno.EEXIST });
    await call('create', '/w/log', 0o644, OpenFlags.O_WRONLY | OpenFlags.O_CREAT | OpenFlags.O_APPEND);
    expect(router.creates).toEqual([OpenFlags.O_WRONLY | OpenFlags.O_CREAT | OpenFlags.O_EXCL, OpenFlags.O_WRONLY | OpenFlags.O_CREAT | OpenFlags.O_APPEND]);
  });

  it('an O_APPEND handle sends its writes one at a time, in order', async () => {
    const { router, call, count } = setup();
    // Later writes are applied faster: only writes sent one at a time stay in order.
    router.writeDelayMs = (n) => Math.max(0, 30 - 5 * n);
    const fd = await call<number>('create', '/w/app', 0o644, OpenFlags.O_WRONLY | OpenFlags.O_CREAT | OpenFlags.O_APPEND);
    const data = randomBytes(5 * MIB + 3);
    for (let pos = 0; pos < data.length; pos += KERNEL_READ) {
      const piece = data.subarray(pos, Math.min(data.length, pos + KERNEL_READ));
      await count('write', '/w/app', fd, Buffer.from(piece), piece.length, pos);
    }
    await call('flush', '/w/app', fd);
    // In arrival order (not sorted): each applied after the one before it.
    expect(router.writes.map((w) => w.off)).toEqual([0, MIB, 2 * MIB, 3 * MIB, 4 * MIB, 5 * MIB]);
    expect(Buffer.concat(router.writes.map((w) => w.data)).equals(data)).toBe(true);
  });
});

describe('FuseFs locks', () => {
  const lock = (type: number, start = 0, len = 0) => ({ type, whence: 0, start, len, pid: 0 });
  const ctxOf = (id: number) => new RequestContext(id, 0, 0, 4242, 0);
  const release = (owner: bigint | null) => ({ flags: 0, flush: false, flockRelease: owner !== null, lockOwner: owner ?? 0n });

  it("sends locks to the node, releases an owner's POSIX locks at its close and a flock at the end of the description", async () => {
    const { router, fs, ops, call } = setup();
    router.add('/w/db', Buffer.from('x'.repeat(100)));
    await call('getattr', '/w/db');
    const ino = fs.inodes.find('/w/db')!.ino;
    const fd = await call<number>('open', '/w/db', OpenFlags.O_RDWR);
    await ops.setlk(ino, fd, 0xabn, lock(1, 10, 5), false, ctxOf(1));
    expect(router.lockCalls.map((c) => c.payload)).toEqual([{ kind: 'posix', type: 'wr', start: 10, len: 5, owner: 'ab', wait: false, pid: 4242 }]);
    // A close by another owner sends nothing; the owner's close releases its locks.
    await ops.flush(ino, fd, 0xcdn, ctxOf(2));
    expect(router.lockCalls).toHaveLength(1);
    await ops.flush(ino, fd, 0xabn, ctxOf(3));
    expect(router.lockCalls[1].payload).toMatchObject({ kind: 'posix', type: 'un', start: 0, len: 0, owner: 'ab' });
    await ops.flush(ino, fd, 0xabn, ctxOf(4));
    expect(router.lockCalls).toHaveLength(2);
    // flock: released when the kernel says the description's flock goes.
    await ops.flock(ino, fd, 0xefn, 2, ctxOf(5));
    expect(router.lockCalls[2].payload).toMatchObject({ kind: 'flock', type: 'wr', owner: 'ef', wait: true });
    await ops.release(ino, fd, release(0xefn), ctxOf(6));
    expect(router.lockCalls[3].payload).toMatchObject({ kind: 'flock', type: 'un', owner: 'ef' });
    expect(fs.operations.locks.size).toBe(0);
    // getlk: the holder's range and pid.
    const fd2 = await call<number>('open', '/w/db', OpenFlags.O_RDONLY);
    expect(await ops.getlk(ino, fd2, 1n, lock(0, 0, 1), ctxOf(7))).toEqual({ type: 1, whence: 0, start: 0, len: 10, pid: 77 });
  });

  it('sends the pending writes of the file to the node before it releases a lock', async () => {
    const { router, fs, ops, call, count } = setup();
    const fd = await call<number>('create', '/w/log', 0o644, OpenFlags.O_RDWR | OpenFlags.O_CREAT);
    const ino = fs.inodes.find('/w/log')!.ino;
    await ops.setlk(ino, fd, 1n, lock(1), false, ctxOf(1));
    await count('write', '/w/log', fd, Buffer.from('under the lock'), 14, 0);
    expect(router.writes).toHaveLength(0);
    await ops.setlk(ino, fd, 1n, lock(2), false, ctxOf(2));
    expect(router.lockCalls[1]).toMatchObject({ payload: { type: 'un' }, writesBefore: 1 });
  });

  it("takes the locks of the binding's opens through one state per inode, and lets the binding answer their closes again once none is left", async () => {
    const fastLocks: Array<[number, boolean]> = [];
    const { router, fs, ops, call } = setup();
    (fs.operations as unknown as { fast: { locks: (ino: number, on: boolean) => void } }).fast.locks = (ino, on) => fastLocks.push([ino, on]);
    router.add('/w/ro', Buffer.from('read only'));
    await call('getattr', '/w/ro');
    const ino = fs.inodes.find('/w/ro')!.ino;
    const fast = (fs.operations as unknown as { fast: { fh: number } }).fast.fh;
    await ops.setlk(ino, fast, 5n, lock(0), false, ctxOf(1));
    expect(router.calls.open).toBe(1);
    expect(fastLocks).toEqual([[ino, true]]);
    await ops.flush(ino, fast, 5n, ctxOf(2));
    expect(router.lockCalls[1].payload).toMatchObject({ type: 'un', owner: '5' });
    expect(fastLocks).toEqual([
      [ino, true],
      [ino, false],
    ]);
    await new Promise((r) => setImmediate(r));
    expect(router.calls.release).toBe(1);
  });

  it('answers an unknown lock type EINVAL and a lock on an unknown handle EBADF', async () => {
    const { router, fs, ops, call } = setup();
    router.add('/w/f', Buffer.from('f'));
    await call('getattr', '/w/f');
    const ino = fs.inodes.find('/w/f')!.ino;
    await expect(ops.setlk(ino, 999, 1n, lock(7), false, ctxOf(1))).rejects.toMatchObject({ errno: Errno.EINVAL });
    await expect(ops.setlk(ino, 999, 1n, lock(1), false, ctxOf(2))).rejects.toMatchObject({ errno: Errno.EBADF });
  });
});

describe('FuseFs extended attributes', () => {
  it('answers the getxattr of security.capability the kernel sends before each write from what it knows, until a push or a change', async () => {
    const { router, fs, ops, call } = setup();
    router.add('/w/bin', Buffer.from('x'));
    await call('getattr', '/w/bin');
    const ino = fs.inodes.find('/w/bin')!.ino;
    const ctx = () => new RequestContext(1, 0, 0, 0, 0);
    for (let i = 0; i < 3; i++) await expect(ops.getxattr(ino, 'security.capability', ctx())).rejects.toMatchObject({ errno: Errno.ENODATA });
    expect(router.getxattrCalls).toBe(1);
    // Other names always go to the node.
    await expect(ops.getxattr(ino, 'user.a', ctx())).rejects.toMatchObject({ errno: Errno.ENODATA });
    expect(router.getxattrCalls).toBe(2);
    // ACLs and SELinux labels are not carried (ls -l asks for them of every file): never the node.
    for (const name of ['system.posix_acl_access', 'security.selinux'])
      await expect(ops.getxattr(ino, name, ctx())).rejects.toMatchObject({ errno: Errno.ENOTSUP });
    expect(router.getxattrCalls).toBe(2);
    // A push of a content change (a write) says nothing of xattrs: still known.
    router.emit('inval', { mount_path: '/w', paths: ['/w/bin'], node: 10, what: 'data' });
    await expect(ops.getxattr(ino, 'security.capability', ctx())).rejects.toMatchObject({ errno: Errno.ENODATA });
    expect(router.getxattrCalls).toBe(2);
    // Set on the node by another client: the push drops what this mount knew.
    await router.setxattr('/w/bin', 'security.capability', Buffer.from([1, 2]));
    router.emit('inval', { mount_path: '/w', paths: ['/w/bin'], node: 10, what: 'attr' });
    expect(await ops.getxattr(ino, 'security.capability', ctx())).toEqual(Buffer.from([1, 2]));
    // This mount's own setxattr too.
    await router.setxattr('/w/bin', 'security.capability', Buffer.from([3]));
    await ops.setxattr(ino, 'user.b', Buffer.from('v'), 0, ctx());
    expect(await ops.getxattr(ino, 'security.capability', ctx())).toEqual(Buffer.from([3]));
    // A file this mount made with O_EXCL: known to have none without asking.
    const before = router.getxattrCalls;
    const fd = await call<number>('create', '/w/new', 0o644, OpenFlags.O_WRONLY | OpenFlags.O_CREAT | OpenFlags.O_EXCL);
    await expect(ops.getxattr(fs.inodes.find('/w/new')!.ino, 'security.capability', ctx())).rejects.toMatchObject({ errno: Errno.ENODATA });
    expect(router.getxattrCalls).toBe(before);
    await call('release', '/w/new', fd);
  });
});

describe('FuseFs pushes and open handles', () => {
  it("drops what an open handle read ahead when the node pushes that the file's content changed", async () => {
    const { router, call, count } = setup();
    router.add('/w/shared', Buffer.from('old content'));
    await call('getattr', '/w/shared');
    const fd = await call<number>('open', '/w/shared', OpenFlags.O_RDONLY);
    const buf = Buffer.alloc(64);
    expect(buf.subarray(0, await count('read', '/w/shared', fd, buf, 64, 0)).toString()).toBe('old content');
    // Another client rewrote it; the open handle's next read must not come from the old chunk.
    const f = router.files.get('/w/shared')!;
    f.data.write('new');
    f.attr = { ...f.attr, mt: 2 };
    router.emit('inval', { mount_path: '/w', paths: ['/w/shared'], node: f.attr.id, what: 'data' });
    expect(buf.subarray(0, await count('read', '/w/shared', fd, buf, 64, 0)).toString()).toBe('new content');
  });
});

describe('FuseFs watchdog', () => {
  it('answers ETIMEDOUT to an operation that does not finish in time', async () => {
    const { router, call } = setup({ opTimeoutMs: 50 });
    router.getattr = () => new Promise<Attr>(() => undefined);
    await expect(call('getattr', '/w/never')).rejects.toMatchObject({ errno: 110 });
  });
});
