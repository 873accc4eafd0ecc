/** The connection failure type of the protocol clients. */
/**
 * The session could not be opened or was lost: refused, unauthorized, closed or timed out.
 * `hung`: the peer stopped answering without closing the connection (no reply, push or pong
 * within the keepalive limit; the session was dropped). `tls`: the server's certificate was
 * refused (unknown CA, expired, another host name) or the TLS handshake failed. `sent` is
 * false when the request it answers was never written to the socket (the session was already
 * closed), so retrying it elsewhere cannot apply it twice.
 */
export class ConnectionError extends Error {
  constructor(
    message: string,
    readonly reason: 'unauthorized' | 'unreachable' | 'closed' | 'timeout' | 'hung' | 'protocol' | 'tls',
    readonly sent: boolean = true,
  ) {
    super(message);
    this.name = 'ConnectionError';
  }
}
