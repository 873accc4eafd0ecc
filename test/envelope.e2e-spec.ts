/**
 * e2e: the strict envelope and negotiation (docs/protocol.md "Envelope and errors") against the
 * built `svc` process over real WebSockets.
 */
import { ADMIN_TOKEN, cleanupTmp, killAll, Running, startSvc, USER_TOKEN } from './support/processes';
import { RawPeer } from './helpers/raw-ws';

let svc: Running;

beforeAll(async () => {
  svc = await startSvc({ env: { SVC_MAX_MESSAGE_BYTES: String(64 * 1024) } });
});
afterAll(async () => {
  await killAll();
  cleanupTmp();
});

async function connected(): Promise<RawPeer> {
  const peer = await RawPeer.open(svc.url, ADMIN_TOKEN);
  await peer.negotiate();
  return peer;
}

async function attached(): Promise<RawPeer> {
  const peer = await connected();
  const v = await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_version', tag: 1, version: 'acheron-1', msize: 65536 });
  expect(v).toMatchObject({ type: 'acheron.r_version', tag: 1, ok: true });
  const a = await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_attach', tag: 2, fid: 0 });
  expect(a).toMatchObject({ type: 'acheron.r_attach', tag: 2, ok: true });
  return peer;
}

describe('upgrade authentication', () => {
  it('refuses an upgrade without a bearer token with HTTP 401', async () => {
    await expect(RawPeer.open(svc.url, null)).rejects.toMatchObject({ status: 401 });
  });
  it('refuses an unknown token with HTTP 401', async () => {
    await expect(RawPeer.open(svc.url, 'not-a-token')).rejects.toMatchObject({ status: 401 });
  });
  it('refuses another path with HTTP 404', async () => {
    await expect(RawPeer.open(svc.url, ADMIN_TOKEN, 'v2/fs')).rejects.toMatchObject({ status: 404 });
  });
  it('gives the admin token role admin and the user token role user', async () => {
    const a = await RawPeer.open(svc.url, ADMIN_TOKEN);
    expect(await a.negotiate()).toMatchObject({ role: 'admin', agent_id: 'default', protocol: 'unified-v2', project_id: null });
    const u = await RawPeer.open(svc.url, USER_TOKEN);
    expect(await u.negotiate('agent-7')).toMatchObject({ role: 'user', agent_id: 'agent-7' });
    a.close();
    u.close();
  });
});

