/**
 * e2e fuzz of the FS endpoint: 6,000 random and mutated frames against
 * a running `svc-fs-node` with a rw export, a ro export and a terminal: every FS operation
 * with wrong types, huge and traversal names, bad handles and node ids, broken base64,
 * binary frames with bad headers. The process stays up, every frame gets a reply or a close,
 * no reply is errno 5 EIO (`internal_error`), nothing outside the export roots changes, the ro export is unchanged, and a normal session
 * works afterwards. `FUZZ_SEED` replays a run.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { FsClient } from '../libs/client/src';
import { FS_OPS } from '../libs/protocol/src/fs';
import { cleanupTmp, killAll, Running, tmpDir } from './support/processes';
import { startFsNode } from './helpers/fs-peer';
import { FuzzRun, NASTY_VALUES, picker } from './helpers/fuzz';
import { RawPeer, Received } from './helpers/raw-ws';

const FRAMES = 6_000;
const FS_TOKEN = 'fs-fuzz-token-0123456789';
let node: Running;
let base: string;

/** Names and contents of every file below `dir`, as one digest (sentinel check). */
function treeDigest(dir: string): string {
  const h = createHash('sha256');
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const p = join(d, e.name);
      h.update(p);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) h.update(readFileSync(p));
    }
  };
  walk(dir);
  return h.digest('hex');
}

beforeAll(async () => {
  base = tmpDir('fs-fuzz-');
  for (const d of ['rw', 'ro', 'outside']) mkdirSync(join(base, d));
  writeFileSync(join(base, 'outside', 'sentinel.txt'), 'outside the roots');
  writeFileSync(join(base, 'ro', 'keep.txt'), 'read-only');
  writeFileSync(join(base, 'rw', 'f.txt'), 'hello');
  node = await startFsNode([`rw=${join(base, 'rw')}`, `ro=${join(base, 'ro')}:ro`], {
    args: ['--terminal-id', 'fz', '--auth-token', FS_TOKEN],
    env: { SVC_LOG_LEVEL: 'warn' },
  });
});

afterAll(async () => {
  await killAll();
  cleanupTmp();
});

const NAMES = ['f.txt', 'new.txt', 'd', '..', '.', '', '/', 'a/b', 'x\u0000y', '../outside/sentinel.txt', 'n'.repeat(300), 'ü', 'control', 'invoke.json'];
const NASTY: unknown[] = [...NASTY_VALUES, 1, 2, 3, { x: { constructor: 1 } }, '!!!not base64', '\ud800', 1.5];

function fsFrame(rand: () => number, ids: number[]): string | Buffer {
  const pick = picker(rand);
  const r = rand();
  if (r < 0.04) {
    // binary frames: random bytes, or a header length that lies
    const body = Buffer.from(Array.from({ length: Math.floor(rand() * 64) }, () => Math.floor(rand() * 256)));
    const head = Buffer.alloc(4);
    head.writeUInt32BE(pick([0, 1, 5, 40, 0xffffffff, body.length + 10]));
    return rand() < 0.5
      ? body
      : Buffer.concat([head, Buffer.from('{"channel":"acheron","type":"acheron.t_fs_write","tag":1,"h":1,"payload":{"off":0}}'), body]);
  }
  if (r < 0.07) return Array.from({ length: 1 + Math.floor(rand() * 40) }, () => String.fromCharCode(32 + Math.floor(rand() * 95))).join('');
  // Every op of the protocol, and one it does not have.
  const op = pick([...FS_OPS, 'nope']);
  const node = pick([...ids, ...ids, 0, 999_999, -5]);
  const payloads: Record<string, Record<string, unknown>> = {
    lookup: { name: pick(NAMES) },
    setattr: { mode: pick([0o644, 0o7777, -1]), sz: pick([0, 10, -1]), mt: pick([0, 1e18, -1]) },
    readdirp: { cookie: pick([0, 1, -1, 1e9]), max: pick([1, 100, 0, 1e9]) },
    open: { flags: pick([0, 1, 2, 0o100, 0o1000, 0o40000, 3, 0o200000]) },
    create: { name: pick(NAMES), mode: 0o644, flags: pick([1, 2, 0o300]) },
    read: { off: pick([0, 1, -1, 2 ** 60]), len: pick([0, 10, 1 << 20, (1 << 20) + 1, -1]) },
    write: { off: pick([0, 3, -1]), data_b64: pick(['aGk=', 'a', '====', '%%%', Buffer.alloc(2000, 1).toString('base64')]) },
    truncate: { sz: pick([0, 5, -1, 2 ** 62]) },
    unlink: { name: pick(NAMES) },
    mkdir: { name: pick(NAMES), mode: 0o755 },
    rmdir: { name: pick(NAMES) },
    rename: { old_parent: pick(ids), old_name: pick(NAMES), new_parent: pick(ids), new_name: pick(NAMES) },
    symlink: { name: pick(NAMES), target: pick(['f.txt', '../outside/sentinel.txt', '/etc/passwd', '..', 'd/../../x']) },
    hello: { protocol: 'unified-v2-fs', proto: 2, auth_token: FS_TOKEN },
  };
  const frame: Record<string, unknown> = {
    channel: 'acheron',
    type: `acheron.t_fs_${op}`,
    tag: 1 + Math.floor(rand() * 1000),
    node,
    h: Math.floor(rand() * 8),
    payload: { ...(payloads[op] ?? {}) },
  };
  for (let i = Math.floor(rand() * 3); i > 0; i--) {
    const m = rand();
    const key = pick(['channel', 'type', 'tag', 'node', 'h', 'payload']);
    if (m < 0.25) delete frame[key];
    else if (m < 0.55) frame[key] = pick(NASTY);
    else if (typeof frame.payload === 'object' && frame.payload)
      (frame.payload as Record<string, unknown>)[pick(['name', 'off', 'len', 'data_b64', 'flags', 'mode', 'target', 'new_name', 'x'])] = pick(NASTY);
  }
  const text = JSON.stringify(frame);
  return rand() < 0.04 ? text.slice(0, Math.floor(rand() * text.length)) : text;
}

