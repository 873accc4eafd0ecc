/**
 * e2e: symlinks and directories that change on disk while `svc-fs-node` resolves them
 * (docs/protocol.md "Confinement"). A child process started by this test unlinks
 * and recreates, in a tight loop for a few seconds, a link pointing inside the export (to a
 * directory and to a file), a link pointing outside it, an entry that keeps changing kind
 * (directory, link inside, link outside, regular file, self-loop, nothing) and one that is a
 * file, nothing or a link to a file in turn. Meanwhile 4 sessions
 * run `lookup`, `open`, `readdirp`, `statfs`, `create`, `rename` and `unlink` on those entries
 * and through them. Every reply must be a success or the errno the filesystem would give
 * (ENOENT, ENOTDIR, ELOOP, EACCES for what leads outside, EEXIST, EISDIR...), never errno 5
 * (EIO: an internal error), and the node must log no "unhandled error". Nothing outside the
 * export is ever reached: what goes through the outside link is never a success, and the
 * outside tree is unchanged afterwards.
 *
 * `SVC_RACE_MS` sets how long the churn lasts (default 4000 ms).
 */
import { spawn, ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { Errno, OpenFlags } from '../libs/protocol/src';
import { FsPeer, FsReply, startFsNode } from './helpers/fs-peer';
import { cleanupTmp, killAll, Running, tmpDir } from './support/processes';

const RACE_MS = Number(process.env.SVC_RACE_MS ?? 4000);
const SESSIONS = 4;
/** Loops per session (requests in flight on each session). */
const LOOPS = 3;

/**
 * The churn, run in its own process so it never waits for this one's event loop. argv: root,
 * duration in ms. Prints the number of rounds on exit.
 */
const CHURN = `
const fs = require('node:fs');
const [root, ms] = [process.argv[1], Number(process.argv[2])];
const at = (n) => root + '/' + n;
const quiet = (f) => { try { f(); } catch {} };
const relink = (name, target) => { quiet(() => fs.unlinkSync(at(name))); quiet(() => fs.symlinkSync(target, at(name))); };
const clear = (name) => { for (let i = 0; i < 5; i++) { try { fs.rmSync(at(name), { recursive: true, force: true }); return; } catch {} } };
const kinds = [
  () => { fs.mkdirSync(at('swap')); quiet(() => fs.writeFileSync(at('swap/f.txt'), 'swap')); },
  () => fs.symlinkSync('dir', at('swap')),
  () => fs.symlinkSync('../outside', at('swap')),
  () => fs.writeFileSync(at('swap'), 'a file now'),
  () => fs.symlinkSync('swap', at('swap')),
  () => undefined,
];
const end = Date.now() + ms;
let rounds = 0;
while (Date.now() < end) {
  relink('in_dir', 'dir');
  relink('in_file', 'dir/f.txt');
  relink('in_abs', root + '/dir');
  relink('out_dir', '../outside');
  relink('out_abs', root + '/../outside/secret.txt');
  clear('swap');
  quiet(kinds[rounds % kinds.length]);
  quiet(() => fs.unlinkSync(at('plain')));
  if (rounds % 3 === 0) quiet(() => fs.writeFileSync(at('plain'), 'plain'));
  else if (rounds % 3 === 1) quiet(() => fs.symlinkSync('dir/f.txt', at('plain')));
  rounds++;
}
process.stdout.write(String(rounds));
`;

let base: string;
let root: string;
let outside: string;
let node: Running;
let churn: ChildProcess | null = null;
const peers: FsPeer[] = [];

/** The outside tree: names, sizes, contents, mtimes. */
function outsideSnapshot(): string {
  return fs
    .readdirSync(outside, { recursive: true })
    .map(String)
    .sort()
    .map((n) => {
      const st = fs.lstatSync(join(outside, n), { bigint: true });
      return `${n} ${st.mode} ${st.size} ${st.mtimeNs} ${st.isFile() ? fs.readFileSync(join(outside, n), 'utf8') : ''}`;
    })
    .join('\n');
}

beforeAll(async () => {
  base = fs.realpathSync(tmpDir('svc-fs-race-'));
  root = join(base, 'root');
  outside = join(base, 'outside');
  fs.mkdirSync(join(root, 'dir', 'sub'), { recursive: true });
  fs.writeFileSync(join(root, 'dir', 'f.txt'), 'inside');
  fs.mkdirSync(join(outside, 'sub'), { recursive: true });
  fs.writeFileSync(join(outside, 'secret.txt'), 'TOP SECRET');
  fs.writeFileSync(join(outside, 'f.txt'), 'outside twin');
  fs.symlinkSync('dir', join(root, 'in_dir'));
  fs.symlinkSync('dir/f.txt', join(root, 'in_file'));
  fs.symlinkSync(join(root, 'dir'), join(root, 'in_abs'));
  fs.symlinkSync('../outside', join(root, 'out_dir'));
  fs.symlinkSync(join(root, '..', 'outside', 'secret.txt'), join(root, 'out_abs'));
  fs.symlinkSync('dir', join(root, 'swap'));
  fs.writeFileSync(join(root, 'plain'), 'plain');
  node = await startFsNode([`work=${root}`]);
  for (let i = 0; i < SESSIONS; i++) peers.push(await FsPeer.connect(node.url));
});

afterAll(async () => {
  churn?.kill('SIGKILL');
  for (const p of peers) p.close();
  await killAll();
  cleanupTmp();
});

/** One request of the race: what it was, and the errnos acceptable for it besides success. */
interface Outcome {
  what: string;
  reply: FsReply;
  allowed: number[];
  /** Must never succeed (it goes through a link leading outside). */
  neverOk: boolean;
}

const THROUGH_LINK = [Errno.ENOENT, Errno.ENOTDIR, Errno.ELOOP, Errno.EACCES];

it(
  'a link unlinked and recreated on disk while 4 sessions use it: success or the filesystem errno, never EIO',
  async () => {
    const outcomes: Outcome[] = [];
    const rootIds = await Promise.all(peers.map((p) => p.root('work')));
    const before = outsideSnapshot();

    churn = spawn(process.execPath, ['-e', CHURN, root, String(RACE_MS)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let rounds = '';
    churn.stdout!.setEncoding('utf8').on('data', (d: string) => (rounds += d));
    const churnDone = new Promise<void>((r) => churn!.once('exit', () => r()));
    let stop = false;
    void churnDone.then(() => (stop = true));

    const names = ['in_dir', 'in_file', 'in_abs', 'out_dir', 'out_abs', 'swap', 'plain'];
    const outward = (name: string) => name.startsWith('out_');

    const loop = async (p: FsPeer, r: number, s: number, l: number) => {
      let i = 0;
      const record = (what: string, reply: FsReply, allowed: number[], neverOk = false) => outcomes.push({ what, reply, allowed, neverOk });
      while (!stop) {
        const name = names[(i + s + l) % names.length];
        const tag = `s${s}l${l}i${i}`;
        i++;
        // The entry itself. `plain` (a file, nothing, or a link to a file, in turn) is also
        // created without O_EXCL: opened or created, never through the link (ELOOP); ENOENT when
        // the churn unlinked it before the node checked what it had opened (a descriptor of a
        // deleted file is never handed out: its place cannot be checked).
        if (name === 'plain') {
          const made = await p.send('create', { node: r }, { name, mode: 0o644, flags: OpenFlags.O_RDWR | OpenFlags.O_CREAT });
          record('create plain', made, [Errno.ELOOP, Errno.ENOENT]);
          if (made.ok) await p.call('close', { h: made.payload.h });
        }
        const look = await p.send('lookup', { node: r }, { name });
        record(`lookup ${name}`, look, [Errno.ENOENT]);
        if (!look.ok) continue;
        const id = look.payload.attr.id as number;
        const out = outward(name);
        const open = await p.send('open', { node: id }, { flags: OpenFlags.O_RDONLY });
        record(`open ${name}`, open, [...THROUGH_LINK, Errno.EISDIR], out);
        if (open.ok) await p.call('close', { h: open.payload.h });
        const rd = await p.send('readdirp', { node: id }, { cookie: 0, max: 64 });
        record(`readdirp ${name}`, rd, THROUGH_LINK, out);
        const inner = await p.send('lookup', { node: id }, { name: 'f.txt' });
        record(`lookup ${name}/f.txt`, inner, THROUGH_LINK, out);
        const sf = await p.send('statfs', { node: id });
        // statfs of a link to a file answers for the directory holding it; an outside link never.
        record(`statfs ${name}`, sf, THROUGH_LINK, out);
        // Mutations through the link: create, rename, unlink of a private name.
        const a = `t-${tag}-a`;
        const b = `t-${tag}-b`;
        const cr = await p.send('create', { node: id }, { name: a, mode: 0o644, flags: OpenFlags.O_RDWR | OpenFlags.O_CREAT | OpenFlags.O_EXCL });
        record(`create ${name}/x`, cr, [...THROUGH_LINK, Errno.EEXIST], out);
        if (cr.ok) await p.call('close', { h: cr.payload.h });
        const rn = await p.send('rename', {}, { old_parent: id, old_name: a, new_parent: id, new_name: b });
        record(`rename ${name}/x`, rn, THROUGH_LINK, out);
        const un = await p.send('unlink', { node: id }, { name: rn.ok ? b : a });
        record(`unlink ${name}/x`, un, THROUGH_LINK, out);
      }
    };
    await Promise.all(peers.flatMap((p, s) => Array.from({ length: LOOPS }, (_, l) => loop(p, rootIds[s], s, l))));
    await churnDone;

    const byOp = new Map<string, { ok: number; errnos: Map<number, number> }>();
    for (const o of outcomes) {
      const op = o.what.split(' ')[0];
      const row = byOp.get(op) ?? { ok: 0, errnos: new Map() };
      byOp.set(op, row);
      if (o.reply.ok) row.ok++;
      else row.errnos.set(o.reply.error!.errno, (row.errnos.get(o.reply.error!.errno) ?? 0) + 1);
    }
    const table = [...byOp].map(([op, r]) => `${op}: ok ${r.ok}, ${[...r.errnos].map(([e, n]) => `errno ${e} x${n}`).join(', ')}`);
    process.stderr.write(`\nsymlink race: ${rounds} churn rounds, ${outcomes.length} replies\n${table.join('\n')}\n`);

    const internal = outcomes.filter((o) => !o.reply.ok && o.reply.error!.errno === Errno.EIO);
    expect(internal.map((o) => `${o.what}: ${o.reply.error!.message}`)).toEqual([]);
    const unexpected = outcomes.filter((o) => !o.reply.ok && !o.allowed.includes(o.reply.error!.errno));
    expect(unexpected.map((o) => `${o.what}: errno ${o.reply.error!.errno} ${o.reply.error!.message}`)).toEqual([]);
    const escaped = outcomes.filter((o) => o.neverOk && o.reply.ok);
    expect(escaped.map((o) => `${o.what}: ${JSON.stringify(o.reply.payload).slice(0, 200)}`)).toEqual([]);
    expect(node.stderr()).not.toContain('unhandled error');
    expect(node.stderr()).not.toMatch(/"level":"(error|fatal)"/);

    // The race was real: many rounds, successes and vanished links both seen.
    expect(Number(rounds)).toBeGreaterThan(100);
    expect(outcomes.filter((o) => o.reply.ok).length).toBeGreaterThan(100);
    expect(outcomes.some((o) => !o.reply.ok && o.reply.error!.errno === Errno.ENOENT)).toBe(true);
    for (const op of ['lookup', 'open', 'readdirp', 'statfs', 'create', 'rename', 'unlink']) expect(byOp.get(op)?.ok ?? 0).toBeGreaterThan(0);

    expect(outsideSnapshot()).toBe(before);
    expect(node.proc.exitCode).toBeNull();
    expect((await peers[0].call('getattr', { node: rootIds[0] })).attr.k).toBe(2);
  },
  RACE_MS + 60_000,
);
