/**
 * `npm run demo`: the end-to-end demo. Builds if needed, starts `svc` and two
 * `svc-fs-node`s exporting real directories in control daemon mode (each pairs with an invite,
 * keeps its lease and publishes its catalog record), sets the workspace (a project and its
 * mounts) from docs/workspace.example.yaml with `svc-control apply`, and
 * then, through the real `svc-fs-mount`, lists the workspace, reads a file, writes one, mounts
 * the workspace with FUSE where the machine allows it and reads through the mount, kills the
 * primary node of the failover path and reads again from the survivor, then shows the killed
 * node `degraded` (its control session closed), printing each step.
 * Everything it starts is stopped on exit or Ctrl-C.
 *
 *   node-a: docs    = this repository's docs/ (read-only)     -> /docs
 *           shared  = a temporary directory                     -> /shared (primary)
 *   node-b: samples = a temporary directory with sample files  -> /samples
 *           shared  = the same temporary directory              -> /shared (standby)
 *
 * Flags: `--ci` (non-interactive; the demo never waits for input, the flag is accepted so CI
 * can say so), `--keep` (leave the temporary directory for inspection), `--tls` (make a
 * throwaway CA and certificates with `openssl` and run the same steps over `wss://`: svc and
 * both nodes serve TLS, every client verifies them with `--tls-ca`; without `openssl` the demo
 * says so and runs over `ws://`).
 */
import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fuse3Unavailable } from '../libs/fuse3/src/binding';

const ROOT = resolve(__dirname, '..', '..');
const BIN = {
  svc: join(ROOT, 'dist/src/main.js'),
  control: join(ROOT, 'dist/apps/svc-control/src/main.js'),
  fsNode: join(ROOT, 'dist/apps/svc-fs-node/src/main.js'),
  fsMount: join(ROOT, 'dist/apps/svc-fs-mount/src/main.js'),
};
const keep = process.argv.includes('--keep');
const tlsRequested = process.argv.includes('--tls');
const work = mkdtempSync(join(tmpdir(), 'svc-demo-'));
const children: ChildProcess[] = [];
const ADMIN = `demo-admin-${process.pid}-${Date.now()}`;

const tty = process.stdout.isTTY;
function step(title: string): void {
  process.stdout.write(tty ? `\n\x1b[1m==> ${title}\x1b[0m\n` : `\n==> ${title}\n`);
}

/** A payload for display: secrets shortened so they do not end up in logs. */
function masked(payload: object): string {
  return JSON.stringify(payload, (k: string, v: unknown) => (/(_token|_secret)$/.test(k) && typeof v === 'string' ? `${v.slice(0, 4)}...` : v));
}

/** Stops every process the demo started (SIGTERM, then SIGKILL after 5 s) and waits for them. */
async function cleanup(): Promise<void> {
  const running = children.filter((c) => c.exitCode === null && c.signalCode === null);
  await Promise.all(
    running.map(
      (c) =>
        new Promise<void>((resolve) => {
          const timer = setTimeout(() => c.kill('SIGKILL'), 5000);
          c.once('exit', () => {
            clearTimeout(timer);
            resolve();
          });
          c.kill('SIGTERM');
        }),
    ),
  );
  const mnt = join(work, 'mnt');
  if (existsSync(mnt)) spawnSync('fusermount3', ['-uz', mnt]);
  if (!keep) rmSync(work, { recursive: true, force: true });
}

/** Starts a server program and resolves with the URL of its `listening on` line. */
function startServer(name: string, script: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [script, ...args], { env: { ...process.env, SVC_LOG_LEVEL: 'warn', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let err = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  return new Promise((res, rej) => {
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = /listening on (\S+)/.exec(out);
      if (m) res({ url: m[1], child });
    });
    child.once('exit', (code) => rej(new Error(`${name} exited with ${code}: ${err}`)));
  });
}

/** Certificates of the `--tls` run: the CA every client trusts, one certificate per server. */
interface DemoTls {
  ca: string;
  certs: Record<'svc' | 'node-a' | 'node-b', { cert: string; key: string }>;
}

/** `--tls-ca CA` for every client when the demo runs over TLS. */
let tlsArgs: string[] = [];

