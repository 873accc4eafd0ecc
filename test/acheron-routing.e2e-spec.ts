/**
 * e2e: routed filesystems in the runtime namespace (docs/namespace.md): node exports
 * under /nodes/<id>/fs and terminals under /nodes/<id>/terminal/<tid>, project workspaces under
 * /projects/<id>/fs with failover and invoke gating, errors as runtime codes, and the
 * `svc-control acheron` subcommand.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { closeSessions, failure, gatedTerminalService, INVOKE_GATING, session } from './helpers/control';
import { ADMIN_TOKEN, BIN, cleanupTmp, killAll, runCli, sleep, tmpDir } from './support/processes';
import { RawPeer } from './helpers/raw-ws';
import { startWorkspace, Workspace } from './helpers/workspace';

let ws: Workspace;
beforeAll(async () => {
  const manifest = join(tmpDir('manifest-'), 'search.json');
  writeFileSync(
    manifest,
    JSON.stringify({
      service_id: 'search',
      kind: 'index',
      state: 'online',
      endpoints: ['/services/search'],
      ops: { paths: { invoke: 'q/invoke.json' } },
      schema: { type: 'object', properties: { q: { type: 'string' } } },
      permissions: { allow_roles: ['*'] },
      help_md: '# search\n',
    }),
  );
  ws = await startWorkspace({ terminalIds: ['t1'], manifests: [manifest] });
}, 60_000);
afterAll(async () => {
  closeSessions();
  ws?.close();
  await killAll();
  cleanupTmp();
});

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const seg = (path: string) => path.split('/').filter(Boolean);

/** A runtime session with whole-file helpers. */
async function runtime(role: 'admin' | 'user' = 'admin', agentId?: string) {
  const c = await session(ws.svc.url, role, agentId);
  const { msize } = await c.attach(0, 1 << 20);
  let next = 10;
  const open = async (path: string, mode: 'r' | 'w' | 'rw') => {
    const fid = next++;
    await c.acheron('acheron.t_walk', { fid: 0, newfid: fid, path: seg(path) });
    const { iounit } = await c.acheron<{ iounit: number }>('acheron.t_open', { fid, mode });
    return { fid, iounit };
  };
  const read = async (path: string): Promise<Buffer> => {
    const { fid, iounit } = await open(path, 'r');
    const parts: Buffer[] = [];
    for (let offset = 0; ;) {
      const r = await c.acheron<{ data_b64: string; n: number; eof: boolean }>('acheron.t_read', { fid, offset, count: iounit });
      parts.push(Buffer.from(r.data_b64, 'base64'));
      offset += r.n;
      if (r.eof || r.n === 0) break;
    }
    await c.acheron('acheron.t_clunk', { fid });
    return Buffer.concat(parts);
  };
  const write = async (path: string, data: Buffer): Promise<void> => {
    const { fid, iounit } = await open(path, 'w');
    for (let offset = 0; offset < data.length;) {
      const piece = data.subarray(offset, offset + iounit);
      const { n } = await c.acheron<{ n: number }>('acheron.t_write', { fid, offset, data_b64: piece.toString('base64') });
      offset += n;
    }
    await c.acheron('acheron.t_clunk', { fid });
  };
  const ls = async (path: string) => (JSON.parse((await read(path)).toString()) as { entries: Array<{ name: string }> }).entries.map((e) => e.name);
  return { c, msize, open, read, write, ls };
}

