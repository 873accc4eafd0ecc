/**
 * The embedded StateStore (docs/operations.md "State"): a SQLite database `<state-dir>/state.db` in WAL
 * mode through better-sqlite3, one process at a time (`state.lock`; a second `svc` waits as a
 * standby), and a key check file `state.keycheck.json` beside it so that a wrong or missing
 * state key is refused before anything in the directory is opened for writing.
 *
 * Durability: `synchronous=NORMAL` (the default) makes every acknowledged commit survive a
 * killed process; `SVC_STATE_SYNC=full` (`synchronous=FULL`, an fsync per commit) also survives
 * power loss. A `state.json` of an earlier version is imported on first start and renamed
 * `state.json.imported`.
 *
 * A commit the file system refuses (disk full, I/O error, read-only) is rolled back whole by
 * SQLite; the store then reports itself unreachable (`/readyz` 503, mutations `unavailable`
 * naming the cause) until a commit succeeds again or a probe every
 * {@link SPACE_PROBE_INTERVAL_MS} finds room to write in the directory.
 */
import Database from 'better-sqlite3';
import { Logger } from '@nestjs/common';
import { Kysely, SqliteDialect } from 'kysely';
import { existsSync, openSync, readSync, closeSync, statSync } from 'node:fs';
import { readFile, rename, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic } from '@svc/ops';
import { ChangeSet, ControlState, TABLE_NAMES } from './state.model';
import { RowCodec } from './row-codec';
import { exportState, recordsOfSnapshot, readSnapshotFile } from './snapshot-file';
import { SqlRecords, SvcDb } from './sql-records';
import { replicationLagHistogram, sweeperLeaderGauge } from './store-metrics';
import { StateDirLock } from './state-lock';
import { requireOpen, StateLoadError, StateStore, StoreUnavailableError } from './state-store.port';
import { AuditPage, AuditQuery, AuditRetention } from './audit-log';

/** `PRAGMA application_id` of an svc state database ("svc1"). */
export const SQLITE_APPLICATION_ID = 0x73766331;

/** While commits fail for the file system, how often the directory is probed for room, ms. */
export const SPACE_PROBE_INTERVAL_MS = 500;
/** Bytes the probe writes (then deletes) in the state directory: a few pages and a WAL frame. */
const SPACE_PROBE_BYTES = 64 * 1024;

/**
 * Why a commit failed, when the cause is the file system under the state directory rather
 * than the change itself; null for any other error.
 * @param e an error thrown by better-sqlite3 (its `code` is `SQLITE_FULL`, `SQLITE_IOERR_WRITE`, ...) or by Node (`ENOSPC`, ...)
 */
export function fileSystemFailure(e: unknown): string | null {
  const code = String((e as NodeJS.ErrnoException)?.code ?? '');
  if (code === 'SQLITE_FULL' || code === 'ENOSPC' || code === 'EDQUOT') return `the disk of the state directory is full (${code})`;
  if (code.startsWith('SQLITE_IOERR') || code === 'EIO') return `I/O error on the state directory (${code})`;
  if (code.startsWith('SQLITE_READONLY') || code === 'EROFS') return `the state directory is read-only (${code})`;
  return null;
}

/** What an operator does about a state database `svc` cannot use (appended to start-up refusals). */
export const DAMAGED_STORE_REMEDY =
  'it was left untouched and svc does not start on an empty store in its place. Restore a backup (stop svc, move the file away, then svc state import FILE of a svc state export into the emptied state directory), or move the file away to start empty';

/** Durability of commits (`SVC_STATE_SYNC`). */
export type StateSync = 'normal' | 'full';

export interface SqliteStoreOptions {
  /** The state directory. */
  dir: string;
  /** AES-256 key of record bodies, or null for plaintext. */
  key: Buffer | null;
  /** `normal` (default): survives a killed process; `full`: also power loss. */
  sync?: StateSync;
}

interface KeyCheckFile {
  format: 'svc-state-keycheck';
  encrypted: boolean;
  key_check?: string;
}

/** The embedded SQLite StateStore. */
export class SqliteStateStore implements StateStore {
  private readonly logger = new Logger('SqliteStore');
  readonly dbFile: string;
  readonly keyCheckFile: string;
  readonly legacyFile: string;
  private readonly lock: StateDirLock;
  private readonly codec: RowCodec;
  private sqlite: Database.Database | null = null;
  private records: SqlRecords | null = null;
  /** 1 once loaded: the one process of a state directory runs the sweep. */
  private readonly leaderGauge = sweeperLeaderGauge();
  /** Why commits fail now (disk full, ...), or null while they succeed. */
  private failing: string | null = null;
  private probeTimer: NodeJS.Timeout | null = null;

