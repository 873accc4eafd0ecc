/**
 * The failover state machine of the workspace router (issue 3 item 7, issue 11 item 5): per
 * mount path, its ordered candidates, the active endpoint serving it, per-candidate failure
 * backoff and last errors. Acquires an endpoint (connect, hello, export), runs operations with
 * retry on the next candidate ({@link MountRoutes.withMount}), records endpoint failures and
 * lost sessions, and applies new candidate lists from the topology.
 */
import { ConnectionError } from '@svc/client';
import { Errno, FsError } from '@svc/protocol/wire';
import { EndpointPool, EndpointSession } from './endpoint-pool';
import { LookupCache } from './lookup-cache';
import { CandidateFailure, isEndpointFailure, messageOf, MountUnavailableError } from './router-errors';
import { FailoverEvent, RouterEmit } from './router-events';
import { candidateKey, candidatesFingerprint, MountCandidate } from './topology';

/** The candidate a mount is served from, with its session, export root and lookup cache. */
export interface ActiveEndpoint {
  candidate: MountCandidate;
  /** {@link candidateKey} of the candidate. */
  key: string;
  session: EndpointSession;
  /** Node id of the export root. */
  root: number;
  /** Whether the export is read-only. */
  ro: boolean;
  /** Export-relative path -> node id, for this endpoint only (node ids belong to one node process). */
  cache: LookupCache;
}

/**
 * Per-operation state of {@link MountRoutes.withMount}: `committed` is set by the operation
 * once its mutating request has been handed to the session (a failure after that is EIO, not
 * a retry).
 */
export interface OpContext {
  committed: boolean;
}

/** One mount path: its candidates and which one serves it (state of the failover machine). */
export class MountRoute {
  candidates: MountCandidate[] = [];
  /** {@link candidatesFingerprint} of `candidates`. */
  fingerprint = '';
  active: ActiveEndpoint | null = null;
  /** The last endpoint that served the mount (for `failover` events). */
  last: ActiveEndpoint | null = null;
  acquiring: Promise<ActiveEndpoint> | null = null;
  /** Candidate key -> time (ms since the epoch) before which it is tried only after the others. */
  readonly failedUntil = new Map<string, number>();
  /** Candidate key -> message of its last failure. */
  readonly lastError = new Map<string, string>();

  constructor(readonly mountPath: string) {}
}

/** `node-name (ws-url#export)` of a candidate, for events and error messages. */
export function describeCandidate(c: MountCandidate): string {
  return `${c.node_name ?? c.node_id ?? 'node'} (${c.fs_url ?? 'no fs_url'}#${c.export_name})`;
}

/** Tuning of {@link MountRoutes}. */
export interface MountRoutesOptions {
  /** A failed candidate is tried only after the others for this long, ms. */
  failureBackoffMs: number;
  /** Paths cached per mount ({@link LookupCache} size). */
  lookupCacheEntries: number;
}

/** Which mount paths an {@link MountRoutes.update} added, removed, or moved to another endpoint. */
export interface RoutesUpdate {
  added: string[];
  changed: string[];
  removed: string[];
}

/**
 * The mount routes of one router. Sessions come from the shared {@link EndpointPool}; events
 * (`failover`, `inval_dir` of a mount root on (re)connect, `unavailable`) go to `emit`.
 */
export class MountRoutes {
  private readonly routes = new Map<string, MountRoute>();
  private closed = false;

  constructor(
    private readonly pool: EndpointPool,
    private readonly emit: RouterEmit,
    private readonly options: MountRoutesOptions,
  ) {}

  /** Every mount route, in insertion order. */
  values(): IterableIterator<MountRoute> {
    return this.routes.values();
  }

  /**
   * The route of a mount path.
   * @throws FsError ENOENT when the mount path is no longer in the topology
   */
  route(mountPath: string): MountRoute {
    const r = this.routes.get(mountPath);
    if (!r) throw new FsError(Errno.ENOENT, `mount ${mountPath} is no longer in the topology`);
    return r;
  }

