/**
 * e2e: TLS on every listener (docs/operations.md "Transport security (TLS)"), with a CA and
 * certificates the test makes with `openssl`:
 *  - `svc` and two `svc-fs-node` daemons on `wss://`: pairing, lease refresh, catalog upsert,
 *    the topology's `wss://` fs_url, `svc-fs-mount` reads and writes, a FUSE mount, the runtime
 *    namespace routed to a TLS node, failover;
 *  - clients refuse an unknown CA, a certificate for another host and an expired certificate,
 *    with the reason and before any upgrade reaches the server; plain and TLS mixed up fail
 *    with a clear message and no crash;
 *  - start-up checks (exit 2 naming the file and the reason) and the loopback rule;
 *  - certificate rotation under an open session and a FUSE mount (rename, in place + SIGHUP,
 *    garbage);
 *  - the raw bytes between client and server (a recording TCP proxy) hold neither a file's
 *    content nor a token, where the same run over plain ws:// holds both.
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes, X509Certificate } from 'node:crypto';
import { chmodSync, copyFileSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ClientTls, FsClient, loadClientTls } from '../libs/client/src';
import { ADMIN_TOKEN, BIN, cleanupTmp, killAll, runCli, Running, sleep, startNodeDaemon, startProcess, startSvc, tmpDir, waitFor } from './support/processes';
import { fuseUnavailable, runMount } from './helpers/fs-mount';
import { makeCa, opensslMissing, peerFingerprint, recordingProxy, TestCa, unmaskedClientPayloads } from './helpers/tls';
import { startWorkspace, Workspace } from './helpers/workspace';

const noFuse = fuseUnavailable();
if (noFuse) process.stdout.write(`TLS FUSE e2e steps skipped: ${noFuse}\n`);
const itFuse = noFuse ? it.skip : it;
const mounted = (dir: string) =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === dir);

// The certificates are made by the test with openssl: without it every test here is skipped, saying why.
const missingOpenssl = opensslMissing();
if (missingOpenssl) process.stdout.write(`TLS e2e tests skipped: ${missingOpenssl}\n`);
const describe = missingOpenssl ? global.describe.skip : global.describe;

let ca: TestCa;
let tls: ClientTls;
beforeAll(() => {
  if (missingOpenssl) return;
  ca = makeCa();
  tls = loadClientTls(ca.cert);
});
afterAll(async () => {
  await killAll();
  cleanupTmp();
});

/** `svc-control` with the admin token; extra args before the operation. */
function control(args: string[], env: NodeJS.ProcessEnv = {}) {
  return runCli(BIN.control, args, { env: { SVC_AUTH_TOKEN: ADMIN_TOKEN, SVC_TLS_CA: '', ...env } });
}

/** A FUSE mount of `svc-fs-mount ... mount DIR`, stopped with SIGTERM. */
async function fuseMount(args: string[]): Promise<{ dir: string; proc: ChildProcess; stop: () => Promise<number | null> }> {
  const dir = join(tmpDir('tls-mnt-'), 'm');
  mkdirSync(dir);
  const proc = spawn(process.execPath, [BIN.fsMount, ...args, 'mount', dir], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, SVC_AUTH_TOKEN: '', SVC_TLS_CA: '' },
  });
  let out = '';
  let err = '';
  proc.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  proc.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  await waitFor(() => out.includes(`mounted on ${dir}`) || proc.exitCode !== null, 20_000);
  if (!out.includes(`mounted on ${dir}`)) throw new Error(`mount failed: ${out} ${err}`);
  return {
    dir,
    proc,
    stop: async () => {
      const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
      proc.kill('SIGTERM');
      const code = await exited;
      if (mounted(dir)) execFileSync('fusermount', ['-uz', dir], { stdio: 'ignore' });
      return code;
    },
  };
}

