/**
 * A TCP proxy on loopback for fault tests: forwards every connection to a target port, and on
 * demand stops forwarding in both directions without closing anything (a network partition as
 * the endpoints see it: connections stay open, nothing arrives), or switches its target.
 */
import { createServer, Server, Socket, connect } from 'node:net';

export interface TcpProxy {
  /** The port clients connect to. */
  port: number;
  /** Stops forwarding: every socket is paused (bytes wait in the kernel), new ones start paused. */
  block(): void;
  /** Forwards again, delivering what waited. */
  unblock(): void;
  /**
   * New connections go to `port` from now on; the open ones are destroyed (as a failed-over
   * primary's connections are lost).
   */
  retarget(port: number): void;
  close(): Promise<void>;
}

/**
 * Starts a proxy from a free loopback port to `127.0.0.1:targetPort`.
 * @returns once listening
 */
export async function startTcpProxy(targetPort: number): Promise<TcpProxy> {
  let target = targetPort;
  let blocked = false;
  const sockets = new Set<Socket>();
  const server: Server = createServer((down) => {
    const up = connect(target, '127.0.0.1');
    for (const s of [down, up]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => {
        sockets.delete(s);
        down.destroy();
        up.destroy();
      });
      if (blocked) s.pause();
    }
    down.pipe(up);
    up.pipe(down);
    // pipe() resumes its source: keep the pair paused while blocked
    if (blocked) for (const s of [down, up]) s.pause();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    block() {
      blocked = true;
      for (const s of sockets) s.pause();
    },
    unblock() {
      blocked = false;
      for (const s of sockets) s.resume();
    },
    retarget(p: number) {
      target = p;
      for (const s of sockets) s.destroy();
    },
    close() {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
