/**
 * The PostgreSQL StateStore (docs/operations.md "State"; `--database-url` / `SVC_DATABASE_URL`): the same
 * records, migrations and codec as the embedded store ({@link SqlRecords}), over `pg` through
 * Kysely. The schema is created and migrated at start under an advisory lock, after the state
 * key has been checked against the stored key check value (a wrong key writes nothing).
 *
 * A database that cannot be reached at start is waited for (the server stays live, not
 * ready), retrying with exponential backoff and logging each attempt; wrong credentials, a
 * missing database, a database of another application or a schema newer than this code are
 * refused at once (exit 2).
 *
 * Replicas: every write transaction first takes one advisory transaction lock (writes are
 * serialised over all replicas, so each mutation sees every earlier one: two joins on one
 * invite cannot both pass), replays the commits of other replicas it has not seen, then
 * writes its rows and one `svc_commits` row holding them, and notifies `svc_commits` with the
 * sequence number. Other replicas replay commits in order from that table, woken by the
 * notification or, should one be lost, by polling every {@link POLL_MS} ms; a notification
 * carries no data. The availability sweep runs on the replica holding a session-level
 * advisory lock (re-tried every second by the others, so a dead sweeper is replaced within
 * about a second of PostgreSQL noticing its connection is gone).
 *
 * Database faults (a stop, a restart, `pg_terminate_backend`): every connection this store
 * holds (pooled, checked out, the LISTEN session, the sweeper's lock session) has an `error`
 * listener, so a lost connection never becomes an unhandled `error` event; the process never
 * exits because of the database once it has started. The store then reports itself
 * unreachable (mutations `unavailable`, reads from memory) until a query answers again; the
 * LISTEN session and the sweeper's lock session are opened again with exponential backoff
 * ({@link RECONNECT_MIN_MS} to {@link RECONNECT_MAX_MS}), and once listening the commits that
 * may have been missed are replayed.
 */
import { Logger } from '@nestjs/common';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { Client, Pool, PoolClient } from 'pg';
import { newId } from '@svc/protocol';
import { ChangeSet, ControlState, TABLE_NAMES } from './state.model';
import { RowCodec } from './row-codec';
import { exportState, readSnapshotFile, recordsOfSnapshot } from './snapshot-file';
import { SqlRecords, SvcDb } from './sql-records';
import { replicationLagHistogram, sweeperLeaderGauge } from './store-metrics';
import { AuditPage, AuditQuery, AuditRetention } from './audit-log';
import { requireOpen, StateLoadError, StateStore, StoreUnavailableError } from './state-store.port';

/** Advisory lock keys: migrations, writes (transaction-level), the sweeper (session-level). */
const MIGRATION_LOCK = 0x73766331;
const WRITE_LOCK = 0x73766332;
const SWEEPER_LOCK = 0x73766333;
/** Fallback poll of the commit log, ms (notifications wake replicas at once). */
export const POLL_MS = 500;
/** Commits are kept this long for replicas that were away, ms. */
const COMMIT_RETENTION_MS = 3_600_000;
/** NOTIFY channel. */
const CHANNEL = 'svc_commits';
/** First and largest delay between attempts to open the LISTEN session again, ms. */
export const RECONNECT_MIN_MS = 250;
export const RECONNECT_MAX_MS = 4000;
/** How often the sweeper election is tried by a replica that is not the sweeper (and the sweeper checks its lock session), ms. */
const CAMPAIGN_MS = 1000;
/**
 * Time limit of every statement once the store is loaded, ms, measured by the client: a
 * database that stops answering without closing its connections (a network partition, a
 * stalled proxy) fails the statement in flight after this long, the connection is dropped,
 * and the store reports itself unreachable.
 */
export const QUERY_TIMEOUT_MS = 3000;
/** The same while the store is opened (migrations, loading every record), ms. */
export const OPEN_QUERY_TIMEOUT_MS = 60_000;
/** Time limit of opening a connection, ms. */
export const CONNECT_TIMEOUT_MS = 5000;

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