describe('control negotiation', () => {
  it('acks control.version with the protocol versions', async () => {
    const peer = await RawPeer.open(svc.url, ADMIN_TOKEN);
    const v = await peer.roundTrip({ channel: 'control', type: 'control.version', id: 1, payload: { protocol: 'unified-v2' } });
    expect(v).toEqual({
      channel: 'control',
      type: 'control.version_ack',
      id: 1,
      ok: true,
      payload: { protocol: 'unified-v2', acheron_runtime: 'acheron-1', acheron_node: 'unified-v2-fs', acheron_node_proto: 2 },
    });
    const c = await peer.roundTrip({ channel: 'control', type: 'control.connect', id: 'two', payload: { agent_id: 'a-1' } });
    expect(c).toMatchObject({ type: 'control.connect_ack', id: 'two', ok: true, payload: { agent_id: 'a-1', role: 'admin', workspace: { mounts: [] } } });
    expect(typeof (c.payload as { session: unknown }).session).toBe('string');
    peer.close();
  });

  it.each([
    ['a normal operation first', { channel: 'control', type: 'control.ping', id: 1 }],
    ['control.connect first', { channel: 'control', type: 'control.connect', id: 1 }],
    ['an unknown type first', { channel: 'control', type: 'control.nope', id: 1 }],
  ])('rejects %s with protocol_mismatch naming control.version, then closes 1008', async (_n, frame) => {
    const peer = await RawPeer.open(svc.url, ADMIN_TOKEN);
    const r = await peer.roundTrip(frame);
    expect(r).toMatchObject({ channel: 'control', type: 'control.error', id: 1, ok: false, error: { code: 'protocol_mismatch' } });
    expect(r.error!.message).toContain('control.version');
    expect(await peer.waitClose()).toBe(1008);
  });

  it('rejects a wrong protocol value and closes', async () => {
    const peer = await RawPeer.open(svc.url, ADMIN_TOKEN);
    const r = await peer.roundTrip({ channel: 'control', type: 'control.version', id: 9, payload: { protocol: 'unified-v1' } });
    expect(r).toMatchObject({ type: 'control.error', id: 9, error: { code: 'protocol_mismatch' } });
    expect(await peer.waitClose()).toBe(1008);
  });

  it('rejects a missing protocol and closes', async () => {
    const peer = await RawPeer.open(svc.url, ADMIN_TOKEN);
    const r = await peer.roundTrip({ channel: 'control', type: 'control.version', id: 9 });
    expect(r).toMatchObject({ type: 'control.error', id: 9, error: { code: 'missing_field' } });
    expect(await peer.waitClose()).toBe(1008);
  });

  it('requires control.connect after control.version', async () => {
    const peer = await RawPeer.open(svc.url, ADMIN_TOKEN);
    await peer.roundTrip({ channel: 'control', type: 'control.version', id: 1, payload: { protocol: 'unified-v2' } });
    const r = await peer.roundTrip({ channel: 'control', type: 'control.ping', id: 2 });
    expect(r).toMatchObject({ type: 'control.error', id: 2, error: { code: 'protocol_mismatch' } });
    expect(r.error!.message).toContain('control.connect');
    expect(await peer.waitClose()).toBe(1008);
  });

  it('rejects an agent_id that is not identifier-safe during connect, and closes', async () => {
    const peer = await RawPeer.open(svc.url, ADMIN_TOKEN);
    await peer.roundTrip({ channel: 'control', type: 'control.version', id: 1, payload: { protocol: 'unified-v2' } });
    const r = await peer.roundTrip({ channel: 'control', type: 'control.connect', id: 2, payload: { agent_id: '../x' } });
    expect(r).toMatchObject({ type: 'control.error', error: { code: 'invalid_payload' } });
    expect(r.error!.message).toContain('agent_id');
    expect(await peer.waitClose()).toBe(1008);
  });

  it('handles a pipelined version, connect and ping in order', async () => {
    const peer = await RawPeer.open(svc.url, ADMIN_TOKEN);
    peer.send({ channel: 'control', type: 'control.version', id: 1, payload: { protocol: 'unified-v2' } });
    peer.send({ channel: 'control', type: 'control.connect', id: 2 });
    peer.send({ channel: 'control', type: 'control.ping', id: 3 });
    const types = [(await peer.nth(0)).type, (await peer.nth(1)).type, (await peer.nth(2)).type];
    expect(types).toEqual(['control.version_ack', 'control.connect_ack', 'control.pong']);
    peer.close();
  });

  it('answers control.ping with control.pong and payload exactly {}', async () => {
    const peer = await connected();
    expect(await peer.roundTrip({ channel: 'control', type: 'control.ping', id: 'p' })).toEqual({
      channel: 'control',
      type: 'control.pong',
      id: 'p',
      ok: true,
      payload: {},
    });
    peer.close();
  });

  it('echoes a null id when the request has none', async () => {
    const peer = await connected();
    expect(await peer.roundTrip({ channel: 'control', type: 'control.ping' })).toMatchObject({ type: 'control.pong', id: null });
    peer.close();
  });
});

