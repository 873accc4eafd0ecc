/**
 * The control-plane state and its one write path (ARCHITECTURE.md step 5): every mutation
 * runs through {@link StateService.mutate}, which applies it, saves the snapshot through the
 * StateStore port and only then lets the caller reply. Mutations are serialised and made on
 * a copy that replaces the live state once its snapshot is durable: readers never see an
 * uncommitted change, and a mutation that throws, or whose snapshot cannot be written (full
 * disk, permissions), leaves memory and disk as they were.
 */
import { Inject, Injectable, Logger } from '@nestjs/common';
import { Subject } from 'rxjs';
import { ProtocolError } from '@svc/protocol';
import { ControlState } from './state.model';
import { STATE_STORE, StateStore } from './state-store.port';

@Injectable()
export class StateService {
  private readonly logger = new Logger('StateService');
  private current = new ControlState();
  private lastSavedJson = JSON.stringify(this.current.toSnapshot());
  private chain: Promise<unknown> = Promise.resolve();
  private opened = false;
  private closing = false;
  private committed = 0;
  /** Emits after every committed mutation (drives the availability sweep). */
  readonly changes$ = new Subject<void>();

  constructor(@Inject(STATE_STORE) private readonly store: StateStore) {}

  /** The live state, for reads. Do not mutate it outside {@link mutate}. */
  get state(): ControlState {
    return this.current;
  }

  /** Number of mutations committed since start; changes whenever the state did. */
  get version(): number {
    return this.committed;
  }

  /** True once {@link open} has loaded the snapshot. */
  get isLoaded(): boolean {
    return this.opened;
  }

  /**
   * Takes the store (waiting while another live process holds it) and loads the snapshot.
   * A plaintext snapshot found while a key is set is rewritten encrypted at once.
   * @throws StateLoadError when the snapshot exists but cannot be decrypted or parsed
   */
  async open(): Promise<void> {
    await this.store.acquire((holder) =>
      this.logger.warn({ msg: `state directory is in use by ${holder}; waiting for it (not ready meanwhile)` }),
    );
    const loaded = await this.store.load();
    if (loaded) {
      this.current = ControlState.fromSnapshot(loaded.state);
      this.lastSavedJson = JSON.stringify(this.current.toSnapshot());
      if (loaded.needsRewrite) {
        await this.store.save(this.lastSavedJson);
        this.logger.log({ msg: 'plaintext snapshot rewritten encrypted', file: this.store.describe() });
      }
    }
    this.opened = true;
    this.committed++;
    const s = this.current;
    this.logger.log({
      msg: loaded ? 'state loaded' : 'no snapshot yet; starting empty',
      file: this.store.describe(),
      projects: s.projects.size,
      nodes: s.nodes.size,
      bindings: s.bindings.size,
    });
  }

  /**
   * Applies one mutation and makes it durable before resolving; {@link state} shows it from
   * then on, not before.
   * @param fn synchronous change of the state it is given (a copy of the committed state:
   *   change only that one, not {@link state}); throwing (e.g. a ProtocolError for bad input)
   *   drops the copy
   * @returns what `fn` returned
   * @throws what `fn` threw; ProtocolError `internal_error` when the snapshot could not be
   *   written (nothing changed); `unavailable` while shutting down
   */
  mutate<T>(fn: (state: ControlState) => T): Promise<T> {
    const run = async (): Promise<T> => {
      if (this.closing) throw new ProtocolError('unavailable', 'the server is shutting down; retry on the next instance');
      // The change is made on a copy: readers keep seeing the committed state until the new
      // snapshot is durable, so nothing a client reads can be lost by a crash.
      const draft = ControlState.fromSnapshot(JSON.parse(this.lastSavedJson));
      const result = fn(draft);
      const json = JSON.stringify(draft.toSnapshot());
      try {
        await this.store.save(json);
      } catch (e) {
        const err = e as NodeJS.ErrnoException;
        this.logger.error({ msg: 'snapshot write failed; change dropped', code: err.code, error: err.message });
        throw new ProtocolError('internal_error', `the change could not be saved (${err.code ?? err.message}); nothing was changed`);
      }
      this.current = draft;
      this.lastSavedJson = json;
      this.committed++;
      this.changes$.next();
      return result;
    };
    const p = this.chain.then(run, run);
    this.chain = p.catch(() => undefined);
    return p;
  }

  /** Waits for pending mutations, refuses new ones, and releases the store. */
  async close(): Promise<void> {
    this.closing = true;
    await this.chain;
    await this.store.release();
  }
}
