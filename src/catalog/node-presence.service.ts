/**
 * Liveness of nodes from their daemons' control sessions (docs/protocol.md "Liveness from daemon sessions").
 *
 * A control session of agent `svc-fs-node` that refreshes a node's lease with its node
 * secret is the node's daemon session. Its opening is stored with that refresh (the write the
 * refresh makes anyway, see {@link NodesService.refreshLease}); this service then watches it:
 * it pings the session every {@link PING_INTERVAL_MS} and closes it when no frame and no pong
 * came for `SVC_NODE_SESSION_TIMEOUT_MS` (a stopped or hung daemon, a cut connection). When the
 * session closes without a lease release while this process keeps running, the closing is
 * stored once, {@link RECONNECT_GRACE_MS} later, unless the daemon has reconnected meanwhile
 * (to this replica or another): the node then turns `degraded` on every replica, with the
 * usual availability and topology events. Nothing is written per ping.
 *
 * A process that shuts down ({@link stop}) or dies stores nothing for the sessions it held:
 * their daemons reconnect elsewhere, and until then the nodes are judged as before (open).
 */
import { Injectable, Logger, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { newId, NODE_DAEMON_AGENT_ID } from '@svc/protocol';
import { WsSession } from '@svc/transport';
import { Clock } from '../common/clock';
import { ServerConfig } from '../config';
import { NodesService } from './nodes.service';

/** How often a daemon session is pinged, ms. */
export const PING_INTERVAL_MS = 1500;
/**
 * How long after a daemon session closed its closing is stored, ms: a daemon reconnecting
 * within it stays `online`. Below the 2 s the protocol allows for a reconnect, so that, with the commit, the node is
 * `degraded` within 2 s of the close.
 */
export const RECONNECT_GRACE_MS = 1500;
/** How often silent sessions are looked for, ms. */
const CHECK_MS = 250;
/** Delay before storing a closing again after the store refused it, ms. */
const RETRY_MS = 1000;

interface Watched {
  session: WsSession;
  nodeId: string;
  lastPingMs: number;
}

@Injectable()
export class NodePresenceService implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('NodePresence');
  /** This process, as named in stored sessions. */
  readonly replica = newId('replica');
  private readonly watched = new Map<WsSession, Watched>();
  /** Closings waiting for their grace (or a retry): timer per session. */
  private readonly pending = new Map<WsSession, NodeJS.Timeout>();
  private timer: NodeJS.Timeout | null = null;
  private stopping = false;

  constructor(
    private readonly nodes: NodesService,
    private readonly clock: Clock,
    private readonly config: ServerConfig,
  ) {}

  onModuleInit(): void {
    this.timer = setInterval(() => this.check(), CHECK_MS);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    this.stop();
  }

  /**
   * Whether a refresh from `session` is its node's daemon session (docs/protocol.md "Liveness from daemon sessions"): a control
   * session of agent `svc-fs-node` still open.
   */
  isDaemonSession(session: WsSession): boolean {
    return session.agentId === NODE_DAEMON_AGENT_ID && session.isOpen && !this.stopping;
  }

  /**
   * Watches a daemon session once its lease refresh (which stored it as open) has succeeded:
   * pings, the silence timeout, and the closing. A session already watched for another node
   * is watched for this one from now on.
   * @param nodeId the node whose lease it refreshed
   */
  track(session: WsSession, nodeId: string): void {
    if (this.stopping) return;
    const known = this.watched.get(session);
    if (known) {
      known.nodeId = nodeId;
      return;
    }
    const w: Watched = { session, nodeId, lastPingMs: Date.now() };
    this.watched.set(session, w);
    session.watchLiveness();
    session.once('close', () => this.closed(w, this.clock.now()));
    if (!session.isOpen) this.closed(w, this.clock.now());
  }

  /**
   * Stops watching without storing anything (a shutdown: the sessions' daemons reconnect to
   * another replica). Closings still in their grace are dropped. Idempotent.
   */
  stop(): void {
    this.stopping = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    for (const t of this.pending.values()) clearTimeout(t);
    this.pending.clear();
    this.watched.clear();
  }

  /** Number of daemon sessions watched here. */
  get size(): number {
    return this.watched.size;
  }

  /** Pings what is due and closes sessions silent for longer than the timeout. */
  private check(): void {
    const now = Date.now();
    for (const w of this.watched.values()) {
      const silent = now - w.session.lastHeardMs;
      if (silent > this.config.nodeSessionTimeoutMs) {
        this.logger.warn({
          msg: 'a node daemon stopped answering; its session is closed and the node marked degraded',
          node_id: w.nodeId,
          session: w.session.id,
          silent_ms: silent,
        });
        w.session.terminate();
      } else if (now - w.lastPingMs >= PING_INTERVAL_MS) {
        w.lastPingMs = now;
        w.session.ping();
      }
    }
  }

  /** A watched session closed: its closing is stored after the grace, unless this process stops first. */
  private closed(w: Watched, closedAtMs: number): void {
    if (this.watched.get(w.session) !== w) return;
    this.watched.delete(w.session);
    if (this.stopping) return;
    this.schedule(w, closedAtMs, RECONNECT_GRACE_MS);
  }

  private schedule(w: Watched, closedAtMs: number, delayMs: number): void {
    const t = setTimeout(() => void this.store(w, closedAtMs), delayMs);
    t.unref();
    this.pending.set(w.session, t);
  }

  private async store(w: Watched, closedAtMs: number): Promise<void> {
    this.pending.delete(w.session);
    if (this.stopping) return;
    try {
      if (await this.nodes.closeDaemonSession(w.nodeId, w.session.id, closedAtMs)) {
        this.logger.warn({
          msg: 'a node daemon session closed without a lease release; the node is degraded until its daemon reconnects',
          node_id: w.nodeId,
          session: w.session.id,
        });
      }
    } catch (e) {
      // The store is away: try again while the node may still hold its lease.
      const node = this.nodes.peek(w.nodeId);
      if (!this.stopping && node && node.lease_expires_at_ms > this.clock.now()) this.schedule(w, closedAtMs, RETRY_MS);
      this.logger.warn({ msg: 'storing the close of a node daemon session failed', node_id: w.nodeId, error: (e as Error).message });
    }
  }
}
