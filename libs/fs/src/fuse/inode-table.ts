/**
 * The inode table of the FUSE mount on libfuse's low-level API: which kernel inode (the
 * `nodeid` the kernel names a file by) stands for which workspace path, and how many lookups
 * of it the kernel holds.
 *
 * The kernel learns an inode from every entry reply (lookup, create, mkdir, mknod, symlink,
 * link, each readdirplus entry) and takes one lookup reference each time; `forget(ino, n)`
 * gives `n` back. While the count is above zero the number stands for that file and no other,
 * so numbers come from a counter and are never handed out again for another file in the life
 * of the mount. An entry with count zero is dropped (the root, inode 1, never is).
 *
 * The table is a tree like the kernel's dentries: each inode knows its parent and its name, and
 * each parent its children by name, so a path is found in a few map lookups per segment, a
 * rename moves a whole subtree by relinking one entry, and an entry that was unlinked or
 * replaced by a rename stays (detached, with no path) until the kernel forgets it: operations
 * on it answer ENOENT/ESTALE while open files keep working through their handles.
 */

/** The kernel's number for the mount's root directory. */
export const ROOT_INO = 1;

/** One inode the kernel knows. */
export interface InodeEntry {
  /** The kernel's number for it (the `nodeid` of entry replies). */
  readonly ino: number;
  /** Lookups the kernel holds (entry replies minus forgets). */
  nlookup: number;
  /** Parent directory's entry; null for the root and for a detached entry. */
  parent: InodeEntry | null;
  /** Name in the parent (`''` for the root). */
  name: string;
  /** Children by name (directories only; created on first child). */
  children: Map<string, InodeEntry> | null;
  /** False once unlinked or replaced (it has no path any more). */
  attached: boolean;
  /** File type bits (`S_IFMT` of the mode) the kernel was told; 0 until set. The kernel cannot change an inode's type. */
  type: number;
  /**
   * The node's id of the file the kernel was told of (0 until set, through
   * {@link InodeTable.setFileId}): another id under the same name is another file (replaced by a
   * rename), which needs an inode of its own, or the size and pages of one would be used for the
   * other through files open on the first.
   */
  readonly fileId: number;
}

/** See the module documentation. */
export class InodeTable {
  private readonly byIno = new Map<number, InodeEntry>();
  /** The entries of each file id (more than one: the names of a file with hard links). */
  private readonly byFile = new Map<number, Set<InodeEntry>>();
  private nextIno = ROOT_INO + 1;
  /** The root directory's entry (inode {@link ROOT_INO}, never forgotten). */
  readonly root: InodeEntry;

  constructor() {
    this.root = { ino: ROOT_INO, nlookup: 1, parent: null, name: '', children: null, attached: true, type: 0o040000, fileId: 0 };
    this.byIno.set(ROOT_INO, this.root);
  }

  /** Inodes the table holds, the root included. */
  get size(): number {
    return this.byIno.size;
  }

  /** The entry of kernel inode `ino`, or undefined when the kernel forgot it (or never had it). */
  get(ino: number): InodeEntry | undefined {
    return this.byIno.get(ino);
  }

  /**
   * The other inodes of the file with node id `fileId` (the names of a file with hard links,
   * each its own kernel inode, and inodes detached from it that the kernel still holds).
   */
  sameFile(fileId: number, except: number): InodeEntry[] {
    const entries = this.byFile.get(fileId);
    if (!entries) return [];
    const out: InodeEntry[] = [];
    for (const e of entries) if (e.ino !== except) out.push(e);
    return out;
  }

  /** Records that entry `e` stands for the file of node id `fileId` (0: not known). */
  setFileId(e: InodeEntry, fileId: number): void {
    if (e.fileId === fileId) return;
    this.unindex(e);
    (e as { fileId: number }).fileId = fileId;
    if (fileId === 0 || !this.byIno.has(e.ino)) return;
    let entries = this.byFile.get(fileId);
    if (!entries) this.byFile.set(fileId, (entries = new Set()));
    entries.add(e);
  }

  private unindex(e: InodeEntry): void {
    const entries = this.byFile.get(e.fileId);
    if (!entries?.delete(e)) return;
    if (entries.size === 0) this.byFile.delete(e.fileId);
  }

  /**
   * The workspace path of inode `ino` (`/` for the root, `/a/b` below it).
   * @returns null when the inode is unknown or detached (unlinked, replaced)
   */
  pathOf(ino: number): string | null {
    const e = this.byIno.get(ino);
    return e ? this.entryPath(e) : null;
  }

  /** The workspace path of entry `e`; null when it or one of its ancestors is detached. */
  entryPath(e: InodeEntry): string | null {
    if (e === this.root) return '/';
    const names: string[] = [];
    for (let cur: InodeEntry | null = e; cur !== this.root; cur = cur.parent) {
      if (!cur || !cur.attached) return null;
      names.push(cur.name);
    }
    names.reverse();
    return `/${names.join('/')}`;
  }