  /** How many endpoints an operation on `mountPath` may try: its candidates + 1 (at least 2). */
  maxAttempts(mountPath: string): number {
    return Math.max(1, this.routes.get(mountPath)?.candidates.length ?? 1) + 1;
  }

  /** Session keys of the endpoints serving a mount (to keep them in the pool). */
  activeSessionKeys(): string[] {
    const keys: string[] = [];
    for (const route of this.routes.values()) if (route.active) keys.push(route.active.session.key);
    return keys;
  }

  /** Refuses every later {@link withMount} (EIO). */
  close(): void {
    this.closed = true;
  }

  /**
   * Applies the candidate lists of a new topology: new mount paths get a route, missing ones
   * lose theirs, and a mount whose candidates changed keeps its active endpoint only when
   * {@link revalidateActive} allows it.
   * @param mounts mount path -> candidates in order of preference
   * @returns the mount paths added, removed, and changed (no longer served by their endpoint)
   */
  update(mounts: ReadonlyMap<string, MountCandidate[]>): RoutesUpdate {
    const added: string[] = [];
    const changed: string[] = [];
    const removed: string[] = [];
    for (const [path, candidates] of mounts) {
      let route = this.routes.get(path);
      if (!route) {
        route = new MountRoute(path);
        this.routes.set(path, route);
        added.push(path);
      }
      const fp = candidatesFingerprint(candidates);
      const moved = route.candidates.length > 0 && fp !== route.fingerprint;
      route.candidates = candidates;
      route.fingerprint = fp;
      if (moved) {
        const served = route.active !== null;
        this.revalidateActive(route);
        if (served && route.active === null) changed.push(path);
      }
    }
    for (const path of [...this.routes.keys()]) {
      if (!mounts.has(path)) {
        this.routes.delete(path);
        removed.push(path);
      }
    }
    return { added, changed, removed };
  }

  /**
   * Runs `fn` on the mount's active endpoint, failing over on endpoint failures: retried on
   * the next candidate unless `ctx.committed` was set (the mutating request was sent), which
   * is EIO.
   * @throws FsError EIO (router closed, in-flight mutation, attempts exhausted), ENOENT (mount
   *   no longer in the topology), MountUnavailableError, or what `fn` throws otherwise
   */
  async withMount<T>(mountPath: string, fn: (a: ActiveEndpoint, ctx: OpContext) => Promise<T>): Promise<T> {
    if (this.closed) throw new FsError(Errno.EIO, 'the router is closed');
    const route = this.route(mountPath);
    const max = this.maxAttempts(mountPath);
    for (let attempt = 1; ; attempt++) {
      const a = await this.acquire(route);
      const ctx: OpContext = { committed: false };
      try {
        return await fn(a, ctx);
      } catch (e) {
        if (!isEndpointFailure(e)) throw e;
        this.endpointFailed(route, a, e);
        if (ctx.committed && e.sent) {
          throw new FsError(Errno.EIO, `${mountPath}: ${e.message}; the operation was in flight and may or may not have been applied`);
        }
        if (attempt >= max) throw new FsError(Errno.EIO, `${mountPath}: ${e.message}`);
      }
    }
  }

  /** Records an endpoint failure seen by an operation: the mount will move on (a timed-out session is discarded). */
  endpointFailed(route: MountRoute, a: ActiveEndpoint, e: ConnectionError): void {
    route.failedUntil.set(a.key, Date.now() + this.options.failureBackoffMs);
    route.lastError.set(a.key, e.message);
    if (e.reason === 'timeout') this.pool.discard(a.session);
    if (route.active === a) route.active = null;
  }

