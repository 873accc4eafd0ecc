/**
 * The StateStore port (ARCHITECTURE.md "State"): where the control plane's records live.
 * The embedded adapter is SQLite ({@link SqliteStateStore}); another engine implements this
 * interface and is bound to {@link STATE_STORE}. Nothing outside PersistenceModule knows
 * which engine runs.
 */
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
   * Durably applies one change set in one transaction: when the promise resolves the change
   * survives a killed process (and power loss with `SVC_STATE_SYNC=full`); when it rejects,
   * nothing of it was applied.
   * @throws Error with the engine's code (`SQLITE_FULL`, `SQLITE_READONLY`, ...)
   */
  commit(changes: ChangeSet): Promise<void>;
  /** Closes the database and releases ownership. */
  close(): Promise<void>;
  /** Human-readable location, for logs, e.g. `/var/lib/svc/state.db (encrypted)`. */
  describe(): string;
}

/** DI token of the StateStore. */
export const STATE_STORE = Symbol('STATE_STORE');

/** A store that exists but cannot be used: the server refuses to start (exit 2). */
export class StateLoadError extends Error {}
