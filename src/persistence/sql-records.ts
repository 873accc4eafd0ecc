/**
 * The records in SQL (one SQL layer for SQLite and PostgreSQL): one
 * table per kind of record (`id` primary key, the record's clear index columns, `body`),
 * written through Kysely in statements both engines accept, with versioned migrations
 * (Kysely's Migrator, tables `svc_migration` and `svc_migration_lock`) run at start.
 */
import { ColumnType, Kysely, Migration, Migrator, PostgresAdapter, sql, Transaction } from 'kysely';
import { AuditEntry, AuditPage, AuditQuery, AuditRetention } from './audit-log';
import { ChangeSet, ControlState, RecordOf, TABLE_NAMES, TableName } from './state.model';
import { RowCodec, StoredRow } from './row-codec';
import { StateLoadError } from './state-store.port';

/** Clear columns of each table, with their SQL types (times and revisions are bigints). */
const CLEAR_COLUMNS = {
  projects: [
    ['revision', 'bigint'],
    ['updated_at_ms', 'bigint'],
  ],
  mounts: [
    ['project_id', 'text'],
    ['node_id', 'text'],
    ['seq', 'bigint'],
  ],
  nodes: [['lease_expires_at_ms', 'bigint']],
  invites: [['expires_at_ms', 'bigint']],
  join_requests: [['requested_at_ms', 'bigint']],
  bindings: [['project_id', 'text']],
  catalog: [['updated_at_ms', 'bigint']],
  role_tokens: [['updated_at_ms', 'bigint']],
  undelivered: [],
  mount_states: [
    ['project_id', 'text'],
    ['ts_ms', 'bigint'],
  ],
} as const satisfies { [T in TableName]: ReadonlyArray<readonly [string, 'text' | 'bigint']> };

/** Secondary indexes: name -> [table, column]. */
const INDEXES: Array<[string, TableName, string]> = [
  ['mounts_project_idx', 'mounts', 'project_id'],
  ['mounts_node_idx', 'mounts', 'node_id'],
  ['nodes_lease_idx', 'nodes', 'lease_expires_at_ms'],
  ['bindings_project_idx', 'bindings', 'project_id'],
  ['mount_states_project_idx', 'mount_states', 'project_id'],
];

/** The audit log's table. */
export const AUDIT_TABLE = 'svc_audit';

/** What an audit body is bound to (its clear columns): a body moved to another row does not open. */
function auditContext(tsMs: number, agentId: string, type: string): string {
  return `${AUDIT_TABLE}\0${tsMs}\0${agentId}\0${type}`;
}

/** Marker of audit entries in a commit-log body (not a table name: older code skips it). */
const AUDIT_IN_COMMIT = '@audit';

/** The schema's migrations, in order. Never edit one that has shipped: add the next. */
export const MIGRATIONS: Record<string, Migration> = {
  '0001_records': {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema
        .createTable('svc_meta')
        .addColumn('key', 'text', (c) => c.primaryKey())
        .addColumn('value', 'text', (c) => c.notNull())
        .execute();
      for (const t of TABLE_NAMES) {
        let q = db.schema.createTable(t).addColumn('id', 'text', (c) => c.primaryKey());
        for (const [col, type] of CLEAR_COLUMNS[t]) q = q.addColumn(col, type);
        await q.addColumn('body', 'text', (c) => c.notNull()).execute();
      }
      for (const [name, table, column] of INDEXES) await db.schema.createIndex(name).on(table).column(column).execute();
    },
  },
  // The change feed of a shared store: every commit, in order, with the rows it wrote (bodies
  // encoded as in their tables), so other processes replay each commit (docs/operations.md "State").
  '0002_commit_log': {
    async up(db: Kysely<unknown>): Promise<void> {
      const pg = db.getExecutor().adapter instanceof PostgresAdapter;
      await db.schema
        .createTable('svc_commits')
        .addColumn('seq', pg ? 'bigserial' : 'integer', (c) => (pg ? c.primaryKey() : c.primaryKey().autoIncrement()))
        .addColumn('ts_ms', 'bigint', (c) => c.notNull())
        .addColumn('replica', 'text', (c) => c.notNull())
        .addColumn('body', 'text', (c) => c.notNull())
        .execute();
    },
  },
  // The audit log (docs/protocol.md "Audit log" `control.audit_list`): insert-only rows, in commit order
  // (`seq`); time, agent and type in the clear for the filters, the rest in `body` (encrypted
  // with the state key when set). Never loaded into the read model.
  '0003_audit': {
    async up(db: Kysely<unknown>): Promise<void> {
      const pg = db.getExecutor().adapter instanceof PostgresAdapter;
      await db.schema
        .createTable(AUDIT_TABLE)
        .addColumn('seq', pg ? 'bigserial' : 'integer', (c) => (pg ? c.primaryKey() : c.primaryKey().autoIncrement()))
        .addColumn('ts_ms', 'bigint', (c) => c.notNull())
        .addColumn('agent_id', 'text', (c) => c.notNull())
        .addColumn('type', 'text', (c) => c.notNull())
        .addColumn('body', 'text', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('svc_audit_ts_idx').on(AUDIT_TABLE).column('ts_ms').execute();
      await db.schema.createIndex('svc_audit_agent_idx').on(AUDIT_TABLE).columns(['agent_id', 'seq']).execute();
      await db.schema.createIndex('svc_audit_type_idx').on(AUDIT_TABLE).columns(['type', 'seq']).execute();
    },
  },
};

