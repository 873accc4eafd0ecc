import { Errno, FsError, Frame, ProtocolError } from '@svc/protocol';
import type { WsSession } from '@svc/transport';
import { attachFsSession, FsEndpointProfile } from './fs-endpoint.profile';
import { FsSession } from './fs-session';

function frame(channel: 'acheron' | 'control', type: string): Frame {
  return { channel, type, id: null, tag: 1, payload: {}, root: {} };
}

function session(fs: 'start' | 'ready'): WsSession {
  return { fs, locals: new Map() } as unknown as WsSession;
}

describe('FsEndpointProfile', () => {
  const profile = new FsEndpointProfile();

  it('admits every upgrade and answers every error as acheron.err_fs', () => {
    expect(profile.authenticate()).toEqual({ role: null });
    expect(profile.errorType()).toBe('acheron.err_fs');
    expect(profile.errorBody(new FsError(Errno.ENOENT))).toEqual({ errno: 2, message: 'No such file or directory' });
    expect(profile.errorBody(new ProtocolError('protocol_mismatch', 'm'))).toEqual({ errno: 71, code: 'protocol_mismatch', message: 'm' });
  });

  it('lets only acheron.t_fs_hello through before the hello', () => {
    const s = session('start');
    expect(profile.gate(s, frame('acheron', 'acheron.t_fs_hello'))).toBeNull();
    const err = profile.gate(s, frame('acheron', 'acheron.t_fs_getattr'));
    expect(err?.toErrno()).toBe(Errno.EPROTO);
    expect(err?.message).toContain('acheron.t_fs_hello');
    expect(profile.gate(s, frame('control', 'control.version'))?.toErrno()).toBe(Errno.EPROTO);
  });

  it('after the hello: any acheron type passes, the control channel is invalid_envelope', () => {
    const s = session('ready');
    expect(profile.gate(s, frame('acheron', 'acheron.t_fs_read'))).toBeNull();
    expect(profile.gate(s, frame('control', 'control.ping'))?.code).toBe('invalid_envelope');
  });

  it('takes binary frames for acheron.t_fs_write only', () => {
    const s = session('ready');
    expect(profile.gate(s, { ...frame('acheron', 'acheron.t_fs_write'), data: Buffer.alloc(1) })).toBeNull();
    expect(profile.gate(s, { ...frame('acheron', 'acheron.t_fs_getattr'), data: Buffer.alloc(1) })?.code).toBe('invalid_envelope');
  });

  it('accepts binary frames only on sessions that negotiated the binary data path', () => {
    const s = session('ready');
    expect(profile.acceptsBinary(s)).toBe(false);
    attachFsSession(s, new FsSession('s', false, () => undefined));
    expect(profile.acceptsBinary(s)).toBe(false);
    const b = session('ready');
    attachFsSession(b, new FsSession('b', true, () => undefined));
    expect(profile.acceptsBinary(b)).toBe(true);
    expect(profile.acceptsBinary(session('start'))).toBe(false);
  });
});