/** Why the `--tls` run cannot make certificates here, or null when `openssl` works. */
function opensslMissing(): string | null {
  const r = spawnSync('openssl', ['version'], { encoding: 'utf8' });
  return r.status === 0 ? null : `openssl is not installed (${r.error?.message ?? `exit ${r.status}`}; Debian: apt-get install openssl)`;
}

/**
 * A throwaway CA (EC P-256, valid 2 days) and a certificate for each server, for 127.0.0.1 and
 * localhost, made with `openssl` in `dir` (the commands are shown).
 */
function makeDemoTls(dir: string): DemoTls {
  mkdirSync(dir);
  const run = (args: string[]) => {
    const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`openssl ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
  };
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  process.stdout.write(`$ openssl req -x509 ${ec.join(' ')} -keyout ca.key -out ca.pem -days 2 -subj '/CN=svc demo CA'\n`);
  run(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=svc demo CA']);
  writeFileSync(join(dir, 'server.ext'), 'basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n');
  const certs = {} as DemoTls['certs'];
  for (const name of ['svc', 'node-a', 'node-b'] as const) {
    process.stdout.write(`$ openssl req -new ${ec.join(' ')} -keyout ${name}.key -out ${name}.csr -subj '/CN=${name}'\n`);
    run(['req', '-new', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`]);
    process.stdout.write(`$ openssl x509 -req -in ${name}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext -out ${name}.pem\n`);
    run([
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-days',
      '2',
      '-extfile',
      'server.ext',
      '-out',
      `${name}.pem`,
    ]);
    certs[name] = { cert: join(dir, `${name}.pem`), key: join(dir, `${name}.key`) };
  }
  process.stdout.write(`  CA ${join(dir, 'ca.pem')}; server certificates for IP:127.0.0.1, DNS:localhost\n`);
  return { ca: join(dir, 'ca.pem'), certs };
}

