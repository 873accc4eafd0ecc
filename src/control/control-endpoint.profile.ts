/**
 * Rules of the `svc` WebSocket endpoint `/` (docs/protocol.md "Envelope and errors"): bearer role tokens at the
 * upgrade, `control.error` / `acheron.error` replies, and the negotiation order of the
 * control session (`control.version`, `control.connect`) and of the runtime session
 * (`acheron.t_version`, `acheron.t_attach`, only after `control.connect`).
 */
import { Injectable } from '@nestjs/common';
import type { IncomingMessage } from 'node:http';
import { Channel, Frame, ProtocolError, Role } from '@svc/protocol';
import { EndpointProfile, ErrorBody, WsSession } from '@svc/transport';
import { AuthTokensService } from './auth-tokens.service';

@Injectable()
export class ControlEndpointProfile implements EndpointProfile {
  readonly path = '/';
  readonly fsEndpoint = false;

  constructor(private readonly tokens: AuthTokensService) {}

  authenticate(req: IncomingMessage): { role: Role } | undefined {
    const header = req.headers.authorization;
    if (typeof header !== 'string') return undefined;
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match) return undefined;
    const role = this.tokens.roleOf(match[1]);
    return role ? { role } : undefined;
  }

  errorType(channel: Channel): 'control.error' | 'acheron.error' {
    return channel === 'control' ? 'control.error' : 'acheron.error';
  }

  errorBody(err: ProtocolError): ErrorBody {
    return { code: err.code, message: err.message };
  }

  gate(session: WsSession, frame: Frame): ProtocolError | null {
    if (frame.channel === 'control') {
      if (session.control === 'start' && frame.type !== 'control.version') {
        return new ProtocolError(
          'protocol_mismatch',
          `the first message of a control session must be control.version {"protocol":"unified-v2"} (got ${frame.type})`,
        );
      }
      if (session.control === 'versioned' && frame.type !== 'control.connect') {
        return new ProtocolError('protocol_mismatch', `control.connect must follow control.version (got ${frame.type})`);
      }
      return null;
    }
    if (session.control !== 'connected') {
      return new ProtocolError(
        'protocol_mismatch',
        `acheron messages need a connected control session: send control.version and control.connect first (got ${frame.type})`,
      );
    }
    if (session.runtime === 'none' && frame.type !== 'acheron.t_version') {
      return new ProtocolError('protocol_mismatch', `the first runtime message must be acheron.t_version {"version":"acheron-1"} (got ${frame.type})`);
    }
    if (session.runtime === 'versioned' && frame.type !== 'acheron.t_attach') {
      return new ProtocolError('protocol_mismatch', `acheron.t_attach must follow acheron.t_version (got ${frame.type})`);
    }
    return null;
  }

  acceptsBinary(): boolean {
    return false;
  }
}
