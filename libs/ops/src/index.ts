export * from './logging';
export * from './readiness.service';
export * from './health.controller';
export * from './metrics';
export * from './ops.module';
export * from './config-values';
export * from './atomic-file';
export * from './server-start';
