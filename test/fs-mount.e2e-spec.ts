/**
 * e2e: `svc-fs-mount` in endpoint mode against real `svc-fs-node` processes on temp dirs: every command checked against the filesystem itself, binary-exact
 * round trips on the binary and the JSON data path, the error format and exit codes
 * (ENOENT, EROFS, AuthMissing/AuthFailed, usage), EXDEV across mounts, the synthetic tree,
 * and failover over a repeated mount path (CLI and in-process router, including a read-only
 * handle re-opened on the survivor and EIO for a write handle).
 */
import { randomBytes } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Errno, FsError } from '../libs/protocol/src';
import { OpenFlags, parseEndpointSpec, StaticTopologySource, WorkspaceRouter } from '../libs/fs/src/router';
import { runMount, sha256, startFsNode } from './helpers/fs-mount';
import { cleanupTmp, killAll, Running, tmpDir } from './support/processes';

const TOKEN = 'fs-token-0123456789abcdef0123456789';

let work: string;
let ro: string;
let secret: string;
let nodeA: Running;
let nodeAuth: Running;
/** `--endpoint` args: /w = work (rw) on A, /ro = ro export on A. */
let ep: string[];

beforeAll(async () => {
  work = tmpDir('svc-mount-work-');
  ro = tmpDir('svc-mount-ro-');
  secret = tmpDir('svc-mount-auth-');
  writeFileSync(join(work, 'hello.txt'), 'hello, world\n');
  mkdirSync(join(work, 'dir'));
  for (let i = 0; i < 25; i++) writeFileSync(join(work, 'dir', `f${String(i).padStart(2, '0')}`), `file ${i}`);
  writeFileSync(join(ro, 'readme.md'), '# read only\n');
  writeFileSync(join(secret, 'token.txt'), 'behind auth\n');
  [nodeA, nodeAuth] = await Promise.all([
    startFsNode([`work=${work}`, `ro=${ro}:ro`], { name: 'node-a' }),
    startFsNode([`work=${secret}`], { authToken: TOKEN, name: 'node-auth' }),
  ]);
  ep = ['--endpoint', `w=${nodeA.url}`, '--endpoint', `ro=${nodeA.url}#ro`];
}, 30_000);

afterAll(async () => {
  await killAll();
  cleanupTmp();
});

