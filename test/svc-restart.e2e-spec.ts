/**
 * e2e: `svc` SIGKILLed and restarted (same state directory, same port) under a mounted
 * workspace (FUSE, workspace mode), while a separate process keeps writing and reading files
 * through the mount: data keeps flowing between the mount and the nodes while `svc` is down
 * (the data path does not go through it), every acknowledged write is read back whole (through
 * the mount and from the nodes' directories), and a topology change made once `svc` is back
 * (`project_mount_set` of a new mount path) is in `ls` of the mount root within 2 s.
 * Skipped, saying why, where FUSE mounts cannot run.
 */
import { ChildProcess, spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ControlClient } from '../libs/client/src';
import { fuseUnavailable, killMount, portOf, sha256 } from './helpers/fs-mount';
import { ADMIN_TOKEN, BIN, cleanupTmp, killAll, Running, sleep, startSvc, tmpDir, waitFor } from './support/processes';
import { startWorkspace, Workspace } from './helpers/workspace';

const reason = fuseUnavailable();
if (reason) process.stdout.write(`svc restart under a FUSE mount skipped: ${reason}\n`);
const describeFuse = reason ? describe.skip : describe;

/**
 * The writer: a loop over `/a` and `/b` of the mount writing a file of 16-48 KiB (fsync,
 * close), reading it back through a new descriptor and printing `ack <path> <sha256> <ms>` once
 * the bytes read equal those written (`err <path> <message>` otherwise); stops on SIGTERM.
 */
const WRITER = `
const fs = require('node:fs'), crypto = require('node:crypto'), path = require('node:path');
const root = process.argv[1];
let stop = false, i = 0;
process.on('SIGTERM', () => { stop = true; });
(async () => {
  while (!stop) {
    const rel = (i % 2 ? 'b' : 'a') + '/restart-' + i + '.bin';
    const file = path.join(root, rel);
    const data = crypto.randomBytes(16384 + ((i * 7919) % 32768));
    const t0 = Date.now();
    try {
      const fd = fs.openSync(file, 'w');
      fs.writeSync(fd, data);
      fs.fsyncSync(fd);
      fs.closeSync(fd);
      const back = fs.readFileSync(file);
      const sha = crypto.createHash('sha256').update(data).digest('hex');
      if (!back.equals(data)) process.stdout.write('err ' + rel + ' read back differs\\n');
      else process.stdout.write('ack ' + rel + ' ' + sha + ' ' + (Date.now() - t0) + '\\n');
    } catch (e) {
      process.stdout.write('err ' + rel + ' ' + e.message + '\\n');
    }
    i++;
    await new Promise((r) => setTimeout(r, 20));
  }
  process.exit(0);
})();
`;

interface Ack {
  path: string;
  sha: string;
  at: number;
}

describeFuse('svc SIGKILLed and restarted under a mounted workspace', () => {
  let ws: Workspace;
  let svc: Running & { stateDir: string };
  let mountDir: string;
  let mount: ChildProcess;
  let writer: ChildProcess;
  const acks: Ack[] = [];
  const errors: string[] = [];

  beforeAll(async () => {
    ws = await startWorkspace();
    svc = ws.svc;
    mountDir = join(tmpDir('restart-mount-'), 'ws');
    mkdirSync(mountDir);
    const log = join(tmpDir('restart-log-'), 'mount.log');
    const fd = openSync(log, 'a');
    mount = spawn(process.execPath, [BIN.fsMount, ...ws.mountArgs, 'mount', mountDir, '--attr-ttl-ms', '1000'], { stdio: ['ignore', fd, fd] });
    closeSync(fd);
    await waitFor(() => readFileSync(log, 'utf8').includes(`mounted on ${mountDir}`), 20_000);
  }, 90_000);

  afterAll(async () => {
    if (writer && writer.exitCode === null) writer.kill('SIGKILL');
    killMount(mount, mountDir);
    ws?.close();
    await killAll();
    cleanupTmp();
  });

  it('data flows while svc is down, every acknowledged write reads back whole, a later topology change reaches the mount within 2 s', async () => {
    writer = spawn(process.execPath, ['-e', WRITER, mountDir], { stdio: ['ignore', 'pipe', 'inherit'] });
    let partial = '';
    writer.stdout!.setEncoding('utf8').on('data', (d: string) => {
      const lines = (partial + d).split('\n');
      partial = lines.pop()!;
      for (const line of lines) {
        const [kind, path, sha] = line.split(' ');
        if (kind === 'ack') acks.push({ path, sha, at: Date.now() });
        else if (line) errors.push(line);
      }
    });
    await waitFor(() => acks.length >= 20, 15_000, 20);

    // svc SIGKILLed; down for 2 s, then restarted on the same state directory and port
    ws.admin.close();
    const port = portOf(svc.url);
    const tKill = Date.now();
    await svc.kill();
    await sleep(2000);
    const ackedWhileDown = acks.filter((a) => a.at > tKill).length;
    svc = await startSvc({ stateDir: svc.stateDir, env: { SVC_LOG_LEVEL: 'warn' }, args: ['--port', String(port)] });
    const tBack = Date.now();
    const admin = await ControlClient.connect({ url: svc.url, token: ADMIN_TOKEN });
    try {
      // a topology change once svc is back: a new mount path, in `ls` of the mount root within 2 s
      await admin.request('project_mount_set', { project_id: ws.project.project_id, node_id: ws.nodeIds.b, export_name: 'work', mount_path: '/after-restart' });
      const tSet = Date.now();
      await waitFor(() => readdirSync(mountDir).includes('after-restart'), 5000, 25);
      const visibleMs = Date.now() - tSet;
      // writes go on after the restart too
      const ackedAtBack = acks.length;
      await waitFor(() => acks.length >= ackedAtBack + 10, 10_000, 20);
      writer.kill('SIGTERM');
      await new Promise((r) => writer.once('exit', r));
      process.stderr.write(
        `svc restart under a mount: ${ackedWhileDown} writes acknowledged in the 2 s svc was down; svc listening again ${tBack - tKill} ms after the kill; the new mount path in ls after ${visibleMs} ms; ${acks.length} acknowledged in all, ${errors.length} errors\n`,
      );
      expect(ackedWhileDown).toBeGreaterThan(0);
      expect(visibleMs).toBeLessThanOrEqual(2000);
      expect(errors).toEqual([]);
      // every acknowledged write, whole: through the mount and in the node's directory
      const dirOf: Record<string, string> = { a: ws.dirs.a, b: ws.dirs.b };
      for (const a of acks) {
        expect(sha256(readFileSync(join(mountDir, a.path)))).toBe(a.sha);
        const [top, name] = a.path.split('/');
        expect(sha256(readFileSync(join(dirOf[top], name)))).toBe(a.sha);
      }
      expect(mount.exitCode).toBeNull();
    } finally {
      admin.close();
    }
  }, 90_000);
});
