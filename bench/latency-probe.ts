/**
 * Latency probe for `bench/fuse-latency.ts`: preloaded into the
 * `svc-fs-node` and `svc-fs-mount mount` processes with `node -r dist/bench/latency-probe.js`,
 * it timestamps, without changing what they do:
 *  - every WebSocket frame sent and received (the `ws` module's `send` and `message` event),
 *    matched by the envelope's `tag`: in the node, receive -> reply sent per request type
 *    (`node` times); in the mount, request sent -> reply received (`rtt` times, the round trip
 *    as the mount sees it: the node's time plus both hops over loopback and both event loops);
 *  - (`fuse` times per FUSE operation are left empty: the mount's own `--metrics-port` figures
 *    count its requests by operation.)
 * On exit the process writes `{pid, role, fuse, rtt, node}` (each a map of name -> durations,
 * microseconds) as JSON to `$LATENCY_PROBE_DIR/probe-<pid>.json`; SIGUSR2 forgets what was
 * recorded so far. Without LATENCY_PROBE_DIR it does nothing. Costs about a microsecond per frame (a regular expression on the first 200 bytes).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

const DIR = process.env.LATENCY_PROBE_DIR;

/** Durations in µs by name. */
type Series = Record<string, number[]>;

const fuse: Series = {};
const rtt: Series = {};
const node: Series = {};
/** Requests seen and not yet answered: tag -> [type, time ms]. */
const sent = new Map<number, [string, number]>();
const received = new Map<number, [string, number]>();

function add(series: Series, name: string, us: number): void {
  (series[name] ??= []).push(us);
}

const HEAD = /"type":"([^"]+)","tag":(\d+)/;

/** The `type` and `tag` of a frame (text, or binary with its 4-byte header length), or null. */
function typeAndTag(data: unknown, binary: boolean): [string, number] | null {
  let head: string;
  if (typeof data === 'string') head = data.slice(0, 200);
  else if (Buffer.isBuffer(data)) head = data.toString('latin1', binary ? 4 : 0, Math.min(data.length, 204));
  else return null;
  const m = HEAD.exec(head);
  return m ? [m[1], Number(m[2])] : null;
}

/**
 * Records a frame going one way: a request (`acheron.t_*`) is kept in `requests` by its tag; a
 * reply ends the request of its tag kept in `answered` (those of the other way), adding the time
 * between them, µs, to `series` under the request's operation name.
 */
function onFrame(data: unknown, binary: boolean, requests: Map<number, [string, number]>, answered: Map<number, [string, number]>, series: Series): void {
  const tt = typeAndTag(data, binary);
  if (!tt) return;
  const now = performance.now();
  const [type, tag] = tt;
  if (type.startsWith('acheron.t_')) {
    requests.set(tag, [type.replace(/^acheron\.t_(fs_)?/, ''), now]);
  } else {
    const req = answered.get(tag);
    if (req) {
      answered.delete(tag);
      add(series, req[0], (now - req[1]) * 1000);
    }
  }
}

/** A frame sent: a request the mount sends, or the node's reply to one it received (`node` times). */
function onSend(data: unknown, binary: boolean): void {
  onFrame(data, binary, sent, received, node);
}

/** A frame received: a request the node receives, or the reply to one the mount sent (`rtt` times). */
function onMessage(data: unknown, binary: boolean): void {
  onFrame(data, binary, received, sent, rtt);
}

if (DIR) {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- patched only when the probe is on (DIR set)
  const WebSocket = require('ws') as { prototype: Record<string, (...args: unknown[]) => unknown> };
  const send = WebSocket.prototype.send;
  WebSocket.prototype.send = function (this: unknown, data: unknown, options?: unknown, cb?: unknown) {
    const binary =
      typeof options === 'object' && options !== null
        ? (options as { binary?: boolean }).binary !== false && typeof data !== 'string'
        : typeof data !== 'string';
    onSend(data, binary);
    return send.call(this, data, options, cb);
  };
  const emit = WebSocket.prototype.emit;
  WebSocket.prototype.emit = function (this: unknown, event: unknown, ...args: unknown[]) {
    if (event === 'message') onMessage(args[0], args[1] === true);
    return emit.call(this, event, ...args);
  };

  // SIGUSR2 forgets what was recorded so far (a phase that warms up first).
  process.on('SIGUSR2', () => {
    for (const series of [fuse, rtt, node]) for (const k of Object.keys(series)) delete series[k];
    sent.clear();
    received.clear();
  });

  process.on('exit', () => {
    const role = process.argv.some((a) => a.includes('svc-fs-node')) ? 'node' : 'mount';
    writeFileSync(join(DIR, `probe-${process.pid}.json`), JSON.stringify({ pid: process.pid, role, fuse, rtt, node }));
  });
}
