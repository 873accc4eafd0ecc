/**
 * `npm run bench:soak`: is memory bounded under sustained hostile input?
 *
 * Starts the built `svc` and a built `svc-fs-node` (loopback only), then sends each of them a
 * long stream of frames, valid and invalid mixed, and prints the server's resident memory
 * (VmRSS of /proc/PID/status) after every batch of frames, then the ratio of the last batch's
 * RSS to the first's (target: within 1.5x). It asserts nothing; it stops by itself.
 *
 * Mix sent to `svc` (over a few long sessions, each keeping a window of requests in flight,
 * reconnected when the server closes them, plus workers that open short-lived sessions):
 * valid control requests (ping, project_list, workspace_status of a project with a mount),
 * malformed JSON, binary frames, unknown types (a new name every time), wrong payload types,
 * forbidden keys, envelope errors, deep nesting, oversized strings (within the frame limit,
 * and now and then a frame over it, which closes the session), acheron frames on a session
 * that never negotiated the runtime, request ids that are never repeated; short-lived
 * sessions connect, negotiate, ping and close, or send garbage first and are closed.
 * The FS node gets the same kinds on its own operations (exports, getattr, lookup of existing
 * and missing names, readdirp, statfs, open/read/close with handles left open at close).
 *
 * Environment:
 * - SOAK_FRAMES (default 1000000) frames to `svc`; SOAK_FS_FRAMES (default 500000) to the FS
 *   node; SOAK_BATCH (default 100000) frames per RSS line;
 * - SOAK_SESSIONS (default 4) long sessions per server; SOAK_WINDOW (default 32) requests in
 *   flight per long session; SOAK_SHORT_WORKERS (default 2) short-lived session loops;
 * - SOAK_SERVER_NODE_ARGS extra node flags for both servers (e.g. `--heapsnapshot-signal=SIGUSR2`);
 * - SOAK_ONLY=svc|fs runs one part; SOAK_SEED seeds the random choices.
 */
import { ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { ControlClient } from '../libs/client/src';
import { prng } from '../test/support/prng';
import { BIN, freePort } from '../test/support/processes';
import { rssMiB } from './measure';
import { envWords, startListening } from './programs';

const ADMIN = 'soak-admin-token-0123456789abcdef';
const USER = 'soak-user-token-0123456789abcdef';
const env = (name: string, def: number) => {
  const v = Number(process.env[name] ?? def);
  if (!Number.isFinite(v) || v < 0) throw new Error(`${name} must be a number >= 0`);
  return v;
};
const FRAMES = env('SOAK_FRAMES', 1_000_000);
const FS_FRAMES = env('SOAK_FS_FRAMES', 500_000);
const BATCH = Math.max(1, env('SOAK_BATCH', 100_000));
const SESSIONS = Math.max(1, env('SOAK_SESSIONS', 4));
const WINDOW = Math.max(1, env('SOAK_WINDOW', 32));
const SHORT_WORKERS = env('SOAK_SHORT_WORKERS', 2);
/** Frame limit of both servers during the soak (the FS node's least): frames over it close the session (1009). */
const MAX_MESSAGE_BYTES = 2 * 1024 * 1024;
/** A session that answered nothing for this long while requests were in flight counts them lost. */
const STALL_MS = 5000;

// ---- small helpers ----------------------------------------------------------------------

const seed = env('SOAK_SEED', Date.now() % 1e9);
const rand = prng(seed);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)];
let unique = 0;
/** A string never used before in this run. */
const fresh = (prefix: string) => `${prefix}${(unique++).toString(36)}`;

interface Server {
  name: string;
  url: string;
  opsUrl: string;
  proc: ChildProcess;
  stderr: () => string;
}

/**
 * Starts a built program (`script`, a path in BIN) with `--port 0` and ops endpoints on a free port
 * (their URL is logged only at info level), keeping the last 1 MiB of its log (a warning for
 * every refused upgrade would grow without end); resolves with its URLs.
 * @throws Error (rejects) when it exits before listening
 */