/**
 * A `bigint` column: written as a number (ms since the epoch, a revision, a sequence number),
 * read back as a number from SQLite and as a decimal string from PostgreSQL (`int8`).
 */
type BigintColumn = ColumnType<number | string, number, number>;

/** A sequence number the database assigns (`bigserial` on PostgreSQL, `integer` autoincrement on SQLite). */
type SeqColumn = ColumnType<number | string, never, never>;

/** The row of record table `T`: `id`, its clear columns from {@link CLEAR_COLUMNS}, `body`. */
export type RecordRow<T extends TableName> = { id: string; body: string } & {
  [C in (typeof CLEAR_COLUMNS)[T][number] as C[0]]: C[1] extends 'bigint' ? BigintColumn : string;
};

/**
 * The schema {@link MIGRATIONS} create, as Kysely's database type: one table per kind of
 * record ({@link RecordRow}), the meta values, the commit log, the audit log, and the
 * migrator's own table.
 */
export type SvcDb = { [T in TableName]: RecordRow<T> } & {
  svc_meta: { key: string; value: string };
  svc_commits: { seq: SeqColumn; ts_ms: BigintColumn; replica: string; body: string };
  svc_audit: { seq: SeqColumn; ts_ms: BigintColumn; agent_id: string; type: string; body: string };
  svc_migration: { name: string; timestamp: string };
};

/** Largest number of audit rows one retention statement deletes. */
const PRUNE_CHUNK = 2000;

/** Largest number of rows per INSERT statement (SQLite allows 32,766 bound values). */
const ROWS_PER_INSERT = 200;

type Tx = Transaction<SvcDb>;

/** Records over a Kysely database (either engine). */
export class SqlRecords {
  constructor(
    readonly db: Kysely<SvcDb>,
    readonly codec: RowCodec,
  ) {}

  /**
   * Creates or migrates the schema to this code's version.
   * @throws StateLoadError when the database holds migrations this code does not know (a
   *   newer version wrote it) or a migration fails
   */
  async migrate(): Promise<void> {
    const known = new Set(Object.keys(MIGRATIONS));
    const tables = await this.db.introspection.getTables();
    if (tables.some((t) => t.name === 'svc_migration')) {
      const applied = await this.db.selectFrom('svc_migration').select('name').execute();
      const unknown = applied.map((r) => String(r.name)).filter((n) => !known.has(n));
      if (unknown.length > 0) {
        throw new StateLoadError(`the state store was written by a newer svc (schema ${unknown.join(', ')}); run that version or restore a backup`);
      }
    } else if (tables.length > 0) {
      throw new StateLoadError(
        `the database is not an svc state store (it has tables ${tables
          .slice(0, 5)
          .map((t) => t.name)
          .join(', ')} and no svc schema); it was left untouched`,
      );
    }
    const migrator = new Migrator({
      db: this.db,
      provider: { getMigrations: async () => MIGRATIONS },
      migrationTableName: 'svc_migration',
      migrationLockTableName: 'svc_migration_lock',
    });
    const { error } = await migrator.migrateToLatest();
    // eslint-disable-next-line @typescript-eslint/no-base-to-string -- String() is the fallback for a value that is not an Error
    if (error) throw new StateLoadError(`cannot migrate the state store: ${(error as Error).message ?? String(error)}`);
  }

