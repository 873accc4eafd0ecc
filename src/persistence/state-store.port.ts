/**
 * The StateStore port (ARCHITECTURE.md: PersistenceModule): where the control plane keeps
 * its snapshot. The default adapter is {@link FileStateStore}; another backend implements
 * this interface and is bound to {@link STATE_STORE}.
 */

/** Result of {@link StateStore.load}. */
export interface LoadedSnapshot {
  /** The snapshot's state object, to be checked by `ControlState.fromSnapshot`. */
  state: unknown;
  /** True when the stored form should be rewritten (e.g. plaintext found while a key is set). */
  needsRewrite: boolean;
}

export interface StateStore {
  /**
   * Takes exclusive ownership of the store, waiting while another live process holds it.
   * @param onWait called once if the store is busy, with a description of the holder
   */
  acquire(onWait: (holder: string) => void): Promise<void>;
  /**
   * Reads the last saved snapshot.
   * @returns null when nothing was ever saved
   * @throws StateLoadError when the snapshot cannot be decrypted or parsed (it is left untouched)
   */
  load(): Promise<LoadedSnapshot | null>;
  /**
   * Durably replaces the snapshot with `stateJson` (the state serialised as JSON): when the promise resolves the new state survives a crash;
   * a crash at any instant leaves either the previous or the new snapshot.
   * @throws Error with the system error (`ENOSPC`, `EACCES`, ...) when it cannot be written
   */
  save(stateJson: string): Promise<void>;
  /** Releases ownership (lock). */
  release(): Promise<void>;
  /** Human-readable location, for logs, e.g. `/var/lib/svc/state.json (encrypted)`. */
  describe(): string;
}

/** DI token of the StateStore. */
export const STATE_STORE = Symbol('STATE_STORE');

/** A snapshot that exists but cannot be used: the server refuses to start. */
export class StateLoadError extends Error {}
