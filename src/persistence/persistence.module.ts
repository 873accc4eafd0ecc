/**
 * PersistenceModule: the StateStore port bound to its engine (made by
 * {@link createStateStore}: the embedded SQLite store, or PostgreSQL with `--database-url`),
 * and the StateService every other module reads and mutates state through. Nothing outside
 * this module knows which engine runs.
 */
import { DynamicModule, Global, Module } from '@nestjs/common';
import { StateService } from './state.service';
import { createStateStore, StateStoreConfig } from './state-store.factory';
import { STATE_STORE } from './state-store.port';

@Global()
@Module({})
export class PersistenceModule {
  /** The module with the store `config` names (not yet open: StateService.open opens it). */
  static forRoot(config: StateStoreConfig): DynamicModule {
    return {
      module: PersistenceModule,
      providers: [{ provide: STATE_STORE, useValue: createStateStore(config) }, StateService],
      exports: [StateService, STATE_STORE],
    };
  }
}
