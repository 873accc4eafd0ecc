/**
 * The inode numbers `stat` reports through the FUSE mount (`st_ino`), stable across remounts
 * (cold `git status`). They are not the kernel's numbers for the mount's inodes (those come from
 * the {@link InodeTable} and are handed out afresh at every mount): git keeps each file's inode
 * number in its index and re-reads and re-hashes every file whose number changed, so with
 * per-mount numbers the first `git status` after a remount would read the whole repository.
 *
 * A number is stable for as long as the node serving the mount keeps its node ids (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)":
 * stable for a path for the life of the node process) and the workspace keeps its mount
 * paths. They fit in 32 bits (what git keeps), laid out as:
 * - bits 24-31: the mount path's slot (1-255), from a hash of the mount path; two mount paths
 *   with one hash take the next free slots in path order, so a slot depends only on the set of
 *   mount paths;
 * - bits 0-23: the node id modulo 2^24.
 * Slot 0 is the synthetic tree above mount paths (`/` is 1, the others a hash of their path).
 * Numbers can repeat past 16,777,215 node ids of one node process or 255 mount paths; a repeat
 * is harmless for regular files with one link (tools such as `tar`, `cp -a`, `du` and `rsync -H`
 * pair files by inode number only when `nlink` > 1, and git only compares a file's number with
 * its own previous one), which is what nodes report for the files of an export.
 */
import type { WorkspaceRouter } from '../router/workspace-router';

const ID_BITS = 24;
const ID_SPAN = 2 ** ID_BITS;
const SLOTS = 255;

/** FNV-1a over the UTF-16 code units of `s`, as an unsigned 32-bit number. */
function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/**
 * Slots (1-255) of a set of mount paths: each path's hash slot, or on a clash the next free one,
 * paths taken in sorted order (so the result depends only on the set). Past 255 paths slots are
 * shared.
 * @returns mount path -> slot
 */
export function mountSlots(mountPaths: readonly string[]): Map<string, number> {
  const out = new Map<string, number>();
  const used = new Set<number>();
  for (const path of [...mountPaths].sort()) {
    let slot = 1 + (fnv1a(path) % SLOTS);
    for (let tries = 0; used.has(slot) && tries < SLOTS; tries++) slot = slot === SLOTS ? 1 : slot + 1;
    used.add(slot);
    out.set(path, slot);
  }
  return out;
}

/** Computes the `st_ino` of workspace paths for a router's topology; see the module documentation. */
export class FuseInodes {
  private slots = new Map<string, number>();

  constructor(private readonly router: Pick<WorkspaceRouter, 'mountPaths' | 'resolve' | 'on'>) {
    this.refresh();
    router.on('topology', () => this.refresh());
  }

  /** Recomputes the mount slots from the router's current mount paths. */
  refresh(): void {
    this.slots = mountSlots(this.router.mountPaths);
  }

  /**
   * The inode number of workspace path `path` whose node id is `id` (0 for the synthetic tree).
   * @returns an integer in [1, 2^32)
   */
  of(path: string, id: number): number {
    const r = this.router.resolve(path);
    if (r.kind === 'mount') {
      const slot = this.slots.get(r.mountPath);
      if (slot !== undefined) return slot * ID_SPAN + (id % ID_SPAN);
    }
    if (path === '/') return 1;
    return 2 + (fnv1a(path) % (ID_SPAN - 2));
  }
}
