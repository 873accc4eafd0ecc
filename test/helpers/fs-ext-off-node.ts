/**
 * Jest setup of the `fs-ext-off-node` project (jest.config.js): every spawned `svc-fs-node`
 * grants no FS extension, while the clients ask for them all: the base protocol from the
 * node's side.
 */
process.env.SVC_FS_CLIENT_FEATURES = 'all';
process.env.SVC_FS_NODE_FEATURES = 'none';
