/**
 * The names a FUSE mount told the kernel do not exist, by directory inode: the kernel keeps such
 * a negative entry for the entry timeout, so `git status` probing `.gitignore` in every
 * directory, or a compiler searching include paths, does not reach the mount each time. The
 * kernel is told to drop them (`notify_inval_entry`) when the directory's entries change
 * elsewhere, which only a list of them makes possible: a push names the directory, not the
 * names the kernel holds negative in it.
 */

/** Most negative entries kept at once; past it lookups that fail are not cached by the kernel. */
export const MAX_NEGATIVE_ENTRIES = 65_536;

/** Negative entries handed to the kernel, by directory inode. */
export class NegativeEntries {
  private readonly byDir = new Map<number, Set<string>>();
  private count = 0;

  constructor(private readonly max = MAX_NEGATIVE_ENTRIES) {}

  /** Names held. */
  get size(): number {
    return this.count;
  }

  /**
   * Records that the kernel is told `name` does not exist in directory inode `dir`.
   * @returns false when the table is full (the caller then answers without letting the kernel cache it)
   */
  add(dir: number, name: string): boolean {
    let names = this.byDir.get(dir);
    if (names?.has(name)) return true;
    if (this.count >= this.max) return false;
    if (!names) this.byDir.set(dir, (names = new Set()));
    names.add(name);
    this.count++;
    return true;
  }

  /** `name` in `dir` now exists (this mount made it): no longer negative. */
  delete(dir: number, name: string): void {
    const names = this.byDir.get(dir);
    if (!names?.delete(name)) return;
    this.count--;
    if (names.size === 0) this.byDir.delete(dir);
  }

  /** Takes every name held negative in directory inode `dir` (to invalidate them). */
  take(dir: number): string[] {
    const names = this.byDir.get(dir);
    if (!names) return [];
    this.byDir.delete(dir);
    this.count -= names.size;
    return [...names];
  }
}
