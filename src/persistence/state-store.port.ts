/**
 * The StateStore port: where the control plane's records live.
 * The embedded adapter is SQLite ({@link SqliteStateStore}); another engine implements this
 * interface and is bound to {@link STATE_STORE}. Nothing outside PersistenceModule knows
 * which engine runs.
 */
import type { AuditPage, AuditQuery, AuditRetention } from './audit-log';
import type { ChangeSet, ControlState } from './state.model';

export interface StateStore {
  /**
   * Checks the key, takes ownership of the store (waiting while another live process holds
   * it), creates or migrates the schema, imports an earlier version's snapshot when found,
   * and loads every record.
   * @param onWait called once if the store is busy, with a description of the holder
   * @returns the read model of everything stored
   * @throws StateLoadError when the store exists but cannot be used (wrong or missing key,
   *   foreign or damaged database, a schema newer than this code); nothing was written
   */
  open(onWait: (holder: string) => void): Promise<ControlState>;
  /**
   * One write transaction. On a shared store, the commits of other processes are first passed
   * to the {@link onRemote} listener (so the read model is current); then `build` makes the
   * change set from it (null: nothing to write), which is committed. When the promise
   * resolves the change is durable (a killed process; also power loss with
   * `SVC_STATE_SYNC=full`); when it rejects, nothing of it was applied.
   * @returns whether a change set was committed
   * @throws StoreUnavailableError when the database cannot be reached or its file system
   *   refuses the commit (disk full, I/O error, read-only); otherwise an Error with the
   *   engine's code
   */
  write(build: () => ChangeSet | null): Promise<boolean>;
  /**
   * Listens to the commits of other processes sharing the store, in commit order (a shared
   * store calls it from {@link write} and from its change feed).
   */
  onRemote(listener: (changes: ChangeSet) => void): void;
  /**
   * Replays the commits of other processes now (a shared store; nothing to do otherwise): for
   * a read that missed a record another replica may have just written.
   */
  sync(): Promise<void>;
  /** True while this process is the one that runs the availability sweep (always, unshared). */
  readonly isSweeper: boolean;
  /** True while the store answers and takes commits (false: `/readyz` 503). */
  readonly isReachable: boolean;
  /**
   * A page of the audit log (rows appended by {@link write} from `ChangeSet.audit`), newest
   * first, queried from the database.
   * @throws StoreUnavailableError when the database cannot be reached
   */
  queryAudit(query: AuditQuery): Promise<AuditPage>;
  /**
   * Deletes the audit entries older than `retention.minTsMs` and all but the newest
   * `retention.maxEntries`.
   * @returns how many were deleted
   */
  pruneAudit(retention: AuditRetention): Promise<number>;
  /** Closes the database and releases ownership. */
  close(): Promise<void>;
  /** Human-readable location, for logs, e.g. `/var/lib/svc/state.db (encrypted)`. */
  describe(): string;
}

/** DI token of the StateStore. */
export const STATE_STORE = Symbol('STATE_STORE');

/** A store that exists but cannot be used: the server refuses to start (exit 2). */
export class StateLoadError extends Error {}

/** The database cannot be reached or written now: the change was not made (`unavailable`). */
export class StoreUnavailableError extends Error {}
