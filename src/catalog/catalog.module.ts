/** CatalogModule: nodes (invites, joins, leases, daemon sessions) and the node service catalog. */
import { Module } from '@nestjs/common';
import { CatalogGateway } from './catalog.gateway';
import { CatalogService } from './catalog.service';
import { NodesService } from './nodes.service';
import { NodePresenceService } from './node-presence.service';

@Module({
  providers: [NodesService, CatalogService, NodePresenceService, CatalogGateway],
  exports: [NodesService, CatalogService, NodePresenceService],
})
export class CatalogModule {}
