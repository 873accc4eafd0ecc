/**
 * A draft of the state: reads fall through to the state below it (the committed read model,
 * or another draft), writes stay in the draft until it is committed or merged
 * (each mutation writes only the rows it changed). Records are
 * immutable: to change one, put a new record.
 */
import type { AuditEntry } from '@svc/protocol';
import { ChangeSet, keyOf, MountRecord, ReadTable, RecordOf, StateView, TABLE_NAMES, TableName, VIEW_PROPERTY } from './state.model';

/** One table of a draft: pending writes over a base table. */
export class DraftTable<T extends TableName> implements ReadTable<RecordOf[T]> {
  /** id -> new record, or null for a deletion. */
  readonly writes = new Map<string, RecordOf[T] | null>();
  /** Ids marked as affected without being written (see {@link StateDraft.touch}). */
  readonly touched = new Set<string>();

  constructor(
    readonly name: T,
    private readonly base: ReadTable<RecordOf[T]>,
  ) {}

  get(id: string): RecordOf[T] | undefined {
    const w = this.writes.get(id);
    if (w !== undefined) return w ?? undefined;
    return this.base.get(id);
  }

  has(id: string): boolean {
    return this.get(id) !== undefined;
  }

  /** The committed (or lower draft's) record, ignoring this draft's writes. */
  before(id: string): RecordOf[T] | undefined {
    return this.base.get(id);
  }

  /** Puts a record (insert or replace). */
  put(record: RecordOf[T]): RecordOf[T] {
    this.writes.set(keyOf(this.name, record), record);
    return record;
  }

  /** Deletes a record. @returns whether it existed */
  delete(id: string): boolean {
    const had = this.has(id);
    if (had) this.writes.set(id, null);
    return had;
  }

  *values(): IterableIterator<RecordOf[T]> {
    for (const r of this.base.values()) if (!this.writes.has(keyOf(this.name, r))) yield r;
    for (const r of this.writes.values()) if (r) yield r;
  }

  get size(): number {
    let n = this.base.size;
    for (const [id, r] of this.writes) {
      const inBase = this.base.has(id);
      if (r && !inBase) n++;
      else if (!r && inBase) n--;
    }
    return n;
  }
}

/**
 * The state as one mutation (or one batch of mutations) sees and changes it. Hand it to
 * `StateService.mutate` callbacks; nothing in it is visible to readers before it commits.
 */
export class StateDraft implements StateView {
  readonly projects: DraftTable<'projects'>;
  readonly mounts: DraftTable<'mounts'>;
  readonly nodes: DraftTable<'nodes'>;
  readonly invites: DraftTable<'invites'>;
  readonly joinRequests: DraftTable<'join_requests'>;
  readonly bindings: DraftTable<'bindings'>;
  readonly catalog: DraftTable<'catalog'>;
  readonly roleTokens: DraftTable<'role_tokens'>;
  readonly undelivered: DraftTable<'undelivered'>;
  readonly mountStates: DraftTable<'mount_states'>;
  /** Audit entries to append with this draft's commit (insert-only; see `audit-log.ts`). */
  readonly audit: AuditEntry[] = [];
  private seq: number;

  constructor(readonly base: StateView) {
    this.projects = new DraftTable('projects', base.projects);
    this.mounts = new DraftTable('mounts', base.mounts);
    this.nodes = new DraftTable('nodes', base.nodes);
    this.invites = new DraftTable('invites', base.invites);
    this.joinRequests = new DraftTable('join_requests', base.joinRequests);
    this.bindings = new DraftTable('bindings', base.bindings);
    this.catalog = new DraftTable('catalog', base.catalog);
    this.roleTokens = new DraftTable('role_tokens', base.roleTokens);
    this.undelivered = new DraftTable('undelivered', base.undelivered);
    this.mountStates = new DraftTable('mount_states', base.mountStates);
    this.seq = base.nextMountSeq();
  }

  /** The draft table of a table name. */
  table<T extends TableName>(table: T): DraftTable<T> {
    return this[VIEW_PROPERTY[table]] as unknown as DraftTable<T>;
  }

  mountsOf(projectId: string): readonly MountRecord[] {
    const baseList = this.base.mountsOf(projectId);
    if (this.mounts.writes.size === 0) return baseList;
    let touched = false;
    for (const [id, m] of this.mounts.writes) {
      if (m?.project_id === projectId || this.mounts.before(id)?.project_id === projectId) {
        touched = true;
        break;
      }
    }
    if (!touched) return baseList;
    const out = baseList.filter((m) => !this.mounts.writes.has(m.mount_id));
    for (const m of this.mounts.writes.values()) if (m && m.project_id === projectId) out.push(m);
    return out.sort((a, b) => a.seq - b.seq);
  }

  mountIdsOfNode(nodeId: string): Iterable<string> {
    const ids = new Set(this.base.mountIdsOfNode(nodeId));
    for (const [id, m] of this.mounts.writes) {
      if (m && m.node_id === nodeId) ids.add(id);
      else ids.delete(id);
    }
    return ids;
  }

  nextMountSeq(): number {
    return this.seq;
  }

  /** Takes the next mount `seq` (configuration order). */
  takeMountSeq(): number {
    return this.seq++;
  }

  /**
   * Marks a record as affected without writing it: commit hooks see it among the changes
   * (the availability sweep touches nodes whose lease ran out).
   */
  touch(table: TableName, id: string): void {
    this.table(table).touched.add(id);
  }

  /** Appends an audit entry, committed with this draft's writes. */
  appendAudit(entry: AuditEntry): void {
    this.audit.push(entry);
  }

  /** True when nothing was written, touched or appended. */
  get isEmpty(): boolean {
    return this.audit.length === 0 && TABLE_NAMES.every((t) => this.table(t).writes.size === 0 && this.table(t).touched.size === 0);
  }

  /** Moves another draft's writes (made over this one) into this one. */
  merge(child: StateDraft): void {
    for (const t of TABLE_NAMES) {
      const mine = this.table(t);
      const theirs = child.table(t);
      for (const [id, r] of theirs.writes) mine.writes.set(id, r);
      for (const id of theirs.touched) mine.touched.add(id);
    }
    this.audit.push(...child.audit);
    if (child.seq > this.seq) this.seq = child.seq;
  }

  /** The writes, for the store. */
  changes(): ChangeSet {
    const out: ChangeSet = {};
    for (const t of TABLE_NAMES) {
      const w = this.table(t).writes;
      if (w.size > 0) (out as Record<string, unknown>)[t] = w;
    }
    if (this.audit.length > 0) out.audit = this.audit;
    return out;
  }
}
