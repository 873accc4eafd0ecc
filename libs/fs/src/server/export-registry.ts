/**
 * The exports of an FS node (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)" `exports`): each with its name, read-only flag,
 * backend and root node.
 */
import { Injectable } from '@nestjs/common';
import { Errno, ExportInfo, FsError } from '@svc/protocol';
import type { FsBackend } from './fs-backend';
import { ExportDefinition, FsNodeOptions } from './fs-options';
import { FsNode, NodeTable } from './node-table';

/** One served export. */
export interface FsExport {
  readonly name: string;
  readonly ro: boolean;
  readonly desc: string;
  readonly backend: FsBackend;
  /** The root directory's node (its id is the export's `root`). */
  readonly root: FsNode;
}

@Injectable()
export class ExportRegistry {
  private readonly byName = new Map<string, FsExport>();

  constructor(
    options: FsNodeOptions,
    private readonly table: NodeTable,
  ) {
    for (const def of options.exports) this.add(def);
  }

  /**
   * Adds an export (at start, or later for a synthetic export).
   * @throws Error when the name is taken
   */
  add(def: ExportDefinition): FsExport {
    if (this.byName.has(def.name)) throw new Error(`export ${def.name} is defined twice`);
    const exp: FsExport = { name: def.name, ro: def.ro, desc: def.desc, backend: def.backend, root: this.table.addRoot(def.name) };
    this.byName.set(def.name, exp);
    return exp;
  }

  /** Every export, in the order added. */
  all(): FsExport[] {
    return [...this.byName.values()];
  }

  /**
   * The export a node belongs to.
   * @throws FsError ENOENT when the export is gone
   */
  of(node: FsNode): FsExport {
    const exp = this.byName.get(node.exportName);
    if (!exp) throw new FsError(Errno.ENOENT, 'the export of this node is gone');
    return exp;
  }

  /** The `exports` listing (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). */
  list(): ExportInfo[] {
    return this.all().map((e) => ({
      name: e.name,
      root: e.root.id,
      ro: e.ro,
      desc: e.desc,
      source_kind: e.backend.sourceKind,
      caps: { ...e.backend.caps, rw: !e.ro },
    }));
  }

  /** Releases every backend (shutdown). */
  async close(): Promise<void> {
    await Promise.all(this.all().map((e) => Promise.resolve(e.backend.close?.()).catch(() => undefined)));
  }
}
