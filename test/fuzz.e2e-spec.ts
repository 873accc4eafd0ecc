/**
 * e2e fuzz: 10,000+ random and mutated frames (bad JSON, wrong types, huge strings, deep
 * nesting, legacy names, binary) against a running `svc`. The process stays up, every frame
 * gets a reply or a close, no reply is `internal_error`, and a normal session works afterwards.
 */
import { closeSessions, session } from './helpers/control';
import { ADMIN_TOKEN, cleanupTmp, killAll, Running, startSvc } from './support/processes';
import { FuzzRun, picker } from './helpers/fuzz';
import { RawPeer, Received } from './helpers/raw-ws';

const FRAMES = 10_000;
let svc: Running;

beforeAll(async () => {
  svc = await startSvc({ env: { SVC_LOG_LEVEL: 'warn' } });
});
afterAll(async () => {
  closeSessions();
  await killAll();
  cleanupTmp();
});

const CORPUS: Array<Record<string, unknown>> = [
  { channel: 'control', type: 'control.ping', id: 1 },
  { channel: 'control', type: 'control.workspace_status', id: 2, payload: { project_id: 'proj-x', project_token: 't' } },
  { channel: 'control', type: 'control.project_get', id: 3, payload: { project_id: 'proj-x' } },
  { channel: 'control', type: 'control.project_mount_list', id: 4, payload: { project_id: 'p' } },
  { channel: 'control', type: 'control.node_join', id: 5, payload: { invite_token: 'x', node_name: 'n', fs_url: 'ws://h:1/' } },
  { channel: 'control', type: 'control.node_lease_refresh', id: 6, payload: { node_id: 'node-1', node_secret: 's', lease_ttl_ms: 5000 } },
  { channel: 'control', type: 'control.node_get', id: 7, payload: { node_id: 'node-1' } },
  { channel: 'control', type: 'control.node_join_status', id: 8, payload: { request_id: 'join-1', request_secret: 's' } },
  { channel: 'control', type: 'control.metrics', id: 9 },
  { channel: 'acheron', type: 'acheron.t_walk', tag: 1, fid: 0, newfid: 1, path: ['nodes'] },
  { channel: 'acheron', type: 'acheron.t_read', tag: 2, fid: 1, offset: 0, count: 100 },
  { channel: 'acheron', type: 'acheron.fs_t_read', tag: 3 },
  { channel: 'control', type: 'version', id: 10 },
];
const NASTY: unknown[] = [
  null,
  true,
  -1,
  1e308,
  NaN,
  '',
  'x'.repeat(100_000),
  [],
  {},
  { __proto__: { polluted: true } },
  { constructor: { prototype: { polluted: true } } },
  // an own "__proto__" member, as JSON.parse makes it (the literal above only sets the prototype)
  JSON.parse('{"__proto__":{"polluted":true},"a":{"prototype":1}}'),
  '\u0000\ud800',
  'acheron.fs_evt_inval',
  'control.',
  '../../etc/passwd',
  Array.from({ length: 1000 }, (_, i) => i),
];

function nested(depth: number): string {
  return '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
}

function makeFrame(rand: () => number): string | Buffer {
  const pick = picker(rand);
  const r = rand();
  if (r < 0.05) return Buffer.from(Array.from({ length: 1 + Math.floor(rand() * 64) }, () => Math.floor(rand() * 256)));
  if (r < 0.1) return Array.from({ length: 1 + Math.floor(rand() * 40) }, () => String.fromCharCode(32 + Math.floor(rand() * 95))).join('');
  if (r < 0.13) return nested(10 + Math.floor(rand() * 5000));
  if (r < 0.15) return `{"channel":"control","type":"control.ping","id":1,"payload":${'['.repeat(3000)}${']'.repeat(3000)}}`;
  if (r < 0.16)
    return `{"channel":"control","type":"control.project_create","id":1,"payload":{"name":"x","access_policy":{"invoke":${nested(2000 + Math.floor(rand() * 20000))}}}}`;
  if (r < 0.18) return JSON.stringify(pick(NASTY));
  const frame: Record<string, unknown> = JSON.parse(JSON.stringify(pick(CORPUS)));
  const mutations = 1 + Math.floor(rand() * 3);
  for (let i = 0; i < mutations; i++) {
    const keys = ['channel', 'type', 'id', 'tag', 'payload', 'fid', 'path', 'newfid'];
    const key = pick(keys);
    const m = rand();
    if (m < 0.3) delete frame[key];
    else if (m < 0.6) frame[key] = pick(NASTY);
    else if (m < 0.75 && typeof frame.payload === 'object' && frame.payload)
      (frame.payload as Record<string, unknown>)[pick(['project_id', 'node_id', 'mount_path', 'x', 'lease_ttl_ms'])] = pick(NASTY);
    else if (m < 0.85)
      frame.type = pick(['acheron.fs_t_open', 'acheron.fs_error', 'ping', 'control.pong', 'control.error', 'acheron.r_walk', 'control.project_delete']);
    else frame.channel = pick(['control', 'acheron', 'CONTROL', '', 'fs']);
  }
  const text = JSON.stringify(frame);
  return rand() < 0.05 ? text.slice(0, Math.floor(rand() * text.length)) : text;
}

async function negotiatedPeer(): Promise<RawPeer> {
  const peer = await RawPeer.open(svc.url, ADMIN_TOKEN);
  await peer.negotiate();
  const v = await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_version', tag: 1, version: 'acheron-1' });
  if (!v.ok) throw new Error('t_version failed');
  await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_attach', tag: 2, fid: 0 });
  return peer;
}

it(`survives ${FRAMES} fuzzed frames, answering each with a reply or a close`, async () => {
  const run = new FuzzRun(FRAMES);
  const rules = { timeoutMs: 5000, internalError: (m: Received) => (m.error?.code === 'internal_error' ? String(m.error.message) : null) };
  let peer = await negotiatedPeer();
  for (let i = 0; i < FRAMES; i++) {
    // One frame in ten goes to a fresh, un-negotiated connection.
    const fresh = run.rand() < 0.1;
    const target = fresh ? await RawPeer.open(svc.url, ADMIN_TOKEN) : peer;
    await run.send(i, target, makeFrame(run.rand), rules);
    if (fresh) target.close();
    else if (target.closeCode !== null) peer = await negotiatedPeer();
    if (svc.proc.exitCode !== null) throw new Error(`seed ${run.seed}: svc exited after frame ${i}`);
  }
  peer.close();
  run.expectNoInternalErrors();
  expect(svc.proc.exitCode).toBeNull();
  expect(svc.proc.signalCode).toBeNull();
  // a normal session still works
  const admin = await session(svc.url);
  expect(await admin.request('ping')).toEqual({});
  await expect(admin.request('project_list')).resolves.toHaveProperty('projects');
  expect(svc.stderr()).not.toMatch(/"level":"(error|fatal)"/);
}, 180_000);
