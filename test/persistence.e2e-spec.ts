/**
 * e2e: durable, optionally encrypted state: restart after SIGKILL restores
 * every acknowledged mutation; wrong or malformed keys refuse to start and leave the file
 * untouched; secrets are never in the snapshot in plaintext; torn writes never corrupt it.
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { closeSessions, Credentials, failure, joinNode, ProjectDetail, session } from './helpers/control';
import { BIN, cleanupTmp, killAll, sleep, startSvc, tmpDir } from './support/processes';

const KEY = 'a'.repeat(32) + '0123456789abcdef0123456789abcdef';
const OTHER_KEY = 'b'.repeat(64);

afterEach(() => closeSessions());
afterAll(async () => {
  await killAll();
  cleanupTmp();
});

/** Every byte the store keeps in the state directory (database, WAL, key check; not the role token copy), as text. */
const snapshotOf = (dir: string) =>
  readdirSync(dir)
    .filter((f) => f !== 'auth_tokens.json' && f !== 'state.lock')
    .map((f) => readFileSync(join(dir, f)).toString('latin1'))
    .join('\n');
/** Names and contents of every file in the state directory (a subdirectory: its entries' names). */
const digest = (dir: string) => {
  const h = createHash('sha256');
  for (const f of readdirSync(dir).sort()) {
    const path = join(dir, f);
    h.update(f)
      .update('\0')
      .update(statSync(path).isDirectory() ? `dir:${readdirSync(path).join('/')}` : readFileSync(path));
  }
  return h.digest('hex');
};

/** Starts svc expecting it to refuse: returns exit code and stderr. */
function refuses(stateDir: string, env: NodeJS.ProcessEnv): { code: number | null; stderr: string } {
  const r = spawnSync(process.execPath, [BIN.svc, '--port', '0', '--state-dir', stateDir], {
    env: { ...process.env, SVC_ADMIN_TOKEN: 'a'.repeat(20), SVC_USER_TOKEN: 'u'.repeat(20), ...env },
    encoding: 'utf8',
    timeout: 20_000,
  });
  return { code: r.status, stderr: r.stderr };
}

interface World {
  project: ProjectDetail;
  node: Credentials;
  invite: string;
  request: { request_id: string; request_secret: string };
  /** Mutations other than creation, each checked after the restart. */
  leaseExpiresAtMs: number;
  rotated: { project_id: string; old: string; now: string };
  revoked: { project_id: string; old: string };
  deletedProject: string;
  deletedNode: Credentials;
  usedInvite: string;
  approved: { request_id: string; request_secret: string; node_id: string };
  denied: { request_id: string; request_secret: string };
}

async function populate(url: string): Promise<World> {
  const admin = await session(url);
  const project = await admin.request<ProjectDetail>('project_create', { name: 'persist', vision: 'survive', access_policy: { invoke: 'allow' } });
  const node = await joinNode(admin, 'persist-node', 600_000);
  await admin.request('project_mount_set', { project_id: project.project_id, node_id: node.node_id, export_name: 'work', mount_path: '/p' });
  const user = await session(url, 'user', 'agent-p');
  await user.request('project_activate', { project_id: project.project_id, project_token: project.project_token });
  const { invite_token: invite } = await admin.request<{ invite_token: string }>('node_invite_create', { ttl_ms: 600_000 });
  const request = await user.request<{ request_id: string; request_secret: string }>('node_join_request', { node_name: 'pending-node', fs_url: 'ws://h:1/' });
  // updates, removals, rotations, revocations, deletions, decisions
  await admin.request('project_update', { project_id: project.project_id, vision: 'survive twice' });
  await admin.request('project_mount_set', { project_id: project.project_id, node_id: node.node_id, export_name: 'work', mount_path: '/gone' });
  await admin.request('project_mount_remove', { project_id: project.project_id, mount_path: '/gone' });
  const { lease_expires_at_ms: leaseExpiresAtMs } = await admin.request<{ lease_expires_at_ms: number }>('node_lease_refresh', {
    node_id: node.node_id,
    node_secret: node.node_secret,
    lease_ttl_ms: 3_600_000,
  });
  const r = await admin.request<ProjectDetail>('project_create', { name: 'rotated' });
  const other = await session(url, 'user', 'agent-r');
  await other.request('project_activate', { project_id: r.project_id, project_token: r.project_token });
  const { project_token: now } = await admin.request<{ project_token: string }>('project_token_rotate', { project_id: r.project_id });
  const v = await admin.request<ProjectDetail>('project_create', { name: 'revoked' });
  await admin.request('project_token_revoke', { project_id: v.project_id });
  const d = await admin.request<ProjectDetail>('project_create', { name: 'deleted' });
  await admin.request('project_delete', { project_id: d.project_id });
  const deletedNode = await joinNode(admin, 'deleted-node', 600_000);
  await admin.request('node_delete', { node_id: deletedNode.node_id });
  const { invite_token: usedInvite } = await admin.request<{ invite_token: string }>('node_invite_create', { ttl_ms: 600_000 });
  await user.request('node_join', { invite_token: usedInvite, node_name: 'used-invite', fs_url: 'ws://h:1/' });
  const toApprove = await user.request<{ request_id: string; request_secret: string }>('node_join_request', {
    node_name: 'approved-node',
    fs_url: 'ws://h:1/',
  });
  const { node_id: approvedId } = await admin.request<{ node_id: string }>('node_join_approve', { request_id: toApprove.request_id });
  const denied = await user.request<{ request_id: string; request_secret: string }>('node_join_request', { node_name: 'denied-node', fs_url: 'ws://h:1/' });
  await admin.request('node_join_deny', { request_id: denied.request_id });
  return {
    project,
    node,
    invite,
    request,
    leaseExpiresAtMs,
    rotated: { project_id: r.project_id, old: r.project_token!, now },
    revoked: { project_id: v.project_id, old: v.project_token! },
    deletedProject: d.project_id,
    deletedNode,
    usedInvite,
    approved: { ...toApprove, node_id: approvedId },
    denied,
  };
}

