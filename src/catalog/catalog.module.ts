/** CatalogModule: nodes (invites, joins, leases) and, later, the node service catalog. */
import { Module } from '@nestjs/common';
import { CatalogGateway } from './catalog.gateway';
import { NodesService } from './nodes.service';

@Module({
  providers: [NodesService, CatalogGateway],
  exports: [NodesService],
})
export class CatalogModule {}