async function startServer(name: string, script: string, args: string[], extraEnv: NodeJS.ProcessEnv): Promise<Server> {
  const opsPort = await freePort();
  const { proc, url, stderr } = await startListening(
    [script, '--port', '0', ...args],
    { SVC_LOG_LEVEL: 'warn', SVC_METRICS_PORT: String(opsPort), SVC_MAX_MESSAGE_BYTES: String(MAX_MESSAGE_BYTES), ...extraEnv },
    { nodeFlags: envWords('SOAK_SERVER_NODE_ARGS'), stderr: 1024 * 1024 },
  );
  return { name, url, opsUrl: `http://127.0.0.1:${opsPort}`, proc, stderr };
}

/** Figures of a server's /metrics: series of `counterName`, all series, JS heap used and external memory (MiB). */
async function scrape(
  opsUrl: string,
  counterName: string,
): Promise<{ series: number; allSeries: number; heapMiB: number; externalMiB: number; handles: number; gauges: Record<string, number> }> {
  const text = await (await fetch(`${opsUrl}/metrics`)).text();
  const lines = text.split('\n');
  const value = (name: string) => {
    const line = lines.find((l) => l.startsWith(`${name} `));
    return line ? Number(line.split(' ')[1]) : NaN;
  };
  return {
    series: lines.filter((l) => l.startsWith(`${counterName}{`)).length,
    allSeries: lines.filter((l) => l && !l.startsWith('#')).length,
    heapMiB: value('nodejs_heap_size_used_bytes') / 2 ** 20,
    externalMiB: value('nodejs_external_memory_bytes') / 2 ** 20,
    handles: value('nodejs_active_handles_total'),
    gauges: Object.fromEntries(HOLDINGS.map((g) => [g, value(g)] as const).filter(([, v]) => !Number.isNaN(v))),
  };
}

/** Gauges of what the servers hold (sessions, projects, node table, handles), shown when present. */
const HOLDINGS = ['svc_sessions', 'svc_projects', 'svc_nodes', 'svc_fs_sessions', 'svc_fs_nodes', 'svc_fs_open_handles', 'svc_fs_session_seen_nodes'];

/** {@link scrape} as one line, with the {@link HOLDINGS} gauges. */
async function metricsSummary(opsUrl: string, counterName: string): Promise<string> {
  const m = await scrape(opsUrl, counterName);
  const held = Object.entries(m.gauges)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  return `${counterName} series ${m.series}, all series ${m.allSeries}, heap used ${m.heapMiB.toFixed(1)} MiB, external ${m.externalMiB.toFixed(1)} MiB, active handles ${m.handles}; ${held}`;
}

// ---- traffic ----------------------------------------------------------------------------

/** What a soak of one server counts. */
class Tally {
  sent = 0;
  replies = 0;
  lost = 0;
  sessions = 0;
  closedByServer = 0;
  refusedUpgrades = 0;
  readonly rss: number[] = [];
  private nextMark: number;
  private readonly t0 = Date.now();
  /** When the last frame was answered (set by {@link soak}). */
  endedAt: number | null = null;
  private last = Date.now();
  private lastSent = 0;

  /** Batch lines are printed in order, each after its scrape. */
  printing: Promise<void> = Promise.resolve();

  constructor(
    readonly server: Server,
    readonly total: number,
    /** The request counter of the server (`svc_requests_total`, `svc_fs_ops_total`). */
    readonly counter: string,
  ) {
    this.nextMark = Math.min(BATCH, total);
  }

  get done(): boolean {
    return this.sent >= this.total;
  }

