/**
 * PersistenceModule: the StateStore port bound to its default file adapter, and the
 * StateService every other module reads and mutates state through.
 */
import { DynamicModule, Global, Module } from '@nestjs/common';
import { FileStateStore } from './file-state.store';
import { StateService } from './state.service';
import { STATE_STORE } from './state-store.port';

export interface PersistenceOptions {
  /** State directory. */
  stateDir: string;
  /** AES-256 key, or null for plaintext snapshots. */
  stateKey: Buffer | null;
}

@Global()
@Module({})
export class PersistenceModule {
  static forRoot(options: PersistenceOptions): DynamicModule {
    return {
      module: PersistenceModule,
      providers: [{ provide: STATE_STORE, useValue: new FileStateStore(options.stateDir, options.stateKey) }, StateService],
      exports: [StateService, STATE_STORE],
    };
  }
}
