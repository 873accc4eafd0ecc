/**
 * `npm run bench:control`: starts the built `svc`, then measures
 *  - control.ping throughput and latency from 64 concurrent sessions,
 *  - control.workspace_status latency for a project with 1,000 mounts over 200 nodes,
 *  - the server's RSS with 1,000 idle sessions.
 * Prints the figures; it asserts nothing. Targets (2 cores): >= 20,000 pings/s,
 * workspace_status p99 < 10 ms, < 200 MiB RSS with 1,000 idle sessions.
 * BENCH_SERVER_NODE_ARGS passes extra node flags to the server (e.g. `--cpu-prof`);
 * BENCH_ONLY=ping|rss|status runs one part.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { ControlClient } from '../libs/client/src';
import { quantile, rssMiB } from './measure';
import { BENCH_ADMIN_TOKEN as TOKEN, startBenchSvc } from './programs';

const PING_SECONDS = Number(process.env.BENCH_SECONDS ?? 5);

/** Opens a raw, negotiated session (the cheapest client, so the client is not the bottleneck). */
function rawSession(url: string): Promise<WebSocket> {
  return new Promise((res, rej) => {
    const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${TOKEN}` }, perMessageDeflate: false });
    let step = 0;
    ws.on('open', () => ws.send('{"channel":"control","type":"control.version","id":0,"payload":{"protocol":"unified-v2"}}'));
    ws.on('message', function onMsg() {
      if (++step === 1) ws.send('{"channel":"control","type":"control.connect","id":0}');
      else {
        ws.off('message', onMsg);
        res(ws);
      }
    });
    ws.once('error', rej);
  });
}

/**
 * 64 sessions, each keeping `depth` pings in flight (depth 1: strict request/response).
 * Latency is per ping, from send to its pong.
 */
async function benchPing(url: string, depth: number): Promise<void> {
  const sessions = await Promise.all(Array.from({ length: 64 }, () => rawSession(url)));
  const latencies: number[] = [];
  let count = 0;
  const deadline = Date.now() + PING_SECONDS * 1000;
  const frame = '{"channel":"control","type":"control.ping","id":1}';
  await Promise.all(
    sessions.map(
      (ws) =>
        new Promise<void>((done) => {
          const sent: number[] = [];
          let inflight = 0;
          const send = () => {
            sent.push(performance.now());
            inflight++;
            ws.send(frame);
          };
          ws.on('message', () => {
            latencies.push(performance.now() - sent.shift()!);
            count++;
            inflight--;
            if (Date.now() < deadline) send();
            else if (inflight === 0) done();
          });
          for (let i = 0; i < depth; i++) send();
        }),
    ),
  );
  console.log(
    `control.ping, 64 sessions x ${depth} in flight, ${PING_SECONDS} s: ${Math.round(count / PING_SECONDS)} ops/s, p50 ${quantile(latencies, 0.5).toFixed(3)} ms, p99 ${quantile(latencies, 0.99).toFixed(3)} ms`,
  );
  for (const ws of sessions) ws.close();
}

async function benchWorkspaceStatus(url: string): Promise<void> {
  const admin = await ControlClient.connect({ url, token: TOKEN, requestTimeoutMs: 120_000 });
  const t0 = Date.now();
  const nodes: string[] = [];
  for (let i = 0; i < 200; i++) {
    const { invite_token } = await admin.request<{ invite_token: string }>('node_invite_create');
    const c = await admin.request<{ node_id: string }>('node_join', {
      invite_token,
      node_name: `n${i}`,
      fs_url: `ws://10.0.${i >> 8}.${i & 255}:18891/v2/fs`,
      lease_ttl_ms: 3_600_000,
    });
    nodes.push(c.node_id);
  }
  const p = await admin.request<{ project_id: string; project_token: string }>('project_create', { name: 'big' });
  for (let i = 0; i < 1000; i++) {
    await admin.request('project_mount_set', { project_id: p.project_id, node_id: nodes[i % 200], export_name: 'work', mount_path: `/m/${Math.floor(i / 2)}` });
  }
  console.log(`setup: 200 nodes, 1000 mounts (500 failover pairs) in ${((Date.now() - t0) / 1000).toFixed(1)} s (every mutation fsynced)`);
  const latencies: number[] = [];
  for (let i = 0; i < 50; i++) await admin.request('workspace_status', { project_id: p.project_id, project_token: p.project_token });
  for (let i = 0; i < 500; i++) {
    const s = performance.now();
    await admin.request('workspace_status', { project_id: p.project_id, project_token: p.project_token });
    latencies.push(performance.now() - s);
  }
  console.log(
    `control.workspace_status (1000 mounts, 200 nodes), 500 sequential via ControlClient (incl. JSON.parse of the reply): p50 ${quantile(latencies, 0.5).toFixed(2)} ms, p99 ${quantile(latencies, 0.99).toFixed(2)} ms`,
  );
  admin.close();
  // The same from a raw session that takes the frame without decoding it: server + transport.
  const raw = await rawSession(url);
  const frame = JSON.stringify({
    channel: 'control',
    type: 'control.workspace_status',
    id: 1,
    payload: { project_id: p.project_id, project_token: p.project_token },
  });
  const rawLatencies: number[] = [];
  let bytes = 0;
  for (let i = 0; i < 550; i++) {
    const s = performance.now();
    const data = await new Promise<Buffer>((res) => {
      raw.once('message', (d: Buffer) => res(d));
      raw.send(frame);
    });
    if (i >= 50) rawLatencies.push(performance.now() - s);
    bytes = data.length;
  }
  console.log(
    `control.workspace_status, raw frame received (${(bytes / 1024).toFixed(0)} KiB, not decoded): p50 ${quantile(rawLatencies, 0.5).toFixed(2)} ms, p99 ${quantile(rawLatencies, 0.99).toFixed(2)} ms`,
  );
  raw.close();
}

async function benchIdleRss(url: string, pid: number): Promise<void> {
  const before = rssMiB(pid);
  const sessions: WebSocket[] = [];
  for (let i = 0; i < 1000; i += 50) sessions.push(...(await Promise.all(Array.from({ length: 50 }, () => rawSession(url)))));
  await new Promise((r) => setTimeout(r, 1000));
  console.log(`RSS: ${before.toFixed(1)} MiB before, ${rssMiB(pid).toFixed(1)} MiB with ${sessions.length} idle negotiated sessions`);
  for (const ws of sessions) ws.close();
}

async function main(): Promise<void> {
  const stateDir = mkdtempSync(join(tmpdir(), 'svc-bench-'));
  const { proc, url } = await startBenchSvc(stateDir);
  try {
    console.log(`svc bench on ${url} (node ${process.version})`);
    const only = process.env.BENCH_ONLY;
    if (!only || only === 'ping') {
      await benchPing(url, 1);
      await benchPing(url, 8);
    }
    if (!only || only === 'rss') await benchIdleRss(url, proc.pid!);
    if (!only || only === 'status') await benchWorkspaceStatus(url);
  } finally {
    proc.kill('SIGTERM');
    rmSync(stateDir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