/** A negotiated raw session (binary data path on or off) and the node ids it can name. */
async function peer(binary: boolean): Promise<{ p: RawPeer; ids: number[] }> {
  const p = await RawPeer.open(node.url, null);
  await p.roundTrip({ channel: 'acheron', type: 'acheron.t_fs_hello', tag: 1, payload: { protocol: 'unified-v2-fs', proto: 2, binary, auth_token: FS_TOKEN } });
  const ex = await p.roundTrip({ channel: 'acheron', type: 'acheron.t_fs_exports', tag: 2, payload: {} });
  const ids = ((ex.payload?.exports ?? []) as Array<{ root: number }>).map((e) => e.root);
  for (const root of [...ids]) {
    const l = await p.roundTrip({ channel: 'acheron', type: 'acheron.t_fs_lookup', tag: 3, node: root, payload: { name: 'f.txt' } });
    if (l.ok) ids.push((l.payload as { attr: { id: number } }).attr.id);
  }
  return { p, ids };
}

it(`survives ${FRAMES} fuzzed FS frames: a reply or a close for each, nothing outside the roots touched`, async () => {
  const outside = treeDigest(join(base, 'outside'));
  const ro = treeDigest(join(base, 'ro'));
  const run = new FuzzRun(FRAMES);
  const rules = {
    timeoutMs: 5000,
    // errno 5 (EIO) here can only be an internal error: no disk fails during this test
    internalError: (m: Received) => (m.error?.code === 'internal_error' || m.error?.errno === 5 ? JSON.stringify(m.error) : null),
    // invalidation pushes are skipped: the reply is JSON with `ok`, or a binary read reply
    isReply: (m: Received) => 'ok' in m || 'binary' in m,
  };
  let s = await peer(run.rand() < 0.5);
  for (let i = 0; i < FRAMES; i++) {
    await run.send(i, s.p, fsFrame(run.rand, s.ids), rules);
    if (s.p.closeCode !== null) s = await peer(run.rand() < 0.5);
    if (node.proc.exitCode !== null) throw new Error(`seed ${run.seed}: svc-fs-node exited after frame ${i}\n${node.stderr()}`);
  }
  s.p.close();
  run.expectNoInternalErrors();
  expect(run.answered).toBeGreaterThan(FRAMES / 2);
  expect(node.proc.exitCode).toBeNull();
  expect(treeDigest(join(base, 'outside'))).toBe(outside);
  expect(treeDigest(join(base, 'ro'))).toBe(ro);
  // a normal session still works
  const c = await FsClient.connect({ url: node.url, authToken: FS_TOKEN });
  const { exports } = await c.request('exports');
  expect(exports.map((e) => e.name)).toEqual(expect.arrayContaining(['rw', 'ro', 'terminal-fz']));
  c.close();
  expect(node.stderr()).not.toMatch(/"level":"(error|fatal)"/);
}, 240_000);