async function verify(url: string, w: World): Promise<void> {
  const admin = await session(url);
  const user = await session(url, 'user', 'agent-p');
  // project and its token
  const p = await user.request<ProjectDetail>('project_get', { project_id: w.project.project_id, project_token: w.project.project_token });
  expect(p).toMatchObject({ name: 'persist', vision: 'survive twice', access_policy: { invoke: 'allow' }, token_locked: true });
  expect(p.mounts).toEqual([expect.objectContaining({ mount_path: '/p', node_id: w.node.node_id, export_name: 'work', state: 'online' })]);
  // binding
  const status = await user.request<{ project_id: string; mounts: Array<{ auth_token?: string }> }>('workspace_status');
  expect(status.project_id).toBe(w.project.project_id);
  expect(status.mounts[0].auth_token).toBe(w.node.fs_auth_token);
  // node, lease and secret
  const { node } = await admin.request<{ node: { lease_expires_at_ms: number; node_name: string } }>('node_get', { node_id: w.node.node_id });
  expect(node.node_name).toBe('persist-node');
  expect(node.lease_expires_at_ms).toBe(w.leaseExpiresAtMs);
  await expect(admin.request('node_lease_refresh', { node_id: w.node.node_id, node_secret: w.node.node_secret })).resolves.toBeDefined();
  expect((await failure(admin.request('node_lease_refresh', { node_id: w.node.node_id, node_secret: 'x' }))).code).toBe('node_auth_failed');
  // pending join request
  const { pending } = await admin.request<{ pending: Array<{ request_id: string }> }>('node_join_pending_list');
  expect(pending.map((r) => r.request_id)).toContain(w.request.request_id);
  expect(await user.request('node_join_status', w.request)).toMatchObject({ state: 'pending' });
  // invite still redeemable once
  await expect(user.request('node_join', { invite_token: w.invite, node_name: 'late', fs_url: 'ws://h:1/' })).resolves.toBeDefined();
  // a rotated token: the old one fails, the new one opens, and the user's binding stays ended
  expect((await failure(user.request('project_get', { project_id: w.rotated.project_id, project_token: w.rotated.old }))).code).toBe('project_auth_failed');
  await expect(user.request('project_get', { project_id: w.rotated.project_id, project_token: w.rotated.now })).resolves.toMatchObject({ name: 'rotated' });
  const other = await session(url, 'user', 'agent-r');
  expect(await other.request('workspace_status')).toMatchObject({ project_id: null });
  // a revoked token stays revoked
  expect((await failure(user.request('project_get', { project_id: w.revoked.project_id, project_token: w.revoked.old }))).code).toBe('project_auth_failed');
  expect(await admin.request('project_get', { project_id: w.revoked.project_id })).toMatchObject({ token_locked: false });
  // deletions stay deleted
  expect((await failure(admin.request('project_get', { project_id: w.deletedProject }))).code).toBe('project_not_found');
  expect((await failure(admin.request('node_get', { node_id: w.deletedNode.node_id }))).code).toBe('node_not_found');
  // a redeemed invite stays redeemed; decisions on join requests stay made
  expect((await failure(user.request('node_join', { invite_token: w.usedInvite, node_name: 'again', fs_url: 'ws://h:1/' }))).code).toBe('invite_redeemed');
  expect(await user.request('node_join_status', { request_id: w.approved.request_id, request_secret: w.approved.request_secret })).toMatchObject({
    state: 'approved',
  });
  await expect(admin.request('node_get', { node_id: w.approved.node_id })).resolves.toMatchObject({ node: { node_name: 'approved-node' } });
  expect(await user.request('node_join_status', { request_id: w.denied.request_id, request_secret: w.denied.request_secret })).toMatchObject({
    state: 'denied',
  });
}