describe('commands, checked against the filesystem', () => {
  it('getattr prints the attributes of a file and a directory (JSON and text)', async () => {
    const r = await runMount([...ep, '--json', 'getattr', '/w/hello.txt']);
    expect(r.code).toBe(0);
    const { attr } = JSON.parse(r.stdout.toString());
    const st = statSync(join(work, 'hello.txt'));
    expect(attr).toMatchObject({ k: 1, sz: st.size, m: st.mode, n: st.nlink });
    expect(Math.abs(attr.mt / 1e6 - st.mtimeMs)).toBeLessThan(2);
    const d = await runMount([...ep, 'getattr', 'w/dir']);
    expect(d.code).toBe(0);
    expect(d.stdout.toString()).toMatch(/Type: directory/);
    expect(d.stdout.toString()).toContain('File: /w/dir');
  });

  it('readdir lists every entry, and pages with cookie and max', async () => {
    const all = await runMount([...ep, '--json', 'readdir', '/w/dir']);
    expect(all.code).toBe(0);
    const names = (JSON.parse(all.stdout.toString()).entries as Array<{ name: string; attr: { sz: number } }>).map((e) => e.name).sort();
    expect(names).toEqual(readdirSync(join(work, 'dir')).sort());
    const seen: string[] = [];
    let cookie = 0;
    for (let pages = 0; ; pages++) {
      const p = await runMount([...ep, '--json', 'readdir', '/w/dir', String(cookie), '13']);
      const page = JSON.parse(p.stdout.toString());
      expect(page.entries.length).toBeLessThanOrEqual(13);
      seen.push(...page.entries.map((e: { name: string }) => e.name));
      if (page.eof) break;
      cookie = page.next;
      expect(pages).toBeLessThan(5);
    }
    expect(seen.sort()).toEqual(names);
    const text = await runMount([...ep, 'readdir', '/w']);
    expect(text.stdout.toString()).toMatch(/^d\S+ .* dir$/m);
    expect(text.stdout.toString()).toMatch(/^-rw\S+ .* hello\.txt$/m);
  }, 30_000);

  it('cat prints the content; write replaces it from an argument and from stdin', async () => {
    const c = await runMount([...ep, 'cat', '/w/hello.txt']);
    expect(c.code).toBe(0);
    expect(c.stdout.toString()).toBe('hello, world\n');
    const w = await runMount([...ep, 'write', '/w/new.txt', 'written by the CLI']);
    expect(w.code).toBe(0);
    expect(readFileSync(join(work, 'new.txt'), 'utf8')).toBe('written by the CLI');
    const s = await runMount([...ep, 'write', '/w/new.txt', '-'], { input: 'shorter' });
    expect(s.code).toBe(0);
    expect(readFileSync(join(work, 'new.txt'), 'utf8')).toBe('shorter');
  });

  it('mkdir, rename, truncate, unlink and rmdir change the directory', async () => {
    expect((await runMount([...ep, 'mkdir', '/w/sub'])).code).toBe(0);
    expect(statSync(join(work, 'sub')).isDirectory()).toBe(true);
    writeFileSync(join(work, 'sub', 'a.bin'), Buffer.alloc(1000, 7));
    expect((await runMount([...ep, 'rename', '/w/sub/a.bin', '/w/sub/b.bin'])).code).toBe(0);
    expect(existsSync(join(work, 'sub', 'a.bin'))).toBe(false);
    expect(statSync(join(work, 'sub', 'b.bin')).size).toBe(1000);
    const t = await runMount([...ep, '--json', 'truncate', '/w/sub/b.bin', '10']);
    expect(t.code).toBe(0);
    expect(JSON.parse(t.stdout.toString()).attr.sz).toBe(10);
    expect(statSync(join(work, 'sub', 'b.bin')).size).toBe(10);
    expect((await runMount([...ep, 'truncate', '/w/sub/b.bin', '2K'])).code).toBe(0);
    expect(statSync(join(work, 'sub', 'b.bin')).size).toBe(2048);
    const notEmpty = await runMount([...ep, 'rmdir', '/w/sub']);
    expect(notEmpty.code).toBe(1);
    expect(notEmpty.stderr).toMatch(/^svc-fs-mount: \/w\/sub: .+ \(errno 39\)\n$/);
    expect((await runMount([...ep, 'unlink', '/w/sub/b.bin'])).code).toBe(0);
    expect(existsSync(join(work, 'sub', 'b.bin'))).toBe(false);
    expect((await runMount([...ep, 'rmdir', '/w/sub'])).code).toBe(0);
    expect(existsSync(join(work, 'sub'))).toBe(false);
  }, 30_000);

  it('status shows each mount with a probe, as a table and as JSON (no tokens)', async () => {
    const j = await runMount([...ep, '--endpoint', `s=${nodeAuth.url}`, '--auth-token', TOKEN, 'status', '--json']);
    expect(j.code).toBe(0);
    expect(j.stdout.toString()).not.toContain(TOKEN);
    const report = JSON.parse(j.stdout.toString());
    expect(report.mode).toBe('endpoints');
    expect(report.mounts.map((m: { mount_path: string }) => m.mount_path)).toEqual(['/ro', '/s', '/w']);
    const w = report.mounts.find((m: { mount_path: string }) => m.mount_path === '/w');
    expect(w.candidates[0]).toMatchObject({ export_name: 'work', fs_url: nodeA.url, auth: true, probe: { ok: true, read_only: false, binary: true } });
    expect(report.mounts[0].candidates[0].probe).toMatchObject({ ok: true, read_only: true });
    const t = await runMount([...ep, '--no-binary', 'status']);
    expect(t.code).toBe(0);
    expect(t.stdout.toString()).toMatch(/^MOUNT +NODE +EXPORT +STATE +ROLE +AUTH +ENDPOINT +PROBE$/m);
    expect(t.stdout.toString()).toMatch(/^\/w +w +work .* ok [\d.]+ ms \(rw, json\)$/m);
    const np = await runMount([...ep, 'status', '--no-probe', '--json']);
    expect(JSON.parse(np.stdout.toString()).mounts[0].candidates[0].probe).toBeUndefined();
  });
});

