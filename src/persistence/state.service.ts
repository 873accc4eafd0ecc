/**
 * The control-plane state and its one write path: every mutation
 * runs through {@link StateService.mutate} on a draft over the committed read model; the
 * draft's writes (only the rows it changed) are committed by the StateStore in one
 * transaction, and only then applied to the read model and acknowledged. Readers never see an
 * uncommitted change, and a mutation that throws, or whose transaction fails (full disk,
 * permissions), changes nothing.
 *
 * Mutations are serialised. Those that queue up while a transaction commits are committed
 * together in the next one (group commit): each still runs alone on its own draft, in arrival
 * order, and one that throws drops only its own writes.
 */
import { Inject, Injectable, Logger } from '@nestjs/common';
import { Subject } from 'rxjs';
import { Histogram } from 'prom-client';
import { getOrCreate } from '@svc/ops';
import { ProtocolError } from '@svc/protocol';
import { AuditEntry, AuditPage, AuditQuery, AuditRetention, AuditScope, auditScope } from './audit-log';
import { ChangeSet, ControlState, StateView } from './state.model';
import { StateDraft } from './state.draft';
import { STATE_STORE, StateStore, StoreUnavailableError } from './state-store.port';

/** At most this many mutations share one transaction. */
const MAX_BATCH = 256;

/**
 * A commit hook: runs on the batch's draft after its mutations and before the transaction,
 * so what it writes commits with them (derived records: mount states, revisions).
 */
export type CommitHook = (draft: StateDraft) => void;

/**
 * One committed change set, once applied to the read model: what changed, what it was
 * before, and whether this process committed it. Derived state (availability, deltas,
 * catalog events, role tokens) follows these, so it is the same whoever committed.
 */
export interface AppliedChanges {
  changes: ChangeSet;
  prior: ChangeSet;
  local: boolean;
}

interface Pending {
  fn: (draft: StateDraft) => unknown;
  /** The audit record of the request that called {@link StateService.mutate}, if any. */
  scope: AuditScope | undefined;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}

@Injectable()
export class StateService {
  private readonly logger = new Logger('StateService');
  private current = new ControlState();
  private readonly queue: Pending[] = [];
  /** True while {@link drain} runs; set and cleared synchronously. */
  private running = false;
  private idle: Promise<void> = Promise.resolve();
  private readonly hooks: CommitHook[] = [];
  private readonly openHooks: Array<() => Promise<void> | void> = [];
  private opened = false;
  private closing = false;
  private committed = 0;
  private readonly commitSeconds = getOrCreate(
    'svc_store_commit_duration_seconds',
    () =>
      new Histogram({
        name: 'svc_store_commit_duration_seconds',
        help: 'Time to commit one transaction of the state store (one or more mutations)',
        buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      }),
  );
  /** Every committed change set, after it is applied to the read model (events follow commits). */
  readonly applied$ = new Subject<AppliedChanges>();

  constructor(@Inject(STATE_STORE) private readonly store: StateStore) {
    store.onRemote((changes) => this.publish(changes, false));
  }

  /**
   * Brings the read model up to date with the commits of other processes sharing the store
   * (a no-op for the embedded store). For reads that miss a record a client may have just
   * written through another replica (read your writes behind a load balancer).
   */
  async refresh(): Promise<void> {
    await this.store.sync();
  }

  /** True while this process runs the availability sweep (one process at a time on a shared store). */
  get isSweeper(): boolean {
    return this.store.isSweeper;
  }

  /** True while the store answers; false: mutations are refused (`unavailable`), reads go on. */
  get isReachable(): boolean {
    return this.store.isReachable;
  }

  /** The committed read model. Records are immutable; change them only through {@link mutate}. */
  get state(): ControlState {
    return this.current;
  }

  /** Number of transactions committed since start; changes whenever the state did. */
  get version(): number {
    return this.committed;
  }

  /** True once {@link open} has loaded the store. */
  get isLoaded(): boolean {
    return this.opened;
  }

  /** Registers a commit hook (see {@link CommitHook}); hooks run in registration order. */
  addCommitHook(hook: CommitHook): void {
    this.hooks.push(hook);
  }

  /**
   * Registers work to run once the store is loaded, before {@link open} resolves (and so
   * before the server listens); it may mutate.
   */
  addOpenHook(hook: () => Promise<void> | void): void {
    this.openHooks.push(hook);
  }

  /**
   * Opens the store (waiting while another live process holds it) and loads every record.
   * @throws StateLoadError when the store exists but cannot be used
   */
  async open(): Promise<void> {
    this.current = await this.store.open((holder) => this.logger.warn({ msg: `state directory is in use by ${holder}; waiting for it (not ready meanwhile)` }));
    this.opened = true;
    this.committed++;
    const s = this.current;
    this.logger.log({
      msg: 'state loaded',
      store: this.store.describe(),
      projects: s.projects.size,
      mounts: s.mounts.size,
      nodes: s.nodes.size,
      bindings: s.bindings.size,
    });
    for (const hook of this.openHooks) await hook();
  }

