/**
 * AcheronGateway: the runtime session on `/` (docs/namespace.md): negotiation
 * (`acheron.t_version`, `acheron.t_attach`), then 9P-style `t_walk`,
 * `t_open`, `t_read`, `t_write`, `t_stat`, `t_clunk`, `t_flush` over the per-session
 * namespace of {@link NamespaceService}. Fids belong to the session.
 */
import { UseFilters } from '@nestjs/common';
import { SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { ACHERON_VERSION, Frame as FrameT, MAX_TAG, ProtocolError } from '@svc/protocol';
import { Ctx, EnvelopeExceptionFilter, Frame, RequestContext, Session, WsSession } from '@svc/transport';
import { ServerConfig } from '../config';
import { NamespaceService, NsEntry, NsNode } from './namespace.service';
import { NodeRoutesService, RoutedFs, RoutedHandle } from './node-routes.service';
import { ProjectRoutesService } from './project-routes.service';
import { actorOf } from '../common/actor';

type Mode = 'r' | 'w' | 'rw';

/** An open fid: what `t_read`/`t_write` work on. */
interface OpenState {
  mode: Mode;
  /** Content captured at open: a projected file, or a directory listing as JSON. */
  content?: Buffer;
  routed?: RoutedHandle;
}

/** A fid of a runtime session. */
interface FidState {
  path: string[];
  type: 'dir' | 'file';
  open: OpenState | null;
}

/** Runtime session state kept in the session's locals. */
export interface RuntimeLocals {
  /** Negotiated largest message, bytes. */
  msize: number;
  fids: Map<number, FidState>;
  /** Requests in flight that `t_flush` may cancel, by tag. */
  pending: Map<number, () => void>;
}

const RUNTIME_LOCALS = Symbol('runtime');
const MIN_MSIZE = 4096;
const DEFAULT_MSIZE = 65536;
/** Envelope overhead reserved inside msize, bytes. */
const OVERHEAD = 512;
// eslint-disable-next-line no-control-regex -- a name holds neither "/" nor NUL
const NAME = /^[^/\u0000]{1,255}$/;

/** The runtime state of a session (created by `acheron.t_version`). */
export function runtimeLocals(session: WsSession): RuntimeLocals {
  let locals = session.locals.get(RUNTIME_LOCALS) as RuntimeLocals | undefined;
  if (!locals) {
    locals = { msize: DEFAULT_MSIZE, fids: new Map(), pending: new Map() };
    session.locals.set(RUNTIME_LOCALS, locals);
    session.once('close', () => {
      // Nobody is left to tell of a close that fails (its node gone): it must not reject unhandled.
      for (const fid of locals!.fids.values()) fid.open?.routed?.close().catch(() => undefined);
      locals!.fids.clear();
    });
  }
  return locals;
}

function u32(frame: FrameT, field: string): number {
  const v = frame.root[field] ?? frame.payload[field];
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > MAX_TAG) {
    throw new ProtocolError('invalid', `${field} must be an unsigned 32-bit integer`);
  }
  return v;
}

function offsetOf(frame: FrameT): number {
  const v = frame.root.offset ?? frame.payload.offset ?? 0;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new ProtocolError('invalid', 'offset must be a non-negative integer (bytes)');
  return v;
}

function fidState(locals: RuntimeLocals, fid: number): FidState {
  const state = locals.fids.get(fid);
  if (!state) throw new ProtocolError('invalid', `unknown fid ${fid}`);
  return state;
}

/** Bytes of data that fit in one reply of `msize` once base64-encoded. */
function iounitOf(msize: number): number {
  return Math.floor(((msize - OVERHEAD) * 3) / 4);
}