describe('a state database that cannot be used at start', () => {
  /** The refusal names the file and what to do, exits 2, never listens, and changes nothing in the directory. */
  const refusedWithRemedy = (dir: string, what: RegExp) => {
    const before = digest(dir);
    const t0 = Date.now();
    const r = refuses(dir, {});
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(join(dir, 'state.db'));
    expect(r.stderr).toMatch(what);
    expect(r.stderr).toContain('svc state import');
    expect(r.stderr).toContain('move the file away');
    expect(r.stderr).not.toContain('listening on');
    expect(digest(dir)).toBe(before);
    return Date.now() - t0;
  };

  it('garbage bytes in place of state.db: exit 2 naming the file and the remedy, untouched', () => {
    const dir = tmpDir();
    writeFileSync(join(dir, 'state.db'), randomBytes(64 * 1024));
    refusedWithRemedy(dir, /is not an SQLite database/);
  });

  it('a directory in place of state.db (unreadable as a file, also for root): exit 2 naming it and the remedy', () => {
    const dir = tmpDir();
    mkdirSync(join(dir, 'state.db'));
    refusedWithRemedy(dir, /is a directory/);
  });

  it('a real store whose pages are damaged: exit 2 naming it and the remedy, untouched, never an empty store', async () => {
    const dir = tmpDir();
    const svc = await startSvc({ stateDir: dir });
    const c = await session(svc.url);
    for (let i = 0; i < 20; i++) await c.request('project_create', { name: `p-${i}`, vision: 'v'.repeat(2000) });
    closeSessions();
    expect((await svc.stop()).code).toBe(0);
    const file = join(dir, 'state.db');
    const bytes = readFileSync(file);
    // every page after the first (the header and schema stay readable)
    randomBytes(bytes.length - 4096).copy(bytes, 4096);
    writeFileSync(file, bytes);
    refusedWithRemedy(dir, /is damaged \(SQLITE_CORRUPT/);
  }, 30_000);
});

describe.each([
  ['plaintext', {}],
  ['encrypted', { SVC_CONTROL_STATE_KEY_HEX: KEY }],
])('restart after SIGKILL (%s)', (mode, env) => {
  it('restores every acknowledged mutation', async () => {
    const first = await startSvc({ env });
    const w = await populate(first.url);
    closeSessions();
    await first.kill();
    const snapshot = snapshotOf(first.stateDir);
    // never a node secret or project token in the snapshot, in any mode
    for (const secret of [w.node.node_secret, w.project.project_token!, w.invite, w.request.request_secret]) expect(snapshot).not.toContain(secret);
    if (mode === 'encrypted') {
      expect(snapshot).not.toContain(w.node.fs_auth_token);
      expect(snapshot).not.toContain('persist-node');
      expect(JSON.parse(readFileSync(join(first.stateDir, 'state.keycheck.json'), 'utf8'))).toMatchObject({ encrypted: true });
    } else {
      expect(snapshot).toContain('"name":"persist"');
    }
    const second = await startSvc({ stateDir: first.stateDir, env });
    await verify(second.url, w);
    await second.stop();
  });
});

describe('encryption keys', () => {
  it('refuses to start with a key that is not 64 hex characters', () => {
    const dir = tmpDir();
    for (const bad of ['abc', 'g'.repeat(64), 'a'.repeat(63), 'a'.repeat(65)]) {
      const r = refuses(dir, { SVC_CONTROL_STATE_KEY_HEX: bad });
      expect(r.code).toBe(2);
      expect(r.stderr).toContain('SVC_CONTROL_STATE_KEY_HEX must be exactly 64 hexadecimal characters');
    }
  });

  it('refuses a wrong key, and no key for an encrypted file, leaving the file unchanged', async () => {
    const s = await startSvc({ env: { SVC_CONTROL_STATE_KEY_HEX: KEY } });
    await populate(s.url);
    closeSessions();
    await s.stop();
    const before = digest(s.stateDir);
    const wrong = refuses(s.stateDir, { SVC_CONTROL_STATE_KEY_HEX: OTHER_KEY });
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain('cannot decrypt');
    expect(existsSync(join(s.stateDir, 'state.lock'))).toBe(false);
    const none = refuses(s.stateDir, { SVC_CONTROL_STATE_KEY_HEX: '' });
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('is encrypted');
    expect(digest(s.stateDir)).toBe(before);
    // the right key still works
    const again = await startSvc({ stateDir: s.stateDir, env: { SVC_CONTROL_STATE_KEY_HEX: KEY } });
    await again.stop();
  });

  it('reads a plaintext store while a key is set and rewrites it encrypted, leaving no plaintext behind', async () => {
    const s = await startSvc();
    const w = await populate(s.url);
    closeSessions();
    await s.stop();
    expect(snapshotOf(s.stateDir)).toContain('persist-node');
    const enc = await startSvc({ stateDir: s.stateDir, env: { SVC_CONTROL_STATE_KEY_HEX: KEY } });
    expect(snapshotOf(s.stateDir)).not.toContain('persist-node');
    expect(snapshotOf(s.stateDir)).not.toContain(w.node.fs_auth_token);
    await verify(enc.url, w);
    await enc.stop();
  });

  it('refuses an unparseable snapshot of an earlier version and leaves it untouched', () => {
    const dir = tmpDir();
    writeFileSync(join(dir, 'state.json'), '{"format":"svc-control-state", truncated');
    const before = digest(dir);
    const r = refuses(dir, {});
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('not a readable snapshot');
    expect(digest(dir)).toBe(before);
  });

  it('refuses a damaged or foreign database file and leaves it untouched', () => {
    const dir = tmpDir();
    writeFileSync(join(dir, 'state.db'), Buffer.concat([Buffer.from('SQLite format 3\0'), Buffer.alloc(4080, 7)]));
    let before = digest(dir);
    let r = refuses(dir, {});
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/state\.db/);
    expect(digest(dir)).toBe(before);
    writeFileSync(
      join(dir, 'state.db'),
      'not a database at all, just text that is long enough to have a header.............................................................',
    );
    before = digest(dir);
    r = refuses(dir, {});
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('is not an SQLite database');
    expect(digest(dir)).toBe(before);
    // a healthy SQLite database of another application
    rmSync(join(dir, 'state.db'));
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- only this test opens a database itself
    const Database = require('better-sqlite3') as typeof import('better-sqlite3');
    const foreign = new Database(join(dir, 'state.db'));
    foreign.exec("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users (name) VALUES ('alice')");
    foreign.close();
    before = digest(dir);
    r = refuses(dir, {});
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('not an svc state store');
    expect(digest(dir)).toBe(before);
  });
});