  /** Counts `n` frames sent; prints an RSS line each time a batch boundary is crossed. */
  count(n = 1): void {
    this.sent += n;
    while (this.sent >= this.nextMark && this.rss.length * BATCH < this.total) {
      const rss = rssMiB(this.server.proc.pid!);
      this.rss.push(rss);
      const now = Date.now();
      const rate = ((this.sent - this.lastSent) / Math.max(1, now - this.last)) * 1000;
      const line =
        `${this.server.name}: ${String(this.nextMark).padStart(8)} frames  RSS ${rss.toFixed(1).padStart(6)} MiB  ` +
        `(${Math.round(rate)} frames/s, ${this.sessions} sessions opened, ${this.closedByServer} closed by the server, ${this.lost} unanswered`;
      // The JS heap and metric series at about the same moment (scraped while the traffic goes on).
      this.printing = this.printing.then(() =>
        scrape(this.server.opsUrl, this.counter).then(
          (m) => console.log(`${line}; heap ${m.heapMiB.toFixed(1)} MiB, external ${m.externalMiB.toFixed(1)} MiB, ${m.series} series)`),
          () => console.log(`${line})`),
        ),
      );
      this.last = now;
      this.lastSent = this.sent;
      this.nextMark += BATCH;
    }
  }

  summary(): string {
    const first = this.rss[0];
    const last = this.rss[this.rss.length - 1];
    const peak = Math.max(...this.rss);
    const s = ((this.endedAt ?? Date.now()) - this.t0) / 1000;
    return (
      `${this.server.name}: ${this.sent} frames in ${s.toFixed(0)} s, ${this.replies} replies, ${this.sessions} sessions, ` +
      `RSS first batch ${first.toFixed(1)} MiB, last ${last.toFixed(1)} MiB, peak ${peak.toFixed(1)} MiB, ratio last/first ${(last / first).toFixed(2)} (target <= 1.5)`
    );
  }
}

/** Opens a WebSocket; resolves null when the upgrade is refused or fails. */
function openWs(url: string, token: string | null): Promise<WebSocket | null> {
  return new Promise((res) => {
    const ws = new WebSocket(url, { headers: token ? { Authorization: `Bearer ${token}` } : {}, perMessageDeflate: false, maxPayload: 64 * 1024 * 1024 });
    ws.once('open', () => res(ws));
    ws.once('unexpected-response', (req) => {
      req.destroy();
      res(null);
    });
    ws.once('error', () => res(null));
  });
}

/** Sends `frames` one at a time, each after the previous reply; resolves with the replies (stops at a close). */
function exchange(ws: WebSocket, frames: Array<string | Buffer>, tally: Tally): Promise<string[]> {
  return new Promise((res) => {
    const replies: string[] = [];
    let i = 0;
    const next = () => {
      if (i >= frames.length || ws.readyState !== ws.OPEN) return finish();
      const f = frames[i++];
      ws.send(f, { binary: Buffer.isBuffer(f) });
      tally.count();
    };
    const timer = setTimeout(() => finish(), STALL_MS);
    const onMessage = (d: Buffer) => {
      replies.push(d.toString());
      tally.replies++;
      next();
    };
    const finish = () => {
      clearTimeout(timer);
      ws.off('message', onMessage);
      ws.off('close', finish);
      res(replies);
    };
    ws.on('message', onMessage);
    ws.once('close', finish);
    next();
  });
}

/**
 * A long session: negotiates (`hello` frames, one reply each), then keeps `WINDOW` frames from
 * `make` in flight until the tally is done; reconnects when the server closes it.
 */
async function longSession(url: string, token: string | null, hello: string[], make: () => string | Buffer, tally: Tally): Promise<void> {
  while (!tally.done) {
    const ws = await openWs(url, token);
    if (!ws) {
      tally.refusedUpgrades++;
      await new Promise((r) => setTimeout(r, 100));
      continue;
    }
    tally.sessions++;
    const answers = await exchange(ws, hello, tally);
    if (answers.length < hello.length || answers.some((a) => !a.includes('"ok":true'))) {
      ws.terminate();
      throw new Error(`negotiation failed: ${answers.join(' | ').slice(0, 500)}`);
    }
    await new Promise<void>((done) => {
      let inflight = 0;
      let lastReply = Date.now();
      const fill = () => {
        while (inflight < WINDOW && !tally.done && ws.readyState === ws.OPEN) {
          const f = make();
          ws.send(f, { binary: Buffer.isBuffer(f) });
          inflight++;
          tally.count();
        }
        if (tally.done && inflight === 0) ws.close();
      };
      const watchdog = setInterval(() => {
        if (inflight > 0 && Date.now() - lastReply > STALL_MS) {
          tally.lost += inflight;
          inflight = 0;
          fill();
        }
      }, 1000);
      ws.on('message', (d: Buffer) => {
        // Pushes (no id/tag and no ok) are not replies.
        if (d.includes('"ok":')) {
          inflight = Math.max(0, inflight - 1);
          tally.replies++;
        }
        lastReply = Date.now();
        fill();
      });
      ws.once('close', () => {
        clearInterval(watchdog);
        if (!tally.done) tally.closedByServer++;
        done();
      });
      ws.on('error', () => undefined);
      fill();
    });
  }
}

