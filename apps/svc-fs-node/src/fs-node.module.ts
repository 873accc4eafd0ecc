/**
 * Root module of `svc-fs-node` (standalone mode): logging and ops endpoints, the session
 * registry and the FS node server. Control daemon mode (pairing, leases, catalog upsert) will
 * add its module here.
 */
import { DynamicModule, Global, Module } from '@nestjs/common';
import { FsModule, FsNodeOptions } from '@svc/fs';
import { OpsModule } from '@svc/ops';
import { SessionRegistry } from '@svc/transport';
import { FsNodeConfig } from './config';

/** Process-wide providers: the configuration and the session registry. */
@Global()
@Module({})
class CoreModule {
  static forRoot(config: FsNodeConfig): DynamicModule {
    return {
      module: CoreModule,
      providers: [{ provide: FsNodeConfig, useValue: config }, SessionRegistry],
      exports: [FsNodeConfig, SessionRegistry],
    };
  }
}

@Module({})
export class FsNodeAppModule {
  static forRoot(config: FsNodeConfig, fs: FsNodeOptions): DynamicModule {
    return {
      module: FsNodeAppModule,
      imports: [CoreModule.forRoot(config), OpsModule.forRoot({ service: 'svc-fs-node', logLevel: config.logLevel }), FsModule.forRoot(fs)],
    };
  }
}
