/** Control-plane metrics on top of the shared ops endpoints (libs/ops). */
import { Module } from '@nestjs/common';
import { ProjectsModule } from '../projects/projects.module';
import { ControlMetrics } from './control-metrics';

@Module({
  imports: [ProjectsModule],
  providers: [ControlMetrics],
  exports: [ControlMetrics],
})
export class HealthModule {}
