/**
 * V8 garbage-collector setting of the data path: `svc-fs-node` once it serves, and the FUSE
 * mount (`svc-fs-mount fuse`). {@link useDataPathGc} applies it.
 *
 * Incremental marking is turned off. These programs stream file data through 1 MiB buffers
 * (WebSocket messages, read-ahead chunks, write-behind chunks) that live outside the V8 heap; once
 * the heap is past V8's activation threshold (about 8 MB, which a Nest program is), that external
 * memory starts an incremental mark-compact every few MiB. Measured on the 2-core VM, 256 MiB
 * through the FUSE mount: 2-4 mark-compacts per read without it (32-40 with it), a read
 * takes 0.6-0.8 s (1.0-1.3 s with it); `svc-fs-node` CPU time for a 256 MiB write is 0.55-0.7 s (0.9-1.1 s with it), no mark-compact.
 * The cost: a full collection is one pause instead of many steps, a few ms for these heaps
 * (10-30 MB). `--initial-old-space-size=64` has the same effect but can only be given on the
 * node command line (not in NODE_OPTIONS, not at run time).
 *
 * Applied once the program knows it is a data path, not at start-up: V8
 * accepts a code cache only under the flags it was made with, so a flag changed before the
 * program's modules are loaded makes Node's own code cache of its built-in modules useless (http,
 * crypto and their dependencies then compile from source: 5-7 ms more at every start, measured
 * here), and the bundle's cache would have to be recorded under the same flag. Changing the flag
 * later is safe: a marking already under way finishes as usual, and no new one starts.
 */

/**
 * Global marker set by libs/ops/src/bundled-program.ts while a run records the bundle's code
 * cache: such a run leaves V8's flags as they are, or the cache it writes would carry the changed
 * flags and be rejected by every ordinary start.
 */
export const RECORDING_CODE_CACHE = Symbol.for('svc.bundle.recordingCodeCache');

let applied = false;

/**
 * Turns V8's incremental marking off for the rest of the process (see the module). Idempotent; a
 * no-op in a run that records a code cache ({@link RECORDING_CODE_CACHE}).
 */
export function useDataPathGc(): void {
  if (applied || (globalThis as Record<symbol, unknown>)[RECORDING_CODE_CACHE] === true) return;
  applied = true;
  // Loaded here, not at start-up: `node:v8` costs about 2 ms to load.
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded on first use, as the comment above says
  (require('node:v8') as typeof import('node:v8')).setFlagsFromString('--no-incremental-marking');
}
