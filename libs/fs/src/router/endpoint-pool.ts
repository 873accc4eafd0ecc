/**
 * FS sessions shared by the router's mounts: one {@link FsClient} per (endpoint URL, auth token),
 * so several exports of one node use one session (PROTOCOL.md 8: handles and invalidation
 * pushes belong to a session).
 */
import { EventEmitter } from 'node:events';
import { FsClient, FsClientOptions } from '@svc/client';
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
   * The node's exports (`acheron.t_fs_exports`, PROTOCOL.md 8), read once per session.
   * @throws FsError / ConnectionError from the request
   */
  exports(): Promise<Map<string, ExportInfo>> {
    if (!this.exportsPromise) {
      this.exportsPromise = this.client.request<{ exports: ExportInfo[] }>('exports').then((r) => new Map(r.exports.map((e) => [e.name, e])));
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

export interface EndpointPoolOptions {
  /** Ask for the binary data path (default true). */
  binary?: boolean;
  /** FS extensions to ask for (default: FsClient's, i.e. `SVC_FS_CLIENT_FEATURES` or all). */
  features?: readonly string[];
  /** Connect + hello time limit, ms. */
  connectTimeoutMs?: number;
  /** Per-request time limit, ms. */
  requestTimeoutMs?: number;
  /** Opens FS sessions (default {@link FsClient.connect}). */
  connect?: (o: FsClientOptions) => Promise<FsClient>;
}

/**
 * Events: `inval` (session, InvalEvent), `inval_dir` (session, InvalDirEvent), `session_closed`
 * (session) when an open session ends.
 */
export class EndpointPool extends EventEmitter {
  private readonly sessions = new Map<string, EndpointSession>();
  private readonly connecting = new Map<string, Promise<EndpointSession>>();
  private closed = false;

  constructor(private readonly options: EndpointPoolOptions = {}) {
    super();
  }

  /**
   * An open session to `url` with `authToken` (an existing one, or a new one after the hello).
   * Concurrent calls for one endpoint share one connection attempt.
   * @throws ConnectionError when unreachable; FsError when the hello is rejected
   *   (errno 13 `AuthMissing`/`AuthFailed`, 71 EPROTO)
   */
  get(url: string, authToken?: string): Promise<EndpointSession> {
    if (this.closed) return Promise.reject(new FsError(Errno.EIO, 'the router is closed'));
    const key = `${url}\n${authToken ?? ''}`;
    const s = this.sessions.get(key);
    if (s?.isOpen) return Promise.resolve(s);
    let p = this.connecting.get(key);
    if (!p) {
      const connect = this.options.connect ?? ((o: FsClientOptions) => FsClient.connect(o));
      p = connect({
        url,
        authToken,
        binary: this.options.binary ?? true,
        features: this.options.features,
        connectTimeoutMs: this.options.connectTimeoutMs,
        requestTimeoutMs: this.options.requestTimeoutMs,
      })
        .then((client) => {
          const session = new EndpointSession(key, client);
          if (this.closed) {
            client.close();
            throw new FsError(Errno.EIO, 'the router is closed');
          }
          this.sessions.set(key, session);
          client.on('inval', (ev: InvalEvent) => this.emit('inval', session, ev));
          client.on('inval_dir', (ev: InvalDirEvent) => this.emit('inval_dir', session, ev));
          client.once('close', () => {
            if (this.sessions.get(key) === session) this.sessions.delete(key);
            this.emit('session_closed', session);
          });
          return session;
        })
        .finally(() => this.connecting.delete(key));
      this.connecting.set(key, p);
    }
    return p;
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

  /** Closes every session. */
  close(): void {
    this.closed = true;
    for (const s of this.sessions.values()) s.client.close();
    this.sessions.clear();
  }
}
