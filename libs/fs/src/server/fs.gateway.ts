/**
 * FsGateway: the FS session protocol on `/v2/fs` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). One thin handler per
 * operation: it reads the root fields (`node`, `h`) and the validated payload and delegates to
 * {@link FsService}; errors go through the one exception filter as `acheron.err_fs`. Each
 * handler is declared with {@link FsHandler}, which types its reply by the request map
 * (`FsRequests`, libs/protocol/src/fs.ts).
 *
 * Binary data path: after a hello with `binary: true`, `r_fs_read` is sent as a binary frame
 * (4-byte big-endian header length, the JSON envelope with `payload.n` and `eof`, then the
 * bytes) and `t_fs_write` may carry its bytes in a binary frame; so are the replies of the
 * extensions that carry file data (`r_fs_open` with `open_read`, `r_fs_prefetch`; docs/protocol.md
 * "FS extensions").
 */
import { Logger, UseFilters } from '@nestjs/common';
import { SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import {
  base64Length,
  BINARY_HEADER_ROOM,
  completeBinaryFrame,
  decodeBase64Strict,
  Errno,
  FS_ENDPOINT_PATH,
  FsError,
  FsReply,
  FsRequestOp,
  fsRequestType,
  Frame as FrameT,
  MAX_READ,
  ProtocolError,
  writeBase64,
} from '@svc/protocol';
import { BufferPool } from '../buffer-pool';
import { Ctx, EnvelopeExceptionFilter, Frame, Payload, RequestContext, Session, WsSession } from '@svc/transport';
import { attachFsSession, fsSessionOf } from './fs-endpoint.profile';
import { FsSession, FsSessionService } from './fs-session';
import { FsService } from './fs.service';
import {
  AckDto,
  CreateDto,
  GetlkDto,
  GetxattrDto,
  LinkDto,
  ListxattrDto,
  MknodDto,
  SetxattrDto,
  XATTR_SIZE_MAX,
  XattrNameDto,
  LockCancelDto,
  LockDto,
  MkdirDto,
  NameDto,
  OpenDto,
  PrefetchDto,
  ReaddirpDto,
  ReadDto,
  RenameDto,
  SetattrDto,
  SymlinkDto,
  TruncateDto,
  FallocateDto,
  WriteDto,
} from './fs.dto';

/**
 * A root field `node` or `h` (docs/protocol.md "Envelope and errors"), falling back to the payload.
 * @throws FsError EINVAL when absent or not an unsigned integer below 2^53
 */
export function rootId(frame: FrameT, field: 'node' | 'h'): number {
  const v = frame.root[field] ?? frame.payload[field];
  if (v === undefined || v === null) throw new FsError(Errno.EINVAL, `${field} is required`);
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new FsError(Errno.EINVAL, `${field} must be an unsigned integer below 2^53`);
  return v;
}

/** Reads above this many bytes use pooled buffers. */
const POOL_MIN_READ = 64 * 1024;
/** Read buffers: binary frame header room + 1 MiB (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)" max_read). */
const readBuffers = new BufferPool(BINARY_HEADER_ROOM + MAX_READ, 32);

/** Room for the envelope around `data_b64` in a JSON read reply, bytes. */
const JSON_READ_ENVELOPE_ROOM = 256;
/** Text buffers of JSON read replies: envelope room + the base64 of 1 MiB. */
const jsonReplyBuffers = new BufferPool(JSON_READ_ENVELOPE_ROOM + base64Length(MAX_READ), 16);

/**
 * The JSON `acheron.r_fs_read` reply (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)") as UTF-8 bytes: the same text
 * JSON.stringify would give, with the base64 written straight into the buffer.
 * @param tag the request tag
 * @param data the bytes read
 * @param eof whether the end of the file was reached
 * @param into where to build it (a view of it is returned) when it is large enough; else a new buffer
 */
export function jsonReadReply(tag: number | null, data: Buffer, eof: boolean, into?: Buffer): Buffer {
  const head = `{"channel":"acheron","type":"acheron.r_fs_read","tag":${tag},"ok":true,"payload":{"data_b64":"`;
  const tail = `","n":${data.length},"eof":${eof}}}`;
  const b64 = base64Length(data.length);
  const size = head.length + b64 + tail.length;
  const out = into && into.length >= size ? into.subarray(0, size) : Buffer.allocUnsafe(size);
  out.write(head, 0, 'latin1');
  writeBase64(data, out, head.length);
  out.write(tail, head.length + b64, 'latin1');
  return out;
}

/** The requests whose handlers may send their reply themselves, as a binary frame or prebuilt text. */
type SelfReplyingOp = 'open' | 'read' | 'prefetch';

/**
 * What the handler of request `K` returns: the reply payload of `K` in {@link FsRequests}, or,
 * for a {@link SelfReplyingOp}, undefined once it sent the reply itself (`ctx.replied`).
 */
type FsHandlerResult<K extends FsRequestOp> = K extends SelfReplyingOp ? Promise<FsReply<K> | undefined> : FsReply<K> | Promise<FsReply<K>>;

/**
 * Makes the decorated method the handler of `acheron.t_fs_<op>` (`@SubscribeMessage`), typed by
 * the request map: a method whose return type is not {@link FsHandlerResult} of `op` does not
 * compile.
 */
function FsHandler<K extends FsRequestOp>(op: K) {
  return <M extends (...args: never[]) => FsHandlerResult<K>>(target: object, key: string | symbol, descriptor: TypedPropertyDescriptor<M>): void => {
    SubscribeMessage(fsRequestType(op))(target, key, descriptor);
  };
}

function fsOf(session: WsSession): FsSession {
  const fs = fsSessionOf(session);
  if (!fs) throw new ProtocolError('protocol_mismatch', 'send acheron.t_fs_hello first');
  return fs;
}

/**
 * The FS state of a session granted the `posix` extension.
 * @throws ProtocolError `unknown_type` (errno 38 ENOSYS, as before extensions) otherwise
 */
function posixOf(
  session: WsSession,
  op: Extract<
    FsRequestOp,
    'lock' | 'getlk' | 'lock_cancel' | 'fgetattr' | 'ftruncate' | 'fallocate' | 'link' | 'mknod' | 'getxattr' | 'setxattr' | 'listxattr' | 'removexattr'
  >,
): FsSession {
  const fs = fsOf(session);
  if (!fs.features.has('posix')) {
    throw new ProtocolError(
      'unknown_type',
      `unknown message type "acheron.t_fs_${op}" (the posix extension was not granted: ask for it in acheron.t_fs_hello features)`,
    );
  }
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

  /** `acheron.t_fs_hello` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): establishes the FS session. */
  @FsHandler('hello')
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
    const fs = this.sessions.open(session.id, reply.caps.binary_data, (type, event) => session.push('acheron', type, event), reply.caps.features);
    attachFsSession(session, fs);
    session.once('close', () => void this.sessions.close(fs));
    if (!session.isOpen) void this.sessions.close(fs);
    session.fs = 'ready';
    this.log.debug({ session: session.id, remote: session.remoteAddress, binary: fs.binary, msg: 'FS session established' });
    return reply;
  }

  /** `acheron.t_fs_exports` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.exports}. */
  @FsHandler('exports')
  exports(@Session() session: WsSession) {
    return this.fs.exports(fsOf(session));
  }

  /** `acheron.t_fs_lookup` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.lookup}. */
  @FsHandler('lookup')
  lookup(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: NameDto) {
    return this.fs.lookup(fsOf(session), rootId(frame, 'node'), body.name);
  }

  /** `acheron.t_fs_getattr` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.getattr}. */
  @FsHandler('getattr')
  getattr(@Session() session: WsSession, @Frame() frame: FrameT) {
    return this.fs.getattr(fsOf(session), rootId(frame, 'node'));
  }

  /** `acheron.t_fs_setattr` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.setattr}. */
  @FsHandler('setattr')
  setattr(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: SetattrDto) {
    return this.fs.setattr(fsOf(session), rootId(frame, 'node'), body);
  }

  /** `acheron.t_fs_readdirp` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.readdirp}. */
  @FsHandler('readdirp')
  readdirp(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: ReaddirpDto) {
    return this.fs.readdirp(fsOf(session), rootId(frame, 'node'), body.cookie ?? 0, body.max);
  }

  /**
   * `acheron.t_fs_open` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.open}; with `read` on a session granted
   * `open_read`, {@link FsService.openRead}, whose bytes go in `data_b64` or, on the binary data
   * path, after the header of a binary frame (as `r_fs_read`).
   */
  @FsHandler('open')
  async open(@Ctx() ctx: RequestContext, @Payload() body: OpenDto): Promise<FsReply<'open'> | undefined> {
    const fs = fsOf(ctx.session);
    const node = rootId(ctx.frame, 'node');
    const flags = body.flags ?? 0;
    if (body.read === undefined || !fs.features.has('open_read')) return this.fs.open(fs, node, flags);
    const want = Math.min(body.read, MAX_READ);
    const block = fs.binary ? (want > POOL_MIN_READ ? readBuffers.acquire() : Buffer.allocUnsafe(BINARY_HEADER_ROOM + want)) : null;
    const pooled = block !== null && want > POOL_MIN_READ;
    let handedOver = false;
    try {
      const { reply, data } = await this.fs.openRead(fs, node, flags, body.read, body.close_at_eof === true, block?.subarray(BINARY_HEADER_ROOM));
      if (!block || reply.n === undefined) return reply.n === undefined ? reply : { ...reply, data_b64: data.toString('base64') };
      const header = JSON.stringify({ channel: 'acheron', type: 'acheron.r_fs_open', tag: ctx.frame.tag, ok: true, payload: reply });
      handedOver = true;
      ctx.session.sendRaw(completeBinaryFrame(block, BINARY_HEADER_ROOM, data.length, header), pooled ? () => readBuffers.release(block) : undefined);
      ctx.replied = true;
      return undefined;
    } finally {
      if (pooled && !handedOver) readBuffers.release(block);
    }
  }

  /**
   * `acheron.t_fs_prefetch` (the `prefetch` extension): {@link FsService.prefetch}. On the JSON
   * path each entry with data carries `data_b64`; on the binary data path the reply is a binary
   * frame whose bytes are the entries' data one after the other (`n` bytes each, in entry order).
   * @throws ProtocolError `unknown_type` (errno 38 ENOSYS, as before extensions) when the session was not granted `prefetch`
   */
  @FsHandler('prefetch')
  async prefetch(@Ctx() ctx: RequestContext, @Payload() body: PrefetchDto): Promise<FsReply<'prefetch'> | undefined> {
    const fs = fsOf(ctx.session);
    if (!fs.features.has('prefetch')) {
      throw new ProtocolError(
        'unknown_type',
        'unknown message type "acheron.t_fs_prefetch" (the prefetch extension was not granted: ask for it in acheron.t_fs_hello features)',
      );
    }
    const { files, data } = await this.fs.prefetch(fs, rootId(ctx.frame, 'node'), body.names, body.max_file, body.max_total);
    const n = data.reduce((sum, d) => sum + d.length, 0);
    if (!fs.binary) {
      let k = 0;
      for (const f of files) if (f.n !== undefined) f.data_b64 = data[k++].toString('base64');
      return { files, n };
    }
    const header = Buffer.from(
      JSON.stringify({ channel: 'acheron', type: 'acheron.r_fs_prefetch', tag: ctx.frame.tag, ok: true, payload: { files, n } }),
      'utf8',
    );
    const frame = Buffer.allocUnsafe(4 + header.length + n);
    frame.writeUInt32BE(header.length, 0);
    header.copy(frame, 4);
    let at = 4 + header.length;
    for (const d of data) at += d.copy(frame, at);
    ctx.session.sendRaw(frame);
    ctx.replied = true;
    return undefined;
  }

  /**
   * `acheron.t_fs_ack` (the `inval_ack` extension): the client applied every invalidation push
   * up to `seq`; mutations of other sessions waiting for that go on.
   * @throws ProtocolError `unknown_type` when the session was not granted `inval_ack`
   */
  @FsHandler('ack')
  ack(@Session() session: WsSession, @Payload() body: AckDto): FsReply<'ack'> {
    const fs = fsOf(session);
    if (!fs.acks) {
      throw new ProtocolError(
        'unknown_type',
        'unknown message type "acheron.t_fs_ack" (the inval_ack extension was not granted: ask for it in acheron.t_fs_hello features)',
      );
    }
    fs.acked(body.seq);
    return {};
  }

  /**
   * `acheron.t_fs_lock` (the `posix` extension): {@link FsService.lock}; a waiting request ends
   * when granted, cancelled (`lock_cancel` with its tag) or when the session ends.
   * @throws ProtocolError `unknown_type` when the session was not granted `posix`
   */
  @FsHandler('lock')
  lock(@Ctx() ctx: RequestContext, @Payload() body: LockDto) {
    const fs = posixOf(ctx.session, 'lock');
    return this.fs.lock(fs, rootId(ctx.frame, 'h'), body, ctx.frame.tag);
  }

  /** `acheron.t_fs_fgetattr` (the `posix` extension): {@link FsService.fgetattr}. */
  @FsHandler('fgetattr')
  fgetattr(@Session() session: WsSession, @Frame() frame: FrameT) {
    return this.fs.fgetattr(posixOf(session, 'fgetattr'), rootId(frame, 'h'));
  }

  /** `acheron.t_fs_ftruncate` (the `posix` extension): {@link FsService.ftruncate}. */
  @FsHandler('ftruncate')
  ftruncate(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: TruncateDto) {
    return this.fs.ftruncate(posixOf(session, 'ftruncate'), rootId(frame, 'h'), body.sz);
  }

  /** `acheron.t_fs_fallocate` (the `posix` extension): {@link FsService.fallocate}. */
  @FsHandler('fallocate')
  fallocate(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: FallocateDto) {
    return this.fs.fallocate(posixOf(session, 'fallocate'), rootId(frame, 'h'), body.mode ?? 0, body.off, body.len);
  }

  /** `acheron.t_fs_link` (the `posix` extension): {@link FsService.link}. */
  @FsHandler('link')
  link(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: LinkDto) {
    return this.fs.link(posixOf(session, 'link'), rootId(frame, 'node'), body.new_parent, body.new_name);
  }

  /** `acheron.t_fs_mknod` (the `posix` extension): {@link FsService.mknod}. */
  @FsHandler('mknod')
  mknod(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: MknodDto) {
    return this.fs.mknod(posixOf(session, 'mknod'), rootId(frame, 'node'), body.name, body.mode, body.rdev ?? 0, body.cred);
  }

  /** `acheron.t_fs_getxattr` (the `posix` extension): {@link FsService.getxattr}. */
  @FsHandler('getxattr')
  getxattr(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: GetxattrDto) {
    posixOf(session, 'getxattr');
    return this.fs.getxattr(rootId(frame, 'node'), body.name, body.size);
  }

  /** `acheron.t_fs_setxattr` (the `posix` extension): {@link FsService.setxattr}. @throws FsError EINVAL for a value over 64 KiB */
  @FsHandler('setxattr')
  setxattr(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: SetxattrDto) {
    const fs = posixOf(session, 'setxattr');
    const value = decodeBase64Strict(body.value_b64);
    if (value.length > XATTR_SIZE_MAX) throw new FsError(Errno.EINVAL, `an extended attribute value holds at most ${XATTR_SIZE_MAX} bytes`);
    return this.fs.setxattr(fs, rootId(frame, 'node'), body.name, value, body.flags ?? 0);
  }

  /** `acheron.t_fs_listxattr` (the `posix` extension): {@link FsService.listxattr}. */
  @FsHandler('listxattr')
  listxattr(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: ListxattrDto) {
    posixOf(session, 'listxattr');
    return this.fs.listxattr(rootId(frame, 'node'), body.size);
  }

  /** `acheron.t_fs_removexattr` (the `posix` extension): {@link FsService.removexattr}. */
  @FsHandler('removexattr')
  removexattr(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: XattrNameDto) {
    return this.fs.removexattr(posixOf(session, 'removexattr'), rootId(frame, 'node'), body.name);
  }

  /** `acheron.t_fs_getlk` (the `posix` extension): {@link FsService.getlk}. */
  @FsHandler('getlk')
  getlk(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: GetlkDto) {
    return this.fs.getlk(posixOf(session, 'getlk'), rootId(frame, 'h'), body);
  }

  /** `acheron.t_fs_lock_cancel` (the `posix` extension): {@link FsService.lockCancel}. */
  @FsHandler('lock_cancel')
  lockCancel(@Session() session: WsSession, @Payload() body: LockCancelDto) {
    return this.fs.lockCancel(posixOf(session, 'lock_cancel'), body.tag);
  }

  /** `acheron.t_fs_create` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.create}. */
  @FsHandler('create')
  create(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: CreateDto) {
    return this.fs.create(fsOf(session), rootId(frame, 'node'), body.name, body.mode, body.flags, body.cred);
  }

  /**
   * `read` -> `{data_b64, n, eof}` (a text frame), or a binary frame `{n, eof}` + bytes on the
   * binary data path. Both replies are built here as buffers, without JSON.stringify: the
   * binary frame around the bytes read into a pooled buffer (no copy), the JSON text with the
   * base64 written straight into a pooled frame (base64 needs no JSON escaping). Reads of more
   * than 64 KiB use pooled buffers, given back when the WebSocket has sent the frame.
   */
  @FsHandler('read')
  async read(@Ctx() ctx: RequestContext, @Payload() body: ReadDto): Promise<FsReply<'read'> | undefined> {
    const fs = fsOf(ctx.session);
    const h = rootId(ctx.frame, 'h');
    const tag = ctx.frame.tag;
    const pooled = Math.min(body.len, MAX_READ) > POOL_MIN_READ;
    const block = pooled ? readBuffers.acquire() : null;
    let handedOver = false;
    try {
      const { data, eof } = await this.fs.read(fs, h, body.off, body.len, block?.subarray(BINARY_HEADER_ROOM));
      if (fs.binary) {
        const header = `{"channel":"acheron","type":"acheron.r_fs_read","tag":${tag},"ok":true,"payload":{"n":${data.length},"eof":${eof}}}`;
        if (block) {
          handedOver = true;
          ctx.session.sendRaw(completeBinaryFrame(block, BINARY_HEADER_ROOM, data.length, header), () => readBuffers.release(block));
        } else {
          const frame = Buffer.allocUnsafe(BINARY_HEADER_ROOM + data.length);
          data.copy(frame, BINARY_HEADER_ROOM);
          ctx.session.sendRaw(completeBinaryFrame(frame, BINARY_HEADER_ROOM, data.length, header));
        }
      } else if (block) {
        // The bytes are encoded at once: the read buffer is free again; the text goes back once sent.
        const text = jsonReplyBuffers.acquire();
        const reply = jsonReadReply(tag, data, eof, text);
        ctx.session.sendRaw(reply, () => jsonReplyBuffers.release(text), true);
      } else {
        ctx.session.sendRaw(jsonReadReply(tag, data, eof), undefined, true);
      }
    } finally {
      if (block && !handedOver) readBuffers.release(block);
    }
    ctx.replied = true;
    return undefined;
  }

  /**
   * `write` with `data_b64` (strict base64, else EINVAL) or, on the binary data path, the
   * frame's bytes; `set`/`sync` with the `write_then` extension.
   */
  @FsHandler('write')
  write(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: WriteDto) {
    let data: Buffer;
    if (frame.data !== undefined) {
      if (body.data_b64 !== undefined) throw new FsError(Errno.EINVAL, 'a binary write carries its bytes after the header, not in data_b64');
      if (body.n !== undefined && body.n !== frame.data.length)
        throw new FsError(Errno.EINVAL, `payload.n is ${body.n} but the frame carries ${frame.data.length} bytes`);
      data = frame.data;
    } else {
      if (body.data_b64 === undefined) throw new FsError(Errno.EINVAL, 'data_b64 is required');
      data = decodeBase64Strict(body.data_b64);
    }
    return this.fs.write(fsOf(session), rootId(frame, 'h'), body.off, data, body);
  }

  /** `acheron.t_fs_fsync` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.fsync}. */
  @FsHandler('fsync')
  fsync(@Session() session: WsSession, @Frame() frame: FrameT) {
    return this.fs.fsync(fsOf(session), rootId(frame, 'h'));
  }

  /** `acheron.t_fs_close` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.close}. */
  @FsHandler('close')
  close(@Session() session: WsSession, @Frame() frame: FrameT) {
    return this.fs.close(fsOf(session), rootId(frame, 'h'));
  }

  /** `acheron.t_fs_truncate` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.truncate}. */
  @FsHandler('truncate')
  truncate(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: TruncateDto) {
    return this.fs.truncate(fsOf(session), rootId(frame, 'node'), body.sz);
  }

  /** `acheron.t_fs_unlink` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.unlink}. */
  @FsHandler('unlink')
  unlink(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: NameDto) {
    return this.fs.unlink(fsOf(session), rootId(frame, 'node'), body.name);
  }

  /** `acheron.t_fs_mkdir` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.mkdir}. */
  @FsHandler('mkdir')
  mkdir(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: MkdirDto) {
    return this.fs.mkdir(fsOf(session), rootId(frame, 'node'), body.name, body.mode, body.cred);
  }

  /** `acheron.t_fs_rmdir` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.rmdir}. */
  @FsHandler('rmdir')
  rmdir(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: NameDto) {
    return this.fs.rmdir(fsOf(session), rootId(frame, 'node'), body.name);
  }

  /** `acheron.t_fs_rename` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.rename}. */
  @FsHandler('rename')
  rename(@Session() session: WsSession, @Payload() body: RenameDto) {
    return this.fs.rename(fsOf(session), body.old_parent, body.old_name, body.new_parent, body.new_name, body.flags ?? 0);
  }

  /** `acheron.t_fs_symlink` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.symlink}. */
  @FsHandler('symlink')
  symlink(@Session() session: WsSession, @Frame() frame: FrameT, @Payload() body: SymlinkDto) {
    return this.fs.symlink(fsOf(session), rootId(frame, 'node'), body.name, body.target, body.cred);
  }

  /** `acheron.t_fs_readlink` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.readlink}. */
  @FsHandler('readlink')
  readlink(@Frame() frame: FrameT) {
    return this.fs.readlink(rootId(frame, 'node'));
  }

  /** `acheron.t_fs_statfs` (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): {@link FsService.statfs}. */
  @FsHandler('statfs')
  statfs(@Frame() frame: FrameT) {
    return this.fs.statfs(rootId(frame, 'node'));
  }
}
