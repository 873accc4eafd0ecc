/** AcheronModule: the runtime session and its per-session namespace, with routed filesystems. */
import { Module } from '@nestjs/common';
import { CatalogModule } from '../catalog/catalog.module';
import { ProjectsModule } from '../projects/projects.module';
import { AcheronGateway } from './acheron.gateway';
import { NamespaceService } from './namespace.service';
import { NodeRoutesService } from './node-routes.service';
import { ProjectRoutesService } from './project-routes.service';

@Module({
  imports: [CatalogModule, ProjectsModule],
  providers: [NamespaceService, NodeRoutesService, ProjectRoutesService, AcheronGateway],
})
export class AcheronModule {}
