/**
 * e2e: `svc-fs-node` in standalone mode over real processes and real WebSockets
 * (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): start-up and exit codes, the hello rows,
 * every FS operation on a real temporary directory checked against the filesystem itself, readdirp paging, byte-exact
 * round trips on the JSON and binary paths, invalidation events, bad input, read-only exports,
 * metrics, and graceful shutdown.
 */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { Errno, OpenFlags } from '../libs/protocol/src';
// eslint-disable-next-line @typescript-eslint/no-require-imports -- the package has no types; the cast gives the part used here
const parsePrometheus = require('parse-prometheus-text-format') as (
  text: string,
) => Array<{ name: string; metrics: Array<{ value?: string; labels?: Record<string, string> }> }>;
import { FsPeer, Payload, runFsNode, sha256, startFsNode } from './helpers/fs-peer';
import { cleanupTmp, killAll, Running, sleep, tmpDir, waitFor } from './support/processes';

const MiB = 1024 * 1024;
const TOKEN = 'fs-node-test-token-9f8e7d6c5b4a';

let base: string;
let work: string;
let roDir: string;
let other: string;
let node: Running;
const peers: FsPeer[] = [];
const figures: string[] = [];

async function connect(options: { binary?: boolean; authToken?: string } = {}, url = node.url): Promise<FsPeer> {
  const p = await FsPeer.connect(url, options);
  peers.push(p);
  return p;
}

/** Writes a service manifest into a fresh temporary directory; returns its path. */
function manifestFile(name: string, content: unknown): string {
  const path = join(tmpDir('manifest-'), name);
  fs.writeFileSync(path, JSON.stringify(content));
  return path;
}

function lstatNs(path: string) {
  return fs.lstatSync(path, { bigint: true });
}

beforeAll(async () => {
  base = tmpDir('svc-fs-node-');
  work = join(base, 'work');
  roDir = join(base, 'ro');
  other = join(base, 'other');
  for (const d of [work, roDir, other]) fs.mkdirSync(d);
  fs.writeFileSync(join(roDir, 'keep.txt'), 'read-only content\n');
  fs.mkdirSync(join(roDir, 'sub'));
  node = await startFsNode([`work=${work}`, `ro=${roDir}:ro`, `other=${other}:rw`], { env: { SVC_METRICS_PORT: '0' } });
});

afterAll(async () => {
  for (const p of peers) p.close();
  if (figures.length) process.stderr.write(`\nFS throughput (two processes, loopback):\n${figures.join('\n')}\n`);
  await killAll();
  cleanupTmp();
});