describe('runtime negotiation', () => {
  it('rejects acheron messages before control.connect with protocol_mismatch and closes', async () => {
    const peer = await RawPeer.open(svc.url, ADMIN_TOKEN);
    const r = await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_version', tag: 5, version: 'acheron-1' });
    expect(r).toMatchObject({ channel: 'acheron', type: 'acheron.error', tag: 5, ok: false, error: { code: 'protocol_mismatch' } });
    expect(await peer.waitClose()).toBe(1008);
  });

  it('negotiates t_version (msize clamped) and t_attach', async () => {
    const peer = await connected();
    const v = await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_version', tag: 1, version: 'acheron-1', msize: 1 << 30 });
    expect(v).toMatchObject({ type: 'acheron.r_version', tag: 1, ok: true, payload: { version: 'acheron-1' } });
    expect((v.payload as { msize: number }).msize).toBeLessThanOrEqual(32 * 1024);
    const a = await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_attach', tag: 2, fid: 0 });
    expect(a).toMatchObject({ type: 'acheron.r_attach', tag: 2, ok: true, payload: { qid: { path: '/', type: 'dir' }, layout: 'unified-v2' } });
    expect((a.payload as { roots: string[] }).roots).toEqual(expect.arrayContaining(['nodes', 'projects']));
    peer.close();
  });

  it('rejects a first runtime message other than t_version, naming acheron.t_version, and closes', async () => {
    const peer = await connected();
    const r = await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_attach', tag: 3, fid: 0 });
    expect(r).toMatchObject({ type: 'acheron.error', tag: 3, error: { code: 'protocol_mismatch' } });
    expect(r.error!.message).toContain('acheron.t_version');
    expect(await peer.waitClose()).toBe(1008);
  });

  it('rejects a wrong runtime version and closes', async () => {
    const peer = await connected();
    const r = await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_version', tag: 3, version: 'acheron-0' });
    expect(r).toMatchObject({ type: 'acheron.error', tag: 3, error: { code: 'protocol_mismatch' } });
    expect(await peer.waitClose()).toBe(1008);
  });

  it('requires t_attach after t_version', async () => {
    const peer = await connected();
    await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_version', tag: 1, version: 'acheron-1' });
    const r = await peer.roundTrip({ channel: 'acheron', type: 'acheron.t_walk', tag: 2, fid: 0, newfid: 1, path: [] });
    expect(r).toMatchObject({ type: 'acheron.error', tag: 2, error: { code: 'protocol_mismatch' } });
    expect(await peer.waitClose()).toBe(1008);
  });
});

/** Rows of docs/protocol.md "Envelope and errors" as [name, frame, expected reply type, expected code]. */
const ENVELOPE_ROWS: Array<[string, unknown, string, string]> = [
  ['text that is not JSON', '{"channel":', 'control.error', 'invalid_envelope'],
  ['a JSON array', '[1,2,3]', 'control.error', 'invalid_envelope'],
  ['a JSON string', '"control.ping"', 'control.error', 'invalid_envelope'],
  ['JSON null', 'null', 'control.error', 'invalid_envelope'],
  ['a missing channel', { type: 'control.ping', id: 1 }, 'control.error', 'invalid_envelope'],
  ['a channel that is not a string', { channel: 7, type: 'control.ping', id: 1 }, 'control.error', 'invalid_envelope'],
  ['an unknown channel', { channel: 'data', type: 'control.ping', id: 1 }, 'control.error', 'invalid_envelope'],
  ['an acheron type on control', { channel: 'control', type: 'acheron.t_version', id: 1 }, 'control.error', 'invalid_envelope'],
  ['a control type on acheron', { channel: 'acheron', type: 'control.ping', tag: 1 }, 'acheron.error', 'invalid_envelope'],
  ['a missing type', { channel: 'control', id: 1 }, 'control.error', 'invalid_envelope'],
  ['a payload that is not an object', { channel: 'control', type: 'control.ping', id: 1, payload: [1] }, 'control.error', 'invalid_envelope'],
  ['an id that is an object', { channel: 'control', type: 'control.ping', id: { a: 1 } }, 'control.error', 'invalid_envelope'],
  ['an acheron request without tag', { channel: 'acheron', type: 'acheron.t_stat', fid: 0 }, 'acheron.error', 'invalid_envelope'],
  ['legacy acheron.fs_t_*', { channel: 'acheron', type: 'acheron.fs_t_read', tag: 1 }, 'acheron.error', 'legacy_type_rejected'],
  ['legacy acheron.fs_r_*', { channel: 'acheron', type: 'acheron.fs_r_read', tag: 1 }, 'acheron.error', 'legacy_type_rejected'],
  ['legacy acheron.fs_evt_*', { channel: 'acheron', type: 'acheron.fs_evt_inval', tag: 1 }, 'acheron.error', 'legacy_type_rejected'],
  ['legacy acheron.fs_error', { channel: 'acheron', type: 'acheron.fs_error', tag: 1 }, 'acheron.error', 'legacy_type_rejected'],
  ['a type without prefix ("ping")', { channel: 'control', type: 'ping', id: 1 }, 'control.error', 'legacy_type_rejected'],
  ['a type without prefix ("version")', { channel: 'control', type: 'version', id: 1 }, 'control.error', 'legacy_type_rejected'],
  ['an unknown control type', { channel: 'control', type: 'control.frobnicate', id: 1 }, 'control.error', 'unknown_type'],
  ['an unknown acheron type', { channel: 'acheron', type: 'acheron.t_frobnicate', tag: 1 }, 'acheron.error', 'unknown_type'],
  ['a payload missing a field', { channel: 'control', type: 'control.project_get', id: 1, payload: {} }, 'control.error', 'missing_field'],
  ['a payload with a wrong type', { channel: 'control', type: 'control.project_create', id: 1, payload: { name: 42 } }, 'control.error', 'invalid_payload'],
];