describe('binary round trips: write then cat, equal SHA-256', () => {
  const sizes = [1, 1024 * 1024 + 1, 64 * 1024 * 1024];
  for (const mode of ['binary', 'json'] as const) {
    it(`on the ${mode} data path (1 B, 1 MiB + 1, 64 MiB)`, async () => {
      const dir = tmpDir('svc-mount-rt-');
      const flags = mode === 'json' ? ['--no-binary'] : [];
      await Promise.all(
        sizes.map(async (size) => {
          const src = join(dir, `src-${size}`);
          const data = randomBytes(size);
          writeFileSync(src, data);
          const name = `rt-${mode}-${size}.bin`;
          const w = await runMount([...ep, ...flags, 'write', `/w/${name}`, '-'], { stdinFile: src, timeoutMs: 60_000 });
          expect(w.stderr).toBe('');
          expect(w.code).toBe(0);
          expect(sha256(readFileSync(join(work, name)))).toBe(sha256(data));
          const c = await runMount([...ep, ...flags, 'cat', `/w/${name}`], { hashOnly: true, timeoutMs: 60_000 });
          expect(c.code).toBe(0);
          expect(c.bytes).toBe(size);
          expect(c.sha256).toBe(sha256(data));
        }),
      );
    }, 90_000);
  }
});

describe('cat streams in bounded memory', () => {
  // A sparse file costs no disk; whole-file buffering would need its size in memory.
  const SIZE = 512 * 1024 * 1024;
  for (const mode of ['binary', 'json'] as const) {
    it(`cats a 512 MiB file on the ${mode} data path with a peak RSS far below its size`, async () => {
      writeFileSync(join(work, `sparse-${mode}.bin`), '');
      truncateSync(join(work, `sparse-${mode}.bin`), SIZE);
      const c = await runMount([...ep, ...(mode === 'json' ? ['--no-binary'] : []), 'cat', `/w/sparse-${mode}.bin`], {
        hashOnly: true,
        peakRss: true,
        timeoutMs: 90_000,
      });
      expect(c.stderr).toBe('');
      expect(c.code).toBe(0);
      expect(c.bytes).toBe(SIZE);
      expect(c.peakRssBytes).toBeGreaterThan(0);
      // about 120 MiB (binary) and 170 MiB (JSON) measured here, whatever the file size
      expect(c.peakRssBytes).toBeLessThan(256 * 1024 * 1024);
    }, 120_000);
  }
});