  constructor(private readonly options: SqliteStoreOptions) {
    this.dbFile = join(options.dir, 'state.db');
    this.keyCheckFile = join(options.dir, 'state.keycheck.json');
    this.legacyFile = join(options.dir, 'state.json');
    this.lock = new StateDirLock(options.dir);
    this.codec = new RowCodec(options.key);
    // exported in this mode too, for dashboards; never observed (no other replica)
    replicationLagHistogram();
  }

  describe(): string {
    return `${this.dbFile}${this.options.key ? ' (AES-256-GCM encrypted records)' : ''}`;
  }

  async open(onWait: (holder: string) => void): Promise<ControlState> {
    const legacy = await this.precheck();
    await this.lock.acquire(onWait);
    try {
      await this.openDatabase(false);
      const records = this.records!;
      await records.checkKey(this.dbFile);
      if (legacy && (await records.isEmpty())) {
        await records.commit(legacy, this.options.key ? { key_check: this.codec.keyCheck() } : {});
      }
      if (existsSync(this.legacyFile)) await rename(this.legacyFile, `${this.legacyFile}.imported`);
      if (await records.encryptIfNeeded()) {
        // Nothing of the plaintext stays behind: rebuild the file and empty the WAL.
        this.sqlite!.exec('VACUUM');
        this.sqlite!.pragma('wal_checkpoint(TRUNCATE)');
      }
      await this.writeKeyCheckFile();
      const state = await records.loadAll();
      this.leaderGauge.set(1);
      return state;
    } catch (e) {
      await this.close();
      if (e instanceof StateLoadError) throw e;
      const code = String((e as NodeJS.ErrnoException).code ?? '');
      if (code.startsWith('SQLITE_CORRUPT') || code.startsWith('SQLITE_NOTADB')) {
        throw new StateLoadError(`${this.dbFile} is damaged (${code}: ${(e as Error).message}); ${DAMAGED_STORE_REMEDY}`);
      }
      throw new StateLoadError(`cannot open ${this.dbFile}: ${(e as Error).message}`);
    }
  }

  /** One process owns the file: no other commits to catch up on, and it always sweeps. */
  readonly isSweeper = true;

  /** False while commits fail for the file system (disk full, I/O error, read-only). */
  get isReachable(): boolean {
    return this.failing === null;
  }

  /** Why commits fail now (e.g. `the disk of the state directory is full (SQLITE_FULL)`), or null. */
  get unavailableReason(): string | null {
    return this.failing;
  }

  /**
   * @throws StoreUnavailableError naming the cause when the file system refuses the commit
   *   (nothing of it was applied; the store is unreachable until room returns)
   */
  async write(build: () => ChangeSet | null): Promise<boolean> {
    const records = requireOpen(this.records);
    const changes = build();
    if (!changes) return false;
    try {
      await records.commit(changes);
    } catch (e) {
      const why = fileSystemFailure(e);
      if (why === null) throw e;
      this.setFailing(why, (e as Error).message);
      throw new StoreUnavailableError(`${why}: ${(e as Error).message}`);
    }
    this.setFailing(null);
    return true;
  }

  /** Records whether commits fail for the file system; while they do, probes for room. */
  private setFailing(why: string | null, detail?: string): void {
    if (why === this.failing) return;
    const was = this.failing;
    this.failing = why;
    if (why !== null) {
      this.logger.error({
        msg: `${why}; mutations are refused (unavailable) and reads served from memory until room returns`,
        error: detail,
        dir: this.options.dir,
      });
      this.probeTimer ??= setInterval(() => void this.probeSpace(), SPACE_PROBE_INTERVAL_MS).unref();
    } else {
      if (this.probeTimer) clearInterval(this.probeTimer);
      this.probeTimer = null;
      if (was !== null) this.logger.log({ msg: 'the state directory accepts writes again', dir: this.options.dir });
    }
  }

  /** Writes, syncs and deletes {@link SPACE_PROBE_BYTES} in the state directory; success ends the failing state. */
  private async probeSpace(): Promise<void> {
    if (this.failing === null || !this.records) return;
    const file = join(this.options.dir, 'state.space-probe');
    try {
      await writeFile(file, Buffer.alloc(SPACE_PROBE_BYTES, 0x5a), { flush: true });
      this.setFailing(null);
    } catch {
      // still no room (or still read-only); the next probe tries again
    } finally {
      await unlink(file).catch(() => undefined);
    }
  }

  async sync(): Promise<void> {
    // one process per state directory: nothing else commits
  }

