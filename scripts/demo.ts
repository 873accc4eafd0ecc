/**
 * `npm run demo`: the end-to-end demo on an embedded default. Starts `svc` on a temporary
 * state directory and drives it with `svc-control` the way an operator would, printing each
 * step. Everything it starts is stopped on exit or Ctrl-C.
 *
 * Flags: `--ci` (non-interactive; the demo never waits for input, the flag is accepted so CI
 * can say so), `--keep` (leave the temporary directory for inspection).
 */
import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const ROOT = resolve(__dirname, '..', '..');
const BIN = {
  svc: join(ROOT, 'dist/src/main.js'),
  control: join(ROOT, 'dist/apps/svc-control/src/main.js'),
};
const keep = process.argv.includes('--keep');
const work = mkdtempSync(join(tmpdir(), 'svc-demo-'));
const children: ChildProcess[] = [];
const ADMIN = `demo-admin-${process.pid}-${Date.now()}`;

const tty = process.stdout.isTTY;
function step(title: string): void {
  process.stdout.write(tty ? `\n\x1b[1m==> ${title}\x1b[0m\n` : `\n==> ${title}\n`);
}

/** A payload for display: secrets shortened so they do not end up in logs. */
function masked(payload: object): string {
  return JSON.stringify(payload, (k, v) => (/(_token|_secret)$/.test(k) && typeof v === 'string' ? `${v.slice(0, 4)}...` : v));
}

function cleanup(): void {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGTERM');
  if (!keep) rmSync(work, { recursive: true, force: true });
}

/** Starts a server program and resolves with the URL of its `listening on` line. */
function startServer(name: string, script: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<string> {
  const child = spawn(process.execPath, [script, ...args], { env: { ...process.env, SVC_LOG_LEVEL: 'warn', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  return new Promise((res, rej) => {
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = /listening on (\S+)/.exec(out);
      if (m) res(m[1]);
    });
    child.once('exit', (code) => rej(new Error(`${name} exited with ${code}: ${err}`)));
  });
}

/** Runs `svc-control <op> <payload>` and returns the parsed reply (exits the demo on failure). */
function control(url: string, op: string, payload: object = {}): Record<string, unknown> {
  const args = ['--url', url, op, JSON.stringify(payload)];
  process.stdout.write(`$ svc-control ${op} '${masked(payload)}'\n`);
  const r = spawnSync(process.execPath, [BIN.control, ...args], { env: { ...process.env, SVC_AUTH_TOKEN: ADMIN }, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`svc-control ${op} failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

function show(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2).replace(/^/gm, '  ')}\n`);
}

async function main(): Promise<void> {
  process.on('SIGINT', () => {
    cleanup();
    process.exit(130);
  });
  step('start the control plane (svc) on a free port, state in a temporary directory');
  const url = await startServer('svc', BIN.svc, ['--port', '0', '--state-dir', join(work, 'state')], { SVC_ADMIN_TOKEN: ADMIN });
  process.stdout.write(`svc listening on ${url}\n`);

  step('create a project (its token is shown once)');
  const project = control(url, 'project_create', { name: 'demo', vision: 'one tree over several machines' });
  show({ project_id: project.project_id, project_token: `${String(project.project_token).slice(0, 6)}...` });

  step('invite two nodes and join them (what svc-fs-node does when it pairs)');
  const nodes: Array<Record<string, unknown>> = [];
  for (const name of ['node-a', 'node-b']) {
    const invite = control(url, 'node_invite_create', { ttl_ms: 600_000 });
    const creds = control(url, 'node_join', { invite_token: invite.invite_token, node_name: name, fs_url: `ws://127.0.0.1:0/v2/fs`, lease_ttl_ms: 60_000 });
    nodes.push(creds);
    show({ node_id: creds.node_id, node_name: creds.node_name, lease_expires_at_ms: creds.lease_expires_at_ms });
  }

  step('mount: /docs on node-a, /shared on both nodes (a failover group)');
  control(url, 'project_mount_set', { project_id: project.project_id, node_id: nodes[0].node_id, export_name: 'docs', mount_path: '/docs' });
  control(url, 'project_mount_set', { project_id: project.project_id, node_id: nodes[0].node_id, export_name: 'shared', mount_path: '/shared' });
  control(url, 'project_mount_set', { project_id: project.project_id, node_id: nodes[1].node_id, export_name: 'shared', mount_path: '/shared' });

  step('workspace status: one selected mount per path, availability rollup');
  const status = control(url, 'workspace_status', { project_id: project.project_id, project_token: project.project_token });
  show({
    mounts: (status.mounts as Array<Record<string, unknown>>).map((m) => `${m.mount_path} -> ${m.node_name} (${m.state})`),
    availability: status.availability,
    drift: status.drift,
  });

  step('node-b refreshes its lease; node-a lets its lease lapse (1 s): /shared fails over');
  control(url, 'node_lease_refresh', { node_id: nodes[1].node_id, node_secret: nodes[1].node_secret, lease_ttl_ms: 120_000 });
  control(url, 'node_lease_refresh', { node_id: nodes[0].node_id, node_secret: nodes[0].node_secret, lease_ttl_ms: 1000 });
  await new Promise((r) => setTimeout(r, 1300));
  const after = control(url, 'workspace_status', { project_id: project.project_id, project_token: project.project_token });
  show({
    mounts: (after.mounts as Array<Record<string, unknown>>).map((m) => `${m.mount_path} -> ${m.node_name} (${m.state})`),
    availability: after.availability,
    drift: (after.drift as { items: Array<{ message: string }> }).items.map((d) => d.message),
  });

  step('done: stopping everything the demo started');
}

main()
  .then(() => {
    cleanup();
    process.exit(0);
  })
  .catch((e) => {
    process.stderr.write(`demo failed: ${(e as Error).message}\n`);
    cleanup();
    process.exit(1);
  });