describe('projected files of a real daemon node', () => {
  it('projects every file of its fs, terminal and manifest services equal to node_service_get', async () => {
    const r = await runtime();
    const catalog = await ws.admin.request<{ services: Array<{ service_id: string; help_md?: string } & Record<string, unknown>> }>('node_service_get', {
      node_id: ws.nodeIds.a,
    });
    expect(catalog.services.map((s) => s.service_id)).toEqual(['fs', 'terminal-t1', 'search']);
    const base = `/nodes/${ws.nodeIds.a}/services`;
    expect(await r.ls(base)).toEqual(['fs', 'terminal-t1', 'search']);
    const files: Record<string, string> = {
      'SCHEMA.json': 'schema',
      'CAPS.json': 'capabilities',
      'OPS.json': 'ops',
      'RUNTIME.json': 'runtime',
      'PERMISSIONS.json': 'permissions',
      'MOUNTS.json': 'mounts',
    };
    for (const s of catalog.services) {
      for (const [file, field] of Object.entries(files)) {
        expect(JSON.parse((await r.read(`${base}/${s.service_id}/${file}`)).toString())).toEqual(s[field]);
      }
      expect((await r.read(`${base}/${s.service_id}/HELP.md`)).toString()).toBe(s.help_md ?? '');
    }
    const status = (id: string) => r.read(`${base}/${id}/STATUS.json`).then((b) => JSON.parse(b.toString()));
    expect(await status('terminal-t1')).toEqual({ state: 'online', invoke_path: `/nodes/${ws.nodeIds.a}/terminal/t1/control/invoke.json` });
    expect(await status('search')).toEqual({ state: 'online', invoke_path: '/services/search/q/invoke.json' });
    expect(await status('fs')).toEqual({ state: 'online', invoke_path: `/nodes/${ws.nodeIds.a}/fs/control/invoke.json` });
    // a user sees the manifest service (allow_roles *) and fs, not the admin-only terminal
    const user = await runtime('user', 'proj-user');
    expect(await user.ls(base)).toEqual(['fs', 'search']);
    expect(await user.ls(`/nodes/${ws.nodeIds.a}`)).toEqual(['NODE.json', 'STATUS.json', 'services', 'fs']);
  });
});

describe('invoke gating of /projects/<id>/fs', () => {
  it.each(INVOKE_GATING)('policy %s, terminal permission %s, %s: /term listed = %s', async (policy, perm, role, present) => {
    const { invite_token } = await ws.admin.request<{ invite_token: string }>('node_invite_create');
    const n = await ws.admin.request<{ node_id: string; node_secret: string }>('node_join', {
      invite_token,
      node_name: `gate-${policy}-${perm}-${role}`,
      fs_url: 'ws://127.0.0.1:1/v2/fs',
    });
    await ws.admin.request('node_service_upsert', {
      node_id: n.node_id,
      node_secret: n.node_secret,
      services: [
        { service_id: 'fs', kind: 'fs', state: 'online', endpoints: ['/x'], mounts: [{ mount_id: 'work', mount_path: '/x' }] },
        gatedTerminalService('terminal-g', '/t', perm),
      ],
    });
    const p = await ws.admin.request<{ project_id: string; project_token: string }>('project_create', { name: 'gating', access_policy: { invoke: policy } });
    await ws.admin.request('project_mount_set', { project_id: p.project_id, node_id: n.node_id, export_name: 'work', mount_path: '/work' });
    await ws.admin.request('project_mount_set', { project_id: p.project_id, node_id: n.node_id, export_name: 'terminal-g', mount_path: '/term' });
    const r = await runtime(role, `gate-${policy}-${perm}-${role}`);
    await r.c.request('project_activate', { project_id: p.project_id, project_token: p.project_token });
    expect(await r.ls(`/projects/${p.project_id}/fs`)).toEqual(present ? ['term', 'work'] : ['work']);
  });
});