describe('errors: format and exit codes', () => {
  it('ENOENT: exit 1, the path, the message and the errno', async () => {
    const r = await runMount([...ep, 'cat', '/w/missing.txt']);
    expect(r.code).toBe(1);
    expect(r.stdout.length).toBe(0);
    expect(r.stderr).toMatch(/^svc-fs-mount: \/w\/missing\.txt: .+ \(errno 2\)\n$/);
    const outside = await runMount([...ep, 'getattr', '/nowhere/x']);
    expect(outside.code).toBe(1);
    expect(outside.stderr).toBe('svc-fs-mount: /nowhere/x: not in the workspace (errno 2)\n');
  });

  it('EROFS on a read-only export, and the file is unchanged', async () => {
    const r = await runMount([...ep, 'write', '/ro/readme.md', 'overwritten']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^svc-fs-mount: \/ro\/readme\.md: .+ \(errno 30\)\n$/);
    expect(readFileSync(join(ro, 'readme.md'), 'utf8')).toBe('# read only\n');
    const m = await runMount([...ep, 'mkdir', '/ro/newdir']);
    expect(m.code).toBe(1);
    expect(m.stderr).toContain('(errno 30)');
    expect(existsSync(join(ro, 'newdir'))).toBe(false);
  });

  it('a node with auth on: AuthMissing without a token, AuthFailed with a wrong one, content with the right one', async () => {
    const missing = await runMount(['--endpoint', `s=${nodeAuth.url}`, 'cat', '/s/token.txt']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^svc-fs-mount: \/s\/token\.txt: .*AuthMissing.* \(errno 13\)\n$/);
    const wrong = await runMount(['--endpoint', `s=${nodeAuth.url}`, '--auth-token', 'wrong-token', 'cat', '/s/token.txt']);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/AuthFailed.* \(errno 13\)\n$/);
    expect(wrong.stderr).not.toContain('wrong-token');
    const ok = await runMount(['--endpoint', `s=${nodeAuth.url}`, '--auth-token', TOKEN, 'cat', '/s/token.txt']);
    expect(ok.code).toBe(0);
    expect(ok.stdout.toString()).toBe('behind auth\n');
  });

  it('usage and connection errors exit 2', async () => {
    const unknown = await runMount([...ep, 'frobnicate', '/w']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('unknown command');
    const missingArg = await runMount([...ep, 'cat']);
    expect(missingArg.code).toBe(2);
    const badSpec = await runMount(['--endpoint', 'nonsense', 'cat', '/x']);
    expect(badSpec.code).toBe(2);
    expect(badSpec.stderr).toMatch(/^svc-fs-mount: --endpoint "nonsense"/);
    const refused = await runMount(['--endpoint', 'gone=ws://127.0.0.1:1/v2/fs', 'cat', '/gone/f']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/^svc-fs-mount: \/gone\/f: mount \/gone is unavailable .*connection refused.* \(errno 5\)\n$/);
    const noControl = await runMount(['--workspace-url', 'ws://127.0.0.1:1/', '--auth-token', 'x', 'status']);
    expect(noControl.code).toBe(2);
    expect(noControl.stderr).toMatch(/^svc-fs-mount: cannot connect to ws:\/\/127\.0\.0\.1:1\//);
  });
});

describe('the workspace tree', () => {
  it('rename across mounts is EXDEV, nothing moves', async () => {
    const r = await runMount([...ep, 'rename', '/w/hello.txt', '/ro/hello.txt']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^svc-fs-mount: \/w\/hello\.txt: .+ \(errno 18\)\n$/);
    expect(existsSync(join(work, 'hello.txt'))).toBe(true);
  });

  it('/ and the directories above mount paths are synthetic, read-only directories', async () => {
    const args = ['--endpoint', `a=${nodeA.url}@/team/alpha`, '--endpoint', `b=${nodeA.url}#ro@/team/beta`, '--endpoint', `c=${nodeA.url}@/tools`];
    const root = await runMount([...args, '--json', 'readdir', '/']);
    expect(root.code).toBe(0);
    expect(JSON.parse(root.stdout.toString()).entries.map((e: { name: string }) => e.name)).toEqual(['team', 'tools']);
    const team = await runMount([...args, '--json', 'readdir', '/team']);
    expect(JSON.parse(team.stdout.toString()).entries.map((e: { name: string }) => e.name)).toEqual(['alpha', 'beta']);
    const attr = await runMount([...args, '--json', 'getattr', '/team']);
    expect(JSON.parse(attr.stdout.toString()).attr).toMatchObject({ k: 2, m: 0o040555 });
    const inside = await runMount([...args, 'cat', '/team/beta/readme.md']);
    expect(inside.stdout.toString()).toBe('# read only\n');
    const mk = await runMount([...args, 'mkdir', '/team/gamma']);
    expect(mk.code).toBe(1);
    expect(mk.stderr).toContain('(errno 30)');
    const busy = await runMount([...args, 'rmdir', '/team/alpha']);
    expect(busy.code).toBe(1);
    expect(busy.stderr).toContain('(errno 16)');
    expect(statSync(work).isDirectory()).toBe(true);
  }, 30_000);
});

describe('endpoint mode failover (a repeated mount path)', () => {
  it('the CLI reads from the first endpoint, and from the second when the first is down', async () => {
    const a = tmpDir('svc-mount-fa-');
    const b = tmpDir('svc-mount-fb-');
    writeFileSync(join(a, 'who'), 'A');
    writeFileSync(join(b, 'who'), 'B');
    const [na, nb] = await Promise.all([startFsNode([`shared=${a}`]), startFsNode([`shared=${b}`])]);
    const args = ['--endpoint', `p=${na.url}#shared@/s`, '--endpoint', `q=${nb.url}#shared@/s`];
    expect((await runMount([...args, 'cat', '/s/who'])).stdout.toString()).toBe('A');
    await na.kill();
    const r = await runMount([...args, 'cat', '/s/who']);
    expect(r.code).toBe(0);
    expect(r.stdout.toString()).toBe('B');
    const st = JSON.parse((await runMount([...args, '--json', 'status'])).stdout.toString());
    expect(st.mounts[0].candidates.map((c: { probe: { ok: boolean } }) => c.probe.ok)).toEqual([false, true]);
    await nb.stop();
  }, 30_000);

  it('a router keeps serving: idempotent ops fail over, a read-only handle re-opens, a write handle gets EIO', async () => {
    const a = tmpDir('svc-mount-ra-');
    const b = tmpDir('svc-mount-rb-');
    const big = randomBytes(3 * 1024 * 1024);
    for (const d of [a, b]) writeFileSync(join(d, 'big.bin'), big);
    writeFileSync(join(a, 'who'), 'A');
    writeFileSync(join(b, 'who'), 'B');
    const [na, nb] = await Promise.all([startFsNode([`shared=${a}`]), startFsNode([`shared=${b}`])]);
    const router = new WorkspaceRouter(new StaticTopologySource([parseEndpointSpec(`p=${na.url}#shared@/s`), parseEndpointSpec(`q=${nb.url}#shared@/s`)]));
    const failovers: unknown[] = [];
    router.on('failover', (e) => failovers.push(e));
    try {
      await router.start();
      expect((await router.getattr('/s/who')).sz).toBe(1);
      const { fh } = await router.open('/s/big.bin');
      const first = await router.read(fh, 0, 1024 * 1024);
      expect(first.data.equals(big.subarray(0, 1024 * 1024))).toBe(true);
      const w = await router.open('/s/who', OpenFlags.O_WRONLY);
      await na.kill();
      // the read-only handle continues on the survivor, at the same offsets
      const rest = await router.read(fh, 1024 * 1024, 2 * 1024 * 1024);
      expect(rest.data.equals(big.subarray(1024 * 1024))).toBe(true);
      await router.release(fh);
      // the write handle lived on the dead session: EIO, not a silent retry elsewhere
      await expect(router.write(w.fh, 0, Buffer.from('X'))).rejects.toMatchObject({ errno: Errno.EIO });
      // path operations go to the survivor
      const page = await router.readdir('/s');
      expect(page.entries.map((e) => e.name).sort()).toEqual(['big.bin', 'who']);
      const fh2 = (await router.open('/s/who')).fh;
      expect((await router.read(fh2, 0, 10)).data.toString()).toBe('B');
      expect(failovers).toEqual([expect.objectContaining({ mount_path: '/s', to: expect.stringContaining(nb.url) })]);
      expect(router.describe()[0].candidates.map((c) => c.active)).toEqual([false, true]);
      // with every candidate down: a clear error naming the mount path
      await nb.kill();
      const err = await router.getattr('/s/who').then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(FsError);
      expect((err as FsError).message).toMatch(/^mount \/s is unavailable \(2 candidates tried\): p \(.*\): .*; q \(.*\): .*/);
    } finally {
      router.close();
    }
  }, 30_000);

  it('symlink, readlink, setattr, statfs and create through the router', async () => {
    const router = new WorkspaceRouter(new StaticTopologySource([parseEndpointSpec(`w=${nodeA.url}`)]));
    try {
      await router.start();
      await router.symlink('/w/link', 'hello.txt');
      expect(lstatSync(join(work, 'link')).isSymbolicLink()).toBe(true);
      expect(await router.readlink('/w/link')).toBe('hello.txt');
      const attr = await router.setattr('/w/hello.txt', { mode: 0o600 });
      expect(attr.m & 0o777).toBe(0o600);
      expect(statSync(join(work, 'hello.txt')).mode & 0o777).toBe(0o600);
      const fs = await router.statfs('/w');
      expect(fs.bsize).toBeGreaterThan(0);
      const { fh } = await router.create('/w/created.txt', 0o640, OpenFlags.O_WRONLY | OpenFlags.O_EXCL);
      expect(await router.write(fh, 0, Buffer.from('abc'))).toBe(3);
      await router.fsync(fh);
      await router.release(fh);
      expect(readFileSync(join(work, 'created.txt'), 'utf8')).toBe('abc');
      await expect(router.create('/w/created.txt', 0o640, OpenFlags.O_WRONLY | OpenFlags.O_EXCL)).rejects.toMatchObject({ errno: Errno.EEXIST });
      await expect(router.read(12345, 0, 1)).rejects.toMatchObject({ errno: Errno.EBADF });
      // a change made on disk reaches the router as an invalidation of a path it resolved
      const seen: string[] = [];
      router.on('inval_dir', (e: { paths: string[] }) => seen.push(...e.paths));
      await router.readdir('/w/dir');
      await new Promise((r) => setTimeout(r, 300)); // the node sets its directory watch up in the background
      writeFileSync(join(work, 'dir', 'late'), 'x');
      const deadline = Date.now() + 3000;
      while (!seen.includes('/w/dir') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(seen).toContain('/w/dir');
      expect((await router.getattr('/w/dir/late')).sz).toBe(1);
    } finally {
      router.close();
    }
  });
});
