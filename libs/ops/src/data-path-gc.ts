/**
 * V8 garbage-collector setting of the data-path programs (`svc-fs-node`, `svc-fs-mount`),
 * applied when this module is imported: import it first in the program's main module, before
 * anything has been allocated (no marking can be in progress then).
 *
 * Incremental marking is turned off. These programs stream file data through 1 MiB buffers
 * (WebSocket messages, read-ahead chunks, write-behind chunks) that live outside the V8 heap; once
 * the heap is past V8's activation threshold (about 8 MB, which a Nest program is), that external
 * memory starts an incremental mark-compact every few MiB. Measured on the 2-core VM, 256 MiB
 * through the FUSE mount: 32-40 mark-compacts per read with it, 2-4 without, read 1.0-1.3 s ->
 * 0.6-0.8 s; `svc-fs-node` CPU time for a 256 MiB write 0.9-1.1 s -> 0.55-0.7 s, no mark-compact.
 * The cost: a full collection is one pause instead of many steps, a few ms for these heaps
 * (10-30 MB). `--initial-old-space-size=64` has the same effect but can only be given on the
 * node command line (not in NODE_OPTIONS, not at run time).
 */
import { setFlagsFromString } from 'node:v8';

setFlagsFromString('--no-incremental-marking');