// ---- frames for svc ---------------------------------------------------------------------

interface SvcContext {
  projectId: string;
  projectToken: string;
}

/** Values of the wrong type for a string field (none of them may create anything). */
const NOT_STRINGS: unknown[] = [null, true, -1, 1.5, 1e308, [], {}, [1, 2, 3], { a: { b: { c: 1 } } }];
/** Values of the wrong type for a number field. */
const NOT_NUMBERS: unknown[] = [null, true, '5', '', [], {}, ['x'], { a: 1 }];
/** Values for envelope fields: wrong types and strange strings. */
const NASTY: unknown[] = [...NOT_STRINGS, '', '\u0000', '../../etc/passwd', 'x'.repeat(300)];

/** A request type (or FS operation), one of its payload fields, and values of the wrong type for it. */
type WrongField = readonly [string, string, readonly unknown[]];

/** A request type (or FS operation) and a payload with one field of the wrong type, picked from `table`. */
function wrongPayload(table: readonly WrongField[]): [string, Record<string, unknown>] {
  const [type, field, wrong] = pick(table);
  return [type, { [field]: pick(wrong) }];
}

/** Wrong types in control requests; only these: a mix that creates projects or nodes would measure the state growing. */
const SVC_WRONG_FIELDS: readonly WrongField[] = [
  ['control.project_get', 'project_id', NOT_STRINGS],
  ['control.project_create', 'name', NOT_STRINGS],
  ['control.workspace_status', 'project_id', NOT_STRINGS],
  ['control.workspace_status', 'project_token', NOT_STRINGS],
  ['control.node_get', 'node_id', NOT_STRINGS],
  ['control.node_join', 'invite_token', NOT_STRINGS],
  ['control.node_lease_refresh', 'lease_ttl_ms', NOT_NUMBERS],
  ['control.project_mount_set', 'mount_path', NOT_STRINGS],
  ['control.node_join_status', 'request_id', NOT_STRINGS],
];

const nested = (depth: number) => '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
const garbageText = () => Array.from({ length: 1 + Math.floor(rand() * 40) }, () => String.fromCharCode(32 + Math.floor(rand() * 95))).join('');
const garbageBytes = () => Buffer.from(Array.from({ length: 1 + Math.floor(rand() * 64) }, () => Math.floor(rand() * 256)));
const bigString = () => 'x'.repeat(16 * 1024 + Math.floor(rand() * 100 * 1024));

