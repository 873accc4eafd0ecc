/**
 * FsGateway: the FS session protocol on `/v2/fs` (PROTOCOL.md 4, 8). One thin handler per
 * operation: it reads the root fields (`node`, `h`) and the validated payload and delegates to
 * {@link FsService}; errors go through the one exception filter as `acheron.err_fs`.
 *
 * Binary data path: after a hello with `binary: true`, `r_fs_read` is sent as a binary frame
 * (4-byte big-endian header length, the JSON envelope with `payload.n` and `eof`, then the
 * bytes) and `t_fs_write` may carry its bytes in a binary frame.
 */
import { Logger, UseFilters } from '@nestjs/common';
import { SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { decodeBase64Strict, encodeBinaryFrame, Errno, FS_ENDPOINT_PATH, FsError, Frame as FrameT, ProtocolError, ReadReply } from '@svc/protocol';
import { Ctx, EnvelopeExceptionFilter, Frame, Payload, RequestContext, Session, WsSession } from '@svc/transport';
import { attachFsSession, fsSessionOf } from './fs-endpoint.profile';
import { FsSession, FsSessionService } from './fs-session';
import { FsService } from './fs.service';
import { CreateDto, MkdirDto, NameDto, OpenDto, ReaddirpDto, ReadDto, RenameDto, SetattrDto, SymlinkDto, TruncateDto, WriteDto } from './fs.dto';

/**
 * A root field `node` or `h` (PROTOCOL.md 2), falling back to the payload.
 * @throws FsError EINVAL when absent or not an unsigned integer below 2^53
 */
export function rootId(frame: FrameT, field: 'node' | 'h'): number {
  const v = frame.root[field] ?? frame.payload[field];
  if (v === undefined || v === null) throw new FsError(Errno.EINVAL, `${field} is required`);
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new FsError(Errno.EINVAL, `${field} must be an unsigned integer below 2^53`);
  return v;
}

function fsOf(session: WsSession): FsSession {
  const fs = fsSessionOf(session);
  if (!fs) throw new ProtocolError('protocol_mismatch', 'send acheron.t_fs_hello first');
  return fs;
}

@WebSocketGateway({ path: FS_ENDPOINT_PATH })
@UseFilters(EnvelopeExceptionFilter)
export class FsGateway {
  private readonly log = new Logger('FsGateway');

  constructor(
    private readonly fs: FsService,
    private readonly sessions: FsSessionService,
  ) {}

  /** `acheron.t_fs_hello` (PROTOCOL.md 4): establishes the FS session. */
  @SubscribeMessage('acheron.t_fs_hello')
  hello(@Session() session: WsSession, @Payload() payload: Record<string, unknown>) {
    if (session.fs === 'ready') throw new ProtocolError('protocol_mismatch', 'acheron.t_fs_hello was already negotiated on this session');
    let reply;
    try {
      reply = this.fs.hello(payload);
    } catch (e) {
      // Never the token itself: only why the hello was refused.
      this.log.warn({ session: session.id, remote: session.remoteAddress, msg: `FS hello refused: ${(e as Error).message.split(':')[0]}` });
      throw e;
    }
    const fs = this.sessions.open(session.id, reply.caps.binary_data, (type, event) => session.push('acheron', type, event));
    attachFsSession(session, fs);
    session.once('close', () => void this.sessions.close(fs));
    if (!session.isOpen) void this.sessions.close(fs);
    session.fs = 'ready';
    this.log.debug({ session: session.id, remote: session.remoteAddress, binary: fs.binary, msg: 'FS session established' });
    return reply;
  }

  /** `acheron.t_fs_exports` (PROTOCOL.md 8): {@link FsService.exports}. */
  @SubscribeMessage('acheron.t_fs_exports')
  exports(@Session() session: WsSession) {
    return this.fs.exports(fsOf(session));
  }

  /** `acheron.t_fs_lookup` (PROTOCOL.md 8): {@link FsService.lookup}. */
  @SubscribeMessage('acheron.t_fs_lookup')
  lookup(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: NameDto) {
    return this.fs.lookup(fsOf(session), rootId(frame, 'node'), body.name);
  }

  /** `acheron.t_fs_getattr` (PROTOCOL.md 8): {@link FsService.getattr}. */
  @SubscribeMessage('acheron.t_fs_getattr')
  getattr(@Session() session: WsSession, @Frame() frame: FrameT) {
    return this.fs.getattr(fsOf(session), rootId(frame, 'node'));
  }

  /** `acheron.t_fs_setattr` (PROTOCOL.md 8): {@link FsService.setattr}. */
  @SubscribeMessage('acheron.t_fs_setattr')
  setattr(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: SetattrDto) {
    return this.fs.setattr(fsOf(session), rootId(frame, 'node'), body);
  }

  /** `acheron.t_fs_readdirp` (PROTOCOL.md 8): {@link FsService.readdirp}. */
  @SubscribeMessage('acheron.t_fs_readdirp')
  readdirp(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: ReaddirpDto) {
    return this.fs.readdirp(fsOf(session), rootId(frame, 'node'), body.cookie ?? 0, body.max);
  }

  /** `acheron.t_fs_open` (PROTOCOL.md 8): {@link FsService.open}. */
  @SubscribeMessage('acheron.t_fs_open')
  open(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: OpenDto) {
    return this.fs.open(fsOf(session), rootId(frame, 'node'), body.flags ?? 0);
  }

  /** `acheron.t_fs_create` (PROTOCOL.md 8): {@link FsService.create}. */
  @SubscribeMessage('acheron.t_fs_create')
  create(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: CreateDto) {
    return this.fs.create(fsOf(session), rootId(frame, 'node'), body.name, body.mode, body.flags);
  }

  /** `read` -> `{data_b64, n, eof}` (a text frame), or a binary frame `{n, eof}` + bytes on the binary data path. */
  @SubscribeMessage('acheron.t_fs_read')
  async read(@Ctx() ctx: RequestContext, @Payload() body: ReadDto): Promise<ReadReply | undefined> {
    const fs = fsOf(ctx.session);
    const { data, eof } = await this.fs.read(fs, rootId(ctx.frame, 'h'), body.off, body.len);
    if (fs.binary) {
      const header = { channel: 'acheron', type: 'acheron.r_fs_read', tag: ctx.frame.tag, ok: true, payload: { n: data.length, eof } };
      ctx.session.sendRaw(encodeBinaryFrame(header, data));
    } else {
      // The same envelope the adapter would send, written out: base64 needs no JSON escaping,
      // and JSON.stringify would spend ~5 ms scanning the 1.4 MB string of a 1 MiB read.
      ctx.session.sendRaw(
        `{"channel":"acheron","type":"acheron.r_fs_read","tag":${ctx.frame.tag},"ok":true,"payload":{"data_b64":"${data.toString('base64')}","n":${data.length},"eof":${eof}}}`,
      );
    }
    ctx.replied = true;
    return undefined;
  }

  /** `write` with `data_b64` (strict base64, else EINVAL) or, on the binary data path, the frame's bytes. */
  @SubscribeMessage('acheron.t_fs_write')
  write(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: WriteDto) {
    let data: Buffer;
    if (frame.data !== undefined) {
      if (body.data_b64 !== undefined) throw new FsError(Errno.EINVAL, 'a binary write carries its bytes after the header, not in data_b64');
      if (body.n !== undefined && body.n !== frame.data.length) throw new FsError(Errno.EINVAL, `payload.n is ${body.n} but the frame carries ${frame.data.length} bytes`);
      data = frame.data;
    } else {
      if (body.data_b64 === undefined) throw new FsError(Errno.EINVAL, 'data_b64 is required');
      data = decodeBase64Strict(body.data_b64);
    }
    return this.fs.write(fsOf(session), rootId(frame, 'h'), body.off, data);
  }

  /** `acheron.t_fs_fsync` (PROTOCOL.md 8): {@link FsService.fsync}. */
  @SubscribeMessage('acheron.t_fs_fsync')
  fsync(@Session() session: WsSession, @Frame() frame: FrameT) {
    return this.fs.fsync(fsOf(session), rootId(frame, 'h'));
  }

  /** `acheron.t_fs_close` (PROTOCOL.md 8): {@link FsService.close}. */
  @SubscribeMessage('acheron.t_fs_close')
  close(@Session() session: WsSession, @Frame() frame: FrameT) {
    return this.fs.close(fsOf(session), rootId(frame, 'h'));
  }

  /** `acheron.t_fs_truncate` (PROTOCOL.md 8): {@link FsService.truncate}. */
  @SubscribeMessage('acheron.t_fs_truncate')
  truncate(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: TruncateDto) {
    return this.fs.truncate(fsOf(session), rootId(frame, 'node'), body.sz);
  }

  /** `acheron.t_fs_unlink` (PROTOCOL.md 8): {@link FsService.unlink}. */
  @SubscribeMessage('acheron.t_fs_unlink')
  unlink(@Frame() frame: FrameT, @Payload() body: NameDto) {
    return this.fs.unlink(rootId(frame, 'node'), body.name);
  }

  /** `acheron.t_fs_mkdir` (PROTOCOL.md 8): {@link FsService.mkdir}. */
  @SubscribeMessage('acheron.t_fs_mkdir')
  mkdir(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: MkdirDto) {
    return this.fs.mkdir(fsOf(session), rootId(frame, 'node'), body.name, body.mode);
  }

  /** `acheron.t_fs_rmdir` (PROTOCOL.md 8): {@link FsService.rmdir}. */
  @SubscribeMessage('acheron.t_fs_rmdir')
  rmdir(@Frame() frame: FrameT, @Payload() body: NameDto) {
    return this.fs.rmdir(rootId(frame, 'node'), body.name);
  }

  /** `acheron.t_fs_rename` (PROTOCOL.md 8): {@link FsService.rename}. */
  @SubscribeMessage('acheron.t_fs_rename')
  rename(@Payload() body: RenameDto) {
    return this.fs.rename(body.old_parent, body.old_name, body.new_parent, body.new_name);
  }

  /** `acheron.t_fs_symlink` (PROTOCOL.md 8): {@link FsService.symlink}. */
  @SubscribeMessage('acheron.t_fs_symlink')
  symlink(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: SymlinkDto) {
    return this.fs.symlink(fsOf(session), rootId(frame, 'node'), body.name, body.target);
  }

  /** `acheron.t_fs_readlink` (PROTOCOL.md 8): {@link FsService.readlink}. */
  @SubscribeMessage('acheron.t_fs_readlink')
  readlink(@Frame() frame: FrameT) {
    return this.fs.readlink(rootId(frame, 'node'));
  }

  /** `acheron.t_fs_statfs` (PROTOCOL.md 8): {@link FsService.statfs}. */
  @SubscribeMessage('acheron.t_fs_statfs')
  statfs(@Frame() frame: FrameT) {
    return this.fs.statfs(rootId(frame, 'node'));
  }
}