  async queryAudit(query: AuditQuery): Promise<AuditPage> {
    return requireOpen(this.records).queryAudit(query);
  }

  async pruneAudit(retention: AuditRetention): Promise<number> {
    if (!this.records) return 0;
    return this.records.pruneAudit(retention);
  }

  onRemote(): void {
    // one process per state directory: nothing else commits
  }

  async close(): Promise<void> {
    if (this.probeTimer) clearInterval(this.probeTimer);
    this.probeTimer = null;
    this.leaderGauge.set(0);
    const db = this.records?.db;
    this.records = null;
    this.sqlite = null;
    if (db) await db.destroy().catch(() => undefined);
    await this.lock.release();
  }

  /**
   * `svc state export`: a consistent snapshot of the whole store into `file` (encrypted with
   * the key when set), also while a server runs on the store (read from its WAL).
   * @returns numbers of records per table
   * @throws StateLoadError when the store cannot be read; the system error when the file cannot be written
   */
  async exportTo(file: string | null, write: (text: string) => void = (t) => process.stdout.write(t)): Promise<Record<string, number>> {
    await this.precheck();
    if (!existsSync(this.dbFile)) throw new StateLoadError(`no state store in ${this.options.dir} (no state.db)`);
    const owned = await this.lock.acquire(() => undefined, true);
    try {
      await this.openDatabase(!owned);
      return await exportState(await this.records!.loadAll(), file, this.options.key, write);
    } finally {
      await this.close();
    }
  }

  /**
   * `svc state import FILE`: loads a snapshot (this version's export, or an earlier
   * version's `state.json`) into an empty store with no server on it.
   * @param fileKey key the file was written with (default: the store's key; differs when rotating keys)
   * @throws StateLoadError when a server holds the store, the store is not empty, or the file
   *   cannot be read or decrypted (nothing changed)
   */
  async importFrom(file: string, fileKey: Buffer | null = this.options.key): Promise<Record<string, number>> {
    const raw = await readSnapshotFile(file, fileKey);
    if (raw === null) throw new StateLoadError(`${file} does not exist`);
    const changes = recordsOfSnapshot(raw);
    await this.precheck();
    if (!(await this.lock.acquire(() => undefined, true)))
      throw new StateLoadError(`a server is running on ${this.options.dir}; stop it first (import needs the store to itself)`);
    try {
      await this.openDatabase(false);
      if (!(await this.records!.isEmpty()))
        throw new StateLoadError(`the store in ${this.options.dir} is not empty; import only into an empty store (nothing was changed)`);
      await this.records!.commit(changes, this.options.key ? { key_check: this.codec.keyCheck() } : {});
      await this.writeKeyCheckFile();
      return Object.fromEntries(TABLE_NAMES.map((t) => [t, changes[t]?.size ?? 0]));
    } finally {
      await this.close();
    }
  }

  /**
   * Checks, without writing anything: the database file is an svc store, the key matches
   * the key check file, and an earlier version's snapshot (when there is no database yet)
   * can be read with the key.
   * @returns that snapshot's records, to import, or null
   */
  private async precheck(): Promise<ChangeSet | null> {
    let dbExists = false;
    try {
      const st = statSync(this.dbFile);
      if (st.isDirectory()) throw new StateLoadError(`${this.dbFile} is a directory, not a database file; ${DAMAGED_STORE_REMEDY}`);
      dbExists = st.size > 0;
    } catch (e) {
      if (e instanceof StateLoadError) throw e;
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT')
        throw new StateLoadError(`cannot read ${this.dbFile} (${(e as Error).message}); ${DAMAGED_STORE_REMEDY}`);
      dbExists = false;
    }
    if (dbExists) this.checkHeader();
    if (existsSync(this.keyCheckFile)) {
      let kc: KeyCheckFile;
      try {
        kc = JSON.parse(await readFile(this.keyCheckFile, 'utf8')) as KeyCheckFile;
      } catch (e) {
        throw new StateLoadError(`${this.keyCheckFile} is not readable (${(e as Error).message}); restore it or move it away`);
      }
      if (kc.encrypted && !this.options.key)
        throw new StateLoadError(`${this.dbFile} is encrypted; set SVC_CONTROL_STATE_KEY_HEX to the key it was written with`);
      if (kc.encrypted && !this.codec.matchesKeyCheck(String(kc.key_check))) {
        throw new StateLoadError(`cannot decrypt ${this.dbFile}: SVC_CONTROL_STATE_KEY_HEX is not the key it was written with; it was left untouched`);
      }
    }
    if (dbExists) return null;
    const raw = await readSnapshotFile(this.legacyFile, this.options.key);
    return raw === null ? null : recordsOfSnapshot(raw);
  }

