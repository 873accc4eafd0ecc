/**
 * Jest setup of the `fs-ext-off-client` project (jest.config.js): every FS client of the run
 * (spawned `svc-fs-mount`, `svc`, in-process routers and FsClients) asks for no FS extension,
 * while the nodes offer them all: the base protocol from the client's side.
 */
process.env.SVC_FS_CLIENT_FEATURES = 'none';
process.env.SVC_FS_NODE_FEATURES = 'all';
