/**
 * The node table of an FS node (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"): node ids assigned by the node, below 2^53,
 * stable for a path for the life of the process.
 *
 * Nodes form one tree per export (parent, name, children), so a path is the chain of names up
 * to the export root, and a rename moves a node with its whole subtree: every descendant keeps
 * its id under the new path, and an open handle below a renamed directory keeps working. A node
 * is created the first time a path is handed out and forgotten when this node removes it
 * (unlink, rmdir, or replaced by a rename); a path created again later gets a new id.
 *
 * Generations: `gen` grows whenever the node is seen or told to have changed (its ctime moved,
 * an invalidation); `dirGen` grows whenever a directory's entries changed.
 */
import { Injectable } from '@nestjs/common';
import type { FsStat } from './fs-backend';

/** Largest node id handed out (ids are JSON numbers, exact below 2^53). */
export const MAX_NODE_ID = Number.MAX_SAFE_INTEGER;

/**
 * The identity of the file of `st`: its device, inode number and birth time, or null when the
 * backend does not give all three (an inode number alone is soon reused: a file removed and
 * made again may get the old one's).
 */
export function identityOf(st: FsStat): string | null {
  return st.fileKey && st.birthNs ? `${st.fileKey}:${st.birthNs}` : null;
}

/** One node of the table. */
export class FsNode {
  /** Child nodes by name (only those handed out); null until the first (most nodes are files). */
  children: Map<string, FsNode> | null = null;
  /** Generation of the node (see module documentation). */
  gen = 1;
  /** Generation of a directory's entries. */
  dirGen = 1;
  /** Kind last seen (1 file, 2 dir, 3 symlink), 0 before the first stat. */
  kind = 0;
  /** ctime / mtime last seen, ns; size last seen, bytes. */
  ctimeNs = -1;
  mtimeNs = -1;
  size = -1;
  /** False once forgotten. */
  live = true;
  /**
   * The attributes last seen are those of the node's own creation of this name for a session
   * (create, mkdir, symlink, mknod), and every look at it since found it so ({@link NodeTable.observe}
   * clears it otherwise): every session was told of that creation by its reply or a push.
   */
  madeHere = false;
  /**
   * The identity ({@link identityOf}) of the file this node made under this name for a session
   * (create); null otherwise. Kept while the file is written: the name stands for that file as
   * long as a look finds the same identity there.
   */
  madeIdentity: string | null = null;
  /** Opaque per-node state of the invalidation service (its directory watch). */
  watch: { close(): void } | null = null;
  /** {@link FsStat.fileKey} last seen for a file with more than one name (null otherwise). */
  fileKey: string | null = null;
  /**
   * The identity ({@link identityOf}) of the object last seen under this name (null when the
   * backend gave none): a look that finds it again found the same object, not another one made
   * under the name since.
   */
  seenIdentity: string | null = null;

  constructor(
    readonly id: number,
    /** Name of the export the node belongs to. */
    readonly exportName: string,
    public parent: FsNode | null,
    public name: string,
  ) {}

  /** The path below the export root: names from the root down to this node (`[]` for the root). */
  path(): string[] {
    const names: string[] = [];
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the walk up the parents starts at this node
    for (let n: FsNode | null = this; n && n.parent; n = n.parent) names.push(n.name);
    return names.reverse();
  }

  /** True when `other` is this node or below it. */
  contains(other: FsNode): boolean {
    for (let n: FsNode | null = other; n; n = n.parent) if (n === this) return true;
    return false;
  }
}

/** The table: id -> node, plus the per-export trees. @see module documentation */
@Injectable()
export class NodeTable {
  private readonly byId = new Map<number, FsNode>();
  private nextId = 1;
  /** The live nodes seen with more than one link, by {@link FsStat.fileKey}. */
  private readonly links = new Map<string, FsNode[]>();

  /** Number of live nodes. */
  get size(): number {
    return this.byId.size;
  }

  private allocate(exportName: string, parent: FsNode | null, name: string): FsNode {
    if (this.nextId > MAX_NODE_ID) throw new Error('node ids exhausted');
    const node = new FsNode(this.nextId++, exportName, parent, name);
    this.byId.set(node.id, node);
    if (parent) (parent.children ??= new Map()).set(name, node);
    return node;
  }

  /** Creates the root node of an export. */
  addRoot(exportName: string): FsNode {
    return this.allocate(exportName, null, '');
  }

  /** The live node with id `id`, or undefined (unknown or forgotten: a stale id). */
  get(id: number): FsNode | undefined {
    return this.byId.get(id);
  }

  /** The node of `parent/name`, created (with a new id) when not yet handed out. */
  child(parent: FsNode, name: string): FsNode {
    return parent.children?.get(name) ?? this.allocate(parent.exportName, parent, name);
  }

  /** The node of `parent/name` if it was handed out. */
  peek(parent: FsNode, name: string): FsNode | undefined {
    return parent.children?.get(name);
  }

