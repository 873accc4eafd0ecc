/**
 * The one place a StateStore engine is chosen: PostgreSQL when a database URL is configured,
 * else the embedded SQLite store in the state directory. The server (PersistenceModule) and
 * `svc state export|import` both make their store here, from the same configuration.
 */
import { PostgresStateStore, redactUrl } from './postgres-state.store';
import { SqliteStateStore, StateSync } from './sqlite-state.store';
import type { StateStore } from './state-store.port';

/**
 * Where and how the control plane's state is kept: the state part of the server's
 * configuration (`parseStateConfig` in src/config.ts builds it from flags and environment).
 */
export interface StateStoreConfig {
  /** Absolute path of the state directory (the SQLite store's `state.db`, role tokens, lock). */
  stateDir: string;
  /** AES-256 key of record bodies (32 bytes), or null for plaintext. */
  stateKey: Buffer | null;
  /** Commit durability of the embedded store (`SVC_STATE_SYNC`); PostgreSQL's is its own. */
  stateSync: StateSync;
  /** PostgreSQL URL (`postgres://...`); null: the embedded SQLite store in `stateDir`. */
  databaseUrl: string | null;
}

/**
 * The store `config` names, not yet open (nothing is read or connected until
 * {@link StateStore.open}, `exportTo` or `importFrom`).
 * @returns a PostgreSQL store when `config.databaseUrl` is set, else the SQLite store in
 *   `config.stateDir` with `config.stateSync`
 */
export function createStateStore(config: StateStoreConfig): StateStore {
  if (config.databaseUrl !== null) return new PostgresStateStore({ url: config.databaseUrl, key: config.stateKey });
  return new SqliteStateStore({ dir: config.stateDir, key: config.stateKey, sync: config.stateSync });
}

/**
 * Where the state is, for the start-up log: the database URL without its password, or the
 * state directory.
 */
export function stateLocation(config: StateStoreConfig): string {
  return config.databaseUrl !== null ? redactUrl(config.databaseUrl) : config.stateDir;
}