describe('routed node filesystems', () => {
  it('reads and writes under /nodes/<id>/fs/<export>/ with the node disk byte for byte', async () => {
    const r = await runtime();
    const data = randomBytes(3 * 1024 * 1024 + 17);
    writeFileSync(join(ws.dirs.a, 'from-disk.bin'), data);
    expect(await r.ls(`/nodes/${ws.nodeIds.a}/fs`)).toEqual(['shared', 'work']);
    expect(sha(await r.read(`/nodes/${ws.nodeIds.a}/fs/work/from-disk.bin`))).toBe(sha(data));
    const up = randomBytes(2 * 1024 * 1024 + 5);
    // files are created through the FS protocol, not the runtime namespace (docs/namespace.md)
    writeFileSync(join(ws.dirs.a, 'from-runtime.bin'), 'old content, longer than nothing');
    await r.write(`/nodes/${ws.nodeIds.a}/fs/work/from-runtime.bin`, up);
    expect(sha(readFileSync(join(ws.dirs.a, 'from-runtime.bin')))).toBe(sha(up));
    const stat = await r.c
      .acheron<{ kind: string; size: number; writable: boolean }>('acheron.t_walk', {
        fid: 0,
        newfid: 900,
        path: seg(`/nodes/${ws.nodeIds.a}/fs/work/from-runtime.bin`),
      })
      .then(() => r.c.acheron<{ kind: string; size: number; writable: boolean }>('acheron.t_stat', { fid: 900 }));
    expect(stat).toMatchObject({ kind: 'file', size: up.length, writable: true });
  });

  it('runs a terminal request through /nodes/<id>/terminal/<tid>/control/invoke.json', async () => {
    const r = await runtime();
    const path = `/nodes/${ws.nodeIds.a}/terminal/t1/control/invoke.json`;
    const { fid } = await r.open(path, 'rw');
    await r.c.acheron('acheron.t_write', { fid, offset: 0, data_b64: Buffer.from('{"argv":["sh","-c","echo via-runtime; exit 4"]}').toString('base64') });
    const out = await r.c.acheron<{ data_b64: string }>('acheron.t_read', { fid, offset: 0, count: 65536 });
    expect(JSON.parse(Buffer.from(out.data_b64, 'base64').toString())).toMatchObject({ exit_code: 4, stdout: 'via-runtime\n' });
    await r.c.acheron('acheron.t_clunk', { fid });
    // invalid JSON: the clunk (which runs the request) says invalid, the session stays
    const bad = await r.open(path, 'w');
    await r.c.acheron('acheron.t_write', { fid: bad.fid, offset: 0, data_b64: Buffer.from('{nope').toString('base64') });
    expect((await failure(r.c.acheron('acheron.t_clunk', { fid: bad.fid }))).code).toBe('invalid');
    expect(await r.c.request('ping')).toEqual({});
    // the terminal export is not reachable through the fs service root
    expect((await failure(r.c.acheron('acheron.t_walk', { fid: 0, newfid: 901, path: seg(`/nodes/${ws.nodeIds.a}/fs/terminal-t1`) }))).code).toBe('enoent');
  });

  it('t_flush abandons a pending routed request: no reply for its tag, the session goes on', async () => {
    const peer = await RawPeer.open(ws.svc.url, ADMIN_TOKEN);
    await peer.negotiate();
    const ask = async (frame: Record<string, unknown>) => {
      const m = await peer.roundTrip({ channel: 'acheron', ...frame });
      if (!m.ok) throw new Error(JSON.stringify(m));
      return m;
    };
    await ask({ type: 'acheron.t_version', tag: 1, version: 'acheron-1', msize: 65536 });
    await ask({ type: 'acheron.t_attach', tag: 2, fid: 0 });
    await ask({ type: 'acheron.t_walk', tag: 3, fid: 0, newfid: 5, path: seg(`/nodes/${ws.nodeIds.a}/terminal/t1/control/invoke.json`) });
    await ask({ type: 'acheron.t_open', tag: 4, fid: 5, mode: 'rw' });
    await ask({ type: 'acheron.t_write', tag: 5, fid: 5, offset: 0, data_b64: Buffer.from('{"argv":["sleep","1"]}').toString('base64') });
    // the read runs the program: pending for about a second
    const from = peer.messages.length;
    peer.send({ channel: 'acheron', type: 'acheron.t_read', tag: 77, fid: 5, offset: 0, count: 4096 });
    await sleep(100);
    const flushed = await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_flush', tag: 78, oldtag: 77 });
    expect(flushed).toMatchObject({ type: 'acheron.r_flush', tag: 78, ok: true, payload: {} });
    await sleep(1800);
    expect(peer.messages.slice(from).filter((m) => m.tag === 77)).toEqual([]);
    // the fid and the session still work; the program did run
    expect(await ask({ type: 'acheron.t_clunk', tag: 6, fid: 5 })).toMatchObject({ payload: {} });
    await ask({ type: 'acheron.t_walk', tag: 7, fid: 0, newfid: 6, path: seg(`/nodes/${ws.nodeIds.a}/terminal/t1/control/last_result.json`) });
    await ask({ type: 'acheron.t_open', tag: 8, fid: 6, mode: 'r' });
    const last = await ask({ type: 'acheron.t_read', tag: 9, fid: 6, offset: 0, count: 4096 });
    expect(JSON.parse(Buffer.from(last.payload!.data_b64 as string, 'base64').toString())).toMatchObject({ exit_code: 0, timed_out: false });
    peer.close();
  });
});

