/**
 * The envelope WebSocket adapter (docs/protocol.md "Envelope and errors").
 *
 * One `ws` server per endpoint, on its own HTTP listener (`--bind`/`--port`). The adapter
 * authenticates the upgrade, keeps a {@link WsSession} per connection, parses each frame once
 * with the strict parser of `@svc/protocol`, settles envelope errors and negotiation order,
 * and dispatches the frame to the one gateway handler subscribed to its `type`. It sends
 * exactly one reply per request: the handler's return value as `payload`, or the error the
 * exception filter recorded.
 */
import { INestApplicationContext, Logger } from '@nestjs/common';
import { MessageMappingProperties } from '@nestjs/websockets';
import { WsAdapter } from '@nestjs/platform-ws';
import { createServer, IncomingMessage, Server as HttpServer, ServerResponse } from 'node:http';
import type { Server as HttpsServer } from 'node:https';
import type { Duplex } from 'node:stream';
import { performance } from 'node:perf_hooks';
import { isObservable, lastValueFrom, Observable } from 'rxjs';
import { WebSocket, WebSocketServer } from 'ws';
import { Channel, CloseCode, EnvelopeError, Frame, parseBinaryFrame, parseFrame, errnoName, ProtocolError, replyTypeOf, RequestId } from '@svc/protocol';
import { HttpExtension } from './http-extension';
import { EndpointProfile } from './profile';
import { RequestContext, RequestObserver } from './request-context';
import { SessionRegistry, WsSession } from './session';
import { toProtocolError } from './exception.filter';
import { EncodedJson } from './encoded-json';
import type { ServerTls } from './tls-listener';

/** Options of {@link EnvelopeWsAdapter}. */
export interface EnvelopeWsAdapterOptions {
  /** Address to listen on, e.g. `127.0.0.1`. */
  bind: string;
  /** TCP port; 0 picks a free one. */
  port: number;
  /** Largest accepted frame, bytes; larger frames close the connection with 1009. */
  maxMessageBytes: number;
  profile: EndpointProfile;
  sessions: SessionRegistry;
  /** Plain HTTP requests and upgrade checks of this listener (`svc`: the dashboard under `/ui/`). */
  http?: HttpExtension;
  observer?: RequestObserver;
  /**
   * Serve TLS (`wss://`, docs/operations.md "Transport security (TLS)") with this certificate, followed for changes while
   * listening; absent: plain `ws://`.
   */
  tls?: ServerTls | null;
}

/** Metric result label of an error: the errno name on FS sessions (`ENOENT`), else the code. */
function resultOf(err: ProtocolError): string {
  return err.errno !== undefined ? errnoName(err.errno) : err.code;
}

/** @see module documentation */
export class EnvelopeWsAdapter extends WsAdapter {
  private readonly log = new Logger('EnvelopeWsAdapter');
  private readonly wss: WebSocketServer;
  private readonly http: HttpServer;
  private listening = false;
  private stopping = false;
  private url: string | null = null;

  constructor(
    app: INestApplicationContext,
    private readonly options: EnvelopeWsAdapterOptions,
  ) {
    super(app);
    this.wss = new WebSocketServer({
      noServer: true,
      maxPayload: options.maxMessageBytes,
      perMessageDeflate: false,
      clientTracking: false,
    });
    const handler = (req: IncomingMessage, res: ServerResponse) => this.onPlainHttp(req, res);
    this.http = options.tls ? options.tls.createServer(handler) : createServer(handler);
    this.http.on('upgrade', (req, socket, head) => this.onUpgrade(req, socket, head));
    this.http.on('clientError', (_err, socket) => socket.destroy());
  }

  /** The WebSocket URL once listening, e.g. `ws://127.0.0.1:18790/` (`wss://` with TLS). */
  get listenUrl(): string | null {
    return this.url;
  }

  /** True while the listener accepts new sessions. */
  get isListening(): boolean {
    return this.listening && !this.stopping;
  }