let svcId = 1;
/** One control frame of the mix, for a negotiated control session. */
function svcFrame(ctx: SvcContext): string | Buffer {
  const r = rand();
  const id = rand() < 0.2 ? fresh('req-') : svcId++;
  const frame = (type: string, payload?: unknown, extra: Record<string, unknown> = {}) =>
    JSON.stringify(payload === undefined ? { channel: 'control', type, id, ...extra } : { channel: 'control', type, id, payload, ...extra });
  // valid requests
  if (r < 0.25) return frame('control.ping');
  if (r < 0.32) return frame('control.project_list');
  if (r < 0.4) return frame('control.workspace_status', { project_id: ctx.projectId, project_token: ctx.projectToken });
  if (r < 0.41) return frame('control.node_list');
  if (r < 0.412) return frame('control.metrics');
  // a valid request with a wrong token / an unknown project / an unknown node
  if (r < 0.43) return frame('control.workspace_status', { project_id: ctx.projectId, project_token: fresh('bad-token-') });
  if (r < 0.45) return frame('control.project_get', { project_id: fresh('proj-') });
  if (r < 0.46) return frame('control.node_get', { node_id: fresh('node-') });
  // malformed JSON and binary frames
  if (r < 0.5) {
    const text = frame('control.ping', { x: fresh('') });
    return text.slice(0, Math.floor(rand() * (text.length - 1)));
  }
  if (r < 0.53) return garbageText();
  if (r < 0.55) return garbageBytes();
  // unknown types, a new name each time (and names that are not types at all)
  if (r < 0.62) return frame(fresh('control.no_such_'));
  if (r < 0.64) return frame(fresh('acheron.t_no_such_'));
  if (r < 0.65) return JSON.stringify({ channel: 'control', type: fresh(''), id });
  // wrong payload types
  if (r < 0.75) {
    const [type, payload] = wrongPayload(SVC_WRONG_FIELDS);
    return frame(type, payload);
  }
  if (r < 0.77) return frame('control.ping', pick(['x', 5, [], true]));
  // forbidden keys
  if (r < 0.79)
    return `{"channel":"control","type":"control.project_get","id":${svcId++},"payload":{"project_id":"p","__proto__":{"x":1},"constructor":{"prototype":{"y":2}}}}`;
  // envelope errors
  if (r < 0.85) {
    const f: Record<string, unknown> = { channel: 'control', type: 'control.ping', id };
    const key = pick(['channel', 'type', 'id']);
    if (rand() < 0.5) delete f[key];
    else f[key] = pick(NASTY);
    return JSON.stringify(f);
  }
  // acheron frames on a session that never negotiated the runtime (the server closes it)
  if (r < 0.855)
    return JSON.stringify({
      channel: 'acheron',
      type: pick(['acheron.t_walk', 'acheron.t_read', 'acheron.t_version']),
      tag: Math.floor(rand() * 1e6),
      fid: 0,
      newfid: 1,
      path: ['nodes'],
    });
  // deep nesting
  if (r < 0.87) return `{"channel":"control","type":"control.ping","id":${svcId++},"payload":${nested(100 + Math.floor(rand() * 3000))}}`;
  // oversized strings (within the frame limit)
  if (r < 0.905) return frame('control.project_get', { project_id: bigString() });
  if (r < 0.907) return frame(`control.${bigString()}`);
  // over the frame limit: the server closes the session (1009)
  if (r < 0.90705) return frame('control.ping', { x: 'y'.repeat(MAX_MESSAGE_BYTES) });
  return frame('control.ping');
}

/** A short-lived control session: connect, negotiate, ping, close; or garbage first (closed by the server); or a bad token. */
async function svcShortSessions(url: string, tally: Tally): Promise<void> {
  while (!tally.done) {
    const r = rand();
    const token = r < 0.05 ? fresh('wrong-token-') : r < 0.5 ? ADMIN : USER;
    const ws = await openWs(url, token);
    if (!ws) {
      tally.refusedUpgrades++;
      continue;
    }
    tally.sessions++;
    const version = '{"channel":"control","type":"control.version","id":0,"payload":{"protocol":"unified-v2"}}';
    const connect = JSON.stringify({ channel: 'control', type: 'control.connect', id: 1, payload: rand() < 0.5 ? { agent_id: fresh('agent-') } : {} });
    const q = rand();
    const frames: Array<string | Buffer> =
      q < 0.6
        ? [version, connect, '{"channel":"control","type":"control.ping","id":2}']
        : q < 0.75
          ? [garbageText()]
          : q < 0.85
            ? [connect]
            : q < 0.95
              ? [version, '{"channel":"control","type":"control.version","id":1,"payload":{"protocol":"unified-v1"}}']
              : [version];
    await exchange(ws, frames, tally);
    if (rand() < 0.5) ws.close();
    else ws.terminate();
  }
}