describe.each([
  ['plaintext', {}],
  ['encrypted', { SVC_CONTROL_STATE_KEY_HEX: KEY }],
])('torn writes (%s)', (_mode, env) => {
  it('always restarts with every acknowledged mutation after SIGKILL at random instants', async () => {
    const dir = tmpDir();
    const acked: string[] = [];
    for (let round = 0; round < 5; round++) {
      const s = await startSvc({ stateDir: dir, env });
      const admin = await session(s.url);
      // every earlier acknowledged project is there
      const { projects } = await admin.request<{ projects: Array<{ project_id: string }> }>('project_list');
      const ids = new Set(projects.map((p) => p.project_id));
      for (const id of acked) expect(ids.has(id)).toBe(true);
      let stop = false;
      const writers = [0, 1, 2, 3].map(async () => {
        while (!stop) {
          try {
            const p = await admin.request<ProjectDetail>('project_create', { name: `r${round}` });
            acked.push(p.project_id);
          } catch {
            return;
          }
        }
      });
      await sleep(100 + Math.floor(Math.random() * 300));
      await s.kill();
      stop = true;
      await Promise.all(writers);
      closeSessions();
    }
    const last = await startSvc({ stateDir: dir, env });
    const admin = await session(last.url);
    const { projects } = await admin.request<{ projects: Array<{ project_id: string }> }>('project_list');
    expect(acked.length).toBeGreaterThan(5);
    const ids = new Set(projects.map((p) => p.project_id));
    for (const id of acked) expect(ids.has(id)).toBe(true);
  });
});
