/** ProjectsModule: projects, mounts, tokens, bindings, workspace status and availability. */
import { Module } from '@nestjs/common';
import { CatalogModule } from '../catalog/catalog.module';
import { AvailabilityService } from './availability.service';
import { ProjectsGateway } from './projects.gateway';
import { ProjectUpService } from './project-up.service';
import { ProjectsService } from './projects.service';
import { WorkspaceService } from './workspace.service';

@Module({
  imports: [CatalogModule],
  providers: [ProjectsService, ProjectUpService, WorkspaceService, AvailabilityService, ProjectsGateway],
  exports: [ProjectsService, WorkspaceService, AvailabilityService],
})
export class ProjectsModule {}