// ---- frames for the FS node -------------------------------------------------------------

interface FsContext {
  root: number;
  file: string;
  dir: string;
}

/** Wrong types in FS requests. */
const FS_WRONG_FIELDS: readonly WrongField[] = [
  ['lookup', 'name', NOT_STRINGS],
  ['readdirp', 'cookie', NOT_NUMBERS],
  ['readdirp', 'max', NOT_NUMBERS],
  ['open', 'flags', NOT_NUMBERS],
  ['read', 'off', NOT_NUMBERS],
  ['create', 'mode', NOT_NUMBERS],
  ['rename', 'old_name', NOT_STRINGS],
  ['symlink', 'target', NOT_STRINGS],
];

let fsTag = 1;
const FS_HELLO = '{"channel":"acheron","type":"acheron.t_fs_hello","tag":0,"payload":{"protocol":"unified-v2-fs","proto":2}}';

/** One FS frame of the mix, for a session after its hello. */
function fsFrame(ctx: FsContext): string | Buffer {
  const r = rand();
  const tag = fsTag++;
  const frame = (op: string, target: Record<string, unknown>, payload?: unknown) =>
    JSON.stringify({ channel: 'acheron', type: `acheron.t_fs_${op}`, tag, ...target, ...(payload === undefined ? {} : { payload }) });
  const root = { node: ctx.root };
  // valid requests
  if (r < 0.1) return frame('getattr', root);
  if (r < 0.2) return frame('lookup', root, { name: pick([ctx.file, ctx.dir]) });
  if (r < 0.25) return frame('readdirp', root, { cookie: 0, max: 64 });
  if (r < 0.3) return frame('statfs', root);
  if (r < 0.33) return frame('exports', {});
  // missing names (ENOENT) and unknown node ids
  if (r < 0.4) return frame('lookup', root, { name: fresh('missing-') });
  if (r < 0.42) return frame('getattr', { node: 1_000_000 + Math.floor(rand() * 1e9) });
  // malformed JSON and binary frames without the binary data path
  if (r < 0.47) {
    const text = frame('lookup', root, { name: fresh('x') });
    return text.slice(0, Math.floor(rand() * (text.length - 1)));
  }
  if (r < 0.5) return garbageText();
  if (r < 0.52) return garbageBytes();
  // unknown types, a new name each time
  if (r < 0.6) return frame(fresh('no_such_'), root);
  if (r < 0.61) return JSON.stringify({ channel: 'acheron', type: fresh(''), tag });
  // wrong payload types
  if (r < 0.7) {
    const [op, payload] = wrongPayload(FS_WRONG_FIELDS);
    return frame(op, root, payload);
  }
  if (r < 0.72) return frame('getattr', { node: pick(NOT_NUMBERS) });
  // names that are not one component, too long, forbidden keys
  if (r < 0.76) return frame('lookup', root, { name: pick(['..', '.', '', 'a/b', 'x'.repeat(256), 'nul\u0000']) });
  if (r < 0.78)
    return `{"channel":"acheron","type":"acheron.t_fs_lookup","tag":${tag},"node":${ctx.root},"payload":{"name":"a","__proto__":{"x":1},"constructor":{"prototype":{"y":2}}}}`;
  // envelope errors
  if (r < 0.84) {
    const f: Record<string, unknown> = { channel: 'acheron', type: 'acheron.t_fs_getattr', tag, node: ctx.root };
    const key = pick(['channel', 'type', 'tag', 'node']);
    if (rand() < 0.5) delete f[key];
    else f[key] = pick(NASTY);
    return JSON.stringify(f);
  }
  // reads and writes on handles that do not exist
  if (r < 0.87) return frame(pick(['read', 'close', 'fsync']), { h: Math.floor(rand() * 1e6) }, { off: 0, len: 16 });
  // deep nesting, oversized strings, over the frame limit
  if (r < 0.88)
    return `{"channel":"acheron","type":"acheron.t_fs_getattr","tag":${tag},"node":${ctx.root},"payload":${nested(100 + Math.floor(rand() * 3000))}}`;
  if (r < 0.885) return frame('lookup', root, { name: bigString() });
  if (r < 0.8852) return frame('getattr', root, { x: 'y'.repeat(MAX_MESSAGE_BYTES) });
  return frame('getattr', root);
}

