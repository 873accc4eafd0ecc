/** The workspace router: path API over a project's mounts, with failover. */
export * from './fs-types';
export * from './paths';
export * from './mount-table';
export * from './lookup-cache';
export * from './topology';
export * from './topology-source';
export * from './endpoint-pool';
export * from './router-errors';
export * from './workspace-router';
export * from './transfer';
export * from './router.module';