  /**
   * Applies one mutation and makes it durable before resolving; {@link state} shows it from
   * then on, not before.
   * @param fn synchronous change made on the draft it is given (read and write through it,
   *   never through {@link state}); throwing (e.g. a ProtocolError for bad input) drops its writes
   * @returns what `fn` returned
   * @throws what `fn` threw; ProtocolError `unavailable` naming the cause while the store
   *   cannot take changes (database unreachable, state directory's disk full or failing) or
   *   while shutting down; `internal_error` naming the cause when the transaction failed for
   *   another reason (nothing changed either way)
   */
  mutate<T>(fn: (draft: StateDraft) => T): Promise<T> {
    return this.enqueue(fn, auditScope.getStore()) as Promise<T>;
  }

  /**
   * Appends audit entries by themselves (a refusal or a failed request: no mutation to ride
   * with), durably, through the same serialised write path.
   * @param entries the entries, or a function making them from the state they commit over
   *   (current with every replica's commits; e.g. to tell which ids exist)
   * @throws ProtocolError `internal_error` / `unavailable` when they could not be written
   */
  async appendAudit(entries: AuditEntry[] | ((state: StateView) => AuditEntry[])): Promise<void> {
    await this.enqueue((d) => {
      for (const e of typeof entries === 'function' ? entries(d) : entries) d.appendAudit(e);
    }, undefined);
  }

  /**
   * A page of the audit log, newest first, read from the store (not from memory), once every
   * write queued before the call has been committed (an entry recorded just before is in it).
   */
  async queryAudit(query: AuditQuery): Promise<AuditPage> {
    await this.enqueue(() => undefined, undefined).catch(() => undefined);
    return this.store.queryAudit(query);
  }

  /**
   * Drops the audit entries retention no longer keeps.
   * @returns how many were dropped
   */
  pruneAudit(retention: AuditRetention): Promise<number> {
    return this.store.pruneAudit(retention);
  }

  private enqueue(fn: (draft: StateDraft) => unknown, scope: AuditScope | undefined): Promise<unknown> {
    return new Promise((resolve, reject) => {
      this.queue.push({ fn, scope, resolve, reject });
      if (!this.running) {
        this.running = true;
        this.idle = this.drain();
      }
    });
  }

  /** Waits for pending mutations, refuses new ones, and closes the store. */
  async close(): Promise<void> {
    this.closing = true;
    while (this.running) await this.idle;
    await this.store.close();
  }

  /**
   * Commits queued mutations until the queue is empty, and clears {@link running} in the same
   * tick it finds it empty (a mutation queued by a caller resumed meanwhile is never left behind).
   */
  private async drain(): Promise<void> {
    for (;;) {
      if (this.queue.length === 0) {
        this.running = false;
        return;
      }
      const items = this.queue.splice(0, MAX_BATCH);
      let done: Array<[Pending, unknown]> = [];
      let changes: ChangeSet | null = null;
      // audit records whose entry this batch carries: recorded once it commits
      let carried: AuditScope[] = [];
      // Runs inside the store's transaction, once the read model holds every earlier commit.
      const build = (): ChangeSet | null => {
        done = [];
        carried = [];
        const batch = new StateDraft(this.current);
        for (const item of items) {
          if (this.closing || !this.opened) {
            item.reject(new ProtocolError('unavailable', 'the server is shutting down; retry on the next instance'));
            continue;
          }
          const draft = new StateDraft(batch);
          try {
            const result = item.fn(draft);
            const scope = item.scope;
            if (scope?.audited && !scope.recorded && !carried.includes(scope)) {
              draft.appendAudit(scope.entry(result));
              carried.push(scope);
            }
            batch.merge(draft);
            done.push([item, result]);
          } catch (e) {
            item.reject(e);
          }
        }
        if (done.length === 0 && batch.isEmpty) return null;
        for (const hook of this.hooks) hook(batch);
        const c = batch.changes();
        changes = Object.keys(c).length > 0 ? c : null;
        return changes;
      };
      const end = this.commitSeconds.startTimer();
      try {
        await this.store.write(build);
      } catch (e) {
        const err = e as NodeJS.ErrnoException;
        const unavailable = e instanceof StoreUnavailableError;
        this.logger.error({ msg: 'state commit failed; changes dropped', code: err.code, error: err.message });
        const failure = unavailable
          ? new ProtocolError('unavailable', `the state store cannot take changes now (${err.message}); nothing was changed, retry later`)
          : new ProtocolError('internal_error', `the change could not be saved (${err.code ?? 'error'}: ${err.message}); nothing was changed`);
        for (const [item] of done) item.reject(failure);
        // items never reached (the store failed before build ran) get the same answer
        for (const item of items) if (!done.some(([d]) => d === item)) item.reject(failure);
        continue;
      } finally {
        end();
      }
      for (const scope of carried) scope.recorded = true;
      if (changes) this.publish(changes, true);
      for (const [item, result] of done) item.resolve(result);
    }
  }

  /** Applies committed changes to the read model and tells the subscribers of {@link applied$}. */
  private publish(changes: ChangeSet, local: boolean): void {
    const prior = this.current.apply(changes);
    this.committed++;
    try {
      this.applied$.next({ changes, prior, local });
    } catch (e) {
      this.logger.error({ msg: 'a subscriber to committed changes failed', error: (e as Error).message });
    }
  }
}