/** The connection was lost while opening the store: {@link PostgresStateStore.open} waits and tries again. */
class DatabaseAway extends Error {}

/** Errors of the connection rather than of the statement: the database is not reachable. */
function isConnectionError(e: unknown): boolean {
  const err = e as { code?: string; message?: string };
  if (typeof err?.code === 'string' && /^(08|57P0|53300)/.test(err.code)) return true;
  if (typeof err?.code === 'string' && ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH'].includes(err.code)) return true;
  return /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|not queryable|Client was closed|Query read timeout/i.test(
    err?.message ?? '',
  );
}

/**
 * Makes a statement that exceeds its `query_timeout` end its connection: pg leaves the timed-out
 * statement running on the connection and queues the next ones behind it, so a connection that
 * stopped answering would stay stuck in the pool. Destroyed, it fails what is queued on it, is
 * dropped by the pool on release, and the next statement opens a new one.
 */
function dropOnTimeout(client: Client | PoolClient): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  (client as { query: unknown }).query = (...args: unknown[]): unknown => {
    const result = query(...args);
    if (result && typeof (result as Promise<unknown>).catch === 'function') {
      (result as Promise<unknown>).catch((e: Error) => {
        if (/Query read timeout/.test(e?.message ?? '')) (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
      });
    }
    return result;
  };
}

export class PostgresStateStore implements StateStore {
  private readonly logger = new Logger('PostgresStore');
  private readonly codec: RowCodec;
  private pool: Pool | null = null;
  private records: SqlRecords | null = null;
  /** This process, as named in the commit log. */
  readonly replicaId = newId('replica');
  private lastSeq = 0;
  private remote: (changes: ChangeSet) => void = () => undefined;
  private chain: Promise<unknown> = Promise.resolve();
  private listener: Client | null = null;
  private leader: Client | null = null;
  private timers: NodeJS.Timeout[] = [];
  private closed = false;
  private sweeper = false;
  private reachable = true;
  /** True once {@link open} has loaded the store (statements get {@link QUERY_TIMEOUT_MS}). */
  private loaded = false;
  /** The last error that made the store unreachable. */
  private unreachableWhy = '';
  private readonly lag = replicationLagHistogram();
  private readonly leaderGauge = sweeperLeaderGauge();

  constructor(private readonly options: PostgresStoreOptions) {
    this.codec = new RowCodec(options.key);
  }

  get isSweeper(): boolean {
    return this.sweeper;
  }

  get isReachable(): boolean {
    return this.reachable;
  }

  async sync(): Promise<void> {
    await this.exclusive(async () => {
      if (this.closed || !this.records) return;
      try {
        await this.replay(this.records.db);
      } catch (e) {
        if (!isConnectionError(e)) throw e;
        this.setReachable(false, (e as Error).message);
      }
    });
  }

  onRemote(listener: (changes: ChangeSet) => void): void {
    this.remote = listener;
  }

  async write(build: () => ChangeSet | null): Promise<boolean> {
    // Known unreachable: refused at once, not after a replay waiting for its timeouts (the
    // change feed's poll, every POLL_MS, finds out when the database answers again).
    const refuse = () => new StoreUnavailableError(`the state database does not answer (${this.unreachableWhy})`);
    requireOpen(this.records);
    if (!this.reachable) throw refuse();
    return this.exclusive(async () => {
      const records = requireOpen(this.records);
      if (!this.reachable) throw refuse();
      let seq: number | null = null;
      try {
        await records.db.transaction().execute(async (trx) => {
          await sql`SELECT pg_advisory_xact_lock(${WRITE_LOCK})`.execute(trx);
          await this.replay(trx);
          const changes = build();
          if (!changes) return;
          await records.write(trx, changes);
          const row = await trx
            .insertInto('svc_commits')
            .values({ ts_ms: Date.now(), replica: this.replicaId, body: records.encodeCommit(changes) })
            .returning('seq')
            .executeTakeFirstOrThrow();
          await sql`SELECT pg_notify(${CHANNEL}, ${String(row.seq)})`.execute(trx);
          seq = Number(row.seq);
        });
      } catch (e) {
        if (isConnectionError(e)) {
          this.setReachable(false, (e as Error).message);
          throw new StoreUnavailableError((e as Error).message);
        }
        throw e;
      }
      this.setReachable(true);
      if (seq !== null) this.lastSeq = seq;
      return seq !== null;
    });
  }

  async queryAudit(query: AuditQuery): Promise<AuditPage> {
    const records = requireOpen(this.records);
    try {
      return await records.queryAudit(query);
    } catch (e) {
      if (isConnectionError(e)) {
        this.setReachable(false, (e as Error).message);
        throw new StoreUnavailableError((e as Error).message);
      }
      throw e;
    }
  }

  async pruneAudit(retention: AuditRetention): Promise<number> {
    if (!this.records) return 0;
    try {
      return await this.records.pruneAudit(retention);
    } catch (e) {
      if (isConnectionError(e)) return 0;
      throw e;
    }
  }

  describe(): string {
    return `${redactUrl(this.options.url)}${this.options.key ? ' (AES-256-GCM encrypted records)' : ''}`;
  }

  /**
   * Connects (retrying while the database is unreachable when `onWait` is given) and sets up
   * {@link records}.
   * @throws StateLoadError on bad credentials or a missing database; without `onWait`, also when unreachable
   */
  private async connect(onWait?: (holder: string) => void): Promise<SqlRecords> {
    const where = redactUrl(this.options.url);
    let delay = this.options.retryMinMs ?? 250;
    for (let attempt = 1; ; attempt++) {
      const pool = this.newPool();
      try {
        await pool.query('SELECT 1');
        this.pool = pool;
        break;
      } catch (e) {
        await pool.end().catch(() => undefined);
        const err = e as Error & { code?: string };
        if ((err.code && FATAL_CODES.has(err.code)) || !onWait)
          throw new StateLoadError(`cannot use ${where}: ${err.message}${err.code ? ` (${err.code})` : ''}`);
        onWait(`database ${where} unreachable (attempt ${attempt}: ${err.message}); retrying in ${delay} ms`);
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(this.options.retryMaxMs ?? 10_000, delay * 2);
      }
    }
    this.records = new SqlRecords(new Kysely<SvcDb>({ dialect: new PostgresDialect({ pool: this.pool }) }), this.codec);
    return this.records;
  }

  /**
   * A pool whose every client, idle or checked out, has an `error` listener: a connection the
   * database ends (stop, restart, `pg_terminate_backend`) fails the query in flight, if any,
   * and is dropped from the pool; the next query opens a new one.
   */
  private newPool(): Pool {
    const pool = new Pool({ connectionString: this.options.url, max: 4, connectionTimeoutMillis: CONNECT_TIMEOUT_MS, keepAlive: true });
    // pg-pool listens on idle clients only; a checked-out client (a transaction between two
    // statements) would otherwise emit an unhandled 'error' and end the process.
    pool.on('connect', (client) => {
      client.on('error', (e: Error) => this.connectionLost('a pooled connection', e));
      // pg reads the limit at each statement: the open one while opening, the short one after
      Object.defineProperty((client as unknown as { connectionParameters: object }).connectionParameters, 'query_timeout', {
        get: () => (this.loaded ? QUERY_TIMEOUT_MS : OPEN_QUERY_TIMEOUT_MS),
      });
      dropOnTimeout(client);
    });
    pool.on('error', (e: Error) => this.connectionLost('an idle pooled connection', e));
    return pool;
  }

  /**
   * A client of its own, outside the pool, for a session that must outlive single statements
   * (the LISTEN session, the sweeper's lock session): not yet connected; its statements get
   * {@link QUERY_TIMEOUT_MS} and one that exceeds it ends the connection. The caller adds the
   * `error` and `end` listeners before connecting.
   */
  private newSessionClient(): Client {
    const client = new Client({
      connectionString: this.options.url,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      keepAlive: true,
      query_timeout: QUERY_TIMEOUT_MS,
    });
    dropOnTimeout(client);
    return client;
  }

  /**
   * Notes a connection the database ended. Reachability is judged by the queries (the next
   * one opens a new connection): a single connection ended by the server is no outage.
   */
  private connectionLost(which: string, e: Error): void {
    if (this.closed) return;
    this.logger.debug?.({ msg: `${which} to the state database was lost`, error: e.message });
  }

  async open(onWait: (holder: string) => void): Promise<ControlState> {
    let delay = this.options.retryMinMs ?? 250;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.openOnce(onWait);
      } catch (e) {
        // The database went away between connecting and loading: wait for it, as at start.
        if (!(e instanceof DatabaseAway)) throw e;
        onWait(`database ${redactUrl(this.options.url)} lost while loading (attempt ${attempt}: ${e.message}); retrying in ${delay} ms`);
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(this.options.retryMaxMs ?? 10_000, delay * 2);
      }
    }
  }

  /**
   * One attempt of {@link open}.
   * @throws DatabaseAway when the connection was lost after connecting (nothing is held then)
   */
  private async openOnce(onWait: (holder: string) => void): Promise<ControlState> {
    const where = redactUrl(this.options.url);
    this.closed = false;
    this.loaded = false;
    await this.connect(onWait);
    try {
      const records = this.records!;
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
      let state = new ControlState();
      await records.db
        .transaction()
        .setIsolationLevel('repeatable read')
        .execute(async (trx) => {
          // One snapshot: the records and the last commit they include.
          const last = await trx
            .selectFrom('svc_commits')
            .select(sql<string>`coalesce(max(seq), 0)`.as('seq'))
            .executeTakeFirstOrThrow();
          this.lastSeq = Number(last.seq);
          state = await records.loadIn(trx);
        });
      this.loaded = true;
      this.startFeed();
      return state;
    } catch (e) {
      await this.close();
      if (e instanceof StateLoadError) throw e;
      if (isConnectionError(e)) throw new DatabaseAway((e as Error).message);
      throw new StateLoadError(`cannot open ${where}: ${(e as Error).message}`);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    await this.chain.catch(() => undefined);
    for (const c of [this.listener, this.leader]) await c?.end().catch(() => undefined);
    this.listener = this.leader = null;
    this.sweeper = false;
    this.leaderGauge.set(0);
    const db = this.records?.db;
    this.records = null;
    if (db) await db.destroy().catch(() => undefined);
    else await this.pool?.end().catch(() => undefined);
    this.pool = null;
  }

  /**
   * `svc state export` on PostgreSQL: a consistent snapshot (one repeatable-read transaction),
   * encrypted with the key when set, while replicas run. Writes nothing to the database.
   * @returns numbers of records per table
   */
  async exportTo(file: string | null, write: (text: string) => void = (t) => process.stdout.write(t)): Promise<Record<string, number>> {
    const where = redactUrl(this.options.url);
    const records = await this.connect();
    try {
      const tables = (await records.db.introspection.getTables()).map((t) => t.name);
      if (!tables.includes('svc_meta')) throw new StateLoadError(`${where} holds no svc state store`);
      await records.checkKey(where);
      let state = new ControlState();
      await records.db
        .transaction()
        .setIsolationLevel('repeatable read')
        .execute(async (trx) => {
          state = await records.loadIn(trx);
        });
      return await exportState(state, file, this.options.key, write);
    } finally {
      await this.close();
    }
  }

  /**
   * `svc state import FILE` on PostgreSQL: into an empty store (created or migrated first),
   * in one transaction.
   * @param fileKey key the file was written with (default: the store's)
   * @throws StateLoadError when the store is not empty or the file cannot be read (nothing changed)
   */
  async importFrom(file: string, fileKey: Buffer | null = this.options.key): Promise<Record<string, number>> {
    const where = redactUrl(this.options.url);
    const raw = await readSnapshotFile(file, fileKey);
    if (raw === null) throw new StateLoadError(`${file} does not exist`);
    const changes = recordsOfSnapshot(raw);
    const records = await this.connect();
    try {
      await records.migrate();
      await records.checkKey(where);
      if (!(await records.isEmpty())) throw new StateLoadError(`the store in ${where} is not empty; import only into an empty store (nothing was changed)`);
      await records.commit(changes, this.options.key ? { key_check: this.codec.keyCheck() } : {});
      return Object.fromEntries(TABLE_NAMES.map((t) => [t, changes[t]?.size ?? 0]));
    } finally {
      await this.close();
    }
  }

  /** Runs `fn` after every earlier replay or write of this process (one at a time). */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.chain.then(fn, fn);
    this.chain = p.catch(() => undefined);
    return p;
  }

  /**
   * Replays the commits of other replicas after {@link lastSeq}, in order, through the
   * remote listener. When commits were dropped from the log before this replica saw them
   * (away longer than the retention), it reloads every record instead.
   */
  private async replay(db: Kysely<SvcDb>): Promise<void> {
    const records = requireOpen(this.records);
    for (;;) {
      const rows = await db.selectFrom('svc_commits').select(['seq', 'ts_ms', 'body']).where('seq', '>', this.lastSeq).orderBy('seq').limit(1000).execute();
      if (rows.length === 0) return;
      if (this.lastSeq > 0 && Number(rows[0].seq) > this.lastSeq + 1) {
        const oldest = await db
          .selectFrom('svc_commits')
          .select(sql<string>`min(seq)`.as('seq'))
          .executeTakeFirstOrThrow();
        if (Number(oldest.seq) > this.lastSeq + 1) {
          this.logger.warn({ msg: 'commits this replica did not see were dropped from the log; reloading every record' });
          await this.resync(db);
          return;
        }
      }
      for (const row of rows) {
        this.remote(records.decodeCommit(String(row.body)));
        this.lastSeq = Number(row.seq);
        this.lag.observe(Math.max(0, Date.now() - Number(row.ts_ms)) / 1000);
      }
    }
  }

  /** Reloads every record and hands the differences to the remote listener as one change set. */
  private async resync(db: Kysely<SvcDb>): Promise<void> {
    const records = requireOpen(this.records);
    const last = await db
      .selectFrom('svc_commits')
      .select(sql<string>`coalesce(max(seq), 0)`.as('seq'))
      .executeTakeFirstOrThrow();
    const fresh = await records.loadIn(db);
    const changes: ChangeSet = {};
    for (const t of TABLE_NAMES) {
      const m = new Map<string, unknown>();
      for (const [id, r] of fresh.table(t)) m.set(id, r);
      (changes as Record<string, unknown>)[t] = m;
    }
    this.remote(changes);
    this.lastSeq = Number(last.seq);
  }

  /** The change feed (LISTEN plus polling), the sweeper election and the log's retention. */
  private startFeed(): void {
    const tick = (fn: () => Promise<void>, ms: number) => {
      const t = setInterval(() => void fn().catch(() => undefined), ms);
      t.unref();
      this.timers.push(t);
    };
    // At most one replay waits in line: while the database does not answer, each takes up to
    // QUERY_TIMEOUT_MS, and polls must not pile up in front of the writes.
    let queued: Promise<void> | null = null;
    const catchUp = () =>
      (queued ??= this.exclusive(async () => {
        queued = null;
        if (this.closed) return;
        try {
          await this.replay(requireOpen(this.records).db);
          this.setReachable(true);
        } catch (e) {
          if (isConnectionError(e)) this.setReachable(false, (e as Error).message);
          else this.logger.error({ msg: 'replaying commits failed', error: (e as Error).message });
        }
      }));
    tick(catchUp, POLL_MS);
    tick(() => this.listen(catchUp), RECONNECT_MIN_MS);
    tick(() => this.campaign(), CAMPAIGN_MS);
    tick(() => this.prune(), 60_000);
    void this.listen(catchUp);
    void this.campaign();
  }

  /** When the LISTEN session may be opened again (epoch ms), and the delay after that. */
  private listenAt = 0;
  private listenDelay = RECONNECT_MIN_MS;

  /**
   * Opens the LISTEN session when there is none (and the backoff allows): notifications call
   * `onNotify`, and so does a successful LISTEN (commits made while not listening). A lost
   * session is opened again after {@link RECONNECT_MIN_MS}, doubling up to {@link RECONNECT_MAX_MS}
   * while attempts fail. Never throws.
   */
  private async listen(onNotify: () => Promise<void>): Promise<void> {
    if (this.listener || this.closed || Date.now() < this.listenAt) return;
    const client = this.newSessionClient();
    this.listener = client;
    let listening = false;
    const drop = (e?: Error) => {
      if (this.listener !== client) return;
      this.listener = null;
      this.listenAt = Date.now() + this.listenDelay;
      this.listenDelay = Math.min(RECONNECT_MAX_MS, this.listenDelay * 2);
      if (listening && !this.closed)
        this.logger.warn({ msg: 'the LISTEN session to the state database was lost; polling until it is open again', error: e?.message });
      client.end().catch(() => undefined);
    };
    client.on('error', drop);
    client.on('end', () => drop());
    client.on('notification', () => void onNotify());
    try {
      await client.connect();
      await client.query(`LISTEN ${CHANNEL}`);
      if (this.listener !== client) return;
      listening = true;
      this.listenDelay = RECONNECT_MIN_MS;
      void onNotify(); // anything committed while not listening
    } catch (e) {
      drop(e as Error);
    }
  }

  /**
   * Tries to become the sweeper (a session-level advisory lock on a connection of its own).
   * A lost lock session ends the role at once (PostgreSQL released the lock with it); the
   * next attempt opens a new session. Never throws.
   */
  private async campaign(): Promise<void> {
    if (this.closed) return;
    if (this.sweeper) {
      // The lock lives as long as its session: a session that no longer answers (a partition,
      // a failover behind the same address) may have lost it; a timeout drops the session.
      await this.leader?.query('SELECT 1').catch(() => undefined);
      return;
    }
    if (!this.leader) {
      const client = this.newSessionClient();
      let connected = false;
      const lost = (e?: Error) => {
        if (!connected) return; // a failed connect: its error goes to connect()'s promise
        if (this.leader === client) {
          this.leader = null;
          if (this.sweeper && !this.closed) this.logger.warn({ msg: 'lost the sweeper lock (connection to the database lost)', error: e?.message });
          this.sweeper = false;
          this.leaderGauge.set(0);
        }
        client.end().catch(() => undefined);
      };
      client.on('error', lost);
      client.on('end', () => lost());
      try {
        await client.connect();
      } catch {
        client.end().catch(() => undefined);
        return;
      }
      connected = true;
      if (this.closed) {
        client.end().catch(() => undefined);
        return;
      }
      this.leader = client;
    }
    const leader = this.leader;
    try {
      const r = await leader.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [SWEEPER_LOCK]);
      if (r.rows[0]?.ok && !this.closed && this.leader === leader) {
        this.sweeper = true;
        this.leaderGauge.set(1);
        this.logger.log({ msg: 'this replica runs the availability sweep', replica: this.replicaId });
      }
    } catch {
      /* the connection's error handler resets it */
    }
  }

  /** The sweeper drops commits older than the retention. */
  private async prune(): Promise<void> {
    if (!this.sweeper || !this.records) return;
    await this.records.db
      .deleteFrom('svc_commits')
      .where('ts_ms', '<', Date.now() - COMMIT_RETENTION_MS)
      .execute();
  }

  private setReachable(ok: boolean, why?: string): void {
    if (!ok) this.unreachableWhy = why ?? 'connection lost';
    if (ok === this.reachable) return;
    this.reachable = ok;
    if (ok) this.logger.log({ msg: 'the state database answers again' });
    else this.logger.error({ msg: 'the state database cannot be reached; mutations are refused (unavailable), reads are served from memory', error: why });
  }
}
