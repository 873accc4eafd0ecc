/**
 * Routed filesystems of the runtime namespace (docs/namespace.md): FS sessions held by the control plane to nodes (with each node's FS token, kept
 * server-side), and the operations the runtime session needs on them.
 */
import { Injectable, Logger, OnModuleDestroy } from '@nestjs/common';
import { ConnectionError, FsClient } from '@svc/client';
import { Attr, Errno, FsError, OpenFlags, ProtocolError, ErrorCode } from '@svc/protocol';
import { StateService } from '../persistence/state.service';
import { ServerConfig } from '../config';

/** The attributes of an FS node the runtime namespace uses (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)" Attr: `k` kind, `m` st_mode, `sz` bytes, `mt` ns). */
export type FsAttr = Pick<Attr, 'id' | 'k' | 'm' | 'sz' | 'mt'>;

/** A routed filesystem: one FS export reachable through some connection. */
export interface RoutedFs {
  /** Human-readable name of the backing node, for `eio` messages. */
  readonly label: string;
  /** Resolves a path below the root to its attributes. @throws ProtocolError `enoent`, `enotdir`, `eio` */
  walk(rel: string[]): Promise<FsAttr>;
  /** Entries of a directory. */
  list(rel: string[]): Promise<Array<{ name: string; kind: 'dir' | 'file'; size: number }>>;
  /** Opens a file; returns a handle. */
  open(rel: string[], mode: 'r' | 'w' | 'rw'): Promise<RoutedHandle>;
}

/** An open routed file. */
export interface RoutedHandle {
  read(offset: number, count: number): Promise<{ data: Buffer; eof: boolean }>;
  write(offset: number, data: Buffer): Promise<number>;
  close(): Promise<void>;
}

const ERRNO_TO_CODE: Record<number, ErrorCode> = {
  [Errno.ENOENT]: 'enoent',
  [Errno.EACCES]: 'eperm',
  [Errno.EPERM]: 'eperm',
  [Errno.EROFS]: 'eperm',
  [Errno.EISDIR]: 'eisdir',
  [Errno.ENOTDIR]: 'enotdir',
  [Errno.EINVAL]: 'invalid',
  [Errno.ENAMETOOLONG]: 'invalid',
  [Errno.EBADF]: 'invalid',
};

/**
 * Maps an FS failure to a runtime error (docs/namespace.md): errno to `enoent`/`eperm`/
 * `eisdir`/`enotdir`/`invalid`, anything else, and unreachable nodes, to `eio` naming the node.
 */
export function toRuntimeError(e: unknown, label: string): ProtocolError {
  if (e instanceof FsError || (e instanceof ProtocolError && e.errno !== undefined)) {
    const code = ERRNO_TO_CODE[e.errno!] ?? 'eio';
    return new ProtocolError(code, code === 'eio' ? `${label}: ${e.message}` : e.message);
  }
  if (e instanceof ProtocolError) return e;
  if (e instanceof ConnectionError) return new ProtocolError('eio', `${label} is unreachable: ${e.message}`);
  return new ProtocolError('eio', `${label}: ${(e as Error).message}`);
}

/**
 * Runs `op` and throws its failure mapped by {@link toRuntimeError}, as a routed filesystem
 * answers the runtime session.
 * @param label the node or project named in `eio` messages
 */
export async function withRuntimeErrors<T>(label: string, op: () => Promise<T>): Promise<T> {
  try {
    return await op();
  } catch (e) {
    throw toRuntimeError(e, label);
  }
}

/** The {@link RoutedHandle} over `ops` whose failures are mapped by {@link toRuntimeError} (see {@link withRuntimeErrors}). */
export function runtimeHandle(label: string, ops: RoutedHandle): RoutedHandle {
  return {
    read: (offset, count) => withRuntimeErrors(label, () => ops.read(offset, count)),
    write: (offset, data) => withRuntimeErrors(label, () => ops.write(offset, data)),
    close: () => withRuntimeErrors(label, () => ops.close()),
  };
}

/**
 * The open(2) flags ({@link OpenFlags}) of a runtime open mode: `r` read-only, `w` write-only
 * replacing the content (like a shell redirection), `rw` read-write keeping it.
 */
export function openFlagsOf(mode: 'r' | 'w' | 'rw'): number {
  return mode === 'r' ? OpenFlags.O_RDONLY : mode === 'w' ? OpenFlags.O_WRONLY | OpenFlags.O_TRUNC : OpenFlags.O_RDWR;
}

/** One export on one FS session. */
class ExportFs implements RoutedFs {
  constructor(
    private readonly client: FsClient,
    private readonly root: number,
    readonly label: string,
  ) {}

  private async nodeOf(rel: string[]): Promise<FsAttr> {
    let attr = (await this.client.request('getattr', { node: this.root })).attr;
    for (const name of rel) {
      if (attr.k !== 2 && attr.k !== 3) throw new ProtocolError('enotdir', `${name}: a path component is not a directory`);
      attr = (await this.client.request('lookup', { node: attr.id }, { name })).attr;
    }
    return attr;
  }

  walk(rel: string[]): Promise<FsAttr> {
    return withRuntimeErrors(this.label, () => this.nodeOf(rel));
  }

