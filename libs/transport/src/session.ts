/**
 * Per-connection session state kept by the envelope adapter, and the registry of open sessions used for pushes.
 */
import { Injectable } from '@nestjs/common';
import { EventEmitter } from 'node:events';
import { randomBytes } from 'node:crypto';
import type { WebSocket } from 'ws';
import { Channel, CloseCode, DEFAULT_AGENT_ID, EventEnvelope, Role } from '@svc/protocol';

/** Control negotiation phase. */
export type ControlPhase = 'start' | 'versioned' | 'connected';
/** Runtime (Acheron) negotiation phase. */
export type RuntimePhase = 'none' | 'versioned' | 'attached';
/** FS session phase (`acheron.t_fs_hello` first). */
export type FsPhase = 'start' | 'ready';

/** Largest amount of unsent data, bytes, a session may queue before it is closed as too slow. */
const MAX_BUFFERED_BYTES = 64 * 1024 * 1024;

/**
 * One WebSocket connection: its negotiation phases, role and agent, and per-module state.
 *
 * Handlers receive it with `@Session()`. Modules keep their own per-session state in
 * {@link WsSession.locals} under a key of their own (e.g. pinned project, fids, subscriptions);
 * it dies with the connection. Emits `close` once when the connection ends.
 */
export class WsSession extends EventEmitter {
  /** Random session id, reported in `control.connect_ack` `session`. */
  readonly id = randomBytes(9).toString('base64url');
  readonly openedAtMs = Date.now();
  control: ControlPhase = 'start';
  runtime: RuntimePhase = 'none';
  fs: FsPhase = 'start';
  agentId = DEFAULT_AGENT_ID;
  /** Per-module session state, keyed by a symbol or string owned by the module. */
  readonly locals = new Map<string | symbol, unknown>();
  /** Message handlers bound by the gateways for this connection, by type. */
  readonly handlers = new Map<string, (data: unknown, type: string) => unknown>();
  /** Requests received and not yet answered. */
  inflight = 0;
  /**
   * True when a browser session cookie authenticated the upgrade (the dashboard, through the
   * listener's HTTP extension) rather than a bearer token: operations that hand out a role
   * token refuse such a session, so a script injected into a page can never read one.
   */
  browser = false;
  /** Frames of a channel still negotiating are handled in order on this chain. */
  negotiationChain: Promise<void> = Promise.resolve();
  /**
   * When the peer was last heard from (a frame or a pong), epoch ms; kept only once
   * {@link watchLiveness} was called (0 before).
   */
  lastHeardMs = 0;
  private watching = false;
  private closed = false;
  /** The socket is corked until the end of this tick ({@link sendRaw}). */
  private corked = false;

  constructor(
    private readonly ws: WebSocket,
    /** Role from the upgrade's bearer token; null on endpoints without roles (FS). */
    readonly role: Role | null,
    /** Peer address, for logs. */
    readonly remoteAddress: string,
  ) {
    super();
    ws.once('close', () => {
      this.closed = true;
      this.emit('close');
    });
  }

  get isOpen(): boolean {
    return !this.closed && this.ws.readyState === this.ws.OPEN;
  }

  /** True once the session of `channel` has finished its negotiation (docs/protocol.md "Envelope and errors"). */
  negotiated(channel: Channel, fsEndpoint = false): boolean {
    if (fsEndpoint) return this.fs === 'ready';
    return channel === 'control' ? this.control === 'connected' : this.runtime === 'attached';
  }

  /**
   * Sends one JSON envelope as a text frame. Silently drops it when the connection is closed;
   * closes a session whose unsent backlog exceeds 64 MiB (a consumer that does not read).
   */
  send(envelope: object): void {
    this.sendRaw(JSON.stringify(envelope));
  }

  /**
   * Sends a pre-encoded frame (see {@link send}): a string as a text frame, a Buffer as a
   * binary frame unless `text` is true (a Buffer holding UTF-8 JSON).
   * @param onDone called once when `data` is no longer referenced: after the frame was handed
   *   to the kernel, or at once when it was dropped (closed connection, backlog); lets the
   *   caller reuse the buffer
   */
  sendRaw(data: string | Buffer, onDone?: () => void, text = false): void {
    if (!this.isOpen) return onDone?.();
    if (this.ws.bufferedAmount > MAX_BUFFERED_BYTES) {
      this.close(CloseCode.POLICY_VIOLATION, 'send backlog too large; read your socket');
      return onDone?.();
    }
    const options = { binary: typeof data !== 'string' && !text };
    this.corkUntilNextTick();
    if (onDone) this.ws.send(data, options, () => onDone());
    else this.ws.send(data, options);
  }

  /**
   * Holds the frames sent in this tick (a mutation's pushes and its reply, a batch of replies)
   * in the socket until the tick ends, so they leave in one write(2) instead of one each: a
   * loopback write costs tens of µs of the sender's CPU. `ws` corks each frame's header and
   * payload itself; corks nest. Uses `ws`'s socket, when it has one.
   */
  private corkUntilNextTick(): void {
    if (this.corked) return;
    const socket = (this.ws as unknown as { _socket?: { cork(): void; uncork(): void; destroyed?: boolean } })._socket;
    if (!socket || typeof socket.cork !== 'function') return;
    this.corked = true;
    socket.cork();
    process.nextTick(() => {
      this.corked = false;
      socket.uncork();
    });
  }

  /** Sends a server push (no id/tag, docs/protocol.md "Envelope and errors"). */
  push(channel: Channel, type: string, payload: unknown): void {
    const event: EventEnvelope = { channel, type, payload };
    this.send(event);
  }

  /**
   * Starts keeping {@link lastHeardMs} (every frame and pong from the peer), for a caller that
   * pings the session with {@link ping} and closes it when the peer falls silent. Idempotent.
   */
  watchLiveness(): void {
    if (this.watching) return;
    this.watching = true;
    this.lastHeardMs = Date.now();
    const heard = () => (this.lastHeardMs = Date.now());
    this.ws.on('message', heard);
    this.ws.on('pong', heard);
  }

  /** Sends a WebSocket ping (the peer's WebSocket stack answers with a pong); nothing when closed. */
  ping(): void {
    if (!this.isOpen) return;
    try {
      this.ws.ping();
    } catch {
      /* the connection is closing: its close event follows */
    }
  }

  /** Closes the connection with a close code and a short reason (at most 123 bytes). */
  close(code: number, reason: string): void {
    if (this.closed) return;
    this.closed = true;
    try {
      this.ws.close(code, Buffer.from(reason).subarray(0, 123).toString());
    } catch {
      this.ws.terminate();
    }
  }

  /** Drops the connection without a close handshake. */
  terminate(): void {
    this.closed = true;
    this.ws.terminate();
  }
}

/**
 * Registry of the open sessions of one server, for pushes and shutdown.
 */
@Injectable()
export class SessionRegistry {
  private readonly sessions = new Set<WsSession>();

  add(session: WsSession): void {
    this.sessions.add(session);
    session.once('close', () => this.sessions.delete(session));
  }

  /** Number of open sessions. */
  get size(): number {
    return this.sessions.size;
  }

  /** All open sessions (a snapshot array). */
  all(): WsSession[] {
    return [...this.sessions];
  }

  /** Requests in flight over all sessions. */
  inflight(): number {
    let n = 0;
    for (const s of this.sessions) n += s.inflight;
    return n;
  }
}
