/**
 * FS sessions shared by the router's mounts: one {@link FsClient} per (endpoint URL, auth token),
 * so several exports of one node use one session (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)": handles and invalidation
 * pushes belong to a session).
 *
 * Hung endpoints: an endpoint whose session the keepalive found not
 * answering, or that let a whole connect + hello time out, is *hung*. While it is, {@link
 * EndpointPool.get} fails at once (ConnectionError `hung`, `sent` false) instead of waiting for
 * another connect timeout, and the pool reconnects in the background every `probeIntervalMs`;
 * the first reconnect that gets a hello reply ends the state and its session serves the next
 * request (emitted as `recovered`). A hung endpoint nobody asked for during `probeIdleMs` is
 * forgotten (the next request connects in the foreground again). A refused connection or a
 * rejected hello also ends the state: such an endpoint answers, and fails fast by itself.
 */
import { EventEmitter } from 'node:events';
import { ConnectionError, FsClient, FsClientOptions, FsSessionTuning } from '@svc/client';
import { Errno, FsError } from '@svc/protocol/wire';
import { ExportInfo, InvalDirEvent, InvalEvent } from './fs-types';

/** One open FS session and what it learnt about its node's exports. */
export class EndpointSession {
  private exportsPromise: Promise<Map<string, ExportInfo>> | null = null;

  constructor(
    readonly key: string,
    readonly client: FsClient,
  ) {}

  /** The endpoint URL (`ws://HOST:PORT/v2/fs`). */
  get url(): string {
    return this.client.url;
  }

  /** True while the FS session is open. */
  get isOpen(): boolean {
    return this.client.isOpen;
  }

  /**
   * The node's exports (`acheron.t_fs_exports`, docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"), read once per session.
   * @throws FsError / ConnectionError from the request
   */
  exports(): Promise<Map<string, ExportInfo>> {
    if (!this.exportsPromise) {
      this.exportsPromise = this.client.exports().then((r) => new Map(r.exports.map((e) => [e.name, e])));
      this.exportsPromise.catch(() => {
        this.exportsPromise = null;
      });
    }
    return this.exportsPromise;
  }

  /**
   * The export named `name`.
   * @throws FsError ENOENT when the node has no such export
   */
  async export(name: string): Promise<ExportInfo> {
    const e = (await this.exports()).get(name);
    if (!e) throw new FsError(Errno.ENOENT, `export "${name}" not found on ${this.url} (it has: ${[...(await this.exports()).keys()].join(', ') || 'none'})`);
    return e;
  }
}

/**
 * Pool options: the session options ({@link FsSessionTuning}, passed to every session opened,
 * with FsClient's defaults except `connectTimeoutMs`, {@link DEFAULT_CONNECT_TIMEOUT_MS} here),
 * and the pool's own.
 */
export interface EndpointPoolOptions extends FsSessionTuning {
  /** Background reconnect period of a hung endpoint, ms (default 1000). */
  probeIntervalMs?: number;
  /** A hung endpoint nobody asked for during this long is no longer probed, ms (default 60000). */
  probeIdleMs?: number;
  /** Opens FS sessions (default {@link FsClient.connect}). */
  connect?: (o: FsClientOptions) => Promise<FsClient>;
}

/** Default connect + hello limit of the pool, ms. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 2000;

/** A hung endpoint (see module documentation). */
interface HungEndpoint {
  url: string;
  authToken: string | undefined;
  /** What showed it hung ("no answer from URL within N ms ..."). */
  error: ConnectionError;
  /** Date.now() when it was found hung. */
  since: number;
  /** Date.now() of the last {@link EndpointPool.get} for it. */
  wanted: number;
  timer: NodeJS.Timeout | null;
  probing: boolean;
}

/** True for the failures that mean "connected nowhere, no answer" rather than "refused". */
function isNoAnswer(e: unknown): e is ConnectionError {
  return e instanceof ConnectionError && (e.reason === 'timeout' || e.reason === 'hung');
}

/**
 * Events: `inval` (session, InvalEvent), `inval_dir` (session, InvalDirEvent), `session_closed`
 * (session) when an open session ends, `hung` (key, ConnectionError) when an endpoint is found
 * hung, `recovered` (session) when a background reconnect of a hung endpoint succeeded.
 */
export class EndpointPool extends EventEmitter {
  private readonly sessions = new Map<string, EndpointSession>();
  private readonly connecting = new Map<string, Promise<EndpointSession>>();
  private readonly hung = new Map<string, HungEndpoint>();
  private readonly connectTimeoutMs: number;
  private readonly probeIntervalMs: number;
  private readonly probeIdleMs: number;
  private closed = false;
  /**
   * What every session's acknowledgement of pushes waits for ({@link FsClientOptions.ackBarrier}):
   * the pool's option, or what the FUSE layer on the router sets ({@link WorkspaceRouter.setAckBarrier}).
   */
  ackBarrier: () => Promise<unknown>;

  constructor(private readonly options: EndpointPoolOptions = {}) {
    super();
    this.ackBarrier = options.ackBarrier ?? (() => Promise.resolve());
    this.connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    this.probeIntervalMs = options.probeIntervalMs ?? 1000;
    this.probeIdleMs = options.probeIdleMs ?? 60_000;
  }

