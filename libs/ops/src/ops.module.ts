/**
 * Operational HTTP endpoints and logging shared by the servers: `/livez`, `/readyz`,
 * `/metrics`, `/metrics.json`, served only when the
 * program listens on `SVC_METRICS_PORT`.
 */
import { DynamicModule, Global, Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { PrometheusModule } from '@willsoto/nestjs-prometheus';
import { HealthController } from './health.controller';
import { AppLogger, loggerModule } from './logging';
import { MetricsJsonController, MetricsJsonService } from './metrics';
import { ReadinessService } from './readiness.service';

export interface OpsModuleOptions {
  /** Program name in log lines, e.g. `svc`. */
  service: string;
  /** pino level. */
  logLevel: string;
}

@Global()
@Module({})
export class OpsModule {
  static forRoot(options: OpsModuleOptions): DynamicModule {
    return {
      module: OpsModule,
      imports: [
        loggerModule(options.service, options.logLevel),
        TerminusModule.forRoot({ logger: false, errorLogStyle: 'json' }),
        PrometheusModule.register({ path: '/metrics', defaultMetrics: { enabled: true } }),
      ],
      controllers: [HealthController, MetricsJsonController],
      providers: [ReadinessService, MetricsJsonService, AppLogger],
      exports: [ReadinessService, MetricsJsonService, AppLogger],
    };
  }
}