/** Runs `svc-control <op> <payload>` and returns the parsed reply (exits the demo on failure). */
function control(url: string, op: string, payload: object = {}): Record<string, unknown> {
  const args = ['--url', url, ...tlsArgs, op, JSON.stringify(payload)];
  process.stdout.write(`$ svc-control ${tlsArgs.length ? `${tlsArgs.join(' ')} ` : ''}${op} '${masked(payload)}'\n`);
  const r = spawnSync(process.execPath, [BIN.control, ...args], { env: { ...process.env, SVC_AUTH_TOKEN: ADMIN }, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`svc-control ${op} failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

/**
 * Runs `svc-control apply ARGS`, showing the command and its output (the project token
 * shortened), and returns its standard output (exits the demo on failure).
 */
function apply(url: string, args: string[]): string {
  process.stdout.write(`$ svc-control ${tlsArgs.length ? `${tlsArgs.join(' ')} ` : ''}apply ${args.map((a) => a.replace(ROOT + '/', '')).join(' ')}\n`);
  const r = spawnSync(process.execPath, [BIN.control, '--url', url, ...tlsArgs, 'apply', ...args], {
    env: { ...process.env, SVC_AUTH_TOKEN: ADMIN },
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`svc-control apply failed (${r.status}): ${r.stderr}${r.stdout}`);
  process.stdout.write(
    r.stdout
      .replace(/^(project_token: )(\S{4})\S*/m, '$1$2...')
      .replace(/^/gm, '  ')
      .replace(/ {2}$/, ''),
  );
  return r.stdout;
}

/** `svc-control` without echoing the command (for polling). */
function controlQuiet(url: string, op: string, payload: object = {}): Record<string, unknown> {
  const r = spawnSync(process.execPath, [BIN.control, '--url', url, ...tlsArgs, op, JSON.stringify(payload)], {
    env: { ...process.env, SVC_AUTH_TOKEN: ADMIN },
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`svc-control ${op} failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

/** Polls `fn` until it returns a value (at most 20 s). */
async function waitUntil<T>(fn: () => Promise<T | undefined> | T | undefined): Promise<T> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Why FUSE cannot be used here, or null when it can. */
function fuseUnavailable(): string | null {
  const why = fuse3Unavailable();
  if (why) return why;
  if (spawnSync('fusermount3', ['-V']).status !== 0) return 'fusermount3 is missing (Debian: apt-get install fuse3)';
  return null;
}

/** Runs a shell tool, showing the command and its output. */
function tool(cmd: string, args: string[], maxLines = 12): string {
  process.stdout.write(`$ ${cmd} ${args.join(' ')}\n`);
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  let lines = r.stdout.replace(/\n$/, '').split('\n');
  if (lines.length > maxLines) lines = [...lines.slice(0, maxLines), `... (${lines.length - maxLines} more lines)`];
  if (r.stdout) process.stdout.write(`${lines.map((l) => `  ${l}`).join('\n')}\n`);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
  return r.stdout;
}

/** The workspace options of every svc-fs-mount run (tokens masked when shown). */
let mountArgs: string[] = [];

/**
 * Runs the real `svc-fs-mount` with the workspace options, shows the command (tokens masked)
 * and its output, and returns its standard output.
 * @throws when it exits non-zero and `allowFailure` is not set
 */
function mount(args: string[], options: { input?: string; allowFailure?: boolean; maxLines?: number } = {}): string {
  const shown = [...mountArgs, ...args].map((a, i, all) => (/^--(auth|project)-token$/.test(all[i - 1] ?? '') ? `${a.slice(0, 4)}...` : a));
  process.stdout.write(`$ svc-fs-mount ${shown.map((a) => (/[\s'"|]/.test(a) ? `'${a}'` : a)).join(' ')}${options.input !== undefined ? ' <<< ...' : ''}\n`);
  const t0 = Date.now();
  const r = spawnSync(process.execPath, [BIN.fsMount, ...mountArgs, ...args], {
    input: options.input ?? '',
    encoding: 'utf8',
    env: { ...process.env, SVC_AUTH_TOKEN: '' },
  });
  const ms = Date.now() - t0;
  let lines = r.stdout.replace(/\n$/, '').split('\n');
  if (options.maxLines && lines.length > options.maxLines) lines = [...lines.slice(0, options.maxLines), `... (${lines.length - options.maxLines} more lines)`];
  if (r.stdout) process.stdout.write(`${lines.map((l) => `  ${l}`).join('\n')}\n`);
  if (r.stderr) process.stdout.write(`${r.stderr.replace(/\n$/, '').replace(/^/gm, '  ! ')}\n`);
  process.stdout.write(`  (exit ${r.status}, ${ms} ms)\n`);
  if (r.status !== 0 && !options.allowFailure) throw new Error(`svc-fs-mount ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
  return r.stdout;
}

function ensureBuilt(): void {
  if (Object.values(BIN).every((p) => existsSync(p))) return;
  step('build (dist/ is missing)');
  const r = spawnSync('npm', ['run', 'build', '--silent'], { cwd: ROOT, stdio: 'inherit' });
  if (r.status !== 0) throw new Error('npm run build failed');
}

async function main(): Promise<void> {
  process.on('SIGINT', () => void cleanup().then(() => process.exit(130)));
  process.on('SIGTERM', () => void cleanup().then(() => process.exit(143)));
  ensureBuilt();

  let tls: DemoTls | null = null;
  if (tlsRequested) {
    const missing = opensslMissing();
    if (missing) {
      step(`TLS skipped: ${missing}; the demo runs over plain ws://`);
    } else {
      step('--tls: make a throwaway CA and a certificate for svc and each node with openssl');
      tls = makeDemoTls(join(work, 'tls'));
      tlsArgs = ['--tls-ca', tls.ca];
    }
  }
  const serverTls = (name: keyof DemoTls['certs']) => (tls ? ['--tls-cert', tls.certs[name].cert, '--tls-key', tls.certs[name].key] : []);

  step(`start the control plane (svc) on a free port, state in a temporary directory${tls ? ', serving wss:// with its certificate' : ''}`);
  const { url } = await startServer('svc', BIN.svc, ['--port', '0', '--state-dir', join(work, 'state'), ...serverTls('svc')], { SVC_ADMIN_TOKEN: ADMIN });
  process.stdout.write(`svc listening on ${url}\n`);
  if (tls) {
    step('a client that does not trust the CA is refused before it sends its token (exit 2)');
    process.stdout.write(`$ svc-control --url ${url} node_list\n`);
    const refused = spawnSync(process.execPath, [BIN.control, '--url', url, 'node_list'], {
      env: { ...process.env, SVC_AUTH_TOKEN: ADMIN, SVC_TLS_CA: '' },
      encoding: 'utf8',
    });
    process.stdout.write(`${refused.stderr.replace(/\n$/, '').replace(/^/gm, '  ! ')}\n  (exit ${refused.status})\n`);
    if (refused.status !== 2) throw new Error(`a client without the CA was not refused (exit ${refused.status})`);
  }

  step('prepare directories: sample files for node-b, a shared directory exported by both nodes');
  const samples = join(work, 'samples');
  const shared = join(work, 'shared');
  mkdirSync(join(samples, 'notes'), { recursive: true });
  mkdirSync(shared);
  writeFileSync(join(samples, 'hello.txt'), 'Hello from node-b.\n');
  writeFileSync(join(samples, 'notes', 'todo.md'), '- try the failover\n- read docs/protocol.md\n');
  writeFileSync(join(shared, 'README.txt'), 'This directory is exported by node-a and node-b.\n');
  process.stdout.write(`samples: ${samples}\nshared:  ${shared}\ndocs:    ${join(ROOT, 'docs')} (read-only on node-a)\n`);

  step('start two FS nodes in control daemon mode: each pairs with an invite, keeps its lease, publishes its services');
  // node-a asks for the longer lease, so the selection rule (latest lease expiry among online
  // nodes) makes it the primary of /shared.
  const plan = [
    { name: 'node-a', lease: 1_800_000, exports: [`docs=${join(ROOT, 'docs')}:ro`, `shared=${shared}`] },
    { name: 'node-b', lease: 900_000, exports: [`samples=${samples}`, `shared=${shared}`] },
  ];
  const nodes: Array<{ id: string; name: string; child: ChildProcess; url: string }> = [];
  for (const p of plan) {
    const invite = control(url, 'node_invite_create', { ttl_ms: 600_000 });
    const nodeTls = [...serverTls(p.name as 'node-a' | 'node-b'), ...tlsArgs];
    const args = [
      '--port',
      '0',
      '--node-name',
      p.name,
      '--control-url',
      url,
      `--invite-token=${String(invite.invite_token)}`,
      '--state-file',
      join(work, `${p.name}.state.json`),
      '--lease-ttl-ms',
      String(p.lease),
      ...nodeTls,
    ];
    for (const e of p.exports) args.push('--export', e);
    process.stdout.write(
      `$ svc-fs-node --port 0 --node-name ${p.name} --control-url ${url} --invite-token ${String(invite.invite_token).slice(0, 4)}... ${nodeTls.length ? `${nodeTls.join(' ')} ` : ''}${p.exports.map((e) => `--export ${e}`).join(' ')}\n`,
    );
    const started = await startServer(p.name, BIN.fsNode, args, { SVC_AUTH_TOKEN: ADMIN });
    const id = await waitUntil(async () => {
      const { nodes: list } = controlQuiet(url, 'node_list') as { nodes: Array<{ node_id: string; node_name: string }> };
      const n = list.find((x) => x.node_name === p.name);
      return n && (controlQuiet(url, 'node_service_get', { node_id: n.node_id }).services as unknown[]).length > 0 ? n.node_id : undefined;
    });
    process.stdout.write(`  ${p.name} paired as ${id}, serving on ${started.url}\n`);
    nodes.push({ id, name: p.name, child: started.child, url: started.url });
  }

  step('set the workspace from a file: /docs (node-a), /samples (node-b), /shared (node-a and node-b: a failover group)');
  const workspaceFile = join(ROOT, 'docs', 'workspace.example.yaml');
  const applied = apply(url, ['-f', workspaceFile]);
  const projectId = /^project_id: (\S+)$/m.exec(applied)?.[1];
  const projectToken = /^project_token: (\S+)/m.exec(applied)?.[1];
  if (!projectId || !projectToken) throw new Error(`svc-control apply did not report a new project:\n${applied}`);
  step('apply the same file again: nothing to change');
  apply(url, ['-f', workspaceFile]);
  mountArgs = ['--workspace-url', url, '--auth-token', ADMIN, '--project-id', projectId, '--project-token', projectToken, ...tlsArgs];

  step('the workspace as svc-fs-mount sees it: topology, states and a probe of every endpoint');
  mount(['status']);

  step("list the workspace: / is synthetic (mount path segments), below are the nodes' directories");
  mount(['readdir', '/']);
  mount(['readdir', '/docs']);
  mount(['readdir', '/samples']);

  step('read a file from node-a (docs/ of this repository, read-only)');
  mount(['cat', '/docs/protocol.md'], { maxLines: 8 });

  step('write a file on node-b, read it back; writing to the read-only /docs is refused (EROFS)');
  const text = `written through svc-fs-mount at ${new Date().toISOString()}\n`;
  mount(['write', '/samples/from-demo.txt', '-'], { input: text });
  const back = mount(['cat', '/samples/from-demo.txt']);
  if (back !== text) throw new Error('the file read back differs from what was written');
  mount(['write', '/docs/nope.txt', 'x'], { allowFailure: true });

  step('read /shared from its primary (node-a)');
  mount(['cat', '/shared/README.txt']);

  const noFuse = fuseUnavailable();
  let fuse: { child: ChildProcess; dir: string } | null = null;
  if (noFuse) {
    step(`FUSE mount skipped: ${noFuse}`);
  } else {
    step('mount the workspace with FUSE and use it with ordinary tools');
    const dir = join(work, 'mnt');
    mkdirSync(dir);
    process.stdout.write(`$ svc-fs-mount ... mount ${dir}\n`);
    const child = spawn(process.execPath, [BIN.fsMount, ...mountArgs, 'mount', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    await waitUntil(() =>
      out.includes('mounted on') ? true : child.exitCode !== null ? Promise.reject(new Error('the FUSE mount failed to start')) : undefined,
    );
    fuse = { child, dir };
    tool('ls', ['-la', dir]);
    tool('ls', ['-la', join(dir, 'samples')]);
    tool('grep', ['-R', '-l', 'failover', dir]);
    tool('cat', [join(dir, 'shared', 'README.txt')]);
  }

  step('kill node-a (SIGKILL), then read /shared again: svc-fs-mount fails over to node-b');
  nodes[0].child.kill('SIGKILL');
  await new Promise((r) => nodes[0].child.once('exit', r));
  process.stdout.write(`  node-a (pid ${nodes[0].child.pid}) killed\n`);
  const survivor = mount(['cat', '/shared/README.txt']);
  if (!survivor.includes('exported by node-a and node-b')) throw new Error('the survivor did not serve /shared');
  // svc saw node-a's control session close: node-a is degraded within 2 s, node-b selected
  await new Promise((r) => setTimeout(r, 2000));
  mount(['status'], { allowFailure: true });
  if (fuse) {
    await new Promise((r) => setTimeout(r, 1100)); // the mount's attribute cache (1 s) expires
    const viaMount = tool('cat', [join(fuse.dir, 'shared', 'README.txt')]);
    if (!viaMount.includes('exported by node-a and node-b')) throw new Error('the FUSE mount did not fail over');
    step('unmount (SIGTERM to svc-fs-mount mount)');
    const f = fuse;
    const exited = new Promise<number | null>((r) => f.child.once('exit', (code) => r(code)));
    f.child.kill('SIGTERM');
    process.stdout.write(`  svc-fs-mount mount exited ${await exited}\n`);
  }

  step('the audit log: every change above, by whom, with its result');
  process.stdout.write(`$ svc-control ${tlsArgs.length ? `${tlsArgs.join(' ')} ` : ''}audit --limit 8\n`);
  const audit = spawnSync(process.execPath, [BIN.control, '--url', url, ...tlsArgs, 'audit', '--limit', '8'], {
    env: { ...process.env, SVC_AUTH_TOKEN: ADMIN },
    encoding: 'utf8',
  });
  if (audit.status !== 0) throw new Error(`svc-control audit failed (${audit.status}): ${audit.stderr}`);
  process.stdout.write(audit.stdout.replace(/^/gm, '  ').replace(/ {2}$/, ''));

  step('done: stopping everything the demo started');
}

main()
  .then(async () => {
    await cleanup();
    process.exit(0);
  })
  .catch(async (e) => {
    process.stderr.write(`demo failed: ${(e as Error).message}\n`);
    await cleanup();
    process.exit(1);
  });