  /** @throws StateLoadError unless the file starts with SQLite's header and our application id (or none yet) */
  private checkHeader(): void {
    const header = Buffer.alloc(100);
    let n = 0;
    try {
      const fd = openSync(this.dbFile, 'r');
      try {
        n = readSync(fd, header, 0, 100, 0);
      } finally {
        closeSync(fd);
      }
    } catch (e) {
      throw new StateLoadError(`cannot read ${this.dbFile} (${(e as Error).message}); ${DAMAGED_STORE_REMEDY}`);
    }
    if (n < 100 || header.toString('latin1', 0, 16) !== 'SQLite format 3\0') {
      throw new StateLoadError(`${this.dbFile} is not an SQLite database (damaged, or another file); ${DAMAGED_STORE_REMEDY}`);
    }
    const appId = header.readUInt32BE(68);
    if (appId !== SQLITE_APPLICATION_ID && appId !== 0) {
      throw new StateLoadError(`${this.dbFile} belongs to another application or is damaged (application_id 0x${appId.toString(16)}); ${DAMAGED_STORE_REMEDY}`);
    }
  }

  private async openDatabase(readonly: boolean): Promise<void> {
    const sqlite = new Database(this.dbFile, { readonly, fileMustExist: readonly });
    sqlite.pragma('busy_timeout = 5000');
    this.sqlite = sqlite;
    this.records = new SqlRecords(new Kysely<SvcDb>({ dialect: new RollbackSafeSqliteDialect(sqlite) }), this.codec);
    if (readonly) return;
    // The schema check reads only: a foreign database is refused before anything is written.
    const tables = sqlite.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>;
    if (tables.length > 0 && !tables.some((t) => t.name === 'svc_migration')) {
      throw new StateLoadError(
        `${this.dbFile} is not an svc state store (tables ${tables
          .slice(0, 5)
          .map((t) => t.name)
          .join(', ')}); it was left untouched`,
      );
    }
    sqlite.pragma('journal_mode = WAL');
    // Deleted and replaced content is overwritten, so no old plaintext lingers in free pages.
    sqlite.pragma('secure_delete = ON');
    sqlite.pragma(`synchronous = ${this.options.sync === 'full' ? 'FULL' : 'NORMAL'}`);
    if ((sqlite.pragma('application_id', { simple: true }) as number) !== SQLITE_APPLICATION_ID) sqlite.pragma(`application_id = ${SQLITE_APPLICATION_ID}`);
    await this.records.migrate();
  }

  private async writeKeyCheckFile(): Promise<void> {
    const kc: KeyCheckFile = this.options.key
      ? { format: 'svc-state-keycheck', encrypted: true, key_check: (await this.records!.meta('key_check')) ?? this.codec.keyCheck() }
      : { format: 'svc-state-keycheck', encrypted: false };
    let current: string | null = null;
    try {
      current = await readFile(this.keyCheckFile, 'utf8');
    } catch {
      current = null;
    }
    const text = JSON.stringify(kc) + '\n';
    if (current !== text) await writeFileAtomic(this.keyCheckFile, text);
  }
}

/**
 * Kysely's SQLite dialect, except that a ROLLBACK is skipped when SQLite has already rolled
 * the transaction back by itself (a COMMIT that failed with SQLITE_FULL or SQLITE_IOERR):
 * otherwise "cannot rollback - no transaction is active" would replace the real cause.
 */
class RollbackSafeSqliteDialect extends SqliteDialect {
  constructor(private readonly sqlite: Database.Database) {
    super({ database: withStatementCache(sqlite) });
  }

  override createDriver(): ReturnType<SqliteDialect['createDriver']> {
    const driver = super.createDriver();
    const rollback = driver.rollbackTransaction.bind(driver);
    driver.rollbackTransaction = async (connection) => {
      if (this.sqlite.inTransaction) await rollback(connection);
    };
    return driver;
  }
}

/**
 * The database as Kysely's SQLite driver sees it, with prepared statements kept by SQL text
 * (least recently used dropped past `max`): the store issues the same few statements over and
 * over, and preparing one costs as much as running it.
 */
function withStatementCache(db: Database.Database, max = 512): { close(): void; prepare(sql: string): Database.Statement } {
  const cache = new Map<string, Database.Statement>();
  return {
    close: () => db.close(),
    prepare(sql: string): Database.Statement {
      let stmt = cache.get(sql);
      if (stmt) cache.delete(sql);
      else stmt = db.prepare(sql);
      cache.set(sql, stmt);
      if (cache.size > max) cache.delete(cache.keys().next().value!);
      return stmt;
    },
  };
}
