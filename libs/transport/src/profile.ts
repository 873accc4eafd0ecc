/**
 * What differs between the two WebSocket endpoints (docs/protocol.md "Envelope and errors"): who may connect, how
 * errors are shaped, and which message must come first.
 */
import type { IncomingMessage } from 'node:http';
import { Channel, Frame, ProtocolError, Role } from '@svc/protocol';
import type { WsSession } from './session';

/** The body of an error reply: `{code, message}` (control, runtime) or `{errno, message}` (FS). */
export interface ErrorBody {
  code?: string;
  errno?: number;
  message: string;
}

/** Endpoint rules applied by {@link EnvelopeWsAdapter} before any gateway code runs. */
export interface EndpointProfile {
  /** WebSocket path: `/` for `svc`, `/v2/fs` for `svc-fs-node`. */
  readonly path: string;
  /** True on the FS endpoint: one FS session per connection, negotiated by `acheron.t_fs_hello`. */
  readonly fsEndpoint: boolean;
  /**
   * Decides the role of an upgrade request. Returns `undefined` to refuse it with HTTP 401.
   * Must compare secrets in constant time and never log them.
   */
  authenticate(req: IncomingMessage): { role: Role | null } | undefined;
  /** Error reply type for `channel`: `control.error`, `acheron.error` or `acheron.err_fs`. */
  errorType(channel: Channel): 'control.error' | 'acheron.error' | 'acheron.err_fs';
  /** Error reply body for `err` (docs/protocol.md "Envelope and errors"). */
  errorBody(err: ProtocolError, session: WsSession): ErrorBody;
  /**
   * Negotiation gate (docs/protocol.md "Envelope and errors"): null lets the frame through; an error is replied and
   * the connection closed with 1008.
   */
  gate(session: WsSession, frame: Frame): ProtocolError | null;
  /** Whether binary frames are accepted on this session now (FS binary data path). */
  acceptsBinary(session: WsSession): boolean;
}
