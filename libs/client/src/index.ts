export * from './control-client';
export * from './auth';
export * from './client.module';
export * from './fs-client';
export * from './tls-options';