  /** An FS session closed: every mount it served loses its active endpoint (`unavailable` event). */
  sessionClosed(s: EndpointSession): void {
    for (const route of this.routes.values()) {
      if (route.active?.session === s) {
        route.failedUntil.set(route.active.key, Date.now() + this.options.failureBackoffMs);
        route.lastError.set(route.active.key, `FS session to ${s.url} closed`);
        route.active = null;
        this.emit('unavailable', { mount_path: route.mountPath, cause: `FS session to ${s.url} closed` });
      }
    }
  }

  /**
   * The active endpoint of a mount, connecting to the first usable candidate when there is
   * none: candidates in order, those that failed within `failureBackoffMs` last.
   * @throws MountUnavailableError when every candidate fails
   */
  private acquire(route: MountRoute): Promise<ActiveEndpoint> {
    if (route.active?.session.isOpen) return Promise.resolve(route.active);
    if (!route.acquiring) {
      route.acquiring = this.connectRoute(route).finally(() => {
        route.acquiring = null;
      });
    }
    return route.acquiring;
  }

  private async connectRoute(route: MountRoute): Promise<ActiveEndpoint> {
    const previous = route.last;
    route.active = null;
    const now = Date.now();
    const fresh: MountCandidate[] = [];
    const backedOff: MountCandidate[] = [];
    for (const c of route.candidates) ((route.failedUntil.get(candidateKey(c)) ?? 0) > now ? backedOff : fresh).push(c);
    const failures: CandidateFailure[] = [];
    for (const c of [...fresh, ...backedOff]) {
      const key = candidateKey(c);
      try {
        if (!c.fs_url) throw new FsError(Errno.ENODEV, `node ${c.node_id ?? c.node_name} has no fs_url (state ${c.state ?? 'unknown'})`);
        const session = await this.pool.get(c.fs_url, c.auth_token);
        const ex = await session.export(c.export_name);
        if (!this.routes.has(route.mountPath) || !route.candidates.includes(c)) continue;
        const active: ActiveEndpoint = { candidate: c, key, session, root: ex.root, ro: ex.ro, cache: new LookupCache(this.options.lookupCacheEntries) };
        active.cache.set('', ex.root);
        route.active = active;
        route.last = active;
        route.failedUntil.delete(key);
        const previousError = previous ? route.lastError.get(previous.key) : undefined;
        route.lastError.delete(key);
        if (!previous || previous.key !== key || previous.session !== session) {
          const cause = previous ? (previousError ?? null) : null;
          const ev: FailoverEvent = { mount_path: route.mountPath, from: previous ? describeCandidate(previous.candidate) : null, to: describeCandidate(c), cause };
          if (previous) this.emit('failover', ev);
          this.emit('inval_dir', { mount_path: route.mountPath, paths: [route.mountPath], dir: ex.root });
        }
        return active;
      } catch (e) {
        const message = messageOf(e);
        route.failedUntil.set(key, Date.now() + this.options.failureBackoffMs);
        route.lastError.set(key, message);
        failures.push({ candidate: describeCandidate(c), message, errno: e instanceof FsError && !(e instanceof MountUnavailableError) ? (e.errno ?? null) : null });
      }
    }
    throw new MountUnavailableError(route.mountPath, failures);
  }

  /**
   * After a candidate list changed: keep the active endpoint when it is still a candidate
   * with the same URL and token and it is not worse than the new preferred one (no churn
   * when two online nodes alternate by lease expiry); otherwise the mount reconnects to the
   * new preferred candidate (with an empty cache).
   */
  private revalidateActive(route: MountRoute): void {
    const a = route.active;
    if (!a) return;
    const same = route.candidates.find((c) => candidateKey(c) === a.key && c.fs_url === a.candidate.fs_url && c.auth_token === a.candidate.auth_token);
    const first = route.candidates[0];
    const worse = same && same.state !== null && same.state !== 'online' && first?.state === 'online';
    if (same && !worse) {
      a.candidate = same;
      return;
    }
    route.active = null;
  }
}