  /**
   * Moves `node` (with its subtree) to `newParent/newName` after a rename. A node already at the
   * destination is forgotten (rename(2) replaced it) and returned with its subtree.
   * @returns the forgotten nodes (empty when the destination was not known)
   */
  /**
   * `a` and `b` swapped names (rename with RENAME_EXCHANGE): each node takes the other's parent
   * and name, keeping its id (open handles and clients' ids follow the files).
   */
  exchange(a: FsNode, b: FsNode): void {
    const [pa, na, pb, nb] = [a.parent, a.name, b.parent, b.name];
    if (!pa || !pb) return;
    pa.children?.set(na, b);
    pb.children?.set(nb, a);
    a.parent = pb;
    a.name = nb;
    b.parent = pa;
    b.name = na;
  }

  move(node: FsNode, newParent: FsNode, newName: string): FsNode[] {
    if (node.parent === newParent && node.name === newName) return [];
    const displaced = newParent.children?.get(newName);
    // rename(2) between two names of one file does nothing.
    if (displaced && displaced !== node && displaced.fileKey !== null && displaced.fileKey === node.fileKey) return [];
    const gone = displaced && displaced !== node ? this.forget(displaced) : [];
    node.parent?.children?.delete(node.name);
    node.parent = newParent;
    node.name = newName;
    (newParent.children ??= new Map()).set(newName, node);
    return gone;
  }

  /**
   * Forgets `node` and its subtree: their ids become stale (ENOENT). When `node` is the name
   * whose id every name of its file is handed out under (see {@link linkPrimary}) and the file
   * keeps other names, the id stays with the file, as an inode number does: `node` takes the
   * place of the next of those names, whose own id is forgotten instead.
   * @returns the forgotten nodes (`node` itself stays live in the second case)
   */
  forget(node: FsNode): FsNode[] {
    if (!node.parent) return [];
    node.parent.children?.delete(node.name);
    const heir = this.heirOf(node);
    if (heir) {
      const parent = heir.parent!;
      node.parent = parent;
      node.name = heir.name;
      parent.children!.set(heir.name, node);
      heir.live = false;
      this.unlink(heir);
      this.byId.delete(heir.id);
      return [heir];
    }
    const gone: FsNode[] = [];
    const stack = [node];
    while (stack.length > 0) {
      const n = stack.pop()!;
      n.live = false;
      this.unlink(n);
      this.byId.delete(n.id);
      gone.push(n);
      if (n.children) for (const c of n.children.values()) stack.push(c);
      n.children = null;
    }
    return gone;
  }

  /**
   * Records what a stat said about `node`: bumps `gen` when its ctime moved since last seen,
   * and `dirGen` when a directory's mtime moved (its entries changed).
   * @returns true when the node changed since it was last seen
   */
  /**
   * The node whose id the names of `node`'s file are handed out under: for a file with more
   * than one name (hard links, `st.nlink` > 1), the live name with the lowest id (the oldest
   * handed out, so a name clients know keeps its id when another name of its file shows up),
   * so every name shows one id (one `st_ino` through a mount) and a change through any name
   * reaches the clients that know it; `node` itself otherwise. Records `node` as a name of the
   * file.
   */
  linkPrimary(node: FsNode, st: FsStat): FsNode {
    const key = st.kind === 1 && st.nlink > 1 && st.fileKey ? st.fileKey : null;
    if (node.fileKey !== key) {
      if (node.fileKey) this.unlink(node);
      node.fileKey = key;
      if (key) {
        const names = this.links.get(key) ?? [];
        names.push(node);
        this.links.set(key, names);
      }
    }
    if (!key) return node;
    let primary = node;
    for (const n of this.links.get(key)!) if (n.id < primary.id) primary = n;
    return primary;
  }

  /**
   * The name that `node` hands its id on to when it goes: the other live name of its file with
   * the lowest id, when `node`'s id is the one shown for the file (lower than the others').
   */
  private heirOf(node: FsNode): FsNode | undefined {
    let heir: FsNode | undefined;
    for (const n of this.otherNames(node)) {
      if (!n.live || !n.parent) continue;
      if (n.id < node.id) return undefined;
      if (!heir || n.id < heir.id) heir = n;
    }
    return heir;
  }

  /** The other live names of `node`'s file known to have more than one name (hard links). */
  otherNames(node: FsNode): FsNode[] {
    return node.fileKey ? (this.links.get(node.fileKey) ?? []).filter((n) => n !== node) : [];
  }

  private unlink(node: FsNode): void {
    const names = node.fileKey ? this.links.get(node.fileKey) : undefined;
    if (!names) return;
    const i = names.indexOf(node);
    if (i >= 0) names.splice(i, 1);
    if (names.length === 0) this.links.delete(node.fileKey!);
    node.fileKey = null;
  }

  observe(node: FsNode, st: FsStat): boolean {
    if (st.kind !== node.kind || st.ctimeNs !== node.ctimeNs || st.mtimeNs !== node.mtimeNs || st.size !== node.size) node.madeHere = false;
    let changed = false;
    if (node.ctimeNs !== -1 && (st.ctimeNs !== node.ctimeNs || st.kind !== node.kind)) {
      node.gen++;
      changed = true;
    }
    if (st.kind === 2 && node.mtimeNs !== -1 && st.mtimeNs !== node.mtimeNs) node.dirGen++;
    node.kind = st.kind;
    node.seenIdentity = identityOf(st);
    node.ctimeNs = st.ctimeNs;
    node.mtimeNs = st.mtimeNs;
    node.size = st.size;
    return changed;
  }
}
