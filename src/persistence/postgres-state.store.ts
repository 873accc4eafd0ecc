/**
 * The PostgreSQL StateStore (PROTOCOL.md 10; `--database-url` / `SVC_DATABASE_URL`): the same
 * records, migrations and codec as the embedded store ({@link SqlRecords}), over `pg` through
 * Kysely. The schema is created and migrated at start under an advisory lock, after the state
 * key has been checked against the stored key check value (a wrong key writes nothing).
 *
 * A database that cannot be reached at start is waited for (the server stays live, not
 * ready), retrying with exponential backoff and logging each attempt; wrong credentials, a
 * missing database, a database of another application or a schema newer than this code are
 * refused at once (exit 2).
 *
 * This adapter serves one replica; several replicas on one database need the change feed and
 * the sweeper election of issue 10, which are not built yet.
 */
import { Kysely, PostgresDialect, sql } from 'kysely';
import { Pool } from 'pg';
import { ChangeSet, ControlState } from './state.model';
import { RowCodec } from './row-codec';
import { SqlRecords } from './sql-records';
import { StateLoadError, StateStore } from './state-store.port';

/** Key of the advisory lock held while migrating (any replica). */
const MIGRATION_LOCK = 0x73766331;

/** SQLSTATEs that retrying will not fix: bad credentials, no such database, no permission. */
const FATAL_CODES = new Set(['28P01', '28000', '3D000', '42501']);

export interface PostgresStoreOptions {
  /** `postgres://user:password@host:port/database` */
  url: string;
  /** AES-256 key of record bodies, or null for plaintext. */
  key: Buffer | null;
  /** First and largest delay between connection attempts at start, ms (default 250 and 10,000). */
  retryMinMs?: number;
  retryMaxMs?: number;
}

/** The URL without its password, for messages and logs. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'the database URL';
  }
}

export class PostgresStateStore implements StateStore {
  private readonly codec: RowCodec;
  private pool: Pool | null = null;
  private records: SqlRecords | null = null;

  constructor(private readonly options: PostgresStoreOptions) {
    this.codec = new RowCodec(options.key);
  }

  describe(): string {
    return `${redactUrl(this.options.url)}${this.options.key ? ' (AES-256-GCM encrypted records)' : ''}`;
  }

  async open(onWait: (holder: string) => void): Promise<ControlState> {
    const where = redactUrl(this.options.url);
    let delay = this.options.retryMinMs ?? 250;
    for (let attempt = 1; ; attempt++) {
      const pool = new Pool({ connectionString: this.options.url, max: 4, connectionTimeoutMillis: 5000 });
      pool.on('error', () => undefined); // an idle client lost: the next query reconnects
      try {
        await pool.query('SELECT 1');
        this.pool = pool;
        break;
      } catch (e) {
        await pool.end().catch(() => undefined);
        const err = e as Error & { code?: string };
        if (err.code && FATAL_CODES.has(err.code)) throw new StateLoadError(`cannot use ${where}: ${err.message} (${err.code})`);
        onWait(`database ${where} unreachable (attempt ${attempt}: ${err.message}); retrying in ${delay} ms`);
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(this.options.retryMaxMs ?? 10_000, delay * 2);
      }
    }
    try {
      this.records = new SqlRecords(new Kysely({ dialect: new PostgresDialect({ pool: this.pool }) }), this.codec);
      const records = this.records;
      const hasMeta = (await records.db.introspection.getTables()).some((t) => t.name === 'svc_meta');
      if (hasMeta) await records.checkKey(where);
      // Lock and unlock on one connection: advisory locks belong to the session.
      await records.db.connection().execute(async (conn) => {
        await sql`SELECT pg_advisory_lock(${MIGRATION_LOCK})`.execute(conn);
        try {
          await new SqlRecords(conn, this.codec).migrate();
        } finally {
          await sql`SELECT pg_advisory_unlock(${MIGRATION_LOCK})`.execute(conn);
        }
      });
      await records.checkKey(where);
      await records.encryptIfNeeded();
      return await records.loadAll();
    } catch (e) {
      await this.close();
      if (e instanceof StateLoadError) throw e;
      throw new StateLoadError(`cannot open ${where}: ${(e as Error).message}`);
    }
  }

  async commit(changes: ChangeSet): Promise<void> {
    if (!this.records) throw new Error('the state store is not open');
    await this.records.commit(changes);
  }

  async close(): Promise<void> {
    const db = this.records?.db;
    this.records = null;
    if (db) await db.destroy().catch(() => undefined);
    else await this.pool?.end().catch(() => undefined);
    this.pool = null;
  }
}
