/**
 * A tiny FS node for unit tests of the client side's fault handling (FsClient keepalive,
 * EndpointPool hung endpoints): a real `ws` server that speaks just enough of docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"
 * (hello; `exports` with one export `work`; `lookup`/`getattr` with one file attribute whose
 * size is the node's `size`; `open` with handle 1; `read` with the text `size N`; other
 * requests answered by echoing the operation) and can
 * behave like a node that stopped (`hung`: no replies, no pongs, upgrades left unanswered, as
 * a SIGSTOPped process whose kernel still accepts connections), a busy node (`slow`: late
 * replies, pongs at once), a node that never pongs but pushes, one that never says hello, or
 * one that never replies to requests while answering pings, or one that sends a large reply
 * slowly (`trickle`: one frame in pieces over 2 s, nothing else meanwhile).
 */
import { createServer, IncomingMessage, Server } from 'node:http';
import { AddressInfo, Socket } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';

export type StubMode = 'normal' | 'hung' | 'slow' | 'pushes' | 'trickle' | 'mute-hello' | 'no-reply';

export interface StubNode {
  url: string;
  /** Behaviour from now on (existing sessions included). */
  mode: StubMode;
  /** Reply delay in `slow` mode, ms. */
  slowMs: number;
  /** The `sz` of every attribute it answers (`lookup`, `getattr`): tells nodes apart. */
  size: number;
  /** Pings received, requests (other than hello) received, sessions opened. */
  pings: number;
  requests: number;
  sessions: number;
  close(): Promise<void>;
}

/** Starts a stub node on a free port of 127.0.0.1. */
export async function startStubNode(mode: StubMode = 'normal'): Promise<StubNode> {
  const wss = new WebSocketServer({ noServer: true, autoPong: false });
  const held: Socket[] = [];
  const http: Server = createServer((_req, res) => res.writeHead(404).end());
  const node: StubNode = {
    url: '',
    mode,
    slowMs: 0,
    size: 0,
    pings: 0,
    requests: 0,
    sessions: 0,
    close: () =>
      new Promise<void>((r) => {
        for (const c of wss.clients) c.terminate();
        for (const s of held) s.destroy();
        http.closeAllConnections?.();
        http.close(() => r());
      }),
  };
  http.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    if (node.mode === 'hung') {
      held.push(socket); // accepted by the kernel, never answered
      socket.on('error', () => undefined);
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws, socket));
  });
  wss.on('connection', (ws: WebSocket, socket: Socket) => {
    node.sessions++;
    const timers: NodeJS.Timeout[] = [];
    ws.on('close', () => timers.forEach((t) => clearTimeout(t)));
    ws.on('error', () => undefined);
    ws.on('ping', (data) => {
      node.pings++;
      if (node.mode !== 'hung' && node.mode !== 'trickle') ws.pong(data);
    });
    ws.on('message', (raw) => {
      if (node.mode === 'hung') return;
      const msg = JSON.parse((raw as Buffer).toString()) as { type: string; tag: number };
      const reply = (type: string, payload: object) => ws.send(JSON.stringify({ channel: 'acheron', type, tag: msg.tag, ok: true, payload }));
      if (msg.type === 'acheron.t_fs_hello') {
        if (node.mode === 'mute-hello') return;
        return reply('acheron.r_fs_hello', { protocol: 'acheron-fs', caps: { binary_data: false, max_read: 1 << 20, max_write: 1 << 20 } });
      }
      node.requests++;
      const op = msg.type.replace('acheron.t_fs_', '');
      if (op === 'exports') return reply('acheron.r_fs_exports', { exports: [{ name: 'work', root: 1, ro: false }] });
      if (node.mode === 'no-reply') return;
      if (op === 'open' && node.mode === 'normal') return reply('acheron.r_fs_open', { h: 1 });
      if (op === 'read' && node.mode === 'normal')
        return reply('acheron.r_fs_read', { data_b64: Buffer.from(`size ${node.size}`).toString('base64'), eof: true });
      if ((op === 'lookup' || op === 'getattr') && node.mode === 'normal') {
        return reply(`acheron.r_fs_${op}`, { attr: { id: 2, k: 1, m: 0o100644, n: 1, u: 0, g: 0, sz: node.size, at: 0, mt: 0, ct: 0, gen: 1 } });
      }
      if (node.mode === 'slow') {
        timers.push(setTimeout(() => reply(`acheron.r_fs_${op}`, { late: true }), node.slowMs));
        return;
      }
      if (node.mode === 'trickle') {
        // one large reply frame written by hand in 20 pieces over 2 s (no pong meanwhile:
        // nothing may be sent inside a frame), as over a slow link
        const body = Buffer.from(
          JSON.stringify({ channel: 'acheron', type: `acheron.r_fs_${op}`, tag: msg.tag, ok: true, payload: { pad: 'x'.repeat(200_000) } }),
        );
        const header = Buffer.alloc(10);
        header[0] = 0x81; // FIN + text
        header[1] = 127; // 64-bit length, unmasked
        header.writeBigUInt64BE(BigInt(body.length), 2);
        const frame = Buffer.concat([header, body]);
        const piece = Math.ceil(frame.length / 20);
        for (let i = 0; i < 20; i++) timers.push(setTimeout(() => socket.write(frame.subarray(i * piece, (i + 1) * piece)), i * 100));
        return;
      }
      if (node.mode === 'pushes') {
        // never a pong, but a push every 150 ms, then the reply
        for (let i = 1; i <= 8; i++)
          timers.push(
            setTimeout(() => ws.send(JSON.stringify({ channel: 'acheron', type: 'acheron.e_fs_inval', payload: { node: 1, what: 'attr', gen: i } })), i * 150),
          );
        timers.push(setTimeout(() => reply(`acheron.r_fs_${op}`, { after_pushes: true }), 9 * 150));
        return;
      }
      reply(`acheron.r_fs_${op}`, { ok: op });
    });
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', () => r()));
  node.url = `ws://127.0.0.1:${(http.address() as AddressInfo).port}/v2/fs`;
  return node;
}
