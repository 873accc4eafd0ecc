/**
 * e2e: the README's first command runs to the end (`npm run demo -- --ci`, here the built
 * script directly) and exits 0, leaving no process behind: svc, two svc-fs-nodes, a project,
 * and svc-fs-mount listing, reading, writing and failing over; and the same over wss:// with
 * `--tls`.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { ROOT, runCli } from './support/processes';

it('runs the demo to the end and exits 0', async () => {
  const r = await runCli(join(ROOT, 'dist/scripts/demo.js'), ['--ci'], { timeoutMs: 120_000 });
  if (r.code !== 0) throw new Error(`demo exited ${r.code}\n${r.stdout}\n${r.stderr}`);
  const out = r.stdout;
  expect(out).toContain('==> done');
  // the workspace listing: / is synthetic, one entry per first mount path segment
  expect(out).toMatch(/readdir \/\n( {2}dr-xr-xr-x .*\n){3}/);
  expect(out).toMatch(/^ {2}dr-xr-xr-x .* docs$/m);
  expect(out).toMatch(/^ {2}dr-xr-xr-x .* samples$/m);
  expect(out).toMatch(/^ {2}dr-xr-xr-x .* shared$/m);
  // a file of docs/ read through node-a, a file written on node-b and read back, EROFS on docs
  expect(out).toContain('  # Protocol notes');
  expect(out).toMatch(/cat \/samples\/from-demo\.txt\n {2}written through svc-fs-mount at /);
  expect(out).toMatch(/! svc-fs-mount: \/docs\/nope\.txt: .* \(errno 30\)/);
  // /shared read after node-a was killed, served by node-b
  const afterKill = out.slice(out.indexOf('killed'));
  expect(afterKill).toMatch(/cat \/shared\/README\.txt\n {2}This directory is exported by node-a and node-b\.\n {2}\(exit 0/);
  // node-a degraded once svc saw its daemon session close; node-b now the primary
  expect(afterKill).toMatch(/\/shared +node-b +shared +online +primary .* ok /);
  expect(afterKill).toMatch(/^ +node-a +shared +degraded +standby 1 .* FAILED: .*connection refused/m);
  // nodes paired in control daemon mode
  expect(out).toMatch(/node-a paired as node-[0-9a-f]+, serving on ws:\/\//);
  // where FUSE is available the workspace is read through a real mount, before and after the failover
  if (out.includes('mount the workspace with FUSE')) {
    expect(out).toMatch(/\$ grep -R -l failover .*\n(.*\n)*.*samples\/notes\/todo\.md/);
    expect(afterKill).toMatch(/\$ cat .*mnt\/shared\/README\.txt\n {2}This directory is exported by node-a and node-b\./);
    expect(out).toContain('svc-fs-mount mount exited 0');
  } else {
    expect(out).toContain('FUSE mount skipped: ');
  }
  // secrets are not printed whole
  expect(out).not.toMatch(/"node_secret":"[A-Za-z0-9_-]{43}"/);
  expect(out).not.toMatch(/--(auth|project)-token [A-Za-z0-9_-]{8,}/);
  // nothing left running
  const ps = execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' });
  expect(ps).not.toMatch(/svc-demo-/);
}, 120_000);

it('runs the demo over wss:// with --tls (a throwaway CA made with openssl) and exits 0', async () => {
  const r = await runCli(join(ROOT, 'dist/scripts/demo.js'), ['--ci', '--tls'], { timeoutMs: 180_000 });
  if (r.code !== 0) throw new Error(`demo --tls exited ${r.code}\n${r.stdout}\n${r.stderr}`);
  const out = r.stdout;
  expect(out).toContain('==> done');
  if (out.includes('TLS skipped: ')) {
    // no openssl here: the demo says why and runs over ws://
    expect(out).toMatch(/TLS skipped: openssl is not installed/);
    return;
  }
  expect(out).toMatch(/\$ openssl req -x509 .* -out ca\.pem/);
  expect(out).toMatch(/^svc listening on wss:\/\/127\.0\.0\.1:\d+\/$/m);
  // a client without the CA is refused, saying why
  expect(out).toMatch(/! svc-control: TLS: refused the certificate of wss:\/\/127\.0\.0\.1:\d+\/: unknown CA.*\n {2}\(exit 2\)/);
  expect(out).toMatch(/node-a paired as node-[0-9a-f]+, serving on wss:\/\//);
  expect(out).toMatch(/node-b paired as node-[0-9a-f]+, serving on wss:\/\//);
  // the topology's wss:// URLs, probed
  expect(out).toMatch(/\/shared +node-a +shared +online +primary +token +wss:\/\/127\.0\.0\.1:\d+\/v2\/fs +ok /);
  expect(out).toContain('  # Protocol notes');
  expect(out).toMatch(/cat \/samples\/from-demo\.txt\n {2}written through svc-fs-mount at /);
  const afterKill = out.slice(out.indexOf('killed'));
  expect(afterKill).toMatch(/cat \/shared\/README\.txt\n {2}This directory is exported by node-a and node-b\.\n {2}\(exit 0/);
  if (out.includes('mount the workspace with FUSE')) expect(out).toContain('svc-fs-mount mount exited 0');
  expect(out).not.toMatch(/--(auth|project)-token [A-Za-z0-9_-]{8,}/);
  const ps = execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' });
  expect(ps).not.toMatch(/svc-demo-/);
}, 180_000);
