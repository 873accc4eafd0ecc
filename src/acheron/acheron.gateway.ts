/**
 * AcheronGateway: the runtime session on `/` (SPEC.md "Protocol session phases"; PROTOCOL.md
 * 4, 9). This part negotiates: `acheron.t_version` then `acheron.t_attach`. The namespace
 * operations are added by the runtime-namespace work.
 */
import { UseFilters } from '@nestjs/common';
import { SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { ACHERON_VERSION, Frame as FrameT, MAX_TAG, ProtocolError } from '@svc/protocol';
import { EnvelopeExceptionFilter, Frame, Session, WsSession } from '@svc/transport';
import { ServerConfig } from '../config';

/** Runtime session state kept in the session's locals. */
export interface RuntimeLocals {
  msize: number;
  /** fid -> namespace path (array of names from the root). */
  fids: Map<number, string[]>;
}

const RUNTIME_LOCALS = Symbol('runtime');
const MIN_MSIZE = 4096;
const DEFAULT_MSIZE = 65536;

/** The runtime state of a session (created by `acheron.t_version`). */
export function runtimeLocals(session: WsSession): RuntimeLocals {
  let locals = session.locals.get(RUNTIME_LOCALS) as RuntimeLocals | undefined;
  if (!locals) {
    locals = { msize: DEFAULT_MSIZE, fids: new Map() };
    session.locals.set(RUNTIME_LOCALS, locals);
  }
  return locals;
}

function fidOf(frame: FrameT, field = 'fid'): number {
  const v = frame.root[field] ?? frame.payload[field];
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > MAX_TAG) {
    throw new ProtocolError('invalid', `${field} must be an unsigned 32-bit integer`);
  }
  return v;
}

@WebSocketGateway({ path: '/' })
@UseFilters(EnvelopeExceptionFilter)
export class AcheronGateway {
  constructor(private readonly config: ServerConfig) {}

  /**
   * `acheron.t_version` `{version:"acheron-1", msize?}` (root fields) -> `{msize, version}`.
   * `msize` (bytes) is clamped to [4096, max message size / 2].
   * @throws ProtocolError `protocol_mismatch` for another version
   */
  @SubscribeMessage('acheron.t_version')
  version(@Session() session: WsSession, @Frame() frame: FrameT) {
    const version = frame.root.version ?? frame.payload.version;
    if (version !== ACHERON_VERSION) {
      throw new ProtocolError('protocol_mismatch', `acheron.t_version version must be "${ACHERON_VERSION}" (got ${JSON.stringify(version ?? null)})`);
    }
    const requested = frame.root.msize ?? frame.payload.msize ?? DEFAULT_MSIZE;
    if (typeof requested !== 'number' || !Number.isInteger(requested) || requested <= 0) {
      throw new ProtocolError('protocol_mismatch', 'acheron.t_version msize must be a positive integer (bytes)');
    }
    const locals = runtimeLocals(session);
    locals.msize = Math.max(MIN_MSIZE, Math.min(requested, Math.floor(this.config.maxMessageBytes / 2)));
    locals.fids.clear();
    session.runtime = 'versioned';
    return { msize: locals.msize, version: ACHERON_VERSION };
  }

  /**
   * `acheron.t_attach` `{fid}` -> `{qid:{path:"/", type:"dir"}, layout:"unified-v2", roots}`;
   * `fid` then names the namespace root.
   * @throws ProtocolError `protocol_mismatch` when `fid` is not an unsigned 32-bit integer
   */
  @SubscribeMessage('acheron.t_attach')
  attach(@Session() session: WsSession, @Frame() frame: FrameT) {
    let fid: number;
    try {
      fid = fidOf(frame);
    } catch (e) {
      throw new ProtocolError('protocol_mismatch', `acheron.t_attach: ${(e as Error).message}`);
    }
    runtimeLocals(session).fids.set(fid, []);
    session.runtime = 'attached';
    const roots = session.role === 'admin' ? ['nodes', 'projects', 'debug'] : ['nodes', 'projects'];
    return { qid: { path: '/', type: 'dir' }, layout: 'unified-v2', roots };
  }
}
