/**
 * `@svc/protocol/wire`: the protocol without the payload DTOs and their validation
 * (class-validator, class-transformer): constants, errors, the envelope and binary frames,
 * identifiers, records, secrets, topology, catalog and FS shapes. Clients (libs/client, the
 * workspace router, the FUSE layer, the CLIs) import this entry point, which spares them
 * loading the validation libraries (about 0.2 s of start-up and a larger heap); servers use
 * `@svc/protocol`, which is this plus the DTOs.
 */
export * from './constants';
export * from './errors';
export * from './envelope';
export * from './identifiers';
export * from './records';
export * from './forbidden-keys';
export * from './secrets';
export * from './topology';
export * from './catalog';
export * from './fs';
export * from './file-mode';