  /** The entry of child `name` of directory inode `parent`, if the kernel knows it. */
  child(parent: number, name: string): InodeEntry | undefined {
    return this.byIno.get(parent)?.children?.get(name);
  }

  /**
   * The entry of a workspace path, walking from the root through known children.
   * @param path normalised workspace path
   * @returns undefined when the kernel does not know the path (or one of its ancestors)
   */
  find(path: string): InodeEntry | undefined {
    let cur: InodeEntry | undefined = this.root;
    if (path === '/') return cur;
    for (const seg of path.slice(1).split('/')) {
      cur = cur.children?.get(seg);
      if (!cur) return undefined;
    }
    return cur;
  }

  /**
   * Records an entry reply for child `name` of directory inode `parent`: the existing inode of
   * that name gains one lookup, or a new inode is made with one.
   * @returns the entry (its `ino` is what the reply carries)
   * @throws Error when `parent` is unknown (the kernel cannot ask below an inode it forgot)
   */
  lookup(parent: number, name: string): InodeEntry {
    const dir = this.byIno.get(parent);
    if (!dir) throw new Error(`inode ${parent} is not known`);
    let e = dir.children?.get(name);
    if (!e) {
      e = { ino: this.nextIno++, nlookup: 0, parent: dir, name, children: null, attached: true, type: 0, fileId: 0 };
      (dir.children ??= new Map()).set(name, e);
      this.byIno.set(e.ino, e);
    }
    e.nlookup++;
    return e;
  }

  /**
   * The kernel gives back `n` lookups of `ino`; at zero the entry is dropped (its children stay
   * reachable by number while the kernel holds them, detached from their parent's path).
   * Unknown numbers are ignored; the root is never dropped.
   */
  forget(ino: number, n: number): void {
    const e = this.byIno.get(ino);
    if (!e || e === this.root) return;
    e.nlookup -= n;
    if (e.nlookup > 0) return;
    this.byIno.delete(ino);
    this.unindex(e);
    if (e.attached && e.parent?.children?.get(e.name) === e) e.parent.children.delete(e.name);
    // A child still held by the kernel needs its parent for its path: children keep `parent`
    // pointing at this entry, which stays alive through them (not in the number map).
  }

  /**
   * Child `name` of `parent` was removed (unlink, rmdir, or the entry was replaced by something
   * the kernel has not looked up): its inode, if known, is detached (no path; the kernel may still hold it).
   * @returns the detached entry, if the kernel knew one
   */
  remove(parent: number, name: string): InodeEntry | undefined {
    const dir = this.byIno.get(parent);
    const e = dir?.children?.get(name);
    if (!dir || !e) return undefined;
    dir.children!.delete(name);
    e.attached = false;
    e.parent = null;
    return e;
  }

  /**
   * `oldName` in `oldParent` was renamed to `newName` in `newParent`: the inode moves with its
   * subtree; an inode the target name had is detached (returned so the caller can tell the kernel).
   * Nothing happens when the source is unknown to the kernel (beyond detaching the target).
   * @returns the detached target entry, if any
   */
  rename(oldParent: number, oldName: string, newParent: number, newName: string): InodeEntry | undefined {
    const from = this.byIno.get(oldParent);
    const to = this.byIno.get(newParent);
    const e = from?.children?.get(oldName);
    if (e && to && e.parent === to && e.name === newName) return undefined;
    const replaced = to ? this.remove(newParent, newName) : undefined;
    if (!e || !from || !to) return replaced;
    from.children!.delete(oldName);
    e.parent = to;
    e.name = newName;
    (to.children ??= new Map()).set(newName, e);
    return replaced;
  }

  /**
   * Swaps two names (rename with RENAME_EXCHANGE): each inode takes the other's place.
   */
  exchange(parentA: number, nameA: string, parentB: number, nameB: string): void {
    const pa = this.byIno.get(parentA);
    const pb = this.byIno.get(parentB);
    if (!pa || !pb) return;
    const a = pa.children?.get(nameA);
    const b = pb.children?.get(nameB);
    pa.children?.delete(nameA);
    pb.children?.delete(nameB);
    if (b) {
      b.parent = pa;
      b.name = nameA;
      (pa.children ??= new Map()).set(nameA, b);
    }
    if (a) {
      a.parent = pb;
      a.name = nameB;
      (pb.children ??= new Map()).set(nameB, a);
    }
  }

  /** Every known entry below `path` (the path's own entry first), for invalidating a subtree. */
  *subtree(path: string): Generator<InodeEntry> {
    const top = this.find(path);
    if (!top) return;
    const stack = [top];
    while (stack.length > 0) {
      const e = stack.pop()!;
      yield e;
      if (e.children) for (const c of e.children.values()) stack.push(c);
    }
  }
}
