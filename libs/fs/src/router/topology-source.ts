/**
 * Where the router's topology comes from:
 *  - {@link WorkspaceTopologySource}: a control session on `svc` reading
 *    `control.workspace_status` (docs/protocol.md "Workspace status"), applying `control.workspace_topology_delta`
 *    pushes (re-reading the whole status on a revision gap), re-syncing periodically and
 *    reconnecting with backoff while keeping the last topology;
 *  - {@link StaticTopologySource}: a fixed `--endpoint` list.
 */
import { EventEmitter } from 'node:events';
import { ConnectionError, ControlClient, ControlClientOptions, ControlError } from '@svc/client';
import { TopologyDelta, WorkspaceStatus } from '@svc/protocol/wire';
import { applyTopologyDelta, EndpointSpec, Topology, topologyFromEndpoints, topologyFromStatus } from './topology';

/** Health of a topology source, for `status`. */
export interface TopologySourceInfo {
  kind: 'workspace' | 'endpoints';
  /** Control-plane URL (workspace mode). */
  url: string | null;
  /** Whether the control session is open (always true in endpoint mode). */
  connected: boolean;
  /** Last successful read, ms since the epoch. */
  last_sync_ms: number | null;
  /** Last failure to read the topology, if the latest attempt failed. */
  last_error: string | null;
}

/**
 * A source of topologies. Events: `topology` (Topology) whenever a new one is read or a delta
 * is applied (also when unchanged: the router compares; a published Topology is never
 * modified afterwards), `sync_error` (Error) when a read fails (the last topology is kept).
 */
export interface TopologySource extends EventEmitter {
  /** Reads the first topology. @throws what the first read throws (the CLI exits 2) */
  start(): Promise<Topology>;
  /** The latest topology (after start). */
  readonly current: Topology;
  /** Re-reads now (workspace mode); resolves when done, never rejects. */
  refresh(): Promise<void>;
  /** Health of the source, for `status`. */
  info(): TopologySourceInfo;
  /** Stops timers and closes the control session. */
  close(): void;
}

/** A fixed endpoint list (endpoint mode). */
export class StaticTopologySource extends EventEmitter implements TopologySource {
  current: Topology;

  /** @param authToken FS session token for every endpoint */
  constructor(
    private readonly specs: EndpointSpec[],
    private readonly authToken?: string,
  ) {
    super();
    this.current = topologyFromEndpoints(specs, authToken);
  }

  /** The fixed topology (never fails). */
  async start(): Promise<Topology> {
    return this.current;
  }

  /** Nothing to re-read. */
  async refresh(): Promise<void> {
    return;
  }

  /** Always connected (there is no control session). */
  info(): TopologySourceInfo {
    return { kind: 'endpoints', url: null, connected: true, last_sync_ms: this.current.ts_ms, last_error: null };
  }

  /** Nothing to close. */
  close(): void {
    return;
  }
}

export interface WorkspaceSourceOptions {
  /** Control-plane URL, e.g. `ws://127.0.0.1:18790/`. */
  url: string;
  /** Role token (bearer). */
  token: string;
  /** Agent id; its binding selects the project when `projectId` is not given. */
  agentId?: string;
  /** Project to pin (`control.workspace_status` `project_id`). */
  projectId?: string;
  /** Its token, when the caller has no binding to it. */
  projectToken?: string;
  /** Re-read the whole status this often, ms (default 30000; 0 disables). */
  syncIntervalMs?: number;
  /** Connect + negotiate time limit, ms (default 5000). */
  connectTimeoutMs?: number;
  /** Opens control sessions (default {@link ControlClient.connect}); injected by Nest. */
  connect?: (o: ControlClientOptions) => Promise<ControlClient>;
}

/** Default `--workspace-sync-interval-ms`. */
export const DEFAULT_WORKSPACE_SYNC_INTERVAL_MS = 30_000;
/**
 * Reconnect backoff of a lost control session, ms: 250 doubling to 1000, each jittered by
 * ±25 %. The cap keeps a restarted `svc`'s topology changes reaching mounts within about
 * 1.5 s of it listening again; attempts on a down `svc` are refused connects, and the jitter
 * spreads a fleet's reconnects over half a second.
 */
const BACKOFF_MIN_MS = 250;
const BACKOFF_MAX_MS = 1000;

/**
 * Workspace mode. The session is pinned to the project (explicitly with `projectId`, or, when
 * the agent's binding selects it, by asking again with that `project_id` and no token, which
 * the binding allows: docs/protocol.md "Workspace status"), so `control.workspace_topology_delta` pushes arrive.
 *
 * Deltas (docs/protocol.md "Workspace status") are applied with {@link applyTopologyDelta} and the result published:
 * a delta carries the changed mount paths only (selected and configured mounts), so no full
 * re-read is needed. A full re-read ({@link refresh}, coalesced) happens instead when the delta
 * cannot be applied: a revision gap, an unknown revision (a server without revisions, or
 * after a reconnect until the next read), another project, or an unknown `reason`. A stale
 * delta (revision not newer) is ignored. `reason: "access_ended"` publishes an empty topology,
 * as a `project_auth_failed` re-read does.
 *
 * Reads and deltas race on one session: a status reply computed before a change can arrive
 * after the change's delta. So a delta that arrives during a read is applied only when it is
 * consecutive (else one more read follows), and a read whose revision is older than what the
 * deltas of the same session already brought is not published.
 */
export class WorkspaceTopologySource extends EventEmitter implements TopologySource {
  current: Topology;
  private client: ControlClient | null = null;
  private timer: NodeJS.Timeout | null = null;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private backoffMs = BACKOFF_MIN_MS;
  private closed = false;
  private lastSync: number | null = null;
  private lastError: string | null = null;
  private inflight: Promise<void> | null = null;
  private again = false;
  /** The control session {@link current}'s revision was learned on (deltas apply only there). */
  private revisionClient: ControlClient | null = null;