describe('start-up and configuration', () => {
  it('prints exactly one stdout line with the WebSocket URL', () => {
    expect(node.stdout()).toMatch(/^listening on ws:\/\/127\.0\.0\.1:\d+\/v2\/fs\n$/);
    expect(node.url).toMatch(/\/v2\/fs$/);
  });

  it.each([
    ['a missing export path', ['--export', 'w=/nonexistent/svc-fs-node-test'], /does not exist/],
    ['an export path that is a file', ['--export', `w=${__filename}`], /not a directory/],
    ['a malformed --export', ['--export', 'no-equals-sign'], /NAME=PATH/],
    ['an export name that is not identifier-safe', ['--export', `.hidden=${__dirname}`], /identifier-safe/],
    ['a duplicate export name', ['--export', `a=${__dirname}`, '--export', `a=${__dirname}:ro`], /given twice/],
    ['a bad port', ['--port', '70000'], /port number/],
    ['an unknown flag', ['--no-such-flag'], /Unknown option/],
    ['daemon mode without a role token', ['--control-url', 'ws://127.0.0.1:1/'], /needs a role token/],
    ['a malformed --label', ['--control-url', 'ws://127.0.0.1:1/', '--control-auth-token', 't', '--label', 'novalue'], /--label must be KEY=VALUE/],
    ['a --label without daemon mode', ['--label', 'a=b'], /needs --control-url/],
    ['a bad --pair-mode', ['--control-url', 'ws://127.0.0.1:1/', '--control-auth-token', 't', '--pair-mode', 'magic'], /--pair-mode must be invite or request/],
    [
      'an invalid service manifest',
      ['--control-url', 'ws://127.0.0.1:1/', '--control-auth-token', 't', '--service-manifest', __filename],
      /invalid service manifest: .*fs-node\.e2e-spec\.ts/,
    ],
    [
      'a manifest with a bad field',
      [
        '--control-url',
        'ws://127.0.0.1:1/',
        '--control-auth-token',
        't',
        '--service-manifest',
        manifestFile('bad-field.json', { services: [{ service_id: 'ok', kind: 'k', state: 'online', endpoints: ['relative'] }] }),
      ],
      /bad-field\.json: services\[0\]\.endpoints/,
    ],
    [
      'a manifest repeating a built-in service',
      [
        '--control-url',
        'ws://127.0.0.1:1/',
        '--control-auth-token',
        't',
        '--service-manifest',
        manifestFile('dup.json', { service_id: 'fs', kind: 'fs', state: 'online', endpoints: ['/x'] }),
      ],
      /dup\.json: .*service_id.*fs/,
    ],
    [
      'a terminal without FS session auth',
      ['--export', `w=${__dirname}`, '--terminal-id', 't1'],
      /--terminal-id runs programs for every FS session: it needs FS session auth/,
    ],
    ['an unknown --meta-io', ['--export', `w=${__dirname}`, '--meta-io', 'threads'], /--meta-io must be auto or pool \(got "threads"\)/],
  ])('exits 2 with a clear message for %s', (_name, args, message) => {
    const r = runFsNode(['--port', '0', ...args]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^svc-fs-node: /);
    expect(r.stderr).toMatch(message);
  });

  it('warns when it listens beyond this host without FS session auth', async () => {
    // Beyond loopback without TLS needs --insecure-transport (docs/operations.md "Transport security (TLS)"; test/tls.e2e-spec.ts).
    const open = await startFsNode([`work=${work}`], { args: ['--bind', '0.0.0.0', '--insecure-transport'] });
    await waitFor(
      () =>
        /svc-fs-node: warning: FS session auth is off and ws:\/\/0\.0\.0\.0:\d+\/v2\/fs is reachable from other hosts: anyone who reaches it can read and write the exports/.test(
          open.stderr(),
        ),
      5000,
    );
    await open.stop();
    const closed = await startFsNode([`work=${work}`], { args: ['--bind', '0.0.0.0', '--insecure-transport', '--auth-token', 'tok'] });
    await waitFor(() => closed.stderr().includes('svc-fs-node ready'), 5000);
    await sleep(200);
    expect(closed.stderr()).not.toMatch(/FS session auth is off/);
    expect(closed.stderr()).toContain('svc-fs-node: warning: --insecure-transport:');
    await closed.stop();
  });

  it('with --meta-io pool: entry operations and their errors are as in place', async () => {
    const dir = join(base, 'pooled');
    fs.mkdirSync(dir);
    const pooled = await startFsNode([`work=${dir}`], { args: ['--meta-io', 'pool'] });
    const p = await connect({}, pooled.url);
    const root = await p.root('work');
    const { attr } = await p.call('mkdir', { node: root }, { name: 'd', mode: 0o750 });
    expect(fs.statSync(join(dir, 'd')).mode & 0o7777).toBe(0o750);
    expect(await p.errno('mkdir', { node: root }, { name: 'd', mode: 0o755 })).toBe(Errno.EEXIST);
    const made = await p.call('create', { node: attr.id }, { name: 'f', mode: 0o640, flags: 0o101 });
    await p.call('close', { h: made.h });
    await p.call('rename', {}, { old_parent: attr.id, old_name: 'f', new_parent: root, new_name: 'g' });
    expect(fs.statSync(join(dir, 'g')).mode & 0o7777).toBe(0o640);
    expect(await p.call('unlink', { node: root }, { name: 'g' })).toEqual({});
    expect(await p.errno('lookup', { node: root }, { name: 'g' })).toBe(Errno.ENOENT);
    await pooled.stop();
  });

  it('prints usage and exits 0 for --help', () => {
    const r = runFsNode(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('--export NAME=PATH[:ro|:rw]');
  });
});

describe('hello', () => {
  let authNode: Running;
  beforeAll(async () => {
    authNode = await startFsNode([`work=${work}`], { args: ['--auth-token', TOKEN], env: { SVC_LOG_LEVEL: 'trace' } });
  });

  async function refused(url: string, frame: unknown): Promise<{ errno: number; message: string; close: number }> {
    const p = await FsPeer.open(url);
    const n = p.pushes.length;
    p.raw(frame);
    const close = await p.waitClose();
    // The error reply carries the request's tag, so it is not a push; read it from the strays.
    const reply = p.strays[0] as { type: string; error: { errno: number; message: string } } | undefined;
    expect(p.pushes.length).toBe(n);
    expect(reply?.type).toBe('acheron.err_fs');
    return { errno: reply!.error.errno, message: reply!.error.message, close };
  }

  it('refuses a wrong first message with errno 71 naming acheron.t_fs_hello, and closes 1008', async () => {
    const r = await refused(node.url, { channel: 'acheron', type: 'acheron.t_fs_getattr', tag: 1, node: 1 });
    expect(r).toMatchObject({ errno: Errno.EPROTO, close: 1008 });
    expect(r.message).toContain('acheron.t_fs_hello');
  });

  it('refuses a control message first with errno 71, and closes 1008', async () => {
    const r = await refused(node.url, { channel: 'control', type: 'control.version', id: 1, payload: { protocol: 'unified-v2' } });
    expect(r).toMatchObject({ errno: Errno.EPROTO, close: 1008 });
  });

  it('refuses a wrong protocol with errno 71, and closes 1008', async () => {
    const r = await refused(node.url, { channel: 'acheron', type: 'acheron.t_fs_hello', tag: 1, payload: { protocol: 'unified-v1-fs', proto: 2 } });
    expect(r).toMatchObject({ errno: Errno.EPROTO, close: 1008 });
    expect(r.message).toContain('acheron.t_fs_hello');
  });

  it('refuses a wrong proto with errno 71, and closes 1008', async () => {
    const r = await refused(node.url, { channel: 'acheron', type: 'acheron.t_fs_hello', tag: 1, payload: { protocol: 'unified-v2-fs', proto: 1 } });
    expect(r).toMatchObject({ errno: Errno.EPROTO, close: 1008 });
  });

  it('refuses a binary frame before the hello and closes 1008', async () => {
    const p = await FsPeer.open(node.url);
    p.raw(Buffer.from([0, 0, 0, 2, 0x7b, 0x7d, 1, 2]));
    expect(await p.waitClose()).toBe(1008);
  });

  it('with auth on: no auth_token is errno 13 AuthMissing and a close 1008', async () => {
    const r = await refused(authNode.url, { channel: 'acheron', type: 'acheron.t_fs_hello', tag: 1, payload: { protocol: 'unified-v2-fs', proto: 2 } });
    expect(r).toMatchObject({ errno: Errno.EACCES, close: 1008 });
    expect(r.message).toMatch(/^AuthMissing/);
  });

  it('with auth on: a wrong auth_token is errno 13 AuthFailed and a close 1008', async () => {
    const r = await refused(authNode.url, {
      channel: 'acheron',
      type: 'acheron.t_fs_hello',
      tag: 1,
      payload: { protocol: 'unified-v2-fs', proto: 2, auth_token: `${TOKEN}x` },
    });
    expect(r).toMatchObject({ errno: Errno.EACCES, close: 1008 });
    expect(r.message).toMatch(/^AuthFailed/);
  });

  it('with auth on: the right token opens a working session, and the token is never logged', async () => {
    const p = await connect({ authToken: TOKEN }, authNode.url);
    const root = await p.root('work');
    expect((await p.call('getattr', { node: root })).attr.k).toBe(2);
    await p.errno('getattr', { node: 987654321 });
    expect(authNode.stderr()).toContain('FS session established');
    expect(authNode.stderr()).toContain('FS hello refused: AuthFailed');
    expect(authNode.stderr()).toContain('FS hello refused: AuthMissing');
    expect(authNode.stderr()).not.toContain(TOKEN);
  });

  it('handles requests pipelined behind the hello after it, on the session it negotiated', async () => {
    const p = await FsPeer.open(node.url);
    peers.push(p);
    // Sent together, before any reply: the exports and a getattr of a node the hello's session
    // does not know yet must both be answered as after a finished hello.
    const hello = p.send('hello', {}, { protocol: 'unified-v2-fs', proto: 2, binary: true });
    const exportsReply = p.send('exports');
    const bad = p.send('getattr', { node: 987654321 });
    expect((await hello).ok).toBe(true);
    const list = await exportsReply;
    expect(list).toMatchObject({ type: 'acheron.r_fs_exports', tag: 2, ok: true });
    expect(list.payload.exports.map((e: { name: string }) => e.name).sort()).toEqual(['other', 'ro', 'work']);
    // An error after negotiation keeps the session open.
    expect((await bad).error?.errno).toBe(Errno.ENOENT);
    expect((await p.send('getattr', { node: list.payload.exports[0].root })).ok).toBe(true);
  });

  it('with auth on: a request pipelined behind a refused hello is dropped with the session', async () => {
    const p = await FsPeer.open(authNode.url);
    const hello = p.send('hello', {}, { protocol: 'unified-v2-fs', proto: 2, auth_token: `${TOKEN}x` });
    const exportsReply = p.send('exports');
    expect((await hello).error).toMatchObject({ errno: Errno.EACCES });
    expect(await p.waitClose()).toBe(1008);
    // Never answered: the session ended with the refused hello.
    expect((await exportsReply).type).toBe('closed');
    expect(p.strays).toEqual([]);
  });

  it('answers a good hello with the node and its caps', async () => {
    const p = await FsPeer.open(node.url);
    peers.push(p);
    const r = await p.send('hello', {}, { protocol: 'unified-v2-fs', proto: 2 });
    expect(r).toMatchObject({ type: 'acheron.r_fs_hello', tag: 1, ok: true });
    expect(r.payload).toMatchObject({
      protocol: 'unified-v2-fs',
      proto: 2,
      node: { os: 'linux' },
      // No extension unless asked for (docs/protocol.md "FS extensions").
      caps: {
        readdirp: true,
        symlink: true,
        statfs: true,
        events: true,
        case_sensitive: true,
        max_read: MiB,
        max_write: MiB,
        binary_data: false,
        features: [],
      },
    });
    expect(typeof r.payload.node.name).toBe('string');
    // after negotiation: errors keep the session open
    expect(await p.errno('hello', {}, { protocol: 'unified-v2-fs', proto: 2 })).toBe(Errno.EPROTO);
    const control = await p.send('x', {}, {});
    expect(control.error?.errno).toBe(Errno.ENOSYS);
    p.raw({ channel: 'control', type: 'control.ping', id: 5 });
    p.raw({ channel: 'acheron', type: 'acheron.fs_t_read', tag: 77 });
    p.raw(Buffer.from([0, 0, 0, 2, 0x7b, 0x7d]));
    await waitFor(() => p.strays.length >= 3, 2000);
    const errors = p.strays as Array<{ type: string; error: { errno: number; code?: string; message: string } }>;
    expect(errors.map((e) => e.type)).toEqual(['acheron.err_fs', 'acheron.err_fs', 'acheron.err_fs']);
    expect(errors[0].error).toMatchObject({ errno: Errno.EINVAL, code: 'invalid_envelope' });
    expect(errors[1].error).toMatchObject({ errno: Errno.EINVAL, code: 'legacy_type_rejected' });
    expect(errors[1].error.message).toContain('acheron.t_fs_read');
    expect(errors[2].error).toMatchObject({ errno: Errno.EINVAL, code: 'invalid_envelope' });
    expect(p.closeCode).toBeNull();
    expect((await p.call('exports')).exports.length).toBe(3);
  });
});

describe('operations on a real directory', () => {
  let p: FsPeer;
  let root: number;
  beforeAll(async () => {
    p = await connect();
    root = await p.root('work');
  });

  it('lists the exports with their roots and modes', async () => {
    const { exports } = await p.call('exports');
    expect(exports).toEqual([
      { name: 'work', root, ro: false, desc: expect.any(String), source_kind: 'local_dir', caps: expect.objectContaining({ rw: true }) },
      { name: 'ro', root: expect.any(Number), ro: true, desc: expect.any(String), source_kind: 'local_dir', caps: expect.objectContaining({ rw: false }) },
      { name: 'other', root: expect.any(Number), ro: false, desc: expect.any(String), source_kind: 'local_dir', caps: expect.objectContaining({ rw: true }) },
    ]);
    expect(new Set(exports.map((e: { root: number }) => e.root)).size).toBe(3);
  });

  it('lookup and getattr report what lstat says', async () => {
    const file = join(work, 'attrs.txt');
    fs.writeFileSync(file, 'twelve bytes');
    fs.chmodSync(file, 0o604);
    const { attr } = await p.call('lookup', { node: root }, { name: 'attrs.txt' });
    const st = lstatNs(file);
    expect(attr).toEqual({
      id: expect.any(Number),
      k: 1,
      m: Number(st.mode),
      n: Number(st.nlink),
      u: Number(st.uid),
      g: Number(st.gid),
      sz: 12,
      at: Number(st.atimeNs),
      mt: Number(st.mtimeNs),
      ct: Number(st.ctimeNs),
      gen: expect.any(Number),
    });
    expect(attr.m & 0o7777).toBe(0o604);
    expect(attr.id).toBeLessThan(2 ** 53);
    const again = await p.call('getattr', { node: attr.id });
    expect(again.attr.id).toBe(attr.id);
    expect(again.attr.mt).toBe(attr.mt);
    // the id is stable for the path
    expect((await p.call('lookup', { node: root }, { name: 'attrs.txt' })).attr.id).toBe(attr.id);
    const rootAttr = (await p.call('getattr', { node: root })).attr;
    expect(rootAttr.k).toBe(2);
    expect(rootAttr.m).toBe(Number(lstatNs(work).mode));
    expect(await p.errno('lookup', { node: root }, { name: 'missing' })).toBe(Errno.ENOENT);
  });

  it('setattr changes mode, times, size and owner on disk', async () => {
    const file = join(work, 'setattr.txt');
    fs.writeFileSync(file, '0123456789');
    const { attr } = await p.call('lookup', { node: root }, { name: 'setattr.txt' });
    // nanoseconds, each exact as a double
    const mt = 1_600_000_000_123_456_768;
    const at = 1_500_000_000_987_654_400;
    const r = await p.call('setattr', { node: attr.id }, { mode: 0o640, mt, at });
    const st = fs.statSync(file, { bigint: true });
    expect(Number(st.mode) & 0o7777).toBe(0o640);
    expect(Math.abs(Number(st.mtimeNs) - mt)).toBeLessThan(1000);
    expect(Math.abs(Number(st.atimeNs) - at)).toBeLessThan(1000);
    expect(r.attr.m & 0o7777).toBe(0o640);
    expect(r.attr.mt).toBe(Number(st.mtimeNs));
    expect(r.attr.gen).toBeGreaterThan(attr.gen);
    const shrunk = await p.call('setattr', { node: attr.id }, { sz: 4 });
    expect(fs.readFileSync(file, 'utf8')).toBe('0123');
    expect(shrunk.attr.sz).toBe(4);
    const uid = process.getuid!();
    const gid = process.getgid!();
    const owner = uid === 0 ? 4321 : uid;
    await p.call('setattr', { node: attr.id }, { uid: owner, gid: uid === 0 ? 4322 : gid });
    expect(fs.statSync(file).uid).toBe(owner);
    expect(await p.errno('setattr', { node: attr.id }, { mode: -1 })).toBe(Errno.EINVAL);
  });

  it('create, write, fsync, read and close: content, size and mode on disk', async () => {
    const c = await p.call('create', { node: root }, { name: 'created.txt', mode: 0o640, flags: OpenFlags.O_RDWR });
    expect(c.attr.k).toBe(1);
    expect(typeof c.h).toBe('number');
    const st = fs.statSync(join(work, 'created.txt'));
    expect(st.mode & 0o7777).toBe(0o640);
    expect((await p.call('write', { h: c.h }, { off: 0, data_b64: Buffer.from('hello, world').toString('base64') })).n).toBe(12);
    expect((await p.call('write', { h: c.h }, { off: 7, data_b64: Buffer.from('there').toString('base64') })).n).toBe(5);
    expect(await p.call('fsync', { h: c.h })).toEqual({});
    expect(fs.readFileSync(join(work, 'created.txt'), 'utf8')).toBe('hello, there');
    const r = await p.call('read', { h: c.h }, { off: 7, len: 100 });
    expect(Buffer.from(r.data_b64, 'base64').toString()).toBe('there');
    expect(r.eof).toBe(true);
    expect((await p.call('read', { h: c.h }, { off: 0, len: 5 })).eof).toBe(false);
    expect((await p.call('getattr', { node: c.attr.id })).attr.sz).toBe(12);
    expect(await p.call('close', { h: c.h })).toEqual({});
    expect(await p.errno('read', { h: c.h }, { off: 0, len: 1 })).toBe(Errno.EBADF);
    // O_EXCL on an existing name; without it the file is opened
    expect(await p.errno('create', { node: root }, { name: 'created.txt', mode: 0o600, flags: OpenFlags.O_RDWR | OpenFlags.O_EXCL })).toBe(Errno.EEXIST);
    const again = await p.call('create', { node: root }, { name: 'created.txt', mode: 0o600, flags: OpenFlags.O_RDWR });
    expect(again.attr.id).toBe(c.attr.id);
    expect(fs.statSync(join(work, 'created.txt')).mode & 0o7777).toBe(0o640);
    await p.call('close', { h: again.h });
  });

  it('open honours access modes, O_TRUNC and O_APPEND', async () => {
    const file = join(work, 'flags.txt');
    fs.writeFileSync(file, 'abcdef');
    const { attr } = await p.call('lookup', { node: root }, { name: 'flags.txt' });
    const ro = await p.call('open', { node: attr.id }, { flags: OpenFlags.O_RDONLY });
    expect(ro.caps).toEqual({ rd: true, wr: false });
    expect(typeof ro.gen).toBe('number');
    expect(await p.errno('write', { h: ro.h }, { off: 0, data_b64: 'eA==' })).toBe(Errno.EBADF);
    const wo = await p.call('open', { node: attr.id }, { flags: OpenFlags.O_WRONLY | OpenFlags.O_APPEND });
    expect(wo.caps).toEqual({ rd: false, wr: true });
    expect(await p.errno('read', { h: wo.h }, { off: 0, len: 1 })).toBe(Errno.EBADF);
    await p.call('write', { h: wo.h }, { off: 0, data_b64: Buffer.from('gh').toString('base64') });
    expect(fs.readFileSync(file, 'utf8')).toBe('abcdefgh');
    const tr = await p.call('open', { node: attr.id }, { flags: OpenFlags.O_RDWR | OpenFlags.O_TRUNC });
    expect(fs.statSync(file).size).toBe(0);
    for (const h of [ro.h, wo.h, tr.h]) await p.call('close', { h });
    const dir = await p.call('open', { node: root }, { flags: OpenFlags.O_RDONLY });
    expect(await p.errno('read', { h: dir.h }, { off: 0, len: 1 })).toBe(Errno.EISDIR);
    await p.call('close', { h: dir.h });
    expect(await p.errno('open', { node: root }, { flags: OpenFlags.O_RDWR })).toBe(Errno.EISDIR);
    expect(await p.errno('open', { node: attr.id }, { flags: 3 })).toBe(Errno.EINVAL);
  });

  it('truncate sets the size on disk', async () => {
    const file = join(work, 'trunc.txt');
    fs.writeFileSync(file, 'x'.repeat(100));
    const { attr } = await p.call('lookup', { node: root }, { name: 'trunc.txt' });
    expect((await p.call('truncate', { node: attr.id }, { sz: 10 })).attr.sz).toBe(10);
    expect(fs.readFileSync(file, 'utf8')).toBe('x'.repeat(10));
    await p.call('truncate', { node: attr.id }, { sz: 4096 });
    expect(fs.statSync(file).size).toBe(4096);
    expect(await p.errno('truncate', { node: root }, { sz: 0 })).toBe(Errno.EISDIR);
  });

  it('mkdir and rmdir', async () => {
    const { attr } = await p.call('mkdir', { node: root }, { name: 'made', mode: 0o750 });
    const st = fs.statSync(join(work, 'made'));
    expect(st.isDirectory()).toBe(true);
    expect(st.mode & 0o7777).toBe(0o750);
    expect(attr.k).toBe(2);
    expect(await p.errno('mkdir', { node: root }, { name: 'made', mode: 0o755 })).toBe(Errno.EEXIST);
    fs.writeFileSync(join(work, 'made', 'inner'), '');
    expect(await p.errno('rmdir', { node: root }, { name: 'made' })).toBe(Errno.ENOTEMPTY);
    fs.unlinkSync(join(work, 'made', 'inner'));
    expect(await p.call('rmdir', { node: root }, { name: 'made' })).toEqual({});
    expect(fs.existsSync(join(work, 'made'))).toBe(false);
    expect(await p.errno('getattr', { node: attr.id })).toBe(Errno.ENOENT);
    fs.writeFileSync(join(work, 'plain'), '');
    expect(await p.errno('rmdir', { node: root }, { name: 'plain' })).toBe(Errno.ENOTDIR);
  });

  it('unlink removes the file; its old id is stale (ENOENT)', async () => {
    fs.writeFileSync(join(work, 'doomed.txt'), 'bye');
    const { attr } = await p.call('lookup', { node: root }, { name: 'doomed.txt' });
    expect(await p.call('unlink', { node: root }, { name: 'doomed.txt' })).toEqual({});
    expect(fs.existsSync(join(work, 'doomed.txt'))).toBe(false);
    expect(await p.errno('getattr', { node: attr.id })).toBe(Errno.ENOENT);
    expect(await p.errno('open', { node: attr.id }, { flags: 0 })).toBe(Errno.ENOENT);
    expect(await p.errno('unlink', { node: root }, { name: 'doomed.txt' })).toBe(Errno.ENOENT);
    fs.mkdirSync(join(work, 'adir'));
    expect(await p.errno('unlink', { node: root }, { name: 'adir' })).toBe(Errno.EISDIR);
  });

  it('rename moves files and directories; ids move with them and open handles keep working', async () => {
    fs.mkdirSync(join(work, 'tree', 'deep'), { recursive: true });
    fs.writeFileSync(join(work, 'tree', 'deep', 'f.txt'), 'v1');
    const tree = (await p.call('lookup', { node: root }, { name: 'tree' })).attr;
    const deep = (await p.call('lookup', { node: tree.id }, { name: 'deep' })).attr;
    const f = (await p.call('lookup', { node: deep.id }, { name: 'f.txt' })).attr;
    const h = (await p.call('open', { node: f.id }, { flags: OpenFlags.O_RDWR })).h;
    expect(await p.call('rename', {}, { old_parent: root, old_name: 'tree', new_parent: root, new_name: 'moved' })).toEqual({});
    expect(fs.existsSync(join(work, 'moved', 'deep', 'f.txt'))).toBe(true);
    expect(fs.existsSync(join(work, 'tree'))).toBe(false);
    // the ids moved with the tree
    expect((await p.walk(root, 'moved/deep/f.txt')).id).toBe(f.id);
    expect((await p.call('getattr', { node: f.id })).attr.sz).toBe(2);
    await p.call('write', { h }, { off: 0, data_b64: Buffer.from('v2').toString('base64') });
    expect(fs.readFileSync(join(work, 'moved', 'deep', 'f.txt'), 'utf8')).toBe('v2');
    await p.call('close', { h });
    expect(await p.errno('lookup', { node: root }, { name: 'tree' })).toBe(Errno.ENOENT);
    // file rename replacing an existing file: the replaced id is stale
    fs.writeFileSync(join(work, 'src.txt'), 'source');
    fs.writeFileSync(join(work, 'dst.txt'), 'destination');
    const src = (await p.call('lookup', { node: root }, { name: 'src.txt' })).attr;
    const dst = (await p.call('lookup', { node: root }, { name: 'dst.txt' })).attr;
    await p.call('rename', {}, { old_parent: root, old_name: 'src.txt', new_parent: deep.id, new_name: 'dst.txt' });
    await p.call('rename', {}, { old_parent: deep.id, old_name: 'dst.txt', new_parent: root, new_name: 'dst.txt' });
    expect(fs.readFileSync(join(work, 'dst.txt'), 'utf8')).toBe('source');
    expect(fs.existsSync(join(work, 'src.txt'))).toBe(false);
    expect((await p.call('lookup', { node: root }, { name: 'dst.txt' })).attr.id).toBe(src.id);
    expect(await p.errno('getattr', { node: dst.id })).toBe(Errno.ENOENT);
    // a directory into itself
    expect(await p.errno('rename', {}, { old_parent: root, old_name: 'moved', new_parent: deep.id, new_name: 'x' })).toBe(Errno.EINVAL);
  });

  it('rename across exports is EXDEV', async () => {
    const otherRoot = await p.root('other');
    fs.writeFileSync(join(work, 'stay.txt'), 'here');
    expect(await p.errno('rename', {}, { old_parent: root, old_name: 'stay.txt', new_parent: otherRoot, new_name: 'stay.txt' })).toBe(Errno.EXDEV);
    expect(fs.existsSync(join(work, 'stay.txt'))).toBe(true);
    expect(fs.readdirSync(other)).toEqual([]);
  });

  it('symlink and readlink store and return the target; open follows a link that stays inside', async () => {
    fs.writeFileSync(join(work, 'target.txt'), 'through the link');
    const { attr } = await p.call('symlink', { node: root }, { name: 'link', target: 'target.txt' });
    expect(attr.k).toBe(3);
    expect(fs.readlinkSync(join(work, 'link'))).toBe('target.txt');
    expect(attr.m).toBe(Number(lstatNs(join(work, 'link')).mode));
    expect(await p.call('readlink', { node: attr.id })).toEqual({ target: 'target.txt' });
    expect((await p.call('lookup', { node: root }, { name: 'link' })).attr.k).toBe(3);
    const h = (await p.call('open', { node: attr.id }, { flags: OpenFlags.O_RDONLY })).h;
    expect(Buffer.from((await p.call('read', { h }, { off: 0, len: 100 })).data_b64, 'base64').toString()).toBe('through the link');
    await p.call('close', { h });
    expect(await p.errno('open', { node: attr.id }, { flags: OpenFlags.O_RDONLY | OpenFlags.O_NOFOLLOW })).toBe(40);
    expect(await p.errno('readlink', { node: root })).toBe(Errno.EINVAL);
    const file = (await p.call('lookup', { node: root }, { name: 'target.txt' })).attr;
    expect(await p.errno('readlink', { node: file.id })).toBe(Errno.EINVAL);
    expect(await p.errno('symlink', { node: root }, { name: 'link', target: 'x' })).toBe(Errno.EEXIST);
    expect(await p.errno('symlink', { node: root }, { name: 'empty', target: '' })).toBe(Errno.EINVAL);
  });

  it('statfs reports the filesystem of the export', async () => {
    const s = await p.call('statfs', { node: root });
    const st = fs.statfsSync(work);
    expect(s).toMatchObject({ bsize: st.bsize, frsize: st.bsize, blocks: st.blocks, files: st.files, namemax: 255 });
    expect(s.bfree).toBeGreaterThan(0);
    const file = (await p.call('lookup', { node: root }, { name: 'target.txt' })).attr;
    expect((await p.call('statfs', { node: file.id })).blocks).toBe(st.blocks);
  });

  it('readdirp pages over 1,050 entries: every name exactly once, sorted, no . or ..', async () => {
    const big = join(work, 'big');
    fs.mkdirSync(big);
    const names: string[] = [];
    for (let i = 0; i < 1050; i++) {
      const name = `entry-${String(i).padStart(4, '0')}-${i % 7 === 0 ? 'dir' : 'file'}`;
      if (i % 7 === 0) fs.mkdirSync(join(big, name));
      else fs.writeFileSync(join(big, name), String(i));
      names.push(name);
    }
    const dir = (await p.call('lookup', { node: root }, { name: 'big' })).attr;
    const seen: string[] = [];
    let cookie = 0;
    let pages = 0;
    for (;;) {
      const r = await p.call('readdirp', { node: dir.id }, { cookie, max: 100 });
      expect(r.ents.length).toBeLessThanOrEqual(100);
      expect(typeof r.dir_gen).toBe('number');
      for (const e of r.ents) {
        seen.push(e.name);
        expect(e.attr.k).toBe(e.name.endsWith('dir') ? 2 : 1);
      }
      pages++;
      if (r.eof) break;
      expect(r.next).toBeGreaterThan(cookie);
      cookie = r.next;
    }
    expect(pages).toBe(11);
    expect(seen).toEqual([...names].sort());
    expect(new Set(seen).size).toBe(1050);
    expect(seen).not.toContain('.');
    expect(seen).not.toContain('..');
    // ids in the listing are the lookup ids
    const e5 = (await p.call('lookup', { node: dir.id }, { name: names[5] })).attr;
    const first = await p.call('readdirp', { node: dir.id }, { cookie: 0, max: 10 });
    expect(first.ents.find((e: { name: string }) => e.name === names[5]).attr.id).toBe(e5.id);
    // max is clamped
    expect((await p.call('readdirp', { node: dir.id }, { cookie: 0, max: 1_000_000 })).ents.length).toBe(1024);
    expect((await p.call('readdirp', { node: dir.id }, { cookie: 0, max: 0 })).ents.length).toBe(1);
    expect((await p.call('readdirp', { node: dir.id }, { cookie: 5000, max: 10 })).eof).toBe(true);
    const file = (await p.call('lookup', { node: root }, { name: 'target.txt' })).attr;
    expect(await p.errno('readdirp', { node: file.id }, { cookie: 0 })).toBe(Errno.ENOTDIR);
  });
});

describe('bad input', () => {
  let p: FsPeer;
  let root: number;
  let file: number;
  beforeAll(async () => {
    p = await connect({ binary: true });
    root = await p.root('work');
    fs.writeFileSync(join(work, 'victim.txt'), 'unchanged');
    file = (await p.call('lookup', { node: root }, { name: 'victim.txt' })).attr.id;
  });

  it('an unknown handle is EBADF for every handle operation', async () => {
    for (const op of ['read', 'write', 'fsync', 'close']) {
      const payload = op === 'read' ? { off: 0, len: 1 } : op === 'write' ? { off: 0, data_b64: 'eA==' } : {};
      expect(await p.errno(op, { h: 424242 }, payload)).toBe(Errno.EBADF);
    }
  });

  it('a stale or unknown node id is ENOENT, never a crash', async () => {
    for (const [op, payload] of [
      ['getattr', {}],
      ['lookup', { name: 'x' }],
      ['readdirp', { cookie: 0 }],
      ['open', { flags: 0 }],
      ['setattr', { mode: 0o600 }],
      ['truncate', { sz: 0 }],
      ['readlink', {}],
      ['statfs', {}],
      ['mkdir', { name: 'x' }],
    ] as const) {
      expect(await p.errno(op, { node: 9_007_199_254_740_000 }, payload)).toBe(Errno.ENOENT);
    }
    expect(await p.errno('rename', {}, { old_parent: 9_000_000_000, old_name: 'a', new_parent: root, new_name: 'b' })).toBe(Errno.ENOENT);
    expect((await p.call('getattr', { node: root })).attr.k).toBe(2);
  });

  it('a missing or malformed node / handle field is EINVAL', async () => {
    expect(await p.errno('getattr')).toBe(Errno.EINVAL);
    expect(await p.errno('getattr', { node: '1' })).toBe(Errno.EINVAL);
    expect(await p.errno('getattr', { node: -1 })).toBe(Errno.EINVAL);
    expect(await p.errno('getattr', { node: 1.5 })).toBe(Errno.EINVAL);
    expect(await p.errno('read', { h: 2 ** 60 }, { off: 0, len: 1 })).toBe(Errno.EINVAL);
    expect(await p.errno('read', { h: 1 }, { off: -1, len: 1 })).toBe(Errno.EINVAL);
    expect(await p.errno('lookup', { node: root }, {})).toBe(Errno.EINVAL);
  });

  it('base64 that does not decode strictly is EINVAL and writes nothing', async () => {
    const plain = await connect();
    const h = (await plain.call('open', { node: file }, { flags: OpenFlags.O_RDWR })).h;
    for (const bad of ['abc', '!!!!', 'QQ=A', 'Q===', 'QUJD\n', 'QUJ-', 'QUJD====', 'A']) {
      expect(await plain.errno('write', { h }, { off: 0, data_b64: bad })).toBe(Errno.EINVAL);
    }
    expect(await plain.errno('write', { h }, { off: 0 })).toBe(Errno.EINVAL);
    expect(fs.readFileSync(join(work, 'victim.txt'), 'utf8')).toBe('unchanged');
    await plain.call('close', { h });
  });

  it('a write above max_write is EINVAL on both paths; a larger read len is clamped to 1 MiB', async () => {
    const big = join(work, 'big.bin');
    fs.writeFileSync(big, randomBytes(2 * MiB));
    const id = (await p.call('lookup', { node: root }, { name: 'big.bin' })).attr.id;
    const h = (await p.call('open', { node: id }, { flags: OpenFlags.O_RDWR })).h;
    expect(await p.errno('write', { h }, { off: 0 }, Buffer.alloc(MiB + 1))).toBe(Errno.EINVAL);
    const plain = await connect();
    const h2 = (await plain.call('open', { node: id }, { flags: OpenFlags.O_RDWR })).h;
    expect(await plain.errno('write', { h: h2 }, { off: 0, data_b64: Buffer.alloc(MiB + 1).toString('base64') })).toBe(Errno.EINVAL);
    const r = await p.call('read', { h }, { off: 0, len: 4 * MiB });
    expect(r.n).toBe(MiB);
    expect(r.data.length).toBe(MiB);
    expect(r.data_b64).toBeUndefined();
    expect(r.eof).toBe(false);
    const j = await plain.call('read', { h: h2 }, { off: MiB, len: 3 * MiB });
    expect(Buffer.from(j.data_b64, 'base64').length).toBe(MiB);
    expect(sha256(Buffer.concat([r.data, Buffer.from(j.data_b64, 'base64')]))).toBe(sha256(fs.readFileSync(big)));
    // a binary write whose n disagrees with the bytes
    expect(await p.errno('write', { h }, { off: 0, n: 5 }, Buffer.alloc(4))).toBe(Errno.EINVAL);
    // only writes travel as binary frames
    expect(await p.errno('getattr', { node: id }, {}, Buffer.alloc(4))).toBe(Errno.EINVAL);
    expect(await p.errno('read', { h }, { off: 0, len: 4 }, Buffer.alloc(1))).toBe(Errno.EINVAL);
    expect(p.closeCode).toBeNull();
  });

  it('a read-only export refuses every mutation with EROFS and leaves the files unchanged', async () => {
    const ro = await p.root('ro');
    const keep = join(roDir, 'keep.txt');
    const before = { content: fs.readFileSync(keep, 'utf8'), st: lstatNs(keep), list: fs.readdirSync(roDir).sort() };
    const k = (await p.call('lookup', { node: ro }, { name: 'keep.txt' })).attr.id;
    const attempts: Array<[string, Record<string, unknown>, Record<string, unknown>]> = [
      ['open', { node: k }, { flags: OpenFlags.O_WRONLY }],
      ['open', { node: k }, { flags: OpenFlags.O_RDWR }],
      ['open', { node: k }, { flags: OpenFlags.O_RDONLY | OpenFlags.O_TRUNC }],
      ['open', { node: k }, { flags: OpenFlags.O_RDONLY | OpenFlags.O_APPEND }],
      ['create', { node: ro }, { name: 'new.txt', mode: 0o644, flags: OpenFlags.O_RDWR }],
      ['create', { node: ro }, { name: 'keep.txt', mode: 0o644, flags: OpenFlags.O_RDONLY }],
      ['mkdir', { node: ro }, { name: 'newdir', mode: 0o755 }],
      ['unlink', { node: ro }, { name: 'keep.txt' }],
      ['rmdir', { node: ro }, { name: 'sub' }],
      ['rename', {}, { old_parent: ro, old_name: 'keep.txt', new_parent: ro, new_name: 'moved.txt' }],
      ['symlink', { node: ro }, { name: 'l', target: 'keep.txt' }],
      ['setattr', { node: k }, { mode: 0o777 }],
      ['setattr', { node: k }, { mt: 1_000_000_000 }],
      ['truncate', { node: k }, { sz: 0 }],
    ];
    for (const [op, target, payload] of attempts) expect([op, await p.errno(op, target, payload)]).toEqual([op, Errno.EROFS]);
    // reading works
    const h = (await p.call('open', { node: k }, { flags: OpenFlags.O_RDONLY })).h;
    expect((await p.call('read', { h }, { off: 0, len: 100 })).data.toString()).toBe(before.content);
    await p.call('close', { h });
    const after = lstatNs(keep);
    expect(fs.readFileSync(keep, 'utf8')).toBe(before.content);
    expect(after.mode).toBe(before.st.mode);
    expect(after.mtimeNs).toBe(before.st.mtimeNs);
    expect(after.size).toBe(before.st.size);
    expect(fs.readdirSync(roDir).sort()).toEqual(before.list);
  });
});

describe('byte-exact round trips (write then read, SHA-256)', () => {
  const sizes: Array<[string, number]> = [
    ['1 B', 1],
    ['1 MiB + 1', MiB + 1],
    ['64 MiB', 64 * MiB],
  ];
  for (const binary of [false, true]) {
    const path = binary ? 'binary' : 'JSON';
    it.each(sizes)(`%s on the ${path} path`, async (label, size) => {
      const p = await connect({ binary });
      const root = await p.root('work');
      const data = randomBytes(size);
      const name = `rt-${path}-${size}.bin`;
      const c = await p.call('create', { node: root }, { name, mode: 0o600, flags: OpenFlags.O_WRONLY | OpenFlags.O_TRUNC });
      const t0 = performance.now();
      await p.writeAll(c.h, data, binary);
      const t1 = performance.now();
      await p.call('close', { h: c.h });
      expect(sha256(fs.readFileSync(join(work, name)))).toBe(sha256(data));
      const h = (await p.call('open', { node: c.attr.id }, { flags: OpenFlags.O_RDONLY })).h;
      const t2 = performance.now();
      const back = await p.readAll(h, size + 1);
      const t3 = performance.now();
      await p.call('close', { h });
      expect(back.length).toBe(size);
      expect(sha256(back)).toBe(sha256(data));
      if (size >= 64 * MiB) {
        const rate = (ms: number) => `${(size / MiB / (ms / 1000)).toFixed(0)} MiB/s`;
        figures.push(`  ${path.padEnd(6)} ${label}: write ${rate(t1 - t0)}, read ${rate(t3 - t2)}`);
      }
      p.close();
      fs.unlinkSync(join(work, name));
    });
  }
});

describe('invalidation events', () => {
  let a: FsPeer;
  let b: FsPeer;
  let bystander: FsPeer;
  let dir: number;
  let file: Payload;
  const d = () => join(work, 'shared');

  beforeAll(async () => {
    fs.mkdirSync(d());
    fs.writeFileSync(join(d(), 'f.txt'), 'one');
    a = await connect();
    b = await connect({ binary: true });
    bystander = await connect();
    for (const p of [a, b]) {
      const root = await p.root('work');
      dir = (await p.call('lookup', { node: root }, { name: 'shared' })).attr.id;
      file = (await p.call('lookup', { node: dir }, { name: 'f.txt' })).attr;
      await p.call('readdirp', { node: dir }, { cookie: 0 });
    }
    await bystander.root('work');
  });

  it('a write by one session reaches the other within 2 s', async () => {
    const from = b.pushes.length;
    const h = (await a.call('open', { node: file.id }, { flags: OpenFlags.O_WRONLY })).h;
    const t0 = Date.now();
    await a.call('write', { h }, { off: 0, data_b64: Buffer.from('two').toString('base64') });
    const ev = await b.waitPush('acheron.e_fs_inval', (x) => x.node === file.id, 2000, from);
    expect(ev.atMs - t0).toBeLessThan(2000);
    expect(ev.payload.what).toBe('data');
    expect(ev.payload.gen).toBeGreaterThan(file.gen);
    await a.call('close', { h });
  });

  it('a create by one session invalidates the directory for the other', async () => {
    const from = b.pushes.length;
    const c = await a.call('create', { node: dir }, { name: 'new.txt', mode: 0o644, flags: OpenFlags.O_WRONLY });
    const ev = await b.waitPush('acheron.e_fs_inval_dir', (x) => x.dir === dir, 2000, from);
    expect(typeof ev.payload.dir_gen).toBe('number');
    await a.call('close', { h: c.h });
  });

  it('changes made directly on disk reach both sessions within 2 s', async () => {
    const fromA = a.pushes.length;
    const fromB = b.pushes.length;
    fs.appendFileSync(join(d(), 'f.txt'), ' more');
    await a.waitPush('acheron.e_fs_inval', (x) => x.node === file.id && x.what === 'data', 2000, fromA);
    await b.waitPush('acheron.e_fs_inval', (x) => x.node === file.id && x.what === 'data', 2000, fromB);
    const fromB2 = b.pushes.length;
    fs.writeFileSync(join(d(), 'from-disk.txt'), 'x');
    await b.waitPush('acheron.e_fs_inval_dir', (x) => x.dir === dir, 2000, fromB2);
    const fromB3 = b.pushes.length;
    fs.chmodSync(join(d(), 'f.txt'), 0o600);
    await b.waitPush('acheron.e_fs_inval', (x) => x.node === file.id, 2000, fromB3);
    const fromB4 = b.pushes.length;
    fs.unlinkSync(join(d(), 'f.txt'));
    await b.waitPush('acheron.e_fs_inval', (x) => x.node === file.id && x.what === 'all', 2000, fromB4);
    expect(await b.errno('getattr', { node: file.id })).toBe(Errno.ENOENT);
  });

  it('a new subdirectory made on disk is watched once a session uses it', async () => {
    fs.mkdirSync(join(d(), 'sub'));
    const sub = (await b.call('lookup', { node: dir }, { name: 'sub' })).attr.id;
    await b.call('readdirp', { node: sub }, { cookie: 0 });
    const from = b.pushes.length;
    fs.writeFileSync(join(d(), 'sub', 'inside.txt'), 'x');
    await b.waitPush('acheron.e_fs_inval_dir', (x) => x.dir === sub, 2000, from);
  });

  it('a directory made on disk and looked up before its watch reports it is still the one told of (no push that it may be another)', async () => {
    const from = b.pushes.length;
    fs.mkdirSync(join(d(), 'early'));
    fs.writeFileSync(join(d(), 'early', 'in.txt'), 'x');
    const early = (await b.call('lookup', { node: dir }, { name: 'early' })).attr.id;
    await b.call('readdirp', { node: early }, { cookie: 0 });
    // the watch of `shared` reports the new name after the lookup
    await b.waitPush('acheron.e_fs_inval_dir', (x) => x.dir === dir, 2000, from);
    await sleep(200);
    expect(b.pushes.slice(from).filter((x) => x.payload.node === early && x.payload.what === 'all')).toEqual([]);
    // and the directory's own watch is kept
    const from2 = b.pushes.length;
    fs.writeFileSync(join(d(), 'early', 'later.txt'), 'x');
    await b.waitPush('acheron.e_fs_inval_dir', (x) => x.dir === early, 2000, from2);
  });

  it('a watched directory replaced on disk is watched again on its next use', async () => {
    fs.mkdirSync(join(d(), 're'));
    const re = (await b.call('lookup', { node: dir }, { name: 're' })).attr.id;
    await b.call('readdirp', { node: re }, { cookie: 0 });
    const from = b.pushes.length;
    fs.rmSync(join(d(), 're'), { recursive: true });
    fs.mkdirSync(join(d(), 're'));
    await b.waitPush('acheron.e_fs_inval', (x) => x.node === re && x.what === 'all', 2000, from);
    expect((await b.call('readdirp', { node: re }, { cookie: 0 })).ents).toEqual([]);
    const from2 = b.pushes.length;
    fs.writeFileSync(join(d(), 're', 'again.txt'), 'x');
    await b.waitPush('acheron.e_fs_inval_dir', (x) => x.dir === re, 2000, from2);
  });

  it('a session that never saw the node gets no event about it', async () => {
    await sleep(300);
    const mentions = bystander.pushes.filter((x) => x.payload.node === file.id || x.payload.dir === dir);
    expect(mentions).toEqual([]);
    expect(a.pushes.length + b.pushes.length).toBeGreaterThan(0);
  });
});

describe('ops endpoints and shutdown', () => {
  async function metrics(): Promise<Map<string, Array<{ value?: string; labels?: Record<string, string> }>>> {
    const text = await (await fetch(`${node.opsUrl}/metrics`)).text();
    return new Map(parsePrometheus(text).map((f) => [f.name, f.metrics]));
  }

  it('serves /livez, /readyz and the FS metrics; handles are closed when their session ends', async () => {
    expect(node.opsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect((await fetch(`${node.opsUrl}/livez`)).status).toBe(200);
    expect((await fetch(`${node.opsUrl}/readyz`)).status).toBe(200);
    const p = await FsPeer.connect(node.url);
    const root = await p.root('work');
    fs.writeFileSync(join(work, 'm.txt'), 'metrics');
    const id = (await p.call('lookup', { node: root }, { name: 'm.txt' })).attr.id;
    for (let i = 0; i < 3; i++) await p.call('open', { node: id }, { flags: OpenFlags.O_RDONLY });
    await p.errno('getattr', { node: 123456789 });
    let m = await metrics();
    const ops = m.get('svc_fs_ops_total')!;
    expect(Number(ops.find((x) => x.labels?.op === 'lookup' && x.labels?.result === 'ok')?.value)).toBeGreaterThan(0);
    expect(Number(ops.find((x) => x.labels?.op === 'getattr' && x.labels?.result === 'ENOENT')?.value)).toBeGreaterThan(0);
    expect(Number(m.get('svc_fs_bytes_read_total')![0].value)).toBeGreaterThan(64 * MiB);
    expect(Number(m.get('svc_fs_bytes_written_total')![0].value)).toBeGreaterThan(64 * MiB);
    expect(Number(m.get('svc_fs_sessions')![0].value)).toBeGreaterThanOrEqual(1);
    const handles = Number(m.get('svc_fs_open_handles')![0].value);
    expect(handles).toBeGreaterThanOrEqual(3);
    p.close();
    await waitFor(async () => {
      m = await metrics();
      return Number(m.get('svc_fs_open_handles')![0].value) === handles - 3;
    }, 3000);
  });

  it('forgets the ids of removed nodes in every session that saw them (no growth over create/remove cycles)', async () => {
    const seen = async () => Number((await metrics()).get('svc_fs_session_seen_nodes')![0].value);
    const a = await FsPeer.connect(node.url);
    const b = await FsPeer.connect(node.url);
    const root = await a.root('work');
    await b.root('work');
    const before = await seen();
    const dir = (await a.call('mkdir', { node: root }, { name: 'cycle', mode: 0o755 })).attr.id;
    for (let i = 0; i < 50; i++) {
      const { h } = await a.call('create', { node: dir }, { name: `f${i}`, mode: 0o644, flags: OpenFlags.O_WRONLY });
      await a.call('close', { h });
    }
    await b.call('readdirp', { node: (await b.call('lookup', { node: await b.root('work') }, { name: 'cycle' })).attr.id }, { cookie: 0, max: 100 });
    expect(await seen()).toBeGreaterThanOrEqual(before + 2 * 50);
    for (let i = 0; i < 50; i++) await a.call('unlink', { node: dir }, { name: `f${i}` });
    await a.call('rmdir', { node: root }, { name: 'cycle' });
    // the sessions are told (e_fs_inval all) and then drop the ids
    await b.waitPush('acheron.e_fs_inval', (x) => x.node === dir && x.what === 'all', 2000);
    await waitFor(async () => (await seen()) === before, 3000);
    a.close();
    b.close();
  });

  it('exits 0 on SIGTERM after closing sessions with 1001', async () => {
    const n = await startFsNode([`work=${work}`]);
    const p = await FsPeer.connect(n.url);
    expect((await p.call('exports')).exports).toHaveLength(1);
    const exit = await n.stop();
    expect(exit.code).toBe(0);
    expect(await p.waitClose()).toBe(1001);
  });
});

describe('the process stayed up', () => {
  it('still answers after everything above', async () => {
    const p = await connect();
    expect(await p.call('getattr', { node: await p.root('work') })).toHaveProperty('attr.k', 2);
    expect(node.proc.exitCode).toBeNull();
    expect(node.stderr()).not.toMatch(/"level":"(error|fatal)"/);
  });
});