  /** Reads one meta value, or null. */
  async meta(key: string): Promise<string | null> {
    const row = await this.db.selectFrom('svc_meta').select('value').where('key', '=', key).executeTakeFirst();
    return row ? String(row.value) : null;
  }

  /** Sets meta values in one transaction. */
  async setMeta(values: Record<string, string>): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      for (const [key, value] of Object.entries(values)) await this.upsertMeta(trx, key, value);
    });
  }

  /** True when no table holds a record. */
  async isEmpty(): Promise<boolean> {
    for (const t of TABLE_NAMES) {
      if (await this.db.selectFrom(t).select('id').limit(1).executeTakeFirst()) return false;
    }
    return true;
  }

  /**
   * Reads every record into a read model, in one read transaction.
   * @throws StateLoadError when a body cannot be decrypted or parsed
   */
  async loadAll(): Promise<ControlState> {
    let state = new ControlState();
    await this.db.transaction().execute(async (trx) => {
      state = await this.loadIn(trx);
    });
    return state;
  }

  /**
   * Reads every record through `trx`, normally a transaction the caller holds (for a snapshot
   * consistent with other reads in it).
   */
  async loadIn(trx: Kysely<SvcDb>): Promise<ControlState> {
    const state = new ControlState();
    const changes: ChangeSet = {};
    for (const t of TABLE_NAMES) {
      const rows = await trx.selectFrom(t).select(['id', 'body']).execute();
      const m = new Map<string, RecordOf[typeof t]>();
      for (const r of rows) m.set(String(r.id), this.codec.decode(t, String(r.id), String(r.body)));
      (changes as Record<string, unknown>)[t] = m;
    }
    state.apply(changes);
    return state;
  }

  /** A change set as one commit-log body: `[[table, id, body or null], ...]`, bodies encoded as in their tables. */
  encodeCommit(changes: ChangeSet): string {
    const out: Array<[string, string, string | null]> = [];
    for (const t of TABLE_NAMES) {
      for (const [id, record] of (changes[t] as Map<string, RecordOf[typeof t] | null> | undefined) ?? []) {
        out.push([t, id, record === null ? null : this.codec.encode(t, record).body]);
      }
    }
    // audit entries travel too, so every replica's stream of new entries shows them
    for (const e of changes.audit ?? []) out.push([AUDIT_IN_COMMIT, '', JSON.stringify(this.auditRow(e))]);
    return JSON.stringify(out);
  }

  /**
   * The change set of a commit-log body.
   * @throws StateLoadError when a body cannot be decrypted or parsed
   */
  decodeCommit(body: string): ChangeSet {
    const out: ChangeSet = {};
    for (const [t, id, b] of JSON.parse(body) as Array<[TableName, string, string | null]>) {
      if ((t as string) === AUDIT_IN_COMMIT && b !== null) {
        (out.audit ??= []).push(this.auditEntryOf(JSON.parse(b) as { ts_ms: number; agent_id: string; type: string; body: string }));
        continue;
      }
      if (!TABLE_NAMES.includes(t)) continue;
      let m = out[t] as Map<string, unknown> | undefined;
      if (!m) (out as Record<string, unknown>)[t] = m = new Map();
      m.set(id, b === null ? null : this.codec.decode(t, id, b));
    }
    return out;
  }

  /**
   * Checks the state key against the stored key check value, before anything is written.
   * @param where the store's name, for messages
   * @throws StateLoadError when the store is encrypted and the key is missing or another
   */
  async checkKey(where: string): Promise<void> {
    const kcv = await this.meta('key_check');
    if (kcv === null) return;
    if (!this.codec.encrypted) throw new StateLoadError(`${where} is encrypted; set SVC_CONTROL_STATE_KEY_HEX to the key it was written with`);
    if (!this.codec.matchesKeyCheck(kcv))
      throw new StateLoadError(`cannot decrypt ${where}: SVC_CONTROL_STATE_KEY_HEX is not the key it was written with; it was left untouched`);
  }

  /**
   * With a key set, encrypts every body of a plaintext store (or one half-converted by a
   * crash) in one transaction and records the key check value.
   * @returns whether anything was rewritten
   */
  async encryptIfNeeded(): Promise<boolean> {
    if (!this.codec.encrypted) return false;
    if ((await this.meta('key_check')) !== null && !(await this.needsReencode())) return false;
    const state = await this.loadAll();
    const all: ChangeSet = {};
    for (const t of TABLE_NAMES) (all as Record<string, unknown>)[t] = new Map(state.table(t));
    await this.commit(all, { key_check: this.codec.keyCheck() }, (trx) => this.reencodeAudit(trx));
    return true;
  }

  /** Rewrites every audit body in the codec's mode (plaintext to encrypted). */
  private async reencodeAudit(trx: Tx): Promise<void> {
    for (let after = 0; ;) {
      const rows = await trx
        .selectFrom(AUDIT_TABLE)
        .select(['seq', 'ts_ms', 'agent_id', 'type', 'body'])
        .where('seq', '>', after)
        .orderBy('seq')
        .limit(1000)
        .execute();
      if (rows.length === 0) return;
      for (const r of rows) {
        const { body } = this.auditRow(this.auditEntryOf(r));
        await trx.updateTable(AUDIT_TABLE).set({ body }).where('seq', '=', r.seq).execute();
      }
      after = Number(rows[rows.length - 1].seq);
    }
  }

  /** True when some body is stored in plaintext while the codec encrypts (or the reverse). */
  async needsReencode(): Promise<boolean> {
    for (const t of [...TABLE_NAMES, AUDIT_TABLE] as const) {
      const row = await this.db.selectFrom(t).select('body').limit(1).executeTakeFirst();
      if (row && RowCodec.isEncrypted(String(row.body)) !== this.codec.encrypted) return true;
    }
    return false;
  }

  /** Applies a change set in one transaction (plus meta values and `extra` work, when given). */
  async commit(changes: ChangeSet, meta?: Record<string, string>, extra?: (trx: Tx) => Promise<void>): Promise<void> {
    // SQLite rolls a transaction back by itself on some errors (SQLITE_FULL, SQLITE_IOERR);
    // the ROLLBACK that follows then fails too: report the cause, not that.
    let cause: unknown = null;
    try {
      await this.db.transaction().execute(async (trx) => {
        try {
          await this.write(trx, changes);
          for (const [key, value] of Object.entries(meta ?? {})) await this.upsertMeta(trx, key, value);
          if (extra) await extra(trx);
        } catch (e) {
          cause = e;
          throw e;
        }
      });
    } catch (e) {
      throw cause ?? e;
    }
  }

  /** Writes a change set's rows within a transaction the caller holds. */
  async write(trx: Tx, changes: ChangeSet): Promise<void> {
    for (const t of TABLE_NAMES) {
      const writes = changes[t] as Map<string, RecordOf[typeof t] | null> | undefined;
      if (!writes || writes.size === 0) continue;
      const rows: Array<{ id: string; body: string } & StoredRow['clear']> = [];
      const deletes: string[] = [];
      for (const [id, record] of writes) {
        if (record === null) deletes.push(id);
        else {
          const row = this.codec.encode(t, record);
          rows.push({ id: row.id, ...row.clear, body: row.body });
        }
      }
      const columns = [...CLEAR_COLUMNS[t].map(([c]) => c), 'body'];
      for (let i = 0; i < rows.length; i += ROWS_PER_INSERT) {
        await trx
          .insertInto(t)
          .values(rows.slice(i, i + ROWS_PER_INSERT))
          .onConflict((oc) => oc.column('id').doUpdateSet(Object.fromEntries(columns.map((c) => [c, sql.ref(`excluded.${c}`)]))))
          .execute();
      }
      for (let i = 0; i < deletes.length; i += ROWS_PER_INSERT) {
        await trx
          .deleteFrom(t)
          .where('id', 'in', deletes.slice(i, i + ROWS_PER_INSERT))
          .execute();
      }
    }
    const audit = changes.audit ?? [];
    for (let i = 0; i < audit.length; i += ROWS_PER_INSERT) {
      await trx
        .insertInto(AUDIT_TABLE)
        .values(audit.slice(i, i + ROWS_PER_INSERT).map((e) => this.auditRow(e)))
        .execute();
    }
  }

  /** The row of an audit entry (its body encoded as record bodies are). */
  private auditRow(e: AuditEntry): { ts_ms: number; agent_id: string; type: string; body: string } {
    const body = JSON.stringify({ role: e.role, target: e.target, result: e.result });
    return { ts_ms: e.ts_ms, agent_id: e.agent_id, type: e.type, body: this.codec.encodeBody(auditContext(e.ts_ms, e.agent_id, e.type), body) };
  }

  /**
   * The entry of an audit row.
   * @throws StateLoadError when its body cannot be decrypted or parsed
   */
  private auditEntryOf(row: { ts_ms: unknown; agent_id: unknown; type: unknown; body: unknown }): AuditEntry {
    const ts = Number(row.ts_ms);
    const agent = String(row.agent_id);
    const type = String(row.type);
    const json = this.codec.decodeBody(auditContext(ts, agent, type), String(row.body), `audit entry ${ts}`);
    let body: Pick<AuditEntry, 'role' | 'target' | 'result'>;
    try {
      body = JSON.parse(json) as typeof body;
    } catch {
      throw new StateLoadError(`an audit entry of ${ts} is not readable JSON`);
    }
    return { ts_ms: ts, role: body.role, agent_id: agent, type, target: body.target ?? {}, result: body.result };
  }

  /** A page of the audit log, newest first (by commit order). */
  async queryAudit(query: AuditQuery): Promise<AuditPage> {
    let q = this.db.selectFrom(AUDIT_TABLE).select(['seq', 'ts_ms', 'agent_id', 'type', 'body']);
    if (query.sinceMs !== undefined) q = q.where('ts_ms', '>=', query.sinceMs);
    if (query.untilMs !== undefined) q = q.where('ts_ms', '<=', query.untilMs);
    if (query.agentId !== undefined) q = q.where('agent_id', '=', query.agentId);
    if (query.type !== undefined) q = q.where('type', '=', query.type);
    if (query.beforeSeq !== undefined) q = q.where('seq', '<', query.beforeSeq);
    const rows = await q
      .orderBy('seq', 'desc')
      .limit(query.limit + 1)
      .execute();
    const page = rows.slice(0, query.limit);
    return {
      entries: page.map((r) => this.auditEntryOf(r)),
      nextBeforeSeq: rows.length > query.limit ? Number(page[page.length - 1].seq) : null,
    };
  }

  /**
   * Deletes the audit entries older than `minTsMs` and all but the newest `maxEntries`, in
   * statements of at most {@link PRUNE_CHUNK} rows with a pause between them, so that a large
   * backlog (a lowered limit, a long downtime) never holds the database, or the embedded
   * store's event loop, for long.
   * @returns how many were deleted
   */
  async pruneAudit(retention: AuditRetention): Promise<number> {
    let n = 0;
    const chunk = async (column: 'ts_ms' | 'seq', op: '<' | '<=', value: number): Promise<number> => {
      const sub = this.db.selectFrom(AUDIT_TABLE).select('seq').where(column, op, value).orderBy('seq').limit(PRUNE_CHUNK);
      const r = await this.db.deleteFrom(AUDIT_TABLE).where('seq', 'in', sub).executeTakeFirst();
      await new Promise((resolve) => setImmediate(resolve));
      return Number(r.numDeletedRows ?? 0);
    };
    for (let d = PRUNE_CHUNK; d === PRUNE_CHUNK; n += d) d = await chunk('ts_ms', '<', retention.minTsMs);
    const cut = await this.db.selectFrom(AUDIT_TABLE).select('seq').orderBy('seq', 'desc').limit(1).offset(retention.maxEntries).executeTakeFirst();
    if (cut) for (let d = PRUNE_CHUNK; d === PRUNE_CHUNK; n += d) d = await chunk('seq', '<=', Number(cut.seq));
    return n;
  }

  private async upsertMeta(trx: Tx, key: string, value: string): Promise<void> {
    await trx
      .insertInto('svc_meta')
      .values({ key, value })
      .onConflict((oc) => oc.column('key').doUpdateSet({ value }))
      .execute();
  }
}
