/** CatalogModule: nodes (invites, joins, leases) and the node service catalog. */
import { Module } from '@nestjs/common';
import { CatalogGateway } from './catalog.gateway';
import { CatalogService } from './catalog.service';
import { NodesService } from './nodes.service';

@Module({
  providers: [NodesService, CatalogService, CatalogGateway],
  exports: [NodesService, CatalogService],
})
export class CatalogModule {}
