/**
 * The mount table: which mount serves a path (longest `mount_path`
 * prefix) and the synthetic read-only directories above the mount paths.
 * Path helpers live in `./paths`.
 */
import { segmentsOf } from './paths';

/** Where a workspace path leads. */
export type Resolution =
  /** A directory above (or between) mount paths that exists only in the workspace tree. */
  | { kind: 'synthetic'; path: string; children: string[] }
  /** A path inside a mount; `rel` is relative to the export root (`''` = the root itself). */
  | { kind: 'mount'; path: string; mountPath: string; rel: string }
  /** Nothing: not a mount, not above one. */
  | { kind: 'none'; path: string };

/**
 * The set of mount paths of a topology with longest-prefix resolution. Immutable; build a new
 * one when the topology changes.
 */
export class MountTable {
  private readonly paths: string[];
  /** Synthetic directory -> sorted child names (mount path segments one level below). */
  private readonly synthetic = new Map<string, Set<string>>();
  /** Any directory (mount or synthetic) -> names of mount paths directly below it, for overlays. */
  private readonly below = new Map<string, Set<string>>();

  /** @param mountPaths normalised absolute mount paths (duplicates ignored) */
  constructor(mountPaths: Iterable<string>) {
    this.paths = [...new Set(mountPaths)].sort((a, b) => b.length - a.length || (a < b ? -1 : 1));
    const set = new Set(this.paths);
    this.synthetic.set('/', new Set());
    for (const mp of this.paths) {
      const segs = segmentsOf(mp);
      for (let i = 0; i < segs.length; i++) {
        const dir = `/${segs.slice(0, i).join('/')}`;
        const child = segs[i];
        if (!this.below.has(dir)) this.below.set(dir, new Set());
        this.below.get(dir)!.add(child);
        if (!this.coveredByMount(dir, set)) {
          if (!this.synthetic.has(dir)) this.synthetic.set(dir, new Set());
          this.synthetic.get(dir)!.add(child);
        }
      }
    }
    // `/` is a mount itself when "/" is configured; then it is not synthetic.
    if (set.has('/')) this.synthetic.delete('/');
  }

  /** Every mount path, longest first. */
  get mountPaths(): readonly string[] {
    return this.paths;
  }

  /**
   * Resolves a normalised workspace path: a mount (longest prefix wins), a synthetic
   * directory above mount paths, or nothing.
   */
  resolve(path: string): Resolution {
    const syn = this.synthetic.get(path);
    if (syn) return { kind: 'synthetic', path, children: [...syn].sort() };
    const mountPath = this.mountOf(path);
    if (mountPath !== null) return { kind: 'mount', path, mountPath, rel: mountPath === '/' ? path.slice(1) : path.slice(mountPath.length + 1) };
    return { kind: 'none', path };
  }

  /** The mount path serving `path` (longest prefix), or null. */
  mountOf(path: string): string | null {
    for (const mp of this.paths) {
      if (mp === '/' || path === mp || path.startsWith(`${mp}/`)) return mp;
    }
    return null;
  }

  /**
   * Names of mount paths directly below a directory that lies inside another mount (nested
   * mounts): they are shown in that directory's listing over whatever the export holds.
   */
  overlaysOf(path: string): string[] {
    if (this.synthetic.has(path)) return [];
    return [...(this.below.get(path) ?? [])].sort();
  }

  private coveredByMount(dir: string, set: Set<string>): boolean {
    if (set.has('/')) return true;
    const segs = segmentsOf(dir);
    for (let i = 1; i <= segs.length; i++) if (set.has(`/${segs.slice(0, i).join('/')}`)) return true;
    return false;
  }
}
