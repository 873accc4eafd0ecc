/**
 * e2e: one rule for prototype keys. Every operation of the
 * control protocol (on `svc`), the acheron runtime (on `svc`) and FS sessions (on `svc-fs-node`), sent with
 * an otherwise valid payload plus `__proto__`, `constructor` or `prototype` at the top level
 * of the payload, one level down (inside an object member such as `platform`, `labels`,
 * `access_policy`, a service entry, or a synthetic `{"x":{...}}` where the operation has no
 * object member), and, on acheron, among the root fields: `invalid_payload` (FS:
 * `acheron.err_fs` errno 22) naming the key's path, the session stays open, and nothing is
 * stored (control state, runtime fids, files of the export unchanged). Also: type errors on
 * the wire say the type.
 */
import { createHash } from 'node:crypto';
import { lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { closeSessions, Client, Credentials, failure, joinNode, session } from './helpers/control';
import { FsPeer, startFsNode } from './helpers/fs-peer';
import { ADMIN_TOKEN, cleanupTmp, killAll, Running, startSvc, tmpDir } from './support/processes';
import { RawPeer, Received } from './helpers/raw-ws';

const KEYS = ['__proto__', 'constructor', 'prototype'] as const;
type Key = (typeof KEYS)[number];

/** `obj` with an own enumerable member `key` (an assignment to `__proto__` would set the prototype instead). */
function withKey(obj: Record<string, unknown>, key: string, value: unknown): Record<string, unknown> {
  const out = { ...obj };
  Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  return out;
}

/** What the forbidden key carries: something that would pollute a prototype if it were merged. */
const POISON = () => ({ prototype: { polluted: true }, polluted: true });

/** A variant of a request: where the key goes, and the path the error must name. */
interface Variant {
  label: string;
  /** The modified payload. */
  payload: Record<string, unknown>;
  /** Modified root fields (acheron), if the key goes there. */
  root?: Record<string, unknown>;
  path: string;
}

/**
 * The variants of a valid payload: the key at its top level, and one level down inside each
 * object member (in the first element of an array of objects), or inside a synthetic `x`
 * member when the payload has no object member.
 */
function payloadVariants(base: Record<string, unknown>, key: Key): Variant[] {
  const out: Variant[] = [{ label: 'top level', payload: withKey(base, key, POISON()), path: key }];
  let nested = 0;
  for (const [member, value] of Object.entries(base)) {
    if (Array.isArray(value) && typeof value[0] === 'object' && value[0] !== null) {
      const first = withKey(value[0] as Record<string, unknown>, key, POISON());
      out.push({ label: `in ${member}[0]`, payload: { ...base, [member]: [first, ...value.slice(1)] }, path: `${member}[0].${key}` });
      nested++;
    } else if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
      out.push({ label: `in ${member}`, payload: { ...base, [member]: withKey(value as Record<string, unknown>, key, POISON()) }, path: `${member}.${key}` });
      nested++;
    }
  }
  if (nested === 0) out.push({ label: 'in x', payload: { ...base, x: withKey({ y: 1 }, key, POISON()) }, path: `x.${key}` });
  return out;
}

// ---------------------------------------------------------------------------------------------
// svc: control operations and the acheron runtime (docs/namespace.md)
// ---------------------------------------------------------------------------------------------