describe('routed project filesystems', () => {
  it('reads and writes under /projects/<id>/fs with the node disks byte for byte', async () => {
    const r = await runtime();
    expect(await r.ls(`/projects/${ws.project.project_id}/fs`)).toEqual(['a', 'b', 'shared', 'term']);
    const data = randomBytes(1024 * 1024 + 1);
    writeFileSync(join(ws.dirs.b, 'p.bin'), '');
    await r.write(`/projects/${ws.project.project_id}/fs/b/p.bin`, data);
    expect(sha(readFileSync(join(ws.dirs.b, 'p.bin')))).toBe(sha(data));
    writeFileSync(join(ws.dirs.a, 'q.txt'), 'from node a\n');
    expect((await r.read(`/projects/${ws.project.project_id}/fs/a/q.txt`)).toString()).toBe('from node a\n');
  });

  it('applies invoke gating for users: the terminal mount is absent unless policy and permissions allow', async () => {
    // the terminal is admin-only by default (permissions default deny-by-default)
    const user = await runtime('user', 'gate-user');
    await user.c.request('project_activate', { project_id: ws.project.project_id, project_token: ws.project.project_token });
    expect(await user.ls(`/projects/${ws.project.project_id}/fs`)).toEqual(['a', 'b', 'shared']);
    expect((await failure(user.c.acheron('acheron.t_walk', { fid: 0, newfid: 50, path: seg(`/projects/${ws.project.project_id}/fs/term/t1`) }))).code).toBe(
      'enoent',
    );
    const admin = await runtime();
    expect(await admin.ls(`/projects/${ws.project.project_id}/fs/term`)).toEqual(['t1']);
  });
});