/** Short-lived FS sessions: hello, open/read a file (the handle closed, or left open at close), close; or garbage first. */
async function fsShortSessions(url: string, ctx: FsContext, fileId: () => number, tally: Tally): Promise<void> {
  while (!tally.done) {
    const ws = await openWs(url, null);
    if (!ws) {
      tally.refusedUpgrades++;
      continue;
    }
    tally.sessions++;
    if (rand() < 0.25) {
      await exchange(
        ws,
        [
          pick([
            garbageText(),
            '{"channel":"acheron","type":"acheron.t_fs_hello","tag":0,"payload":{"protocol":"unified-v1","proto":2}}',
            frameGetattr(ctx.root),
          ]),
        ],
        tally,
      );
    } else {
      const [, opened] = await exchange(
        ws,
        [FS_HELLO, JSON.stringify({ channel: 'acheron', type: 'acheron.t_fs_open', tag: 1, node: fileId(), payload: { flags: 0 } })],
        tally,
      );
      const h = opened ? (JSON.parse(opened) as { payload?: { h?: number } }).payload?.h : undefined;
      if (h !== undefined) {
        const frames = [JSON.stringify({ channel: 'acheron', type: 'acheron.t_fs_read', tag: 2, h, payload: { off: 0, len: 64 } })];
        if (rand() < 0.5) frames.push(JSON.stringify({ channel: 'acheron', type: 'acheron.t_fs_close', tag: 3, h }));
        await exchange(ws, frames, tally);
      }
    }
    if (rand() < 0.5) ws.close();
    else ws.terminate();
  }
}

/** An `acheron.t_fs_getattr` of `node` (sent before the hello: the session is closed). */
function frameGetattr(node: number): string {
  return JSON.stringify({ channel: 'acheron', type: 'acheron.t_fs_getattr', tag: 1, node });
}

// ---- the soak ---------------------------------------------------------------------------

/**
 * Runs `SESSIONS` long sessions and `SHORT_WORKERS` short-session loops against `tally`'s
 * server until it has had `tally.total` frames; prints the metrics summary before and after.
 */
async function soak(tally: Tally, long: () => Promise<void>, short: () => Promise<void>): Promise<Tally> {
  const { server, counter } = tally;
  console.log(`\n${server.name} (pid ${server.proc.pid}): ${tally.total} frames, RSS before ${rssMiB(server.proc.pid!).toFixed(1)} MiB`);
  console.log(`  before: ${await metricsSummary(server.opsUrl, counter)}`);
  await Promise.all([...Array.from({ length: SESSIONS }, () => long()), ...Array.from({ length: SHORT_WORKERS }, () => short())]);
  tally.endedAt = Date.now();
  await tally.printing;
  await new Promise((r) => setTimeout(r, 500));
  console.log(`  after:  ${await metricsSummary(server.opsUrl, counter)}`);
  console.log(`  RSS after the run settled: ${rssMiB(server.proc.pid!).toFixed(1)} MiB; ${tally.refusedUpgrades} upgrades refused (bad token)`);
  if (tally.rss.length > 0) console.log(`  ${tally.summary()}`);
  return tally;
}