const REPLACEMENTS: Record<string, string> = {
  'acheron.fs_t_read': 'acheron.t_fs_read',
  'acheron.fs_r_read': 'acheron.r_fs_read',
  'acheron.fs_evt_inval': 'acheron.e_fs_inval',
  'acheron.fs_error': 'acheron.err_fs',
  ping: 'control.ping',
  version: 'control.version',
};

describe('envelope errors after negotiation keep the session open', () => {
  it.each(ENVELOPE_ROWS)('%s', async (_name, frame, replyType, code) => {
    const peer = await attached();
    const before = peer.messages.length;
    const r = await peer.roundTrip(frame);
    expect(r).toMatchObject({ type: replyType, ok: false, error: { code } });
    expect(peer.messages.length).toBe(before + 1);
    const type = (frame as { type?: string }).type;
    if (code === 'legacy_type_rejected' && type) expect(r.error!.message).toContain(REPLACEMENTS[type]);
    // still open and working on both channels
    expect(await peer.roundTrip({ channel: 'control', type: 'control.ping', id: 'after' })).toMatchObject({ type: 'control.pong', ok: true });
    peer.close();
  });

  it('rejects a binary frame with invalid_envelope and stays open', async () => {
    const peer = await connected();
    const r = await peer.roundTrip(Buffer.from([1, 2, 3]));
    expect(r).toMatchObject({ type: 'control.error', error: { code: 'invalid_envelope' } });
    expect(await peer.roundTrip({ channel: 'control', type: 'control.ping', id: 1 })).toMatchObject({ ok: true });
    peer.close();
  });

  it('closes with 1009 on a frame above SVC_MAX_MESSAGE_BYTES', async () => {
    const peer = await connected();
    peer.send(JSON.stringify({ channel: 'control', type: 'control.ping', id: 1, payload: { pad: 'x'.repeat(70 * 1024) } }));
    expect(await peer.waitClose()).toBe(1009);
  });
});

describe('envelope errors during negotiation close the session with 1008', () => {
  it.each(ENVELOPE_ROWS.filter(([, , type]) => type === 'control.error'))('%s', async (_name, frame, replyType, code) => {
    const peer = await RawPeer.open(svc.url, ADMIN_TOKEN);
    const r = await peer.roundTrip(frame);
    expect(r.type).toBe(replyType);
    // During negotiation a well-formed non-version frame is a protocol_mismatch instead.
    expect([code, 'protocol_mismatch']).toContain(r.error!.code);
    expect(await peer.waitClose()).toBe(1008);
  });

  it.each(ENVELOPE_ROWS.filter(([, , type]) => type === 'acheron.error'))('%s (runtime not yet attached)', async (_name, frame, replyType) => {
    const peer = await connected();
    const r = await peer.roundTrip(frame);
    expect(r.type).toBe(replyType);
    expect(await peer.waitClose()).toBe(1008);
  });
});