  constructor(private readonly options: WorkspaceSourceOptions) {
    super();
  }

  /**
   * Connects, reads the first status and starts following deltas.
   * @throws ConnectionError (unreachable, unauthorized, timeout) or ControlError
   *   (`project_auth_failed`, `project_not_found`, ...) from the first read
   */
  async start(): Promise<Topology> {
    await this.connect();
    await this.read();
    const interval = this.options.syncIntervalMs ?? DEFAULT_WORKSPACE_SYNC_INTERVAL_MS;
    if (interval > 0) {
      this.timer = setInterval(() => void this.refresh(), interval);
      this.timer.unref();
    }
    return this.current;
  }

  /**
   * Re-reads the whole status now (coalesced: a call during a read causes one more read).
   * Never rejects: a failure is kept in {@link info} and emitted as `sync_error`;
   * `project_auth_failed`/`project_not_found` empties the topology (access ended).
   */
  refresh(): Promise<void> {
    if (this.closed || !this.client?.isOpen) return Promise.resolve();
    if (this.inflight) {
      this.again = true;
      return this.inflight;
    }
    this.inflight = (async () => {
      do {
        this.again = false;
        try {
          await this.read();
        } catch (e) {
          this.lastError = (e as Error).message;
          this.emit('sync_error', e);
          if (e instanceof ControlError && (e.code === 'project_auth_failed' || e.code === 'project_not_found')) {
            // Access ended: the last topology must not be used any more.
            this.publish({ ...this.current, revision: null, mounts: new Map(), ts_ms: Date.now() });
          }
        }
      } while (this.again && !this.closed);
    })().finally(() => {
      this.inflight = null;
    });
    return this.inflight;
  }

  /** Control session state, last successful read and last error. */
  info(): TopologySourceInfo {
    return { kind: 'workspace', url: this.options.url, connected: this.client?.isOpen === true, last_sync_ms: this.lastSync, last_error: this.lastError };
  }

  /** Stops the re-sync timer and reconnects, closes the control session. */
  close(): void {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.client?.close();
    this.client = null;
  }

  private async connect(): Promise<void> {
    const connect = this.options.connect ?? ((o: ControlClientOptions) => ControlClient.connect(o));
    const client = await connect({
      url: this.options.url,
      token: this.options.token,
      agentId: this.options.agentId,
      connectTimeoutMs: this.options.connectTimeoutMs ?? 5000,
      requestTimeoutMs: 10_000,
    });
    if (this.closed) {
      client.close();
      return;
    }
    this.client = client;
    client.on('event', (type: string, payload: unknown) => {
      if (type === 'control.workspace_topology_delta') this.onDelta(client, payload as TopologyDelta);
    });
    client.once('close', () => {
      if (this.client === client) this.client = null;
      if (!this.closed) this.scheduleReconnect();
    });
  }

  /**
   * A `control.workspace_topology_delta` on `client` (docs/protocol.md "Workspace status"): applied when it continues
   * {@link current}'s revision on the same session, ignored when stale, else a full re-read.
   */
  private onDelta(client: ControlClient, delta: TopologyDelta): void {
    if (this.closed || client !== this.client || typeof delta !== 'object' || delta === null) return;
    const next = this.current && this.revisionClient === client ? applyTopologyDelta(this.current, delta) : null;
    if (next === null) {
      void this.refresh();
      return;
    }
    if (next === this.current) return; // stale: already reflected
    this.publish(next);
    // The pin ended: a read still in flight may carry a reply from before; read once more so
    // the empty topology is not overwritten by it (the next read fails or finds no project).
    if (delta.reason === 'access_ended' && this.inflight) void this.refresh();
  }

  private scheduleReconnect(): void {
    if (this.closed || this.reconnectTimer) return;
    const delay = this.backoffMs * (0.75 + Math.random() * 0.5);
    this.backoffMs = Math.min(BACKOFF_MAX_MS, this.backoffMs * 2);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.connect()
        .then(() => {
          this.backoffMs = BACKOFF_MIN_MS;
          return this.refresh();
        })
        .catch((e: Error) => {
          this.lastError = e.message;
          this.emit('sync_error', e);
          this.scheduleReconnect();
        });
    }, delay);
    this.reconnectTimer.unref();
  }

  private async read(): Promise<void> {
    const client = this.client;
    if (!client) throw new ConnectionError('control session is not open', 'closed');
    const payload: Record<string, unknown> = {};
    if (this.options.projectId !== undefined) payload.project_id = this.options.projectId;
    if (this.options.projectToken !== undefined) payload.project_token = this.options.projectToken;
    let status = await client.request<WorkspaceStatus>('control.workspace_status', payload);
    if (this.options.projectId === undefined && status.project_id !== null) {
      // Selected by the agent's binding: pin the session so deltas follow (allowed by the binding).
      try {
        status = await client.request<WorkspaceStatus>('control.workspace_status', { project_id: status.project_id });
      } catch {
        // keep the unpinned status; the periodic re-sync still follows changes
      }
    }
    this.lastSync = Date.now();
    this.lastError = null;
    const t = topologyFromStatus(status, this.lastSync);
    const cur = this.current as Topology | undefined;
    if (cur && this.revisionClient === client && cur.project_id === t.project_id && cur.revision !== null && t.revision !== null && t.revision < cur.revision) {
      // Computed before changes whose deltas were already applied on this session: keep those.
      return;
    }
    this.revisionClient = client;
    this.publish(t);
  }

  private publish(t: Topology): void {
    this.current = t;
    this.emit('topology', t);
  }
}
