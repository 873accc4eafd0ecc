/**
 * The StateStore port: where the control plane's records live.
 * The embedded adapter is SQLite ({@link SqliteStateStore}); another engine implements this
 * interface and is bound to {@link STATE_STORE}. Nothing outside PersistenceModule knows
 * which engine runs.
 *
 * A store that is not open (before {@link StateStore.open} resolved, after it failed, or after
 * {@link StateStore.close}) refuses {@link StateStore.write} and {@link StateStore.queryAudit}
 * with {@link StoreNotOpenError}, thrown by {@link requireOpen}; {@link StateStore.sync} and
 * {@link StateStore.pruneAudit} do nothing then (the latter returns 0).
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
   * @throws StoreNotOpenError when the store is not open (`build` is not called)
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
   * @throws StoreNotOpenError when the store is not open
   * @throws StoreUnavailableError when the database cannot be reached
   */
  queryAudit(query: AuditQuery): Promise<AuditPage>;
  /**
   * Deletes the audit entries older than `retention.minTsMs` and all but the newest
   * `retention.maxEntries`.
   * @returns how many were deleted (0 when the store is not open)
   */
  pruneAudit(retention: AuditRetention): Promise<number>;
  /** Closes the database and releases ownership. */
  close(): Promise<void>;
  /**
   * `svc state export`: writes a consistent snapshot of every record (docs/operations.md
   * "State"), encrypted with the state key when one is set, also while servers run on the
   * store; writes nothing to the store. Called on a store this process has not opened: it
   * opens the database, checks the key, reads, and closes it again.
   * @param file where to write the snapshot (mode 0600, replaced atomically), or null to hand
   *   the text to `write`
   * @param write receives the snapshot's text when `file` is null (default: standard output)
   * @returns the number of records written per table name (every table, 0 included)
   * @throws StateLoadError when there is no store, or it cannot be read (wrong or missing
   *   key, foreign or damaged database); the system error when `file` cannot be written
   */
  exportTo(file: string | null, write?: (text: string) => void): Promise<Record<string, number>>;
  /**
   * `svc state import FILE`: loads a snapshot (this version's export, or an earlier version's
   * `state.json`) into an empty store, in one transaction, creating or migrating the schema
   * first. Called on a store this process has not opened; closes it when done.
   * @param file the snapshot file
   * @param fileKey key the file was written with: undefined for the store's key (it differs
   *   when rotating keys), null for a plaintext file
   * @returns the number of records imported per table name (every table, 0 included)
   * @throws StateLoadError when the file is missing, unreadable or needs another key, the
   *   store is not empty, cannot be used, or (embedded store) a server holds it; nothing was
   *   changed then
   */
  importFrom(file: string, fileKey?: Buffer | null): Promise<Record<string, number>>;
  /** Human-readable location, for logs, e.g. `/var/lib/svc/state.db (encrypted)`. */
  describe(): string;
}

/** DI token of the StateStore. */
export const STATE_STORE = Symbol('STATE_STORE');

/** A store that exists but cannot be used: the server refuses to start (exit 2). */
export class StateLoadError extends Error {}

/** The database cannot be reached or written now: the change was not made (`unavailable`). */
export class StoreUnavailableError extends Error {}

/**
 * The store is not open (not yet, no longer, or its opening failed): nothing was read or
 * written. A {@link StoreUnavailableError}, so a mutation refused this way is `unavailable`
 * (as during shutdown). Its `code` is always {@link StoreNotOpenError.CODE}.
 */
export class StoreNotOpenError extends StoreUnavailableError {
  static readonly CODE = 'STORE_NOT_OPEN';
  readonly code = StoreNotOpenError.CODE;
  constructor() {
    super('the state store is not open');
  }
}

/**
 * The guard of every store operation that needs the open database.
 * @param db what the store holds while open (its database handle), null otherwise
 * @returns `db`
 * @throws StoreNotOpenError when `db` is null
 */
export function requireOpen<T>(db: T | null): T {
  if (db === null) throw new StoreNotOpenError();
  return db;
}
