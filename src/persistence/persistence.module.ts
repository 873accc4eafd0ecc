/**
 * PersistenceModule: the StateStore port bound to its engine (the embedded SQLite store, or
 * PostgreSQL with `--database-url`), and
 * the StateService every other module reads and mutates state through. Nothing outside this
 * module knows which engine runs.
 */
import { DynamicModule, Global, Module } from '@nestjs/common';
import { PostgresStateStore } from './postgres-state.store';
import { SqliteStateStore, StateSync } from './sqlite-state.store';
import { StateService } from './state.service';
import { STATE_STORE } from './state-store.port';

export interface PersistenceOptions {
  /** State directory. */
  stateDir: string;
  /** AES-256 key of record bodies, or null for plaintext. */
  stateKey: Buffer | null;
  /** Commit durability of the embedded store (`SVC_STATE_SYNC`). */
  stateSync: StateSync;
  /** PostgreSQL URL; null: the embedded SQLite store. */
  databaseUrl: string | null;
}

@Global()
@Module({})
export class PersistenceModule {
  static forRoot(options: PersistenceOptions): DynamicModule {
    return {
      module: PersistenceModule,
      providers: [
        {
          provide: STATE_STORE,
          useValue: options.databaseUrl
            ? new PostgresStateStore({ url: options.databaseUrl, key: options.stateKey })
            : new SqliteStateStore({ dir: options.stateDir, key: options.stateKey, sync: options.stateSync }),
        },
        StateService,
      ],
      exports: [StateService, STATE_STORE],
    };
  }
}