async function main(): Promise<void> {
  const only = process.env.SOAK_ONLY;
  const base = mkdtempSync(join(tmpdir(), 'svc-soak-'));
  const exportDir = join(base, 'export');
  mkdirSync(join(exportDir, 'dir'), { recursive: true });
  writeFileSync(join(exportDir, 'file.txt'), 'soak test file\n'.repeat(100));
  for (let i = 0; i < 20; i++) writeFileSync(join(exportDir, 'dir', `f${i}.txt`), String(i));
  const servers: Server[] = [];
  console.log(`soak seed ${seed}; batch ${BATCH} frames; ${SESSIONS} long sessions x ${WINDOW} in flight + ${SHORT_WORKERS} short-session workers per server`);
  try {
    const fsNode = await startServer('svc-fs-node', BIN.fsNode, ['--export', `work=${exportDir}`], {});
    servers.push(fsNode);
    const svc = await startServer('svc', BIN.svc, ['--state-dir', join(base, 'state')], { SVC_ADMIN_TOKEN: ADMIN, SVC_USER_TOKEN: USER });
    servers.push(svc);

    const results: Tally[] = [];
    if (only !== 'fs' && FRAMES > 0) {
      // A project with one mount on the FS node, so workspace_status has something to report.
      const admin = await ControlClient.connect({ url: svc.url, token: ADMIN, requestTimeoutMs: 30_000 });
      const { invite_token } = await admin.request<{ invite_token: string }>('node_invite_create');
      const node = await admin.request<{ node_id: string }>('node_join', { invite_token, node_name: 'soak-node', fs_url: fsNode.url, lease_ttl_ms: 3_600_000 });
      const p = await admin.request<{ project_id: string; project_token: string }>('project_create', { name: 'soak' });
      await admin.request('project_mount_set', { project_id: p.project_id, node_id: node.node_id, export_name: 'work', mount_path: '/work' });
      admin.close();
      const ctx: SvcContext = { projectId: p.project_id, projectToken: p.project_token };
      const tally = new Tally(svc, FRAMES, 'svc_requests_total');
      const hello = [
        '{"channel":"control","type":"control.version","id":0,"payload":{"protocol":"unified-v2"}}',
        '{"channel":"control","type":"control.connect","id":0}',
      ];
      results.push(
        await soak(
          tally,
          () => longSession(svc.url, ADMIN, hello, () => svcFrame(ctx), tally),
          () => svcShortSessions(svc.url, tally),
        ),
      );
    }
    if (only !== 'svc' && FS_FRAMES > 0) {
      const tally = new Tally(fsNode, FS_FRAMES, 'svc_fs_ops_total');
      // The root and file ids, from one session.
      const ws = (await openWs(fsNode.url, null))!;
      const [, exportsReply] = await exchange(ws, [FS_HELLO, '{"channel":"acheron","type":"acheron.t_fs_exports","tag":1}'], tally);
      const rootId = (JSON.parse(exportsReply) as { payload: { exports: Array<{ root: number }> } }).payload.exports[0].root;
      const [lookup] = await exchange(
        ws,
        [JSON.stringify({ channel: 'acheron', type: 'acheron.t_fs_lookup', tag: 2, node: rootId, payload: { name: 'file.txt' } })],
        tally,
      );
      const fileId = (JSON.parse(lookup) as { payload: { attr: { id: number } } }).payload.attr.id;
      ws.close();
      const ctx: FsContext = { root: rootId, file: 'file.txt', dir: 'dir' };
      results.push(
        await soak(
          tally,
          () => longSession(fsNode.url, null, [FS_HELLO], () => fsFrame(ctx), tally),
          () => fsShortSessions(fsNode.url, ctx, () => fileId, tally),
        ),
      );
    }
    console.log('\nsummary:');
    for (const t of results) if (t.rss.length > 0) console.log(`  ${t.summary()}`);
    for (const s of servers) {
      if (s.proc.exitCode !== null) console.log(`  ${s.name} EXITED (${s.proc.exitCode})`);
      const errors = s
        .stderr()
        .split('\n')
        .filter((l) => /"level":"(error|fatal)"|"level":(50|60)/.test(l));
      if (errors.length > 0) console.log(`  ${s.name}: ${errors.length} error lines in the last MiB of its log, e.g. ${errors[0].slice(0, 300)}`);
    }
  } finally {
    for (const s of servers) s.proc.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    for (const s of servers) if (s.proc.exitCode === null) s.proc.kill('SIGKILL');
    rmSync(base, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
