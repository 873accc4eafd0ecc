/**
 * Opening a client WebSocket with a time limit, shared by ControlClient and FsClient: every
 * failure becomes a {@link ConnectionError} with a reason a CLI can map to its exit code.
 */
import type { Socket } from 'node:net';
import WebSocket from 'ws';
import { ConnectionError } from './connection-error';
import { ClientTls, describeTlsError, tlsSocketOptions } from './tls-options';

/** Options of {@link openWebSocket}. */
export interface OpenOptions {
  /** Time allowed for the TCP connect and the upgrade, ms. */
  timeoutMs: number;
  /** Extra upgrade headers (e.g. `Authorization`). */
  headers?: Record<string, string>;
  /** What is connected to, for messages: `server` or `node`. */
  what: string;
  /** Hint appended to "connection refused" (e.g. `is svc running?`). */
  refusedHint?: string;
  /** CAs a `wss://` server is verified against (default: the system CAs); verification is always on. */
  tls?: ClientTls;
  /** Called with the TCP socket under the WebSocket once upgraded (to see raw bytes arrive). */
  onSocket?: (socket: Socket) => void;
}

/**
 * Opens `url`.
 * @returns the open socket (64 MiB frame limit, no compression)
 * @throws ConnectionError `unreachable` (bad URL, refused, network error), `timeout`,
 *   `unauthorized` (HTTP 401), `protocol` (another HTTP answer than the upgrade), `tls` (the
 *   server's certificate was refused: unknown CA, expired, another host; or the TLS handshake
 *   failed, e.g. a `ws://` URL on a TLS listener or the reverse). Nothing is sent, the bearer
 *   token included, before the server's certificate is verified.
 */
export function openWebSocket(url: string, options: OpenOptions): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    let settled = false;
    let socket: WebSocket | undefined;
    const done = (err: Error | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err) {
        socket?.terminate();
        reject(err);
      } else resolve(socket!);
    };
    const timer = setTimeout(() => done(new ConnectionError(`no answer from ${url} within ${options.timeoutMs} ms (connect)`, 'timeout')), options.timeoutMs);
    try {
      socket = new WebSocket(url, {
        headers: options.headers,
        handshakeTimeout: options.timeoutMs,
        perMessageDeflate: false,
        maxPayload: 64 * 1024 * 1024,
        ...tlsSocketOptions(options.tls),
      });
    } catch (e) {
      done(new ConnectionError(`invalid ${options.what} URL ${url}: ${(e as Error).message}`, 'unreachable'));
      return;
    }
    if (options.onSocket) socket.once('upgrade', (res) => res.socket && options.onSocket!(res.socket));
    socket.once('open', () => done(null));
    socket.once('unexpected-response', (_req, res) => {
      const status = res.statusCode ?? 0;
      done(
        status === 401
          ? new ConnectionError(
              `authentication failed: ${url} answered HTTP 401 (missing or invalid bearer token; pass --auth-token or set SVC_AUTH_TOKEN)`,
              'unauthorized',
            )
          : new ConnectionError(`${url} answered HTTP ${status} instead of a WebSocket upgrade`, 'protocol'),
      );
    });
    socket.once('error', (err: NodeJS.ErrnoException) => {
      const tls = describeTlsError(err, url, options.tls);
      if (tls) return done(new ConnectionError(tls.message, 'tls'));
      const refused = err.code === 'ECONNREFUSED' ? `connection refused${options.refusedHint ? ` (${options.refusedHint})` : ''}` : err.message;
      done(new ConnectionError(`cannot connect to ${url}: ${refused}`, 'unreachable'));
    });
  });
}