describe('svc-control acheron', () => {
  const cli = (args: string[], input?: string) =>
    runCli(BIN.control, ['--url', ws.svc.url, 'acheron', ...args], { env: { SVC_AUTH_TOKEN: ADMIN_TOKEN }, input });

  it('lists, reads, writes and stats like the Unix tools', async () => {
    const root = `/projects/${ws.project.project_id}/fs/b`;
    expect((await cli(['ls', '/'])).stdout).toBe('nodes/\nprojects/\ndebug/\n');
    // the namespace writes existing files; creating one is refused clearly
    const create = await cli(['write', `${root}/cli.txt`, 'x']);
    expect(create.code).toBe(1);
    expect(create.stderr).toMatch(/enoent/);
    writeFileSync(join(ws.dirs.b, 'cli.txt'), 'a much longer old content that must be replaced');
    writeFileSync(join(ws.dirs.b, 'stdin.txt'), '');
    const w = await cli(['write', `${root}/cli.txt`, 'from svc-control\n']);
    expect(w.code).toBe(0);
    expect(readFileSync(join(ws.dirs.b, 'cli.txt'), 'utf8')).toBe('from svc-control\n');
    expect((await cli(['cat', `${root}/cli.txt`])).stdout).toBe('from svc-control\n');
    const piped = await cli(['write', `${root}/stdin.txt`, '-'], 'piped in');
    expect(piped.code).toBe(0);
    expect(readFileSync(join(ws.dirs.b, 'stdin.txt'), 'utf8')).toBe('piped in');
    expect((await cli(['ls', root])).stdout.split('\n')).toEqual(expect.arrayContaining(['cli.txt', 'stdin.txt']));
    // ls of a file prints its name, like ls(1), for routed and projected JSON files alike
    expect(await cli(['ls', `${root}/cli.txt`])).toMatchObject({ code: 0, stdout: 'cli.txt\n' });
    expect(await cli(['ls', `/nodes/${ws.nodeIds.b}/NODE.json`])).toMatchObject({ code: 0, stdout: 'NODE.json\n' });
    const st = await cli(['stat', `${root}/cli.txt`]);
    expect(st.stdout).toMatch(/^name: cli\.txt\nkind: file\nsize: 17\nmode: 0644\nwritable: true\nmtime: /);
  });

  it('prints svc-control: PATH: <code>: <message> and exits 1 on errors', async () => {
    const missing = await cli(['cat', '/nodes/node-none']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe('svc-control: /nodes/node-none: enoent: no such file or directory\n');
    const ro = await cli(['write', `/nodes/${ws.nodeIds.b}/NODE.json`, 'x']);
    expect(ro.code).toBe(1);
    expect(ro.stderr).toMatch(/: eperm: /);
    const dir = await cli(['cat', '/nodes']);
    expect(dir.code).toBe(1);
    expect(dir.stdout).toBe('');
    expect(dir.stderr).toBe('svc-control: /nodes: eisdir: is a directory (use ls)\n');
    const usage = await cli(['bogus', '/']);
    expect(usage.code).toBe(2);
  });
});

describe('isolation', () => {
  it('gives two concurrent sessions with different roles their own projections', async () => {
    const [admin, user] = await Promise.all([runtime('admin', 'iso'), runtime('user', 'iso')]);
    const [a, u] = await Promise.all([admin.ls(`/nodes/${ws.nodeIds.a}/services`), user.ls(`/nodes/${ws.nodeIds.a}/services`)]);
    expect(a).toEqual(expect.arrayContaining(['fs', 'terminal-t1']));
    expect(u).toContain('fs');
    expect(u).not.toContain('terminal-t1');
    // the admin-only terminal's dynamic mount root is absent for the user, not forbidden
    expect((await failure(user.c.acheron('acheron.t_walk', { fid: 0, newfid: 70, path: seg(`/nodes/${ws.nodeIds.a}/terminal/t1`) }))).code).toBe('enoent');
    expect(await admin.ls(`/nodes/${ws.nodeIds.a}/terminal/t1`)).toEqual(expect.arrayContaining(['README.md', 'control']));
    const [ta, tu] = await Promise.all([admin.ls('/'), user.ls('/')]);
    expect(ta).toContain('debug');
    expect(tu).not.toContain('debug');
    const [pa, pu] = await Promise.all([admin.ls('/projects'), user.ls('/projects')]);
    expect(pa).toContain(ws.project.project_id);
    expect(pu).toEqual([]);
    // a binding made by the user session shows in its own tree only (bindings are per role)
    await user.c.request('project_activate', { project_id: ws.project.project_id, project_token: ws.project.project_token });
    const [pa2, pu2] = await Promise.all([admin.ls('/projects'), user.ls('/projects')]);
    expect(pu2).toEqual([ws.project.project_id]);
    expect(pa2).toEqual(pa);
    const userStatus = JSON.parse((await user.read(`/projects/${ws.project.project_id}/STATUS.json`)).toString());
    expect(userStatus).toMatchObject({ agent_id: 'iso', project_id: ws.project.project_id });
    expect(userStatus.mounts.map((m: { mount_path: string }) => m.mount_path)).not.toContain('/term');
    const adminSelf = await admin.c.request<{ project_id: string | null }>('workspace_status', {});
    expect(adminSelf.project_id).toBeNull();
  });
});

describe('failover (last: it kills a node)', () => {
  it('reads again through /projects/<id>/fs after the node serving a failover path is killed', async () => {
    const r = await runtime();
    const project = ws.project.project_id;
    writeFileSync(join(ws.dirs.shared, 'failover.txt'), 'still here\n');
    expect((await r.read(`/projects/${project}/fs/shared/failover.txt`)).toString()).toBe('still here\n');
    // kill the node that serves /shared now (selection follows the latest lease, so either may)
    const status = JSON.parse((await r.read(`/projects/${project}/STATUS.json`)).toString()) as { mounts: Array<{ mount_path: string; node_id: string }> };
    const serving = status.mounts.find((m) => m.mount_path === '/shared')!.node_id;
    expect([ws.nodeIds.a, ws.nodeIds.b]).toContain(serving);
    const victim = serving === ws.nodeIds.a ? ws.nodeA : ws.nodeB;
    await victim.kill();
    await sleep(200);
    const again = await runtime();
    expect((await again.read(`/projects/${project}/fs/shared/failover.txt`)).toString()).toBe('still here\n');
    // the same session too, and a file it never read before (no cached content can answer)
    expect((await r.read(`/projects/${project}/fs/shared/failover.txt`)).toString()).toBe('still here\n');
    writeFileSync(join(ws.dirs.shared, 'after-kill.txt'), 'written after the kill\n');
    expect((await r.read(`/projects/${project}/fs/shared/after-kill.txt`)).toString()).toBe('written after the kill\n');
    // a routed node that is down: eio naming the node
    const down = await failure(again.read(`/nodes/${serving}/fs/work/q.txt`));
    expect(down.code).toBe('eio');
    expect(down.message).toContain(serving);
    expect(await again.c.request('ping')).toEqual({});
  });
});
