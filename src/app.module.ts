/**
 * Root module of the `svc` control-plane server: one module per
 * concern, wired with the validated configuration.
 */
import { DynamicModule, Global, Module } from '@nestjs/common';
import { OpsModule } from '@svc/ops';
import { SessionRegistry } from '@svc/transport';
import { AcheronModule } from './acheron/acheron.module';
import { AuditModule } from './audit/audit.module';
import { CatalogModule } from './catalog/catalog.module';
import { Clock } from './common/clock';
import { ServerConfig } from './config';
import { ControlModule } from './control/control.module';
import { DashboardModule } from './dashboard/dashboard.module';
import { HealthModule } from './health/health.module';
import { PersistenceModule } from './persistence/persistence.module';
import { ProjectsModule } from './projects/projects.module';

/** Process-wide providers: the configuration, the clock, the session registry. */
@Global()
@Module({})
class CoreModule {
  static forRoot(config: ServerConfig): DynamicModule {
    return {
      module: CoreModule,
      providers: [{ provide: ServerConfig, useValue: config }, Clock, SessionRegistry],
      exports: [ServerConfig, Clock, SessionRegistry],
    };
  }
}

@Module({})
export class AppModule {
  static forRoot(config: ServerConfig): DynamicModule {
    return {
      module: AppModule,
      imports: [
        CoreModule.forRoot(config),
        OpsModule.forRoot({ service: 'svc', logLevel: config.logLevel }),
        PersistenceModule.forRoot({ stateDir: config.stateDir, stateKey: config.stateKey, stateSync: config.stateSync, databaseUrl: config.databaseUrl }),
        AuditModule,
        CatalogModule,
        ProjectsModule,
        ControlModule,
        AcheronModule,
        HealthModule,
        DashboardModule,
      ],
    };
  }
}