  /**
   * Starts accepting connections.
   * @returns the WebSocket URL, e.g. `ws://127.0.0.1:18790/`, or `wss://...` with TLS
   * @throws Error with `code` `EADDRINUSE`/`EACCES` when the port cannot be bound
   */
  async listen(): Promise<string> {
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      this.http.once('error', onError);
      this.http.listen(this.options.port, this.options.bind, () => {
        this.http.off('error', onError);
        resolve();
      });
    });
    const addr = this.http.address();
    const port = typeof addr === 'object' && addr ? addr.port : this.options.port;
    const host = this.options.bind.includes(':') ? `[${this.options.bind}]` : this.options.bind;
    this.url = `${this.options.tls ? 'wss' : 'ws'}://${host}:${port}${this.options.profile.path}`;
    this.listening = true;
    this.options.tls?.attach(this.http as HttpsServer);
    return this.url;
  }

  /**
   * Graceful stop (docs/protocol.md "Transport"): refuse new connections, wait up to `graceMs` for requests
   * in flight, then close every session with 1001.
   */
  async shutdown(graceMs: number): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.options.tls?.close();
    const closed = new Promise<void>((resolve) => (this.listening ? this.http.close(() => resolve()) : resolve()));
    const deadline = Date.now() + graceMs;
    while (this.options.sessions.inflight() > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
    }
    for (const s of this.options.sessions.all()) s.close(CloseCode.GOING_AWAY, 'server shutting down');
    await Promise.race([closed, new Promise((r) => setTimeout(r, 1000))]);
    this.http.closeAllConnections?.();
  }

  // ---- Nest WebSocketAdapter contract -------------------------------------------------

  /** Returns the single `ws` server of this endpoint; gateways must use the profile's path. */
  override create(_port: number, options?: { path?: string }): WebSocketServer {
    const path = options?.path ?? '/';
    if (path !== this.options.profile.path) {
      throw new Error(`gateway path ${path} does not match this endpoint's path ${this.options.profile.path}`);
    }
    return this.wss;
  }

  override bindClientConnect(server: WebSocketServer, callback: (session: WsSession) => void): void {
    server.on('connection', callback);
  }

  override bindClientDisconnect(session: WsSession, callback: () => void): void {
    session.once('close', callback);
  }

  /** Registers a gateway's handlers for one session; each type must have exactly one handler. */
  override bindMessageHandlers(session: WsSession, handlers: MessageMappingProperties[], _transform: (data: unknown) => Observable<unknown>): void {
    for (const h of handlers) {
      const type = String(h.message);
      if (session.handlers.has(type)) {
        this.log.error(`two gateways subscribe to ${type}; the first one is used`);
        continue;
      }
      session.handlers.set(type, h.callback as (data: unknown, type: string) => unknown);
    }
  }

  override async close(_server: unknown): Promise<void> {
    await this.shutdown(0);
  }

  override async dispose(): Promise<void> {
    this.options.tls?.close();
    if (this.listening) this.http.close();
  }

  // ---- connections --------------------------------------------------------------------

  private onPlainHttp(req: IncomingMessage, res: ServerResponse): void {
    if (this.options.http?.handleRequest(req, res)) return;
    const body = `this port serves WebSocket sessions on ${this.options.profile.path}; connect with a WebSocket client\n`;
    res.writeHead(426, { 'Content-Type': 'text/plain', Upgrade: 'websocket', Connection: 'close' });
    res.end(body);
  }

  private refuse(socket: Duplex, status: number, reason: string, extra: Record<string, string> = {}): void {
    const body = `${reason}\n`;
    const headers = {
      'Content-Type': 'text/plain',
      'Content-Length': String(Buffer.byteLength(body)),
      Connection: 'close',
      ...extra,
    };
    const head = Object.entries(headers)
      .map(([k, v]) => `${k}: ${v}`)
      .join('\r\n');
    socket.end(`HTTP/1.1 ${status} ${reason}\r\n${head}\r\n\r\n${body}`);
  }

  private onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    // Never the headers: the upgrade carries the bearer token.
    this.log.debug?.({ msg: 'upgrade request', remote: req.socket.remoteAddress, tls: this.options.tls ? true : false });
    let pathname: string;
    try {
      pathname = new URL(req.url ?? '/', 'http://localhost').pathname;
    } catch {
      return this.refuse(socket, 400, 'Bad Request');
    }
    if (pathname !== this.options.profile.path) return this.refuse(socket, 404, 'Not Found');
    if (this.stopping) return this.refuse(socket, 503, 'Service Unavailable');
    const verdict = this.options.http?.checkUpgrade(req) ?? null;
    if (verdict && 'refuse' in verdict) {
      this.log.warn({ remote: req.socket.remoteAddress, msg: `upgrade refused: ${verdict.refuse.log}` });
      return this.refuse(socket, verdict.refuse.status, verdict.refuse.reason);
    }
    const auth = verdict ?? this.options.profile.authenticate(req);
    if (!auth) {
      this.log.warn({ remote: req.socket.remoteAddress, msg: 'upgrade refused: missing or invalid bearer token' });
      return this.refuse(socket, 401, 'Unauthorized', { 'WWW-Authenticate': 'Bearer realm="svc"' });
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => this.onConnection(ws, auth.role, req, verdict !== null));
  }

  private onConnection(ws: WebSocket, role: WsSession['role'], req: IncomingMessage, browser = false): void {
    const session = new WsSession(ws, role, req.socket.remoteAddress ?? 'unknown');
    session.browser = browser;
    this.options.sessions.add(session);
    ws.on('error', (err: Error & { code?: string }) => {
      // ws closes the connection itself (1009 for an oversized frame, 1007 for bad UTF-8).
      this.log.debug?.({ session: session.id, code: err.code, msg: `websocket error: ${err.message}` });
    });
    ws.on('message', (data: Buffer, isBinary: boolean) => this.onMessage(session, data, isBinary));
    this.wss.emit('connection', session);
  }

  // ---- frames -------------------------------------------------------------------------

  private onMessage(session: WsSession, data: Buffer, isBinary: boolean): void {
    const received = performance.now();
    const { profile } = this.options;
    let frame: Frame;
    try {
      if (isBinary) {
        if (!profile.acceptsBinary(session)) {
          throw new EnvelopeError(
            'invalid_envelope',
            profile.fsEndpoint
              ? 'binary frames need the binary data path, negotiated with "binary": true in acheron.t_fs_hello'
              : 'binary frames are not accepted; send one JSON object per text frame',
            profile.fsEndpoint ? 'acheron' : 'control',
          );
        }
        frame = parseBinaryFrame(data);
      } else {
        frame = parseFrame(data.toString('utf8'));
      }
    } catch (e) {
      const err = e instanceof EnvelopeError ? e : new EnvelopeError('invalid_envelope', 'malformed message', 'control');
      const channel: Channel = profile.fsEndpoint ? 'acheron' : err.channel;
      this.replyError(session, channel, err.id, err.tag, err);
      this.observe('invalid', resultOf(err), received);
      if (!session.negotiated(channel, profile.fsEndpoint)) session.close(CloseCode.POLICY_VIOLATION, err.code);
      return;
    }
    if (!session.negotiated(frame.channel, profile.fsEndpoint)) {
      // Negotiation frames are handled strictly in order, so a pipelined
      // version/connect pair sees the phase its predecessor set.
      session.negotiationChain = session.negotiationChain.then(() => (session.isOpen ? this.handleLogged(session, frame, received) : undefined));
    } else {
      void this.handleLogged(session, frame, received);
    }
  }

  /**
   * {@link handle}, never rejecting: a handler's error is answered there, but what fails around
   * it (encoding or sending the reply) would reject with nobody to catch it, which ends the
   * process, and would stop the negotiation chain. It is logged instead.
   */
  private handleLogged(session: WsSession, frame: Frame, received: number): Promise<void> {
    return this.handle(session, frame, received).catch((e: unknown) => {
      this.log.error({ session: session.id, type: frame.type, msg: `request failed outside its handler: ${(e as Error).message}` });
    });
  }

  private async handle(session: WsSession, frame: Frame, received: number): Promise<void> {
    const { profile } = this.options;
    const negotiating = !session.negotiated(frame.channel, profile.fsEndpoint);
    const handler = session.handlers.get(frame.type);
    const label = handler ? frame.type : 'unknown';
    const gateError = profile.gate(session, frame);
    if (gateError) {
      this.replyError(session, frame.channel, frame.id, frame.tag, gateError);
      this.observe(label, resultOf(gateError), received);
      if (negotiating) session.close(CloseCode.POLICY_VIOLATION, gateError.code);
      return;
    }
    if (!handler) {
      const err = new ProtocolError('unknown_type', `unknown message type "${frame.type}"`);
      this.replyError(session, frame.channel, frame.id, frame.tag, err);
      this.observe(label, resultOf(err), received);
      if (negotiating) session.close(CloseCode.POLICY_VIOLATION, err.code);
      return;
    }
    const ctx = new RequestContext(frame, session);
    session.inflight++;
    let result: unknown;
    try {
      result = await handler(ctx, frame.type);
      if (isObservable(result)) result = await lastValueFrom(result, { defaultValue: undefined });
    } catch (e) {
      ctx.error = toProtocolError(e, this.log);
    } finally {
      session.inflight--;
    }
    if (ctx.replied) {
      // The handler answered itself (binary reply) or was abandoned (t_flush): no reply here.
      this.observe(label, ctx.error ? resultOf(ctx.error) : 'ok', received);
      return;
    }
    if (ctx.error) {
      this.replyError(session, frame.channel, frame.id, frame.tag, ctx.error);
      this.observe(label, resultOf(ctx.error), received);
      if (negotiating) session.close(CloseCode.POLICY_VIOLATION, ctx.error.code);
      return;
    }
    const reply: Record<string, unknown> = { channel: frame.channel, type: replyTypeOf(frame.type) };
    if (frame.channel === 'control') reply.id = frame.id;
    else reply.tag = frame.tag;
    reply.ok = true;
    if (result instanceof EncodedJson) {
      // `{...,"ok":true}` + `,"payload":<text>}`: the payload is not encoded again.
      session.sendRaw(`${JSON.stringify(reply).slice(0, -1)},"payload":${result.json}}`);
    } else {
      reply.payload = result ?? {};
      session.send(reply);
    }
    this.observe(label, 'ok', received);
  }

  private replyError(session: WsSession, requested: Channel, id: RequestId, tag: number | null, err: ProtocolError): void {
    const { profile } = this.options;
    // An FS session has one channel: every error goes back on acheron, with the tag.
    const channel: Channel = profile.fsEndpoint ? 'acheron' : requested;
    const reply: Record<string, unknown> = { channel, type: profile.errorType(channel) };
    if (channel === 'control') reply.id = id;
    else reply.tag = tag;
    reply.ok = false;
    reply.error = profile.errorBody(err, session);
    session.send(reply);
  }

  private observe(type: string, result: string, received: number): void {
    this.options.observer?.observe(type, result, (performance.now() - received) / 1000);
  }
}