  /**
   * An open session to `url` with `authToken` (an existing one, or a new one after the hello).
   * Concurrent calls for one endpoint share one connection attempt.
   * @param timeoutMs at most this long for the connect and hello, ms (capped at the pool's
   *   `connectTimeoutMs`; an operation passes what is left of its deadline)
   * @throws ConnectionError when unreachable, `hung` at once while the endpoint is hung;
   *   FsError when the hello is rejected (errno 13 `AuthMissing`/`AuthFailed`, 71 EPROTO)
   */
  get(url: string, authToken?: string, timeoutMs?: number): Promise<EndpointSession> {
    if (this.closed) return Promise.reject(new FsError(Errno.EIO, 'the router is closed'));
    const key = `${url}\n${authToken ?? ''}`;
    const s = this.sessions.get(key);
    if (s?.isOpen) return Promise.resolve(s);
    const hung = this.hung.get(key);
    if (hung) {
      hung.wanted = Date.now();
      this.scheduleProbe(key, hung, this.probeIntervalMs);
      const ago = ((Date.now() - hung.since) / 1000).toFixed(1);
      return Promise.reject(new ConnectionError(`${hung.error.message} (hung for ${ago} s; reconnecting in the background)`, 'hung', false));
    }
    let p = this.connecting.get(key);
    if (!p) {
      const limit = Math.max(1, Math.min(this.connectTimeoutMs, timeoutMs ?? Infinity));
      p = this.open(url, authToken, limit)
        .then((client) => this.adopt(key, client))
        .catch((e: unknown) => {
          // Only a full connect timeout shows a hung node; one cut short by an operation's
          // deadline shows nothing about the node.
          if (isNoAnswer(e) && limit >= this.connectTimeoutMs) this.markHung(key, e);
          throw e;
        })
        .finally(() => this.connecting.delete(key));
      this.connecting.set(key, p);
    }
    return p;
  }

  /** True while the endpoint is hung (see module documentation). */
  isHung(url: string, authToken?: string): boolean {
    return this.hung.has(`${url}\n${authToken ?? ''}`);
  }

  private open(url: string, authToken: string | undefined, connectTimeoutMs: number): Promise<FsClient> {
    const connect = this.options.connect ?? ((o: FsClientOptions) => FsClient.connect(o));
    return connect({
      url,
      authToken,
      binary: this.options.binary ?? true,
      features: this.options.features,
      connectTimeoutMs,
      requestTimeoutMs: this.options.requestTimeoutMs,
      keepaliveMs: this.options.keepaliveMs,
      keepaliveTimeoutMs: this.options.keepaliveTimeoutMs,
      ackBarrier: () => this.ackBarrier(),
      // Every session's first use is an export's root: ask for the list behind the hello.
      listExports: true,
    });
  }

  /** Makes `client` the session of `key`. @throws FsError EIO when the pool was closed meanwhile */
  private adopt(key: string, client: FsClient): EndpointSession {
    const session = new EndpointSession(key, client);
    if (this.closed) {
      client.close();
      throw new FsError(Errno.EIO, 'the router is closed');
    }
    this.sessions.get(key)?.client.close();
    this.sessions.set(key, session);
    client.on('inval', (ev: InvalEvent) => this.emit('inval', session, ev));
    client.on('inval_dir', (ev: InvalDirEvent) => this.emit('inval_dir', session, ev));
    client.once('hung', (e: ConnectionError) => this.markHung(key, e));
    client.once('close', () => {
      if (this.sessions.get(key) === session) this.sessions.delete(key);
      this.emit('session_closed', session);
    });
    return session;
  }

  /** Records `key` (`URL\nTOKEN`) as hung and starts its background reconnects. */
  private markHung(key: string, error: ConnectionError): void {
    if (this.closed) return;
    const cut = key.indexOf('\n');
    const url = key.slice(0, cut);
    const token = key.slice(cut + 1) || undefined;
    const now = Date.now();
    const h = this.hung.get(key);
    if (h) {
      h.error = error;
      return;
    }
    const entry: HungEndpoint = { url, authToken: token, error, since: now, wanted: now, timer: null, probing: false };
    this.hung.set(key, entry);
    this.emit('hung', key, error);
    this.scheduleProbe(key, entry, this.probeIntervalMs);
  }

  private scheduleProbe(key: string, h: HungEndpoint, delayMs: number): void {
    if (h.timer || h.probing || this.closed) return;
    h.timer = setTimeout(() => void this.probe(key, h), delayMs);
    h.timer.unref();
  }

  /** One background reconnect of a hung endpoint. */
  private async probe(key: string, h: HungEndpoint): Promise<void> {
    h.timer = null;
    if (this.closed || this.hung.get(key) !== h) return;
    if (Date.now() - h.wanted > this.probeIdleMs) {
      this.hung.delete(key);
      return;
    }
    h.probing = true;
    try {
      const client = await this.open(h.url, h.authToken, this.connectTimeoutMs);
      h.probing = false;
      if (this.hung.get(key) !== h || this.closed) {
        client.close();
        return;
      }
      this.hung.delete(key);
      this.emit('recovered', this.adopt(key, client));
    } catch (e) {
      h.probing = false;
      if (this.hung.get(key) !== h) return;
      if (isNoAnswer(e)) this.scheduleProbe(key, h, this.probeIntervalMs);
      else this.hung.delete(key); // it answers (refused, hello rejected): no longer hung
    }
  }

  /** Drops a session that stopped answering (no closing handshake). */
  discard(session: EndpointSession): void {
    if (this.sessions.get(session.key) === session) this.sessions.delete(session.key);
    session.client.terminate();
  }

  /** Closes the sessions whose key is not in `keep` (after a topology change). */
  retain(keep: Set<string>): void {
    for (const [key, s] of this.sessions) {
      if (!keep.has(key)) {
        this.sessions.delete(key);
        s.client.close();
      }
    }
  }

  /** Open sessions. */
  get size(): number {
    return this.sessions.size;
  }

  /** Closes every session and stops the background reconnects. */
  close(): void {
    this.closed = true;
    for (const h of this.hung.values()) if (h.timer) clearTimeout(h.timer);
    this.hung.clear();
    for (const s of this.sessions.values()) s.client.close();
    this.sessions.clear();
  }
}