describe('a workspace on TLS: svc and two svc-fs-node daemons', () => {
  let ws: Workspace;
  beforeAll(async () => {
    ws = await startWorkspace({ tls: { ca: ca.cert, svc: ca.issue('svc'), nodeA: ca.issue('node-a'), nodeB: ca.issue('node-b') } });
  }, 90_000);
  afterAll(() => ws?.close());

  it('serves wss:// everywhere; pairing, lease refresh and catalog upsert go over TLS', async () => {
    expect(ws.svc.url).toMatch(/^wss:\/\/127\.0\.0\.1:\d+\/$/);
    expect(ws.nodeA.url).toMatch(/^wss:\/\/127\.0\.0\.1:\d+\/v2\/fs$/);
    expect(ws.nodeB.url).toMatch(/^wss:\/\/127\.0\.0\.1:\d+\/v2\/fs$/);
    type NodeInfo = { node_id: string; node_name: string; fs_url: string; lease_expires_at_ms: number; state: string };
    const list = async () => (await ws.admin.request<{ nodes: NodeInfo[] }>('node_list')).nodes;
    const before = await list();
    // paired (in startWorkspace, by invite over wss://) and advertising their wss:// listening URL
    expect(before.find((n) => n.node_id === ws.nodeIds.a)?.fs_url).toBe(ws.nodeA.url);
    expect(before.find((n) => n.node_id === ws.nodeIds.b)?.fs_url).toBe(ws.nodeB.url);
    // leases refreshed every second over the TLS control session
    await waitFor(async () => {
      const now = await list();
      return [ws.nodeIds.a, ws.nodeIds.b].every(
        (id) => now.find((n) => n.node_id === id)!.lease_expires_at_ms > before.find((n) => n.node_id === id)!.lease_expires_at_ms,
      );
    }, 10_000);
    // catalog upserts arrived: the fs service of each node
    for (const id of [ws.nodeIds.a, ws.nodeIds.b]) {
      const { services } = await ws.admin.request<{ services: Array<{ service_id: string }> }>('node_service_get', { node_id: id });
      expect(services.map((s) => s.service_id)).toContain('fs');
    }
  });

  it('hands the wss:// fs_url to mount clients unchanged; svc-fs-mount reads and writes through it', async () => {
    const status = await ws.admin.request<{ mounts: Array<{ mount_path: string; fs_url: string }> }>('workspace_status', {
      project_id: ws.project.project_id,
      project_token: ws.project.project_token,
    });
    const urls = Object.fromEntries(status.mounts.map((m) => [m.mount_path, m.fs_url]));
    expect(urls['/a']).toBe(ws.nodeA.url);
    expect(urls['/b']).toBe(ws.nodeB.url);

    const st = await runMount([...ws.mountArgs, '--json', 'status']);
    expect({ code: st.code, stderr: st.stderr }).toEqual({ code: 0, stderr: '' });
    const report = JSON.parse(st.stdout.toString()) as { mounts: Array<{ mount_path: string; candidates: Array<{ fs_url: string; probe: { ok: boolean } }> }> };
    for (const m of report.mounts)
      for (const c of m.candidates) {
        expect(c.fs_url).toMatch(/^wss:\/\//);
        expect(c.probe).toMatchObject({ ok: true });
      }

    const data = randomBytes(3 * 1024 * 1024 + 17);
    const w = await runMount([...ws.mountArgs, 'write', '/b/blob.bin', '-'], { input: data });
    expect(w.stderr).toBe('');
    expect(w.code).toBe(0);
    expect(readFileSync(join(ws.dirs.b, 'blob.bin')).equals(data)).toBe(true);
    const r = await runMount([...ws.mountArgs, 'cat', '/b/blob.bin']);
    expect(r.code).toBe(0);
    expect(r.stdout.equals(data)).toBe(true);
  });

  itFuse('mounts the workspace with FUSE over TLS', async () => {
    writeFileSync(join(ws.dirs.a, 'fuse.txt'), 'read through FUSE over wss\n');
    const m = await fuseMount(ws.mountArgs);
    try {
      expect(execFileSync('ls', ['-1', m.dir], { encoding: 'utf8' }).trim().split('\n')).toEqual(['a', 'b', 'shared']);
      expect(readFileSync(join(m.dir, 'a', 'fuse.txt'), 'utf8')).toBe('read through FUSE over wss\n');
      writeFileSync(join(m.dir, 'b', 'via-fuse.txt'), 'written through FUSE over wss\n');
      expect(readFileSync(join(ws.dirs.b, 'via-fuse.txt'), 'utf8')).toBe('written through FUSE over wss\n');
    } finally {
      expect(await m.stop()).toBe(0);
    }
  });

  it('routes the runtime namespace to TLS nodes (node exports and project workspaces)', async () => {
    writeFileSync(join(ws.dirs.a, 'runtime.txt'), 'routed by svc over wss\n');
    const base = ['--url', ws.svc.url, '--tls-ca', ca.cert, 'acheron', 'cat'];
    const viaNode = await control([...base, `/nodes/${ws.nodeIds.a}/fs/work/runtime.txt`]);
    expect(viaNode.stderr).toBe('');
    expect(viaNode.stdout).toBe('routed by svc over wss\n');
    const viaProject = await control([...base, `/projects/${ws.project.project_id}/fs/a/runtime.txt`]);
    expect(viaProject.stderr).toBe('');
    expect(viaProject.stdout).toBe('routed by svc over wss\n');
    writeFileSync(join(ws.dirs.b, 'from-runtime.txt'), 'old content');
    const write = await control([
      '--url',
      ws.svc.url,
      '--tls-ca',
      ca.cert,
      'acheron',
      'write',
      `/projects/${ws.project.project_id}/fs/b/from-runtime.txt`,
      'runtime write over wss',
    ]);
    expect(write.stderr).toBe('');
    expect(write.code).toBe(0);
    expect(readFileSync(join(ws.dirs.b, 'from-runtime.txt'), 'utf8')).toBe('runtime write over wss');
  });

  it('fails over to the standby node when the primary dies', async () => {
    writeFileSync(join(ws.dirs.shared, 'failover.txt'), 'shared by both nodes\n');
    const first = await runMount([...ws.mountArgs, 'cat', '/shared/failover.txt']);
    expect({ code: first.code, stderr: first.stderr, out: first.stdout.toString() }).toEqual({ code: 0, stderr: '', out: 'shared by both nodes\n' });
    await ws.nodeA.kill();
    const after = await runMount([...ws.mountArgs, 'cat', '/shared/failover.txt']);
    expect({ code: after.code, stderr: after.stderr, out: after.stdout.toString() }).toEqual({ code: 0, stderr: '', out: 'shared by both nodes\n' });
    const st = await runMount([...ws.mountArgs, '--json', 'status']);
    const shared = (
      JSON.parse(st.stdout.toString()) as { mounts: Array<{ mount_path: string; candidates: Array<{ fs_url: string; probe: { ok: boolean } }> }> }
    ).mounts.find((m) => m.mount_path === '/shared')!;
    expect(shared.candidates.find((c) => c.fs_url === ws.nodeB.url)?.probe).toMatchObject({ ok: true });
  });
});

describe('clients refuse what they cannot verify, before any upgrade reaches the server', () => {
  let good: Running;
  let wrongHost: Running;
  let expiring: Running;
  let notAfter: number;
  const upgrades = (r: Running) => (r.stderr().match(/"msg":"upgrade request"/g) ?? []).length;
  const debug = { SVC_LOG_LEVEL: 'debug' };

  beforeAll(async () => {
    // Valid for a few more seconds: svc accepts it at start; by the time the test connects it has expired.
    notAfter = Date.now() + 12_000;
    const soon = ca.issue('expiring', { notAfter: new Date(notAfter) });
    expiring = await startSvc({ args: ['--tls-cert', soon.cert, '--tls-key', soon.key], env: debug });
    const g = ca.issue('good');
    good = await startSvc({ args: ['--tls-cert', g.cert, '--tls-key', g.key], env: debug });
    const other = ca.issue('other-host', { sans: ['DNS:other.example'] });
    wrongHost = await startSvc({ args: ['--tls-cert', other.cert, '--tls-key', other.key], env: debug });
  }, 60_000);

  it('a certificate of an unknown CA: exit 2 naming the URL and the reason; no upgrade', async () => {
    const otherCa = makeCa('another CA');
    for (const args of [['--tls-ca', otherCa.cert], []]) {
      const r = await control(['--url', good.url, ...args, 'node_list']);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(`TLS: refused the certificate of ${good.url}: unknown CA`);
    }
    // SVC_TLS_CA is not trusted either when it names another CA; NODE_TLS_REJECT_UNAUTHORIZED=0 changes nothing
    const env = await control(['--url', good.url, 'node_list'], { SVC_TLS_CA: otherCa.cert, NODE_TLS_REJECT_UNAUTHORIZED: '0' });
    expect(env.code).toBe(2);
    expect(env.stderr).toContain('unknown CA');
    expect(upgrades(good)).toBe(0);
    expect(good.stderr()).not.toContain(ADMIN_TOKEN);
    // the right CA (flag or environment) connects, and then the server does log the upgrade
    const ok = await control(['--url', good.url, '--tls-ca', ca.cert, 'node_list']);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect((await control(['--url', good.url, 'node_list'], { SVC_TLS_CA: ca.cert })).code).toBe(0);
    await waitFor(() => upgrades(good) === 2, 5000);
    // so does localhost, also in the certificate
    expect((await control(['--url', good.url.replace('127.0.0.1', 'localhost'), '--tls-ca', ca.cert, 'node_list'])).code).toBe(0);
  });

  it('a certificate for another host name: refused as the wrong host; no upgrade', async () => {
    const r = await control(['--url', wrongHost.url, '--tls-ca', ca.cert, 'node_list']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`TLS: refused the certificate of ${wrongHost.url}: wrong host: the certificate is not for 127.0.0.1`);
    expect(upgrades(wrongHost)).toBe(0);
  });

  it('an expired certificate: refused as expired; no upgrade', async () => {
    const wait = notAfter + 1500 - Date.now();
    if (wait > 0) await sleep(wait);
    const r = await control(['--url', expiring.url, '--tls-ca', ca.cert, 'node_list']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`TLS: refused the certificate of ${expiring.url}: the certificate has expired`);
    expect(upgrades(expiring)).toBe(0);
  }, 30_000);

  it('a mount reports the refusal in status and exits 2 on a read', async () => {
    const dir = tmpDir('tls-export-');
    writeFileSync(join(dir, 'f.txt'), 'x');
    const cert = ca.issue('standalone');
    const node = await startProcess(BIN.fsNode, ['--port', '0', '--export', `work=${dir}`, '--tls-cert', cert.cert, '--tls-key', cert.key], {
      SVC_LOG_LEVEL: 'warn',
      SVC_FS_NODE_AUTH_TOKEN: '',
    });
    const ep = ['--endpoint', `w=${node.url}`];
    const st = await runMount([...ep, 'status']);
    expect(st.code).toBe(1);
    expect(st.stdout.toString()).toContain(`FAILED: TLS: refused the certificate of ${node.url}: unknown CA`);
    const cat = await runMount([...ep, 'cat', '/w/f.txt']);
    expect(cat.code).toBe(2);
    expect(cat.stderr).toContain('unknown CA');
    const ok = await runMount([...ep, '--tls-ca', ca.cert, 'cat', '/w/f.txt']);
    expect(ok.code).toBe(0);
    expect(ok.stdout.toString()).toBe('x');
    // an unusable CA file is a usage error naming it
    const bad = await runMount([...ep, '--tls-ca', join(dir, 'nope.pem'), 'cat', '/w/f.txt']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain(`TLS CA file ${join(dir, 'nope.pem')}: the file does not exist`);
  });

  it('a node daemon that cannot verify the control plane says why and keeps retrying; no upgrade', async () => {
    const before = upgrades(good);
    const node = await startNodeDaemon(
      tmpDir('tls-node-'),
      good.url,
      'tls-node',
      ['--invite-token', 'inv', '--reconnect-backoff-ms', '100', '--reconnect-backoff-max-ms', '200'],
      { SVC_LOG_LEVEL: 'warn', SVC_TLS_CA: '' },
    );
    await waitFor(() => (node.stderr().match(/unknown CA/g) ?? []).length >= 2, 10_000);
    expect(node.stderr()).toContain(`cannot connect to the control plane (attempt 1): TLS: refused the certificate of ${good.url}: unknown CA`);
    expect(node.proc.exitCode).toBeNull();
    expect(upgrades(good)).toBe(before);
    await node.stop();
  });

  it('plain ws:// against a TLS listener and wss:// against a plain one: a clear error, no crash, no token logged', async () => {
    const plainUrl = good.url.replace('wss://', 'ws://');
    const r = await control(['--url', plainUrl, 'node_list']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`${plainUrl}: the server closed the connection without answering the WebSocket upgrade (if it serves TLS, use a wss:// URL)`);
    await waitFor(() => good.stderr().includes('a plain HTTP/ws:// request on the TLS port'), 5000);
    expect(good.stderr()).not.toContain(ADMIN_TOKEN);

    const plain = await startSvc({ env: debug });
    const tlsUrl = plain.url.replace('ws://', 'wss://');
    const t = await control(['--url', tlsUrl, '--tls-ca', ca.cert, 'node_list']);
    expect(t.code).toBe(2);
    expect(t.stderr).toContain(`TLS handshake with ${tlsUrl} failed`);
    expect(t.stderr).toContain('does it serve plain ws://?');
    expect(upgrades(plain)).toBe(0);
    expect(plain.stderr()).not.toContain(ADMIN_TOKEN);
    // both servers still serve
    expect((await control(['--url', good.url, '--tls-ca', ca.cert, 'node_list'])).code).toBe(0);
    expect((await control(['--url', plain.url, 'node_list'])).code).toBe(0);
    expect(good.proc.exitCode).toBeNull();
    expect(plain.proc.exitCode).toBeNull();
  });
});

describe('start-up checks', () => {
  const svcArgs = (extra: string[]) => [BIN.svc, ['--port', '0', '--state-dir', tmpDir('svc-state-'), ...extra]] as const;
  const nodeArgs = (extra: string[]) => [BIN.fsNode, ['--port', '0', '--export', `work=${tmpDir('tls-export-')}`, ...extra]] as const;
  const run = ([bin, args]: readonly [string, readonly string[]], env: NodeJS.ProcessEnv = {}) =>
    runCli(bin, [...args], {
      env: { SVC_ADMIN_TOKEN: ADMIN_TOKEN, SVC_USER_TOKEN: 'u-token-0123456789', SVC_TLS_CERT: '', SVC_TLS_KEY: '', ...env },
      timeoutMs: 20_000,
    });

  it('refuses an expired certificate, a key of another certificate, a missing, unreadable or garbage file: exit 2 naming the file', async () => {
    const good = ca.issue('startup');
    const other = ca.issue('startup-other');
    const expired = ca.issue('startup-expired', { notBefore: new Date('2020-01-01T00:00:00Z'), notAfter: new Date('2020-01-02T00:00:00Z') });
    const garbage = join(tmpDir('tls-bad-'), 'garbage.pem');
    writeFileSync(garbage, 'this is not a certificate\n');
    const missing = join(tmpDir('tls-bad-'), 'missing.pem');
    const cases: Array<[string[], RegExp]> = [
      [['--tls-cert', expired.cert, '--tls-key', expired.key], new RegExp(`TLS certificate ${expired.cert} expired on 2020-01-02T00:00:00.000Z`)],
      [['--tls-cert', good.cert, '--tls-key', other.key], new RegExp(`TLS key ${other.key} does not match the certificate ${good.cert}`)],
      [['--tls-cert', missing, '--tls-key', good.key], new RegExp(`TLS certificate ${missing}: the file does not exist`)],
      [['--tls-cert', good.cert, '--tls-key', tmpDir('tls-bad-')], /TLS key .*: it is a directory/],
      [['--tls-cert', garbage, '--tls-key', good.key], new RegExp(`TLS certificate ${garbage}: not a PEM certificate`)],
      [['--tls-cert', good.cert, '--tls-key', garbage], new RegExp(`TLS key ${garbage}: not a PEM private key`)],
      [['--tls-cert', good.cert], /--tls-cert \(or SVC_TLS_CERT\) needs --tls-key FILE/],
    ];
    if (process.getuid?.() !== 0) {
      const unreadable = join(tmpDir('tls-bad-'), 'unreadable.key');
      copyFileSync(good.key, unreadable);
      chmodSync(unreadable, 0o000);
      cases.push([['--tls-cert', good.cert, '--tls-key', unreadable], new RegExp(`TLS key ${unreadable}: permission denied`)]);
    }
    for (const [flags, message] of cases) {
      for (const [bin, name] of [
        [svcArgs, 'svc'],
        [nodeArgs, 'svc-fs-node'],
      ] as const) {
        const r = await run(bin(flags));
        expect({ name, flags, code: r.code }).toEqual({ name, flags, code: 2 });
        expect(r.stderr).toMatch(new RegExp(`^${name}: ${message.source}`));
      }
    }
    // the same through the environment
    const env = await run(svcArgs([]), { SVC_TLS_CERT: expired.cert, SVC_TLS_KEY: expired.key });
    expect(env.code).toBe(2);
    expect(env.stderr).toContain(`TLS certificate ${expired.cert} expired`);
  }, 120_000);

  it('--bind 0.0.0.0 without TLS: exit 2 saying what to pass; with --insecure-transport it starts and warns; with TLS it serves wss://', async () => {
    for (const [bin, name] of [
      [svcArgs, 'svc'],
      [nodeArgs, 'svc-fs-node'],
    ] as const) {
      const r = await run(bin(['--bind', '0.0.0.0']));
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(`${name}: --bind 0.0.0.0 is reachable from other hosts`);
      expect(r.stderr).toContain('pass --tls-cert FILE --tls-key FILE');
      expect(r.stderr).toContain('--insecure-transport');

      const [script, args] = bin(['--bind', '0.0.0.0', '--insecure-transport']);
      const insecure = await startProcess(script, [...args], {
        SVC_ADMIN_TOKEN: ADMIN_TOKEN,
        SVC_USER_TOKEN: 'u-token-0123456789',
        SVC_LOG_LEVEL: 'warn',
        SVC_TLS_CERT: '',
      });
      expect(insecure.url).toMatch(/^ws:\/\/0\.0\.0\.0:/);
      await waitFor(
        () => insecure.stderr().includes(`${name}: warning: --insecure-transport: ${insecure.url} is reachable from other hosts without TLS`),
        5000,
      );
      await insecure.stop();

      const cert = ca.issue(`bind-all-${name}`);
      const [s2, a2] = bin(['--bind', '0.0.0.0', '--tls-cert', cert.cert, '--tls-key', cert.key]);
      const secure = await startProcess(s2, [...a2], { SVC_ADMIN_TOKEN: ADMIN_TOKEN, SVC_USER_TOKEN: 'u-token-0123456789', SVC_LOG_LEVEL: 'warn' });
      expect(secure.url).toMatch(/^wss:\/\/0\.0\.0\.0:/);
      expect(secure.stderr()).not.toContain('--insecure-transport');
      await secure.stop();
    }
    // loopback stays as it was: no certificate needed
    for (const bind of ['127.0.0.1', 'localhost']) {
      const [script, args] = svcArgs(['--bind', bind]);
      const local = await startProcess(script, [...args], { SVC_ADMIN_TOKEN: ADMIN_TOKEN, SVC_USER_TOKEN: 'u-token-0123456789', SVC_LOG_LEVEL: 'warn' });
      expect(local.url).toMatch(/^ws:\/\//);
      await local.stop();
    }
  }, 120_000);
});

describe('certificate rotation without a restart', () => {
  it('serves replaced files to new connections while an open session and a FUSE mount keep working', async () => {
    const certDir = tmpDir('tls-rotate-');
    const place = (c: { cert: string; key: string }) => {
      // as cert-manager and ACME clients do: write beside, then rename over the served files
      copyFileSync(c.key, join(certDir, '.key.tmp'));
      copyFileSync(c.cert, join(certDir, '.cert.tmp'));
      renameSync(join(certDir, '.key.tmp'), join(certDir, 'tls.key'));
      renameSync(join(certDir, '.cert.tmp'), join(certDir, 'tls.crt'));
    };
    const first = ca.issue('rotate-1');
    place(first);
    const exportDir = tmpDir('tls-export-');
    writeFileSync(join(exportDir, 'before.txt'), 'before rotation\n');
    const token = `fs-token-${randomBytes(8).toString('hex')}`;
    const node = await startProcess(
      BIN.fsNode,
      ['--port', '0', '--export', `work=${exportDir}`, '--auth-token', token, '--tls-cert', join(certDir, 'tls.crt'), '--tls-key', join(certDir, 'tls.key')],
      { SVC_LOG_LEVEL: 'info', SVC_FS_NODE_AUTH_TOKEN: '' },
    );
    const fp = () => peerFingerprint(node.url, ca.cert);
    const fp1 = await fp();
    const session = await FsClient.connect({ url: node.url, authToken: token, tls });
    expect((await session.request('exports')).exports).toHaveLength(1);
    const m = noFuse ? null : await fuseMount(['--endpoint', `w=${node.url}`, '--auth-token', token, '--tls-ca', ca.cert]);
    try {
      if (m) expect(readFileSync(join(m.dir, 'w', 'before.txt'), 'utf8')).toBe('before rotation\n');

      // 1. replaced by rename: new connections get the new certificate within 10 s
      const second = ca.issue('rotate-2');
      place(second);
      const t0 = Date.now();
      await waitFor(async () => (await fp()) !== fp1, 10_000, 100);
      const fp2 = await fp();
      expect(Date.now() - t0).toBeLessThan(10_000);
      expect(fp2).toBe(new X509Certificate(readFileSync(second.cert)).fingerprint256);
      expect(session.isOpen).toBe(true);
      expect((await session.request('exports')).exports).toHaveLength(1);
      if (m) {
        writeFileSync(join(exportDir, 'after.txt'), 'after rotation\n');
        expect(readFileSync(join(m.dir, 'w', 'after.txt'), 'utf8')).toBe('after rotation\n');
        writeFileSync(join(m.dir, 'w', 'from-mount.txt'), 'written after rotation\n');
        expect(readFileSync(join(exportDir, 'from-mount.txt'), 'utf8')).toBe('written after rotation\n');
      }
      // a new client connects with the new certificate
      const cat = await runMount(['--endpoint', `w=${node.url}`, '--auth-token', token, '--tls-ca', ca.cert, 'cat', '/w/before.txt']);
      expect(cat.stdout.toString()).toBe('before rotation\n');

      // 2. written in place, then SIGHUP: served at once
      const third = ca.issue('rotate-3');
      writeFileSync(join(certDir, 'tls.key'), readFileSync(third.key));
      writeFileSync(join(certDir, 'tls.crt'), readFileSync(third.cert));
      node.proc.kill('SIGHUP');
      await waitFor(async () => (await fp()) !== fp2, 2000, 50);
      await waitFor(() => node.stderr().includes('(SIGHUP)'), 2000);
      const fp3 = await fp();
      expect(node.proc.exitCode).toBeNull();

      // 3. replaced by garbage: the previous certificate keeps serving, the error is logged
      writeFileSync(join(certDir, 'tls.crt'), 'garbage\n');
      await waitFor(() => node.stderr().includes('TLS certificate reload failed'), 10_000);
      expect(node.stderr()).toMatch(
        /TLS certificate reload failed \(.*\); still serving the previous certificate: TLS certificate .*tls\.crt: not a PEM certificate/,
      );
      expect(await fp()).toBe(fp3);
      node.proc.kill('SIGHUP');
      await sleep(300);
      expect(await fp()).toBe(fp3);
      expect(session.isOpen).toBe(true);
      expect((await session.request('exports')).exports).toHaveLength(1);
      if (m) expect(readFileSync(join(m.dir, 'w', 'before.txt'), 'utf8')).toBe('before rotation\n');
      // the reload log names fingerprints, never key material
      expect(node.stderr()).toContain(`"fingerprint256":"${fp2}"`);
      expect(node.stderr()).not.toContain('PRIVATE KEY');
    } finally {
      session.close();
      if (m) expect(await m.stop()).toBe(0);
      await node.stop();
    }
  }, 90_000);
});

describe('capture: the bytes on the wire', () => {
  /** Reads `file` through a recording proxy in front of `node`; returns what crossed the wire. */
  async function capturedRead(nodePort: number, url: (port: number) => string, extra: string[]): Promise<{ wire: Buffer; upstream: Buffer; out: Buffer }> {
    const proxy = await recordingProxy(nodePort);
    try {
      const r = await runMount(['--endpoint', `w=${url(proxy.port)}`, ...extra, 'cat', '/w/secret.bin']);
      expect(r.stderr).toBe('');
      expect(proxy.connections()).toBeGreaterThan(0);
      return { wire: Buffer.concat([proxy.upstream(), proxy.downstream()]), upstream: proxy.upstream(), out: r.stdout };
    } finally {
      await proxy.close();
    }
  }

  it('carries neither file content nor tokens in clear over wss:// (and does over ws://)', async () => {
    const dir = tmpDir('tls-export-');
    const marker = `FILE-CONTENT-MARKER-${randomBytes(6).toString('hex')}`;
    const content = Buffer.concat([Buffer.from(`${marker}\n`.repeat(2000)), randomBytes(256 * 1024)]);
    writeFileSync(join(dir, 'secret.bin'), content);
    const token = `fs-secret-token-${randomBytes(12).toString('hex')}`;
    const cert = ca.issue('capture');
    const secure = await startProcess(
      BIN.fsNode,
      ['--port', '0', '--export', `work=${dir}`, '--auth-token', token, '--tls-cert', cert.cert, '--tls-key', cert.key],
      { SVC_LOG_LEVEL: 'warn', SVC_FS_NODE_AUTH_TOKEN: '' },
    );
    const plain = await startProcess(BIN.fsNode, ['--port', '0', '--export', `work=${dir}`, '--auth-token', token], {
      SVC_LOG_LEVEL: 'warn',
      SVC_FS_NODE_AUTH_TOKEN: '',
    });
    const random = content.subarray(content.length - 64 * 1024, content.length - 64 * 1024 + 32);

    const overTls = await capturedRead(Number(new URL(secure.url).port), (p) => `wss://127.0.0.1:${p}/v2/fs`, ['--auth-token', token, '--tls-ca', ca.cert]);
    expect(overTls.out.equals(content)).toBe(true);
    expect(overTls.wire.length).toBeGreaterThan(content.length);
    expect(overTls.wire.includes(marker)).toBe(false);
    expect(overTls.wire.includes(random)).toBe(false);
    expect(overTls.wire.includes(token)).toBe(false);
    expect(unmaskedClientPayloads(overTls.upstream).includes(token)).toBe(false);
    // not even the HTTP upgrade is in clear
    expect(overTls.wire.includes('HTTP/1.1')).toBe(false);
    expect(overTls.wire.includes('/v2/fs')).toBe(false);
    // the JSON data path too
    const json = await capturedRead(Number(new URL(secure.url).port), (p) => `wss://127.0.0.1:${p}/v2/fs`, [
      '--auth-token',
      token,
      '--tls-ca',
      ca.cert,
      '--no-binary',
    ]);
    expect(json.out.equals(content)).toBe(true);
    expect(json.wire.includes(marker)).toBe(false);
    expect(json.wire.includes(content.subarray(0, 3000).toString('base64'))).toBe(false);
    expect(json.wire.includes(token)).toBe(false);

    // the same read over plain ws:// shows both: the capture can see them when they are there
    const overPlain = await capturedRead(Number(new URL(plain.url).port), (p) => `ws://127.0.0.1:${p}/v2/fs`, ['--auth-token', token]);
    expect(overPlain.out.equals(content)).toBe(true);
    expect(overPlain.wire.includes(marker)).toBe(true);
    expect(overPlain.wire.includes('GET /v2/fs HTTP/1.1')).toBe(true);
    // the token travels in the (masked) hello frame
    expect(unmaskedClientPayloads(overPlain.upstream).includes(token)).toBe(true);
  }, 60_000);

  it('carries no role token in clear to svc over wss:// (and does over ws://)', async () => {
    const cert = ca.issue('capture-svc');
    const secure = await startSvc({ args: ['--tls-cert', cert.cert, '--tls-key', cert.key] });
    const plain = await startSvc();
    for (const [server, scheme, expected] of [
      [secure, 'wss', false],
      [plain, 'ws', true],
    ] as const) {
      const proxy = await recordingProxy(Number(new URL(server.url).port));
      try {
        const r = await control(['--url', `${scheme}://127.0.0.1:${proxy.port}/`, '--tls-ca', ca.cert, 'project_create', '{"name":"captured"}']);
        expect(r.code).toBe(0);
        const projectToken = (JSON.parse(r.stdout) as { project_token: string }).project_token;
        const wire = Buffer.concat([proxy.upstream(), proxy.downstream()]);
        expect(wire.includes(ADMIN_TOKEN)).toBe(expected);
        expect(wire.includes(projectToken)).toBe(expected);
      } finally {
        await proxy.close();
      }
    }
  }, 60_000);
});