describe('svc: every control and runtime operation refuses prototype keys', () => {
  let svc: Running;
  let admin: Client;
  let peer: RawPeer;
  let project: { project_id: string; project_token: string };
  let node: Credentials;
  let inviteToken: string;
  let joinRequest: { request_id: string; request_secret: string };
  let nextId = 1;
  let nextTag = 100;

  const SERVICE = {
    service_id: 'fs',
    kind: 'fs',
    state: 'ready',
    endpoints: ['/fs'],
    ops: { invoke: 'control/invoke.json' },
    mounts: [{ mount_id: 'work', mount_path: '/work' }],
  };

  beforeAll(async () => {
    svc = await startSvc({ env: { SVC_LOG_LEVEL: 'warn' } });
    admin = await session(svc.url);
    project = await admin.request('project_create', { name: 'keys', vision: 'v', access_policy: { invoke: 'deny' } });
    node = await joinNode(admin, 'keys-node', 3_600_000);
    await admin.request('project_mount_set', { project_id: project.project_id, node_id: node.node_id, export_name: 'work', mount_path: '/work' });
    await admin.request('node_service_upsert', {
      node_id: node.node_id,
      node_secret: node.node_secret,
      platform: { os: 'linux' },
      labels: { zone: 'a' },
      services: [SERVICE],
    });
    inviteToken = (await admin.request<{ invite_token: string }>('node_invite_create', { ttl_ms: 3_600_000 })).invite_token;
    joinRequest = await admin.request('node_join_request', { node_name: 'pending-node', fs_url: 'ws://127.0.0.1:2/v2/fs', platform: { os: 'linux' } });
    peer = await RawPeer.open(svc.url, ADMIN_TOKEN);
    await peer.negotiate('keys-agent');
    expect(await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_version', tag: 1, version: 'acheron-1', msize: 65536 })).toMatchObject({ ok: true });
    expect(await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_attach', tag: 2, fid: 0 })).toMatchObject({ ok: true });
    // fid 1: the /nodes directory, opened; the runtime cases below must leave it as it is
    expect(await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_walk', tag: 3, fid: 0, newfid: 1, path: ['nodes'] })).toMatchObject({ ok: true });
    expect(await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_open', tag: 4, fid: 1, mode: 'r' })).toMatchObject({ ok: true });
  }, 60_000);

  afterAll(async () => {
    peer?.close();
    closeSessions();
    await killAll();
    cleanupTmp();
  });

  /** Sends a frame on the raw peer and waits for the reply carrying its id (control) or tag (acheron). */
  async function reply(frame: Record<string, unknown>): Promise<Received> {
    const from = peer.messages.length;
    peer.send(JSON.stringify(frame));
    for (let i = from; ; i++) {
      const m = await peer.nth(i, 5000);
      if (!('ok' in m)) continue; // a push
      if (frame.channel === 'control' ? m.id === frame.id : m.tag === frame.tag) return m;
    }
  }

  /** Everything a refused request could have changed, as the admin sees it. */
  async function snapshot(): Promise<Record<string, unknown>> {
    const { project_id } = project;
    return {
      projects: await admin.request('project_list'),
      project: await admin.request('project_get', { project_id }),
      mounts: await admin.request('project_mount_list', { project_id }),
      status: await admin.request('workspace_status', { project_id, project_token: project.project_token }),
      nodes: await admin.request('node_list'),
      node: await admin.request('node_get', { node_id: node.node_id }),
      catalog: await admin.request('node_service_get', { node_id: node.node_id }),
      pending: await admin.request('node_join_pending_list'),
      auth: await admin.request('auth_status'),
      // the raw peer's own binding (project_activate) and debug/watch subscriptions show here
      peerStatus: (await reply({ channel: 'control', type: 'control.workspace_status', id: `snap-${nextId++}` })).payload,
    };
  }

  /** Valid payloads of every control operation (`project_up` and `audit_list` included). */
  function controlCases(): Array<[string, Record<string, unknown>]> {
    const { project_id, project_token } = project;
    const { node_id, node_secret } = node;
    const { request_id, request_secret } = joinRequest;
    const fs_url = 'ws://127.0.0.1:3/v2/fs';
    return [
      ['version', { protocol: 'unified-v2' }],
      ['connect', { agent_id: 'other-agent' }],
      ['ping', {}],
      ['metrics', {}],
      ['auth_status', {}],
      ['auth_rotate', { role: 'user' }],
      ['project_create', { name: 'created', vision: 'v', access_policy: { invoke: 'allow' } }],
      ['project_list', {}],
      ['project_get', { project_id, project_token }],
      ['project_update', { project_id, name: 'renamed', vision: 'w', access_policy: { invoke: 'allow' } }],
      ['project_delete', { project_id }],
      ['project_mount_set', { project_id, node_id, export_name: 'other', mount_path: '/other' }],
      ['project_mount_remove', { project_id, mount_path: '/work', node_id, export_name: 'work' }],
      ['project_mount_list', { project_id }],
      ['project_activate', { project_id, project_token }],
      [
        'project_up',
        {
          name: 'declared',
          access_policy: { invoke: 'allow' },
          mounts: [{ mount_path: '/w', node_id, export_name: 'work' }],
          prune: true,
          activate: true,
          dry_run: false,
        },
      ],
      ['project_token_rotate', { project_id, project_token }],
      ['project_token_revoke', { project_id, project_token }],
      ['workspace_status', { project_id, project_token }],
      ['node_invite_create', { ttl_ms: 60_000 }],
      ['node_join', { invite_token: inviteToken, node_name: 'joiner', fs_url, platform: { os: 'linux', arch: 'x64' }, lease_ttl_ms: 60_000 }],
      ['node_join_request', { node_name: 'requester', fs_url, platform: { os: 'linux' } }],
      ['node_join_status', { request_id, request_secret }],
      ['node_join_pending_list', {}],
      ['node_join_approve', { request_id, lease_ttl_ms: 60_000 }],
      ['node_join_deny', { request_id }],
      ['node_lease_refresh', { node_id, node_secret, lease_ttl_ms: 60_000, fs_url, fs_auth_token: 'new-token' }],
      ['node_lease_release', { node_id, node_secret }],
      ['node_list', {}],
      ['node_get', { node_id }],
      ['node_delete', { node_id }],
      [
        'node_service_upsert',
        { node_id, node_secret, platform: { os: 'linux', arch: 'arm64' }, labels: { zone: 'b' }, services: [{ ...SERVICE, help_md: 'changed' }] },
      ],
      ['node_service_get', { node_id }],
      ['node_service_watch', { node_id }],
      ['node_service_unwatch', {}],
      ['audit_list', { limit: 10 }],
      ['debug_subscribe', {}],
      ['debug_unsubscribe', {}],
    ];
  }

  it('covers the control operations', () => {
    expect(controlCases()).toHaveLength(38);
  });

  it.each(KEYS)(
    'control: %s at the top level and one level down -> invalid_payload naming the path, nothing stored',
    async (key) => {
      const before = await snapshot();
      let refused = 0;
      for (const [op, base] of controlCases()) {
        for (const v of payloadVariants(base, key)) {
          const id = `${op}-${nextId++}`;
          const r = await reply({ channel: 'control', type: `control.${op}`, id, payload: v.payload });
          const what = `${op} ${v.label}`;
          expect({ what, type: r.type, ok: r.ok, code: r.error?.code }).toEqual({ what, type: 'control.error', ok: false, code: 'invalid_payload' });
          expect({ what, message: r.error!.message }).toEqual({ what, message: expect.stringMatching(new RegExp(`^${v.path.replace(/[[\].]/g, '\\$&')}: `)) });
          refused++;
        }
      }
      expect(refused).toBeGreaterThanOrEqual(2 * controlCases().length);
      expect(peer.closeCode).toBeNull();
      // no push either: no watch or debug subscription was set up
      expect(peer.messages.filter((m) => !('ok' in m))).toEqual([]);
      expect(await snapshot()).toEqual(before);
    },
    60_000,
  );

  it('the same payloads without the key are valid (so nothing was stored only because of the key)', async () => {
    const cases = new Map(controlCases());
    expect(await admin.request('project_create', cases.get('project_create'))).toMatchObject({ name: 'created' });
    expect(await admin.request('node_service_upsert', cases.get('node_service_upsert'))).toMatchObject({
      platform: { os: 'linux', arch: 'arm64' },
      labels: { zone: 'b' },
    });
    expect(await admin.request('node_join', cases.get('node_join'))).toMatchObject({ node_name: 'joiner' });
    expect(await admin.request('node_join_status', cases.get('node_join_status'))).toMatchObject({ state: 'pending' });
  });

  /** Valid requests of every runtime operation, root fields as sent on the wire. */
  function runtimeCases(): Array<[string, Record<string, unknown>]> {
    return [
      ['t_version', { version: 'acheron-1', msize: 65536 }],
      ['t_attach', { fid: 7 }],
      ['t_walk', { fid: 0, newfid: 5, path: ['nodes'] }],
      ['t_open', { fid: 1, mode: 'r' }],
      ['t_read', { fid: 1, offset: 0, count: 100 }],
      ['t_write', { fid: 1, offset: 0, data_b64: 'aGk=' }],
      ['t_stat', { fid: 1 }],
      ['t_clunk', { fid: 1 }],
      ['t_flush', { oldtag: 1 }],
    ];
  }

  it.each(KEYS)(
    'runtime: %s in the payload, one level down, or among the root fields -> invalid_payload, fids unchanged',
    async (key) => {
      for (const [op, fields] of runtimeCases()) {
        const variants: Variant[] = [
          ...payloadVariants({}, key).map((v) => ({ ...v, root: fields })),
          { label: 'root', payload: {}, root: withKey(fields, key, POISON()), path: key },
          { label: 'root, in x', payload: {}, root: { ...fields, x: withKey({}, key, 1) }, path: `x.${key}` },
        ];
        if (op === 't_walk')
          variants.push({ label: 'root, in path[1]', payload: {}, root: { ...fields, path: ['nodes', withKey({}, key, 1)] }, path: `path[1].${key}` });
        for (const v of variants) {
          const tag = nextTag++;
          const r = await reply({ channel: 'acheron', type: `acheron.${op}`, tag, ...v.root, payload: v.payload });
          const what = `${op} ${v.label}`;
          expect({ what, type: r.type, code: r.error?.code }).toEqual({ what, type: 'acheron.error', code: 'invalid_payload' });
          expect({ what, message: r.error!.message }).toEqual({ what, message: expect.stringMatching(new RegExp(`^${v.path.replace(/[[\].]/g, '\\$&')}: `)) });
        }
      }
      expect(peer.closeCode).toBeNull();
      // fid 1 is still open on /nodes (not clunked, not reset by t_version); fids 5 and 7 were never made
      const stat = await reply({ channel: 'acheron', type: 'acheron.t_stat', tag: nextTag++, fid: 1 });
      expect(stat).toMatchObject({ ok: true, payload: { kind: 'dir' } });
      const read = await reply({ channel: 'acheron', type: 'acheron.t_read', tag: nextTag++, fid: 1, offset: 0, count: 4096 });
      expect(read).toMatchObject({ ok: true });
      for (const fid of [5, 7])
        expect(await reply({ channel: 'acheron', type: 'acheron.t_stat', tag: nextTag++, fid })).toMatchObject({ ok: false, error: { code: 'invalid' } });
    },
    60_000,
  );

  it('refuses a prototype key during negotiation like any envelope error: invalid_payload, then close 1008', async () => {
    const fresh = await RawPeer.open(svc.url, ADMIN_TOKEN);
    const r = await fresh.roundTrip(
      JSON.stringify({ channel: 'control', type: 'control.version', id: 'v', payload: withKey({ protocol: 'unified-v2' }, '__proto__', { x: 1 }) }),
    );
    expect(r).toMatchObject({ type: 'control.error', id: 'v', ok: false, error: { code: 'invalid_payload', message: expect.stringMatching(/^__proto__: /) } });
    expect(await fresh.waitClose()).toBe(1008);
  });

  it('says the type of a member of the wrong type', async () => {
    for (const name of [5, true]) {
      expect(await failure(admin.request('project_create', { name }))).toEqual({ code: 'invalid_payload', message: 'name must be a string' });
    }
    expect(await failure(admin.request('node_get', { node_id: 5 }))).toEqual({ code: 'invalid_payload', message: 'node_id must be a string' });
    expect(await failure(admin.request('project_update', { project_id: project.project_id, access_policy: 'allow' }))).toEqual({
      code: 'invalid_payload',
      message: 'access_policy must be an object',
    });
    expect(await failure(admin.request('node_join', { invite_token: inviteToken, node_name: 'n', fs_url: 'ws://h:1/', platform: { os: 1 } }))).toEqual({
      code: 'invalid_payload',
      message: 'platform.os must be a string',
    });
    expect(await failure(admin.request('node_invite_create', { ttl_ms: '60000' }))).toEqual({
      code: 'invalid_payload',
      message: 'ttl_ms must be an integer (ms)',
    });
    expect(await failure(admin.request('node_service_upsert', { node_id: 5, node_secret: node.node_secret }))).toEqual({
      code: 'invalid_payload',
      message: 'node_id must be a string',
    });
    expect(
      await failure(admin.request('node_service_upsert', { node_id: node.node_id, node_secret: node.node_secret, services: [{ ...SERVICE, service_id: 5 }] })),
    ).toEqual({ code: 'invalid_payload', message: 'services[0].service_id must be a string' });
  });
});

// ---------------------------------------------------------------------------------------------
// svc-fs-node: FS operations (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)")
// ---------------------------------------------------------------------------------------------

describe('svc-fs-node: every FS operation refuses prototype keys', () => {
  let fsNode: Running;
  let base: string;
  let fs: FsPeer;
  let root: number;
  let file: number;
  let dir: number;
  let link: number;
  let h: number;

  /** Names, kinds, modes, sizes, contents and link targets of everything in the export. */
  function treeDigest(d: string): string {
    const hash = createHash('sha256');
    const walk = (p: string) => {
      for (const name of readdirSync(p).sort()) {
        const full = join(p, name);
        const st = lstatSync(full);
        hash.update(`${full} ${st.mode} ${st.size} ${st.mtimeMs}\n`);
        if (st.isSymbolicLink()) hash.update(readlinkSync(full));
        else if (st.isDirectory()) walk(full);
        else hash.update(readFileSync(full));
      }
    };
    walk(d);
    return hash.digest('hex');
  }

  beforeAll(async () => {
    base = tmpDir('fs-keys-');
    mkdirSync(join(base, 'd'));
    writeFileSync(join(base, 'f.txt'), 'hello');
    symlinkSync('f.txt', join(base, 'l'));
    fsNode = await startFsNode([`work=${base}`], { env: { SVC_LOG_LEVEL: 'warn' } });
    fs = await FsPeer.connect(fsNode.url);
    root = await fs.root('work');
    file = (await fs.walk(root, 'f.txt')).id;
    dir = (await fs.walk(root, 'd')).id;
    link = (await fs.walk(root, 'l')).id;
    h = (await fs.call('open', { node: file }, { flags: 2 })).h;
  }, 60_000);

  afterAll(async () => {
    fs?.close();
    await killAll();
    cleanupTmp();
  });

  /** Valid requests of every FS operation (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): root fields, payload. */
  function fsCases(): Array<[string, Record<string, unknown>, Record<string, unknown>]> {
    return [
      ['hello', {}, { protocol: 'unified-v2-fs', proto: 2 }],
      ['exports', {}, {}],
      ['lookup', { node: root }, { name: 'f.txt' }],
      ['getattr', { node: file }, {}],
      ['setattr', { node: file }, { mode: 0o600, mt: 1_000_000_000 }],
      ['readdirp', { node: root }, { cookie: 0, max: 10 }],
      ['open', { node: file }, { flags: 2 }],
      ['create', { node: root }, { name: 'new.txt', mode: 0o644, flags: 2 }],
      ['read', { h }, { off: 0, len: 5 }],
      ['write', { h }, { off: 0, data_b64: 'WFhY' }],
      ['fsync', { h }, {}],
      ['close', { h }, {}],
      ['truncate', { node: file }, { sz: 1 }],
      ['unlink', { node: root }, { name: 'f.txt' }],
      ['rmdir', { node: root }, { name: 'd' }],
      ['mkdir', { node: root }, { name: 'newdir', mode: 0o755 }],
      ['rename', {}, { old_parent: root, old_name: 'f.txt', new_parent: dir, new_name: 'g.txt' }],
      ['symlink', { node: root }, { name: 'newlink', target: 'f.txt' }],
      ['readlink', { node: link }, {}],
      ['statfs', { node: root }, {}],
    ];
  }

  it('covers the FS operations', () => {
    expect(fsCases()).toHaveLength(20);
  });

  it.each(KEYS)(
    '%s in the payload, one level down, or among the root fields -> errno 22 naming the path, nothing changed on disk',
    async (key) => {
      const before = treeDigest(base);
      for (const [op, target, payload] of fsCases()) {
        const variants: Variant[] = [
          ...payloadVariants(payload, key).map((v) => ({ ...v, root: target })),
          { label: 'root', payload, root: withKey(target, key, POISON()), path: key },
          { label: 'root, in x', payload, root: { ...target, x: withKey({}, key, 1) }, path: `x.${key}` },
        ];
        for (const v of variants) {
          const r = await fs.send(op, v.root, v.payload);
          const what = `${op} ${v.label}`;
          expect({ what, type: r.type, ok: r.ok, errno: r.error?.errno, code: r.error?.code }).toEqual({
            what,
            type: 'acheron.err_fs',
            ok: false,
            errno: 22,
            code: 'invalid_payload',
          });
          expect({ what, message: r.error!.message }).toEqual({ what, message: expect.stringMatching(new RegExp(`^${v.path.replace(/[[\].]/g, '\\$&')}: `)) });
        }
      }
      expect(fs.closeCode).toBeNull();
      expect(treeDigest(base)).toBe(before);
      // the handle is still open (close and fsync were refused) and reads the unchanged file
      expect((await fs.call('read', { h }, { off: 0, len: 5 })).data_b64).toBe(Buffer.from('hello').toString('base64'));
      expect(fs.strays).toEqual([]);
    },
    60_000,
  );

  it('refuses a prototype key in the hello of a new session: errno 22, then close 1008', async () => {
    const fresh = await FsPeer.open(fsNode.url);
    const r = await fresh.send('hello', {}, withKey({ protocol: 'unified-v2-fs', proto: 2 }, 'constructor', { prototype: {} }));
    expect(r).toMatchObject({
      type: 'acheron.err_fs',
      ok: false,
      error: { errno: 22, code: 'invalid_payload', message: expect.stringMatching(/^constructor: /) },
    });
    expect(await fresh.waitClose()).toBe(1008);
  });

  it('says the type of a member of the wrong type (errno 22)', async () => {
    expect(await fs.send('lookup', { node: root }, { name: 5 })).toMatchObject({ ok: false, error: { errno: 22, message: 'name must be a string' } });
    expect(await fs.send('read', { h }, { off: '0', len: 5 })).toMatchObject({ ok: false, error: { errno: 22, message: 'off must be an integer' } });
    expect(await fs.send('rename', {}, { old_parent: root, old_name: 'f.txt', new_parent: dir, new_name: true })).toMatchObject({
      ok: false,
      error: { errno: 22, message: 'new_name must be a string' },
    });
  });
});
