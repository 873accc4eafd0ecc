/**
 * The failover state machine of the workspace router: per
 * mount path, its ordered candidates, the active endpoint serving it, per-candidate failure
 * backoff and last errors. Acquires an endpoint (connect, hello, export), runs operations with
 * retry on the next candidate ({@link MountRoutes.withMount}), records endpoint failures and
 * lost sessions, and applies new candidate lists from the topology.
 */
import { performance } from 'node:perf_hooks';
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
  /**
   * Whose identity the node applies (`caps.identity` of the export): `caller`, a node running as
   * root that makes objects owned by the caller (the `cred` of a request); `node`, a node that
   * owns everything itself.
   */
  identity: 'caller' | 'node';
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
  /**
   * Budget of one operation ({@link MountRoutes.withMount}) from its start, ms: connects get
   * what is left of it, no other candidate is tried once it has passed, and an attempt after a
   * failover must be answered within it.
   */
  opDeadlineMs: number;
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

  /** The deadline (performance.now() time, ms) of an operation starting now. */
  deadline(): number {
    return performance.now() + this.options.opDeadlineMs;
  }

  /**
   * Runs `fn` on the mount's active endpoint, failing over on endpoint failures: retried on
   * the next candidate unless `ctx.committed` was set (the mutating request was sent), which
   * is EIO.
   *
   * Deadline: the whole operation works to `deadline` (default: its start +
   * `opDeadlineMs`). Connecting a candidate gets at most what is left (and never more than the
   * connect timeout); a hung candidate fails at once (EndpointPool); no candidate is tried
   * once the deadline has passed; an attempt after a failover that is not answered by the
   * deadline is EIO. The first attempt on an open session is not cut by it: a node that does
   * not answer is found by the keepalive, a slow one that still answers pings may take up to
   * the request timeout (a large fsync on a busy disk is not a failure). Only silence spends
   * the budget: when the failed endpoint answered something later than the operation's start
   * (a long read that was streaming until the node stopped), the deadline moves to that
   * answer + `opDeadlineMs`, so the failover still gets its time.
   * @param deadline performance.now() time, ms, by which the operation must end (a caller that
   *   already spent part of its budget, e.g. a read that re-opens its file, passes its own)
   * @throws FsError EIO (router closed, in-flight mutation, attempts exhausted, deadline
   *   passed), ENOENT (mount no longer in the topology), MountUnavailableError, or what `fn`
   *   throws otherwise
   */
  async withMount<T>(mountPath: string, fn: (a: ActiveEndpoint, ctx: OpContext) => Promise<T>, deadline = this.deadline()): Promise<T> {
    if (this.closed) throw new FsError(Errno.EIO, 'the router is closed');
    const route = this.route(mountPath);
    const max = this.maxAttempts(mountPath);
    for (let attempt = 1; ; attempt++) {
      const a = await this.acquire(route, deadline);
      const ctx: OpContext = { committed: false };
      try {
        const run = fn(a, ctx);
        return await (attempt === 1 ? run : this.byDeadline(run, deadline, mountPath, ctx));
      } catch (e) {
        if (!isEndpointFailure(e)) throw e;
        this.endpointFailed(route, a, e);
        deadline = this.extendDeadline(deadline, a);
        if (ctx.committed && e.sent) {
          throw new FsError(Errno.EIO, `${mountPath}: ${e.message}; the operation was in flight and may or may not have been applied`);
        }
        if (attempt >= max) throw new FsError(Errno.EIO, `${mountPath}: ${e.message}`);
        if (performance.now() >= deadline)
          throw new FsError(Errno.EIO, `${mountPath}: ${e.message}; no other candidate within the operation deadline of ${this.options.opDeadlineMs} ms`);
      }
    }
  }

  /**
   * The deadline of an operation whose attempt on `failed` just failed: the same, or the
   * endpoint's last answer + `opDeadlineMs` when that is later (see {@link withMount}).
   */
  extendDeadline(deadline: number, failed: ActiveEndpoint): number {
    return Math.max(deadline, failed.session.client.lastHeardAt + this.options.opDeadlineMs);
  }

  /**
   * `p`, or EIO once `deadline` passes first (`p` is then left to settle unobserved).
   * @param what the path named in the error
   * @throws FsError EIO naming the deadline (and, when `ctx.committed`, that the mutation may
   *   or may not have been applied)
   */
  byDeadline<T>(p: Promise<T>, deadline: number, what: string, ctx: OpContext): Promise<T> {
    const left = deadline - performance.now();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => {
          const maybe = ctx.committed ? '; the operation was in flight and may or may not have been applied' : '';
          reject(new FsError(Errno.EIO, `${what}: no answer within the operation deadline of ${this.options.opDeadlineMs} ms${maybe}`));
        },
        Math.max(0, left),
      );
    });
    p.catch(() => undefined);
    return Promise.race([p, late]).finally(() => clearTimeout(timer));
  }

  /** Records an endpoint failure seen by an operation: the mount will move on (a timed-out session is discarded). */
  endpointFailed(route: MountRoute, a: ActiveEndpoint, e: ConnectionError): void {
    route.failedUntil.set(a.key, Date.now() + this.options.failureBackoffMs);
    route.lastError.set(a.key, e.message);
    if (e.reason === 'timeout') this.pool.discard(a.session);
    if (route.active === a) route.active = null;
  }

  /**
   * An FS session closed: every mount it served loses its active endpoint (`unavailable`
   * event). The cause is the keepalive's verdict ("no answer from URL within N ms") when the
   * session was dropped for it.
   */
  sessionClosed(s: EndpointSession): void {
    const cause = s.client.failure?.message ?? `FS session to ${s.url} closed`;
    for (const route of this.routes.values()) {
      if (route.active?.session === s) {
        route.failedUntil.set(route.active.key, Date.now() + this.options.failureBackoffMs);
        route.lastError.set(route.active.key, cause);
        route.active = null;
        this.emit('unavailable', { mount_path: route.mountPath, cause });
      }
    }
  }

  /**
   * The active endpoint of a mount, connecting to the first usable candidate when there is
   * none: candidates in order, those that failed within `failureBackoffMs` last, each within
   * what is left until `deadline`. Concurrent operations share one connection attempt (that
   * of the first, with its deadline).
   * @throws MountUnavailableError when every candidate fails
   */
  private acquire(route: MountRoute, deadline: number): Promise<ActiveEndpoint> {
    if (route.active?.session.isOpen) return Promise.resolve(route.active);
    if (!route.acquiring) {
      route.acquiring = this.connectRoute(route, deadline).finally(() => {
        route.acquiring = null;
      });
    }
    return route.acquiring;
  }

  private async connectRoute(route: MountRoute, deadline: number): Promise<ActiveEndpoint> {
    const previous = route.last;
    route.active = null;
    const now = Date.now();
    const fresh: MountCandidate[] = [];
    const backedOff: MountCandidate[] = [];
    for (const c of route.candidates) ((route.failedUntil.get(candidateKey(c)) ?? 0) > now ? backedOff : fresh).push(c);
    const failures: CandidateFailure[] = [];
    for (const c of [...fresh, ...backedOff]) {
      const key = candidateKey(c);
      const left = Math.floor(deadline - performance.now());
      if (left <= 0) {
        // not tried: its last error (if any) stays as it was
        failures.push({ candidate: describeCandidate(c), message: `not tried: the operation deadline of ${this.options.opDeadlineMs} ms passed`, errno: null });
        continue;
      }
      try {
        if (!c.fs_url) throw new FsError(Errno.ENODEV, `node ${c.node_id ?? c.node_name} has no fs_url (state ${c.state ?? 'unknown'})`);
        const session = await this.pool.get(c.fs_url, c.auth_token, left);
        const ex = await session.export(c.export_name);
        if (!this.routes.has(route.mountPath)) continue;
        // A topology update while connecting rebuilds the candidate list (new objects): the
        // endpoint just reached is used when it is still a candidate, whatever its place now.
        const current = route.candidates.includes(c) ? c : route.candidates.find((x) => candidateKey(x) === key);
        if (!current) continue;
        const active: ActiveEndpoint = {
          candidate: current,
          key,
          session,
          root: ex.root,
          ro: ex.ro,
          identity: ex.caps?.identity === 'caller' ? 'caller' : 'node',
          cache: new LookupCache(this.options.lookupCacheEntries),
        };
        active.cache.set('', ex.root);
        route.active = active;
        route.last = active;
        route.failedUntil.delete(key);
        const previousError = previous ? route.lastError.get(previous.key) : undefined;
        route.lastError.delete(key);
        if (!previous || previous.key !== key || previous.session !== session) {
          const cause = previous ? (previousError ?? null) : null;
          const ev: FailoverEvent = {
            mount_path: route.mountPath,
            from: previous ? describeCandidate(previous.candidate) : null,
            to: describeCandidate(current),
            cause,
          };
          if (previous) this.emit('failover', ev);
          this.emit('inval_dir', { mount_path: route.mountPath, paths: [route.mountPath], dir: ex.root, own: false });
        }
        return active;
      } catch (e) {
        const message = messageOf(e);
        route.failedUntil.set(key, Date.now() + this.options.failureBackoffMs);
        route.lastError.set(key, message);
        failures.push({
          candidate: describeCandidate(c),
          message,
          errno: e instanceof FsError && !(e instanceof MountUnavailableError) ? (e.errno ?? null) : null,
        });
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
