/**
 * e2e fuzz of the runtime namespace with real routed filesystems: 3,000
 * random and mutated `acheron.t_*` frames (walks over node, service, project and routed FS
 * paths, opens, reads, writes with broken base64, stats, clunks, flushes, unknown fids)
 * against a two-node workspace with a terminal. `svc` stays up, every frame gets a reply or a
 * close, no reply is `internal_error`, no error is logged, and a normal runtime session works afterwards. `FUZZ_SEED`
 * replays a run.
 */
import { ControlClient } from '../libs/client/src';
import { ADMIN_TOKEN } from './support/processes';
import { FuzzRun, NASTY_VALUES, picker } from './helpers/fuzz';
import { RawPeer, Received } from './helpers/raw-ws';
import { useWorkspace } from './helpers/workspace';

const FRAMES = 3_000;
const ws = useWorkspace({ terminalIds: ['t1'] });

const NASTY: unknown[] = [...NASTY_VALUES, ['..'], [''], ['a\u0000b'], '!!!', 1.5, ['a', { prototype: 1 }]];

/** Fids this run walked to (most frames use them, so walks, opens and reads reach real files). */
const fids: number[] = [];
let nextFid = 10;

function frame(rand: () => number, names: string[], prefixes: string[][]): string {
  const pick = picker(rand);
  const fid = () => (rand() < 0.8 && fids.length > 0 ? fids[Math.floor(rand() * fids.length)] : pick([0, 1, 99_999, -1]));
  const tail = () => Array.from({ length: Math.floor(rand() * 3) }, () => pick(names));
  // mostly below real roots (routed filesystems included), sometimes anywhere
  const path = () => (rand() < 0.7 ? [...pick(prefixes), ...tail()] : Array.from({ length: Math.floor(rand() * 6) }, () => pick(names)));
  const type = pick([
    't_walk',
    't_walk',
    't_walk',
    't_open',
    't_read',
    't_read',
    't_write',
    't_stat',
    't_clunk',
    't_flush',
    't_attach',
    't_version',
    't_nope',
    'r_walk',
  ]);
  const f: Record<string, unknown> = { channel: 'acheron', type: `acheron.${type}`, tag: 1 + Math.floor(rand() * 60_000) };
  if (type === 't_walk') {
    const newfid = rand() < 0.9 ? nextFid++ : fid();
    if (fids.length > 40) fids.shift();
    fids.push(newfid);
    Object.assign(f, { fid: rand() < 0.7 ? 0 : fid(), newfid, path: path() });
  }
  if (type === 't_open') Object.assign(f, { fid: fid(), mode: pick(['r', 'w', 'rw', 'x', '']) });
  if (type === 't_read') Object.assign(f, { fid: fid(), offset: pick([0, 1, 100, -1, 2 ** 60]), count: pick([0, 1, 4096, 1 << 20, -5]) });
  if (type === 't_write')
    Object.assign(f, {
      fid: fid(),
      offset: pick([0, 3, -1]),
      data_b64: pick(['aGk=', 'e30=', '====', '%%', 'bm90IGpzb24=', Buffer.alloc(3000, 65).toString('base64')]),
    });
  if (type === 't_stat' || type === 't_clunk') f.fid = fid();
  if (type === 't_flush') f.oldtag = pick([1, 2, 3, 60_000, -1]);
  if (type === 't_attach') f.fid = fid();
  if (type === 't_version') Object.assign(f, { version: pick(['acheron-1', 'x']), msize: pick([65536, 0, -1]) });
  for (let i = Math.floor(rand() * 3); i > 0; i--) {
    const key = pick(['fid', 'newfid', 'path', 'offset', 'count', 'data_b64', 'mode', 'tag', 'type', 'channel']);
    if (rand() < 0.3) delete f[key];
    else f[key] = pick(NASTY);
  }
  const text = JSON.stringify(f);
  return rand() < 0.03 ? text.slice(0, Math.floor(rand() * text.length)) : text;
}

async function attached(): Promise<RawPeer> {
  const p = await RawPeer.open(ws.svc.url, ADMIN_TOKEN);
  await p.negotiate();
  await p.roundTrip({ channel: 'acheron', type: 'acheron.t_version', tag: 1, version: 'acheron-1' });
  await p.roundTrip({ channel: 'acheron', type: 'acheron.t_attach', tag: 2, fid: 0 });
  return p;
}

it(`survives ${FRAMES} fuzzed runtime frames over routed filesystems`, async () => {
  const { project_id } = ws.project;
  const names = [
    'nodes',
    'projects',
    'debug',
    ws.nodeIds.a,
    ws.nodeIds.b,
    project_id,
    'fs',
    'services',
    'terminal',
    't1',
    'terminal-t1',
    'control',
    'invoke.json',
    'last_result.json',
    'work',
    'a',
    'b',
    'shared',
    'STATUS.json',
    'NODE.json',
    'CAPS.json',
    'HELP.md',
    'availability.json',
    'events.ndjson',
    '..',
    '.',
    '',
    'missing',
    'x'.repeat(300),
  ];
  const { a, b } = ws.nodeIds;
  const prefixes = [
    [],
    ['nodes', a],
    ['nodes', a, 'fs'],
    ['nodes', a, 'fs', 'work'],
    ['nodes', a, 'terminal', 't1'],
    ['nodes', a, 'terminal', 't1', 'control'],
    ['nodes', b, 'services', 'fs'],
    ['projects', project_id],
    ['projects', project_id, 'fs'],
    ['projects', project_id, 'fs', 'a'],
    ['projects', project_id, 'fs', 'shared'],
    ['debug'],
  ];
  const run = new FuzzRun(FRAMES);
  const rules = {
    timeoutMs: 15_000,
    // also an FS node's internal error passed on by the router (errno 5 with its reference)
    internalError: (m: Received) =>
      m.error?.code === 'internal_error' || /internal error \(ref/.test(m.error?.message ?? '') ? String(m.error?.message) : null,
  };
  let p = await attached();
  for (let i = 0; i < FRAMES; i++) {
    await run.send(i, p, frame(run.rand, names, prefixes), rules);
    if (p.closeCode !== null) {
      p = await attached();
      fids.length = 0;
    }
    if (ws.svc.proc.exitCode !== null) throw new Error(`seed ${run.seed}: svc exited after frame ${i}`);
  }
  p.close();
  run.expectNoInternalErrors();
  expect(run.answered).toBeGreaterThan(FRAMES / 2);
  // a normal runtime session still reads a routed file
  const c = await ControlClient.connect({ url: ws.svc.url, token: ADMIN_TOKEN });
  await c.attach(0);
  await c.acheron('acheron.t_walk', { fid: 0, newfid: 1, path: ['projects', project_id, 'STATUS.json'] });
  await c.acheron('acheron.t_open', { fid: 1, mode: 'r' });
  const r = await c.acheron<{ n: number }>('acheron.t_read', { fid: 1, offset: 0, count: 4096 });
  expect(r.n).toBeGreaterThan(0);
  c.close();
  for (const proc of [ws.svc, ws.nodeA, ws.nodeB]) expect(proc.stderr()).not.toMatch(/"level":"(error|fatal)"/);
}, 240_000);
