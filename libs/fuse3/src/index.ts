/**
 * libfuse 3's low-level (inode-based) API for Node.js: {@link mount} a filesystem given as
 * {@link Operations} (pyfuse3's shape), answer the kernel's requests asynchronously, and tell
 * the kernel what changed elsewhere ({@link FuseSession.notifyInvalInode},
 * {@link FuseSession.notifyInvalEntry}, {@link FuseSession.notifyDelete}). The C side is
 * native/fuse3 (Node-API), built by `npm ci` or `npm run build:native`.
 */
export * from './types';
export * from './operations';
export * from './session';
export { DEBIAN_PACKAGES, FAST_FH, fuse3Unavailable, loadFuse3Binding } from './binding';
export type { Fuse3Binding } from './binding';