@WebSocketGateway({ path: '/' })
@UseFilters(EnvelopeExceptionFilter)
export class AcheronGateway {
  constructor(
    private readonly config: ServerConfig,
    private readonly namespace: NamespaceService,
    private readonly routes: NodeRoutesService,
    private readonly projects: ProjectRoutesService,
  ) {}

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
    // A new version drops every fid; a close that fails there (its node gone) is not reported.
    for (const fid of locals.fids.values()) fid.open?.routed?.close().catch(() => undefined);
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
      fid = u32(frame, 'fid');
    } catch (e) {
      throw new ProtocolError('protocol_mismatch', `acheron.t_attach: ${(e as Error).message}`);
    }
    runtimeLocals(session).fids.set(fid, { path: [], type: 'dir', open: null });
    session.runtime = 'attached';
    return { qid: { path: '/', type: 'dir' }, layout: 'unified-v2', roots: this.namespace.roots(this.namespace.viewOf(session)) };
  }

  /**
   * `t_walk {fid, newfid, path:[names]}` -> `{qid:{path, type}, walked}`. An empty path clones
   * `fid`. All or nothing: a missing name is `enoent`, a name after a file `enotdir`.
   * @throws ProtocolError `invalid` (unknown fid, newfid in use, bad names), `enoent`, `enotdir`, `eio`
   */
  @SubscribeMessage('acheron.t_walk')
  async walk(@Session() session: WsSession, @Frame() frame: FrameT, @Ctx() ctx: RequestContext) {
    const locals = runtimeLocals(session);
    const fid = u32(frame, 'fid');
    const newfid = u32(frame, 'newfid');
    const from = fidState(locals, fid);
    if (newfid !== fid && locals.fids.has(newfid)) throw new ProtocolError('invalid', `newfid ${newfid} is in use`);
    const names = frame.root.path ?? frame.payload.path ?? [];
    if (!Array.isArray(names) || names.length > 64 || !names.every((n) => typeof n === 'string' && NAME.test(n) && n !== '.' && n !== '..')) {
      throw new ProtocolError('invalid', 'path must be an array of at most 64 names (no "/", ".", ".." or empty names)');
    }
    const path = [...from.path, ...(names as string[])];
    const type = await this.cancellable(locals, ctx, () => this.typeOf(session, path, from.path.length));
    locals.fids.set(newfid, { path, type, open: null });
    return { qid: { path: `/${path.join('/')}`, type }, walked: names.length };
  }

  /**
   * `t_open {fid, mode:"r"|"w"|"rw"}` -> `{qid, iounit}`; `iounit` is the largest `count` (bytes)
   * one `t_read` returns. Projected files are read-only; directories open for reading only.
   * @throws ProtocolError `invalid`, `enoent`, `eperm`, `eisdir`, `eio`
   */
  @SubscribeMessage('acheron.t_open')
  async open(@Session() session: WsSession, @Frame() frame: FrameT, @Ctx() ctx: RequestContext) {
    const locals = runtimeLocals(session);
    const fid = u32(frame, 'fid');
    const state = fidState(locals, fid);
    if (state.open) throw new ProtocolError('invalid', `fid ${fid} is already open`);
    const mode = frame.root.mode ?? frame.payload.mode ?? 'r';
    if (mode !== 'r' && mode !== 'w' && mode !== 'rw') throw new ProtocolError('invalid', 'mode must be "r", "w" or "rw"');
    const at = `/${state.path.join('/')}`;
    state.open = await this.cancellable(
      locals,
      ctx,
      async () => {
        const node = this.namespace.resolve(session, state.path);
        if (node.kind === 'dir') {
          if (mode !== 'r') throw new ProtocolError('eisdir', `${at} is a directory`);
          return { mode, content: this.listing(await node.list()) };
        }
        if (node.kind === 'file') {
          if (mode !== 'r') throw new ProtocolError('eperm', `${at} is a read-only projected file`);
          return { mode, content: await node.content() };
        }
        const { fs, rel } = await this.routedFs(session, node);
        const attr = await fs.walk(rel);
        if (attr.k === 2) {
          if (mode !== 'r') throw new ProtocolError('eisdir', `${at} is a directory`);
          return { mode, content: this.listing(await fs.list(rel)) };
        }
        return { mode, routed: await fs.open(rel, mode) };
      },
      (late) => late.routed?.close(),
    );
    return { qid: { path: at, type: state.type }, iounit: iounitOf(locals.msize) };
  }

  /**
   * `t_read {fid, offset, count}` -> `{data_b64, n, eof}`; `count` (bytes) is clamped to the
   * iounit. A directory reads as JSON `{"entries":[{name, kind, size}]}`.
   * @throws ProtocolError `invalid` (unknown or unopened fid, not open for reading), `eio`
   */
  @SubscribeMessage('acheron.t_read')
  async read(@Session() session: WsSession, @Frame() frame: FrameT, @Ctx() ctx: RequestContext) {
    const locals = runtimeLocals(session);
    const fid = u32(frame, 'fid');
    const state = fidState(locals, fid);
    if (!state.open || state.open.mode === 'w') throw new ProtocolError('invalid', `fid ${fid} is not open for reading`);
    const offset = offsetOf(frame);
    const requested = frame.root.count ?? frame.payload.count ?? iounitOf(locals.msize);
    if (typeof requested !== 'number' || !Number.isInteger(requested) || requested < 0)
      throw new ProtocolError('invalid', 'count must be a non-negative integer (bytes)');
    const count = Math.min(requested, iounitOf(locals.msize));
    const open = state.open;
    if (open.content) {
      const data = open.content.subarray(Math.min(offset, open.content.length), Math.min(offset + count, open.content.length));
      return { data_b64: data.toString('base64'), n: data.length, eof: offset + data.length >= open.content.length };
    }
    const { data, eof } = await this.cancellable(locals, ctx, () => open.routed!.read(offset, count));
    return { data_b64: data.toString('base64'), n: data.length, eof };
  }

  /**
   * `t_write {fid, offset, data_b64}` -> `{n}` (bytes written), on a routed file open for writing.
   * @throws ProtocolError `invalid` (unknown fid, not open for writing, bad base64), `eperm`, `eio`
   */
  @SubscribeMessage('acheron.t_write')
  async write(@Session() session: WsSession, @Frame() frame: FrameT, @Ctx() ctx: RequestContext) {
    const locals = runtimeLocals(session);
    const fid = u32(frame, 'fid');
    const state = fidState(locals, fid);
    if (!state.open || state.open.mode === 'r' || !state.open.routed) throw new ProtocolError('invalid', `fid ${fid} is not open for writing`);
    const offset = offsetOf(frame);
    const b64 = frame.root.data_b64 ?? frame.payload.data_b64;
    if (typeof b64 !== 'string' || b64.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(b64)) {
      throw new ProtocolError('invalid', 'data_b64 must be standard base64');
    }
    const routed = state.open.routed;
    const n = await this.cancellable(locals, ctx, () => routed.write(offset, Buffer.from(b64, 'base64')));
    return { n };
  }

  /**
   * `t_stat {fid}` -> `{name, kind, size, mode, writable, mtime_ms}`; `mode` is a full st_mode,
   * `size` bytes (entries for a projected directory).
   * @throws ProtocolError `invalid`, `enoent`, `eio`
   */
  @SubscribeMessage('acheron.t_stat')
  async stat(@Session() session: WsSession, @Frame() frame: FrameT, @Ctx() ctx: RequestContext) {
    const locals = runtimeLocals(session);
    const state = fidState(locals, u32(frame, 'fid'));
    const name = state.path.length ? state.path[state.path.length - 1] : '/';
    return this.cancellable(locals, ctx, async () => {
      const node = this.namespace.resolve(session, state.path);
      if (node.kind === 'dir') return { name, kind: 'dir', size: (await node.list()).length, mode: 0o40555, writable: false, mtime_ms: Date.now() };
      if (node.kind === 'file') return { name, kind: 'file', size: (await node.content()).length, mode: 0o100444, writable: false, mtime_ms: Date.now() };
      const { fs, rel } = await this.routedFs(session, node);
      const attr = await fs.walk(rel);
      return { name, kind: attr.k === 2 ? 'dir' : 'file', size: attr.sz, mode: attr.m, writable: (attr.m & 0o222) !== 0, mtime_ms: Math.floor(attr.mt / 1e6) };
    });
  }

  /** `t_clunk {fid}` -> `{}`: forgets the fid (and closes what it opened). @throws ProtocolError `invalid` */
  @SubscribeMessage('acheron.t_clunk')
  async clunk(@Session() session: WsSession, @Frame() frame: FrameT) {
    const locals = runtimeLocals(session);
    const fid = u32(frame, 'fid');
    const state = fidState(locals, fid);
    locals.fids.delete(fid);
    // The fid is gone either way; an error closing what it opened (a terminal request that
    // was not valid, a failed flush) is still reported.
    await state.open?.routed?.close();
    return {};
  }

  /** `t_flush {oldtag}` -> `{}`: the request `oldtag` is abandoned and gets no reply. */
  @SubscribeMessage('acheron.t_flush')
  flush(@Session() session: WsSession, @Frame() frame: FrameT) {
    const oldtag = u32(frame, 'oldtag');
    runtimeLocals(session).pending.get(oldtag)?.();
    return {};
  }

  private listing(entries: NsEntry[]): Buffer {
    return Buffer.from(JSON.stringify({ entries }));
  }

  /** The type of a path, checking each step: a name after a file is `enotdir`. */
  private async typeOf(session: WsSession, path: string[], known: number): Promise<'dir' | 'file'> {
    let node: NsNode = this.namespace.resolve(session, path.slice(0, Math.max(known, 0)));
    for (let i = Math.max(known, 0); i < path.length; i++) {
      if (node.kind === 'file') throw new ProtocolError('enotdir', `/${path.slice(0, i).join('/')} is not a directory`);
      if (node.kind === 'routed') break;
      node = this.namespace.resolve(session, path.slice(0, i + 1));
    }
    if (node.kind === 'routed') {
      node = this.namespace.resolve(session, path);
      if (node.kind !== 'routed') return node.kind;
      const { fs, rel } = await this.routedFs(session, node);
      return (await fs.walk(rel)).k === 2 ? 'dir' : 'file';
    }
    return node.kind;
  }

  private async routedFs(session: WsSession, node: Extract<NsNode, { kind: 'routed' }>): Promise<{ fs: RoutedFs; rel: string[] }> {
    const t = node.target;
    if (t.type === 'node') {
      // The fs service's root lists only exports no other catalog service claims: a terminal
      // export is reachable only through its own (permission-filtered) service mount.
      const claimed = this.namespace.claimedExports(t.node_id);
      return { fs: await this.routes.fsOf(t.node_id, t.export_name, (name) => !claimed.has(name)), rel: t.rel };
    }
    return { fs: await this.projects.fsOf(session, actorOf(session), t.project_id), rel: t.rel };
  }

  /**
   * Runs a request so that `t_flush {oldtag}` can abandon it (docs/namespace.md): the request then
   * sends no reply, as in 9P. A routed FS request already sent to its node still completes there
   * (the FS protocol has no flush); what it yields after the flush is handed to `discard` (an
   * open handle is closed, so an abandoned `t_open` leaks nothing).
   */
  private async cancellable<T>(locals: RuntimeLocals, ctx: RequestContext, run: () => Promise<T> | T, discard?: (late: T) => unknown): Promise<T> {
    const tag = ctx.frame.tag!;
    let flushed = false;
    let cancel!: () => void;
    const cancelled = new Promise<never>((_, reject) => {
      cancel = () => {
        flushed = true;
        ctx.replied = true;
        reject(new ProtocolError('eio', 'flushed'));
      };
    });
    cancelled.catch(() => undefined);
    locals.pending.set(tag, cancel);
    const work = Promise.resolve().then(run);
    if (discard) {
      work.then((late) => (flushed ? discard(late) : undefined)).catch(() => undefined);
    }
    try {
      return await Promise.race([work, cancelled]);
    } finally {
      locals.pending.delete(tag);
    }
  }
}
