/** Control-plane metrics on top of the shared ops endpoints (libs/ops). */
import { Module } from '@nestjs/common';
import { CatalogModule } from '../catalog/catalog.module';
import { ProjectsModule } from '../projects/projects.module';
import { ControlMetrics } from './control-metrics';

@Module({
  imports: [ProjectsModule, CatalogModule],
  providers: [ControlMetrics],
  exports: [ControlMetrics],
})
export class HealthModule {}
