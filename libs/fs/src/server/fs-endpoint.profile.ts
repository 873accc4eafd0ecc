/**
 * Rules of the FS endpoint `/v2/fs` (docs/protocol.md "Envelope and errors" and
 * "FS sessions on `svc-fs-node` (`/v2/fs`)"): every upgrade is admitted (FS session auth is in the hello), every error is `acheron.err_fs` `{errno, message}` (plus `code` for
 * envelope and negotiation errors), `acheron.t_fs_hello` must come first (else EPROTO and a
 * close with 1008), only the `acheron` channel is served, and binary frames are accepted only
 * on sessions that negotiated the binary data path, and only for `acheron.t_fs_write`.
 */
import { Injectable } from '@nestjs/common';
import { Errno, FS_ENDPOINT_PATH, FS_ERROR_TYPE, FsError, Frame, ProtocolError } from '@svc/protocol';
import { EndpointProfile, ErrorBody, WsSession } from '@svc/transport';
import { FsSession } from './fs-session';

const FS_SESSION = Symbol('fs-session');

/** The FS state of a connection, once its hello succeeded. */
export function fsSessionOf(session: WsSession): FsSession | undefined {
  return session.locals.get(FS_SESSION) as FsSession | undefined;
}

/** Attaches the FS state to a connection (done by the hello handler). */
export function attachFsSession(session: WsSession, fs: FsSession): void {
  session.locals.set(FS_SESSION, fs);
}

@Injectable()
export class FsEndpointProfile implements EndpointProfile {
  readonly path = FS_ENDPOINT_PATH;
  readonly fsEndpoint = true;

  /** Admits every upgrade: FS session auth is checked by `acheron.t_fs_hello` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). */
  authenticate(): { role: null } {
    return { role: null };
  }

  /** Every error on this endpoint is `acheron.err_fs` (docs/protocol.md "Envelope and errors"). */
  errorType(): typeof FS_ERROR_TYPE {
    return FS_ERROR_TYPE;
  }

  /**
   * `{errno, message}`; envelope and negotiation errors also carry their `code` (e.g.
   * `protocol_mismatch`). ESTALE (a directory that is gone) is ENOENT for a session that was not
   * granted the `dir_estale` extension, as the base protocol has it.
   */
  errorBody(err: ProtocolError, session?: WsSession): ErrorBody {
    let errno = err.toErrno();
    if (errno === Errno.ESTALE && !(session && fsSessionOf(session)?.features.has('dir_estale'))) errno = Errno.ENOENT;
    const body: ErrorBody = { errno, message: err.message };
    if (!(err instanceof FsError)) body.code = err.code;
    return body;
  }

  /**
   * Before a good hello only `acheron.t_fs_hello` passes (else `protocol_mismatch`, errno 71,
   * and the adapter closes 1008); after it, control-channel frames and binary frames other than
   * `acheron.t_fs_write` are `invalid_envelope` (errno 22, the session stays open).
   */
  gate(session: WsSession, frame: Frame): ProtocolError | null {
    if (session.fs !== 'ready') {
      if (frame.type === 'acheron.t_fs_hello') return null;
      return new ProtocolError(
        'protocol_mismatch',
        `the first message of an FS session must be acheron.t_fs_hello {"protocol":"unified-v2-fs","proto":2} (got ${frame.type})`,
      );
    }
    if (frame.channel !== 'acheron')
      return new ProtocolError('invalid_envelope', `the FS endpoint ${FS_ENDPOINT_PATH} carries only the acheron channel (got ${frame.type})`);
    if (frame.data !== undefined && frame.type !== 'acheron.t_fs_write') {
      return new ProtocolError('invalid_envelope', `only acheron.t_fs_write may be sent as a binary frame (got ${frame.type})`);
    }
    return null;
  }

  /** True once the session's hello asked for the binary data path (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). */
  acceptsBinary(session: WsSession): boolean {
    return session.fs === 'ready' && fsSessionOf(session)?.binary === true;
  }
}