  list(rel: string[]): Promise<Array<{ name: string; kind: 'dir' | 'file'; size: number }>> {
    return withRuntimeErrors(this.label, async () => {
      const dir = await this.nodeOf(rel);
      const out: Array<{ name: string; kind: 'dir' | 'file'; size: number }> = [];
      let cookie = 0;
      for (;;) {
        const page = await this.client.request('readdirp', { node: dir.id }, { cookie, max: 1000 });
        for (const e of page.ents) out.push({ name: e.name, kind: e.attr.k === 2 ? 'dir' : 'file', size: e.attr.sz });
        if (page.eof || page.ents.length === 0) break;
        cookie = page.next;
      }
      return out;
    });
  }

  open(rel: string[], mode: 'r' | 'w' | 'rw'): Promise<RoutedHandle> {
    return withRuntimeErrors(this.label, async () => {
      const attr = await this.nodeOf(rel);
      const { h } = await this.client.request('open', { node: attr.id }, { flags: openFlagsOf(mode) });
      const client = this.client;
      return runtimeHandle(this.label, {
        read: (offset, count) => client.read(h, offset, count),
        write: (offset, data) => client.write(h, offset, data),
        // A terminal runs its request at close: its EINVAL must reach the caller.
        close: async () => {
          await client.request('close', { h });
        },
      });
    });
  }
}

/** A node's FS service root: lists the node's exports; the first path segment picks one. */
class NodeExportsFs implements RoutedFs {
  constructor(
    private readonly exports: Map<string, ExportFs>,
    readonly label: string,
  ) {}

  private pick(rel: string[]): [ExportFs, string[]] {
    const fs = this.exports.get(rel[0]);
    if (!fs) throw new ProtocolError('enoent', `${rel[0]}: no such export on ${this.label}`);
    return [fs, rel.slice(1)];
  }

  async walk(rel: string[]): Promise<FsAttr> {
    if (rel.length === 0) return { id: 0, k: 2, m: 0o40555, sz: this.exports.size, mt: 0 };
    const [fs, rest] = this.pick(rel);
    return fs.walk(rest);
  }

  async list(rel: string[]) {
    if (rel.length === 0) return [...this.exports.keys()].sort().map((name) => ({ name, kind: 'dir' as const, size: 0 }));
    const [fs, rest] = this.pick(rel);
    return fs.list(rest);
  }

  async open(rel: string[], mode: 'r' | 'w' | 'rw') {
    if (rel.length === 0) throw new ProtocolError('eisdir', `${this.label}: is a directory`);
    const [fs, rest] = this.pick(rel);
    return fs.open(rest, mode);
  }
}

interface Connection {
  client: FsClient;
  url: string;
  token: string;
  exports: Map<string, ExportFs>;
}

/**
 * FS sessions from the control plane to nodes, one per node, opened on demand with the node's
 * `fs_url` and `fs_auth_token`, dropped when the session closes or the node's URL or token
 * changes.
 */
@Injectable()
export class NodeRoutesService implements OnModuleDestroy {
  private readonly logger = new Logger('NodeRoutes');
  private readonly connections = new Map<string, Promise<Connection>>();

  constructor(
    private readonly store: StateService,
    private readonly config: ServerConfig,
  ) {}

  onModuleDestroy(): void {
    for (const c of this.connections.values()) void c.then((conn) => conn.client.close()).catch(() => undefined);
    this.connections.clear();
  }

  /**
   * The routed filesystem of a node export, or of the node's FS root (`exportName` null), which
   * lists only the exports in `fsExports` (those no other catalog service claims).
   * @throws ProtocolError `enoent` (unknown node or export), `eio` naming the node when it cannot be reached
   */
  async fsOf(nodeId: string, exportName: string | null, fsExports: (name: string) => boolean = () => true): Promise<RoutedFs> {
    const node = this.store.state.nodes.get(nodeId);
    if (!node) throw new ProtocolError('enoent', `node ${nodeId} not found`);
    const label = `node ${node.node_name} (${nodeId})`;
    let pending = this.connections.get(nodeId);
    if (pending) {
      const conn = await pending.catch(() => null);
      if (!conn || !conn.client.isOpen || conn.url !== node.fs_url || conn.token !== node.fs_auth_token) {
        conn?.client.close();
        this.connections.delete(nodeId);
        pending = undefined;
      }
    }
    if (!pending) {
      pending = this.open(nodeId, node.fs_url, node.fs_auth_token, label);
      this.connections.set(nodeId, pending);
      pending.catch(() => this.connections.delete(nodeId));
    }
    let conn: Connection;
    try {
      conn = await pending;
    } catch (e) {
      throw toRuntimeError(e, label);
    }
    if (exportName === null) return new NodeExportsFs(new Map([...conn.exports].filter(([name]) => fsExports(name))), label);
    const fs = conn.exports.get(exportName);
    if (!fs) throw new ProtocolError('enoent', `${exportName}: no such export on ${label}`);
    return fs;
  }

  private async open(nodeId: string, url: string, token: string, label: string): Promise<Connection> {
    const d = this.config.fsDeadlines;
    // A wss:// node is verified against the system CAs plus --tls-ca (docs/operations.md "Transport security (TLS)").
    const client = await FsClient.connect({
      url,
      authToken: token,
      connectTimeoutMs: d.connectTimeoutMs,
      requestTimeoutMs: d.requestTimeoutMs,
      keepaliveMs: d.keepaliveMs,
      keepaliveTimeoutMs: d.keepaliveTimeoutMs,
      tls: this.config.clientTls,
    });
    client.once('close', () => this.connections.delete(nodeId));
    const { exports } = await client.request('exports');
    this.logger.debug?.({ msg: 'routed FS session open', node_id: nodeId, exports: exports.length });
    return { client, url, token, exports: new Map(exports.map((e) => [e.name, new ExportFs(client, e.root, label)])) };
  }
}
