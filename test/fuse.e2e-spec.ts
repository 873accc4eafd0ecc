/**
 * e2e: a real FUSE mount of a two-node workspace used with ordinary tools:
 * ls, cat, cp of 64 MiB in and out, mkdir -p, mv, rm -r, grep -R, git, find; failover while
 * mounted; a clean unmount and stale-mount cleanup. Skipped, with the reason printed, where
 * /dev/fuse or the libfuse 3 binding is missing (.ci/run installs libfuse3-dev and fuse3).
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, cleanupTmp, killAll, ROOT, sleep, tmpDir, waitFor } from './support/processes';
import { startWorkspace, Workspace } from './helpers/workspace';
import { fuseUnavailable, killMount } from './helpers/fs-mount';
import { mountSlots } from '../libs/fs/src/fuse/fuse-inodes';

const reason = fuseUnavailable();
if (reason) process.stdout.write(`FUSE e2e tests skipped: ${reason}\n`);
const describeFuse = reason ? describe.skip : describe;

const sha = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');
const sh = (cmd: string, args: string[], cwd?: string) => execFileSync(cmd, args, { cwd, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
const mounted = (dir: string) =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === dir);

describeFuse('FUSE mount', () => {
  let ws: Workspace;
  let mnt: string;
  let mount: ChildProcess;
  let out = '';
  let err = '';

  beforeAll(async () => {
    ws = await startWorkspace();
    mnt = join(tmpDir('mnt-'), 'ws');
    mkdirSync(mnt);
    mount = spawn(process.execPath, [BIN.fsMount, ...ws.mountArgs, 'mount', mnt, '--attr-ttl-ms', '1000'], { stdio: ['ignore', 'pipe', 'pipe'] });
    mount.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
    mount.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
    await waitFor(() => out.includes(`mounted on ${mnt}`), 20_000).catch((e) => {
      throw new Error(`${(e as Error).message}\nstdout: ${out}\nstderr: ${err}`);
    });
  }, 60_000);

  afterAll(async () => {
    killMount(mount, mnt);
    ws?.close();
    await killAll();
    cleanupTmp();
  });

  it('lists the workspace with ls -la and reads with cat', () => {
    writeFileSync(join(ws.dirs.a, 'hello.txt'), 'hello from node a\n');
    expect(sh('ls', ['-1', mnt]).trim().split('\n')).toEqual(['a', 'b', 'shared']);
    const long = sh('ls', ['-la', join(mnt, 'a')]);
    expect(long).toMatch(/-rw-r--r-- .* 18 .* hello\.txt/);
    expect(sh('cat', [join(mnt, 'a', 'hello.txt')])).toBe('hello from node a\n');
  });

  it('copies 64 MiB of random bytes in and out with equal SHA-256', () => {
    const src = join(tmpDir(), 'random.bin');
    writeFileSync(src, randomBytes(64 * 1024 * 1024));
    sh('cp', [src, join(mnt, 'b', 'random.bin')]);
    expect(sha(join(ws.dirs.b, 'random.bin'))).toBe(sha(src));
    const back = join(tmpDir(), 'back.bin');
    sh('cp', [join(mnt, 'b', 'random.bin'), back]);
    expect(sha(back)).toBe(sha(src));
    expect(sh('stat', ['-c', '%s', join(mnt, 'b', 'random.bin')]).trim()).toBe(String(64 * 1024 * 1024));
  });

  it('runs mkdir -p, mv and rm -r', () => {
    sh('mkdir', ['-p', join(mnt, 'a', 'x', 'y', 'z')]);
    writeFileSync(join(mnt, 'a', 'x', 'y', 'z', 'f.txt'), 'deep');
    sh('mv', [join(mnt, 'a', 'x'), join(mnt, 'a', 'moved')]);
    expect(readFileSync(join(ws.dirs.a, 'moved', 'y', 'z', 'f.txt'), 'utf8')).toBe('deep');
    expect(existsSync(join(ws.dirs.a, 'x'))).toBe(false);
    sh('rm', ['-r', join(mnt, 'a', 'moved')]);
    expect(existsSync(join(ws.dirs.a, 'moved'))).toBe(false);
    expect(existsSync(join(mnt, 'a', 'moved'))).toBe(false);
  });

  it('greps and finds over the repository src/ copied into the workspace', () => {
    sh('cp', ['-r', join(ROOT, 'src'), join(mnt, 'a', 'src')]);
    const count = (dir: string) => sh('find', [dir]).trim().split('\n').length;
    expect(count(join(mnt, 'a', 'src'))).toBe(count(join(ROOT, 'src')));
    const grep = (dir: string) =>
      sh('grep', ['-R', '-c', 'WorkspaceService', dir])
        .split('\n')
        .filter((l) => !l.endsWith(':0') && l).length;
    expect(grep(join(mnt, 'a', 'src'))).toBe(grep(join(ROOT, 'src')));
    expect(grep(join(mnt, 'a', 'src'))).toBeGreaterThan(0);
  });

  it('sets distinct access and modification times (utimes, cp -p, touch -d) on the node', () => {
    const file = join(mnt, 'a', 'times.txt');
    writeFileSync(file, 'times');
    utimesSync(file, 1_500_000_000, 1_700_000_000);
    const onDisk = statSync(join(ws.dirs.a, 'times.txt'));
    expect([onDisk.atimeMs, onDisk.mtimeMs]).toEqual([1_500_000_000_000, 1_700_000_000_000]);

    const src = join(tmpDir(), 'kept.sh');
    writeFileSync(src, '#!/bin/sh\necho kept\n', { mode: 0o750 });
    utimesSync(src, 1_600_000_000, 1_650_000_000.25);
    sh('cp', ['-p', src, join(mnt, 'a', 'kept.sh')]);
    const copied = statSync(join(ws.dirs.a, 'kept.sh'));
    expect(copied.mtimeMs).toBe(1_650_000_000_250);
    expect(copied.mode & 0o777).toBe(0o750);
    expect(sh(join(mnt, 'a', 'kept.sh'), [])).toBe('kept\n');

    sh('touch', ['-d', '2021-03-04T05:06:07Z', file]);
    expect(statSync(join(ws.dirs.a, 'times.txt')).mtime.toISOString()).toBe('2021-03-04T05:06:07.000Z');
    expect(statSync(file).mtime.toISOString()).toBe('2021-03-04T05:06:07.000Z');
  });

  it('runs git init, add and commit inside the mount', async () => {
    const repo = join(mnt, 'b', 'repo');
    mkdirSync(repo);
    sh('cp', ['-r', join(ROOT, 'docs'), join(repo, 'docs')]);
    sh('git', ['init', '-q'], repo);
    sh('git', ['add', '-A'], repo);
    sh('git', ['-c', 'user.email=t@example.com', '-c', 'user.name=t', 'commit', '-qm', 'in the mount'], repo);
    expect(sh('git', ['status', '--porcelain'], repo)).toBe('');
    expect(sh('git', ['log', '--oneline'], repo)).toMatch(/in the mount/);
    expect(existsSync(join(ws.dirs.b, 'repo', '.git', 'HEAD'))).toBe(true);
    // use_ino: stat reports the mount's own numbers (mount path slot in the high byte), which
    // another mount of the same workspace gives too, so git's index stays valid there.
    const ino = (root: string) => Number(sh('stat', ['-c', '%i', join(root, 'b', 'repo', 'docs', 'protocol.md')]).trim());
    expect(Math.floor(ino(mnt) / 2 ** 24)).toBe(mountSlots(['/a', '/b', '/shared']).get('/b'));
    const mnt2 = join(tmpDir('mnt2-'), 'ws');
    mkdirSync(mnt2);
    const second = spawn(process.execPath, [BIN.fsMount, ...ws.mountArgs, 'mount', mnt2], { stdio: ['ignore', 'pipe', 'pipe'] });
    let o2 = '';
    second.stdout.setEncoding('utf8').on('data', (d: string) => (o2 += d));
    try {
      await waitFor(() => o2.includes('mounted on'), 20_000);
      expect(ino(mnt2)).toBe(ino(mnt));
      expect(sh('git', ['status', '--porcelain'], join(mnt2, 'b', 'repo'))).toBe('');
    } finally {
      const exited = new Promise((r) => second.once('exit', r));
      second.kill('SIGTERM');
      await exited;
    }
  });

  it('follows a mount path moved with project_mount_remove/project_mount_set while mounted', async () => {
    const set = (mount_path: string) =>
      ws.admin.request('project_mount_set', { project_id: ws.project.project_id, node_id: ws.nodeIds.a, export_name: 'work', mount_path });
    const remove = (mount_path: string) => ws.admin.request('project_mount_remove', { project_id: ws.project.project_id, mount_path });
    const top = () => sh('ls', ['-1', mnt]).trim().split('\n');
    writeFileSync(join(ws.dirs.a, 'moved.txt'), 'node a work\n');
    await remove('/a');
    await set('/tools/a2');
    await waitFor(() => (top().join() === 'b,shared,tools' ? true : undefined), 10_000);
    expect(sh('cat', [join(mnt, 'tools', 'a2', 'moved.txt')])).toBe('node a work\n');
    await remove('/tools/a2');
    await set('/a');
    await waitFor(() => (top().join() === 'a,b,shared' ? true : undefined), 10_000);
    expect(sh('cat', [join(mnt, 'a', 'moved.txt')])).toBe('node a work\n');
  });

  it('keeps reading /shared after its primary node is killed', async () => {
    writeFileSync(join(ws.dirs.shared, 'both.txt'), 'on both nodes\n');
    expect(sh('cat', [join(mnt, 'shared', 'both.txt')])).toBe('on both nodes\n');
    // the primary: the node workspace_status selects for /shared now (the latest lease wins)
    const status = await ws.admin.request<{ mounts: Array<{ mount_path: string; node_id: string }> }>('workspace_status', {
      project_id: ws.project.project_id,
      project_token: ws.project.project_token,
    });
    const primary = status.mounts.find((m) => m.mount_path === '/shared')!.node_id;
    await (primary === ws.nodeIds.a ? ws.nodeA : ws.nodeB).kill();
    // a file nobody read before: no page, attribute or entry cache can answer for it
    writeFileSync(join(ws.dirs.shared, 'after-kill.txt'), 'written after the kill\n');
    expect(sh('cat', [join(mnt, 'shared', 'after-kill.txt')])).toBe('written after the kill\n');
    await sleep(1100); // let the attribute cache expire so the kernel asks again
    expect(sh('cat', [join(mnt, 'shared', 'both.txt')])).toBe('on both nodes\n');
    expect(
      sh('ls', ['-1', join(mnt, 'shared')])
        .trim()
        .split('\n'),
    ).toEqual(expect.arrayContaining(['after-kill.txt', 'both.txt']));
  });

  it('unmounts cleanly on SIGTERM, leaving no stale mount', async () => {
    const exited = new Promise<number | null>((r) => mount.once('exit', (code) => r(code)));
    mount.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(mounted(mnt)).toBe(false);
    expect(out).toContain(`unmounted ${mnt}`);
  });

  it('cleans a stale mount left by a killed run, with a message', async () => {
    const again = spawn(process.execPath, [BIN.fsMount, ...ws.mountArgs, 'mount', mnt], { stdio: ['ignore', 'pipe', 'pipe'] });
    let o = '';
    again.stdout.setEncoding('utf8').on('data', (d: string) => (o += d));
    await waitFor(() => o.includes('mounted on'), 20_000);
    again.kill('SIGKILL');
    await new Promise((r) => again.once('exit', r));
    expect(() => sh('ls', [mnt])).toThrow(/Transport endpoint is not connected/);
    const third = spawn(process.execPath, [BIN.fsMount, ...ws.mountArgs, 'mount', mnt], { stdio: ['ignore', 'pipe', 'pipe'] });
    let o3 = '';
    let e3 = '';
    third.stdout.setEncoding('utf8').on('data', (d: string) => (o3 += d));
    third.stderr.setEncoding('utf8').on('data', (d: string) => (e3 += d));
    await waitFor(() => o3.includes('mounted on'), 20_000);
    expect(e3).toContain(`cleaned a stale FUSE mount at ${mnt}`);
    expect(sh('ls', ['-1', mnt]).trim().split('\n')).toContain('b');
    const exited = new Promise<number | null>((r) => third.once('exit', (code) => r(code)));
    third.kill('SIGINT');
    expect(await exited).toBe(0);
    expect(mounted(mnt)).toBe(false);
  });

  it('ends by itself (exit 0) when its mount point is unmounted from outside with fusermount -u', async () => {
    const m = spawn(process.execPath, [BIN.fsMount, ...ws.mountArgs, 'mount', mnt], { stdio: ['ignore', 'pipe', 'pipe'] });
    let o = '';
    m.stdout.setEncoding('utf8').on('data', (d: string) => (o += d));
    await waitFor(() => o.includes('mounted on'), 20_000);
    const exited = new Promise<number | null>((r) => m.once('exit', (code) => r(code)));
    const t0 = Date.now();
    sh('fusermount', ['-u', mnt]);
    // Seen within the 1 s check, then the process ends without a signal.
    let timer: NodeJS.Timeout | undefined;
    const code = await Promise.race([exited, new Promise((r) => (timer = setTimeout(() => r('still running'), 5000)))]);
    clearTimeout(timer);
    expect(code).toBe(0);
    expect(Date.now() - t0).toBeLessThan(4000);
    expect(o).toContain(`${mnt} was unmounted from outside; stopping`);
    expect(mounted(mnt)).toBe(false);
  });
});
