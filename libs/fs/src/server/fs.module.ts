/**
 * FsModule: the FS node server (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)") — FsGateway on `/v2/fs`, the FS endpoint
 * profile, the export registry, the node table, per-session state, invalidation events and FS
 * metrics. The host program provides a `SessionRegistry` (global) and hands
 * {@link FsEndpointProfile} and {@link FsMetrics}`.requests` to its EnvelopeWsAdapter.
 */
import { DynamicModule, Module } from '@nestjs/common';
import { ExportRegistry } from './export-registry';
import { FsEndpointProfile } from './fs-endpoint.profile';
import { FsMetrics } from './fs-metrics';
import { FsNodeOptions } from './fs-options';
import { FsSessionService } from './fs-session';
import { FsGateway } from './fs.gateway';
import { FsService } from './fs.service';
import { InvalidationService } from './invalidation.service';
import { NodeTable } from './node-table';

@Module({})
export class FsModule {
  /** The FS node server for `options` (exports, FS session token, node name, version). */
  static forRoot(options: FsNodeOptions): DynamicModule {
    return {
      module: FsModule,
      providers: [
        { provide: FsNodeOptions, useValue: options },
        NodeTable,
        ExportRegistry,
        FsSessionService,
        InvalidationService,
        FsMetrics,
        FsService,
        FsEndpointProfile,
        FsGateway,
      ],
      exports: [FsEndpointProfile, FsMetrics, FsService, FsSessionService, ExportRegistry, NodeTable],
    };
  }
}
