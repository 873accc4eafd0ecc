/**
 * A real PostgreSQL started by the test (or bench) itself, never a shared or pre-existing
 * database: Debian's `postgresql` binaries ({@link postgresBinDir}), `initdb` into a temporary
 * directory (as the unprivileged `postgres` user when running as root, {@link initCluster}),
 * listening on a free loopback port, trust auth for the user `svc`, stopped at the end.
 *
 * {@link startPostgres} is the e2e tests' and the fault bench's server: it runs with fsync off,
 * for speed (tests of durability here kill `svc` or stop PostgreSQL, not the machine). The state
 * bench starts a durable one from the same steps (bench/postgres.ts).
 */
import { ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { freePort } from './processes';

/** The directory of PostgreSQL's server binaries, or null when none is installed. */
export function postgresBinDir(): string | null {
  const base = '/usr/lib/postgresql';
  if (existsSync(base)) {
    const versions = readdirSync(base)
      .filter((v) => existsSync(join(base, v, 'bin', 'initdb')))
      .sort((a, b) => Number(b) - Number(a));
    if (versions.length > 0) return join(base, versions[0], 'bin');
  }
  try {
    const initdb = execFileSync('sh', ['-c', 'command -v initdb'], { encoding: 'utf8' }).trim();
    return initdb ? initdb.replace(/\/initdb$/, '') : null;
  } catch {
    return null;
  }
}

/** A data directory made by {@link initCluster}, and how to run PostgreSQL's programs on it. */
export interface Cluster {
  /** The temporary directory holding everything (the data directory, the unix socket); the caller removes it. */
  root: string;
  /** The data directory, `<root>/data`. */
  data: string;
  /** Who PostgreSQL runs as: the `postgres` user and group when this process runs as root, else nothing (this process's user). */
  as: { uid?: number; gid?: number };
  /** The environment PostgreSQL's programs run with: this process's, HOME `root`, LC_ALL=C. */
  env: NodeJS.ProcessEnv;
  /**
   * Runs PostgreSQL's program `cmd` with `args` to completion, in `root`, as {@link Cluster.as}.
   * @returns its stdout
   * @throws Error when it exits non-zero (its output is in the error)
   */
  run: (cmd: string, args: string[]) => Buffer;
}

/**
 * Makes a temporary directory `<OS temp dir>/<prefix>XXXXXX` and runs `initdb` into its `data`
 * (superuser `svc`, trust auth, UTF8, `--no-sync`: the new files are not flushed once; it changes
 * nothing about how the server commits later). PostgreSQL refuses to run as root: then the
 * directory belongs to the unprivileged `postgres` user, and everything runs as that user.
 * @param bin PostgreSQL's binaries ({@link postgresBinDir})
 * @throws Error when `initdb` fails, or when running as root and there is no `postgres` user (the directory is removed then)
 */
export function initCluster(bin: string, prefix: string): Cluster {
  const root = mkdtempSync(join(tmpdir(), prefix));
  try {
    const data = join(root, 'data');
    const as: { uid?: number; gid?: number } = {};
    if (process.getuid?.() === 0) {
      as.uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
      as.gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
      chownSync(root, as.uid, as.gid);
    }
    const env = { ...process.env, HOME: root, LC_ALL: 'C' };
    const run = (cmd: string, args: string[]) => execFileSync(join(bin, cmd), args, { stdio: 'pipe', cwd: root, env, ...as });
    run('initdb', ['-D', data, '-U', 'svc', '--auth=trust', '-E', 'UTF8', '--no-sync']);
    return { root, data, as, env, run };
  } catch (e) {
    rmSync(root, { recursive: true, force: true });
    throw e;
  }
}

/**
 * Resolves once the PostgreSQL server on 127.0.0.1:`port` answers: connects to its `postgres`
 * database as `svc` every 100 ms.
 * @param timeoutMs how long to try, ms
 * @param server the server's process: when given and it exits first, this throws at once, with `why()` (e.g. the end of its log)
 * @throws Error when the server does not answer within `timeoutMs`, or `server` exits first
 */
export async function waitForPostgres(port: number, timeoutMs: number, server?: ChildProcess, why: () => string = () => ''): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (server && (server.exitCode !== null || server.signalCode !== null)) {
      throw new Error(`PostgreSQL exited (${server.exitCode ?? server.signalCode}) while starting: ${why()}`);
    }
    const c = new Client({ host: '127.0.0.1', port, user: 'svc', database: 'postgres' });
    try {
      await c.connect();
      await c.end();
      return;
    } catch (e) {
      await c.end().catch(() => undefined);
      if (Date.now() > deadline) throw new Error(`PostgreSQL did not start on port ${port}: ${(e as Error).message}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** A running server of {@link startPostgres}: on 127.0.0.1, superuser `svc` with trust auth. */
export interface Postgres {
  port: number;
  /** A new, empty database; returns its URL. */
  newDatabase(): Promise<string>;
  /** The URL of an existing database. */
  url(database: string): string;
  /**
   * Stops the server and, with `startServer()` again, brings it back on the same port. Without
   * `mode`: SIGINT to the postmaster (a fast shutdown); with it, `pg_ctl stop -m MODE`, as an
   * operator would, resolving once the server has exited.
   */
  stopServer(mode?: 'smart' | 'fast' | 'immediate'): Promise<void>;
  /**
   * `pg_terminate_backend` of every session on `database` (the server keeps running).
   * @returns how many sessions were ended
   */
  terminateBackends(database: string): Promise<number>;
  startServer(): Promise<void>;
  /**
   * A streaming standby of this server (`pg_basebackup -R`) on another free port, running and
   * connected. `synchronous`: this server then waits for the standby to flush each commit's WAL
   * before the commit returns (`synchronous_standby_names = '*'`), so whatever a client saw
   * committed here is on the standby. Closed with this server.
   */
  startStandby(options?: { synchronous?: boolean }): Promise<Standby>;
  /** Stops the server and removes its data. */
  close(): Promise<void>;
}

/** A running standby of a {@link Postgres} ({@link Postgres.startStandby}), on 127.0.0.1. */
export interface Standby {
  port: number;
  /** `pg_ctl promote -w`: resolves once the standby accepts writes. */
  promote(): Promise<void>;
  /** `pg_ctl stop -m MODE` (default fast); nothing when already stopped. */
  stop(mode?: 'smart' | 'fast' | 'immediate'): Promise<void>;
}

/**
 * Starts a throwaway PostgreSQL.
 * @returns null (after printing why) when PostgreSQL is not installed here
 */
export async function startPostgres(): Promise<Postgres | null> {
  const bin = postgresBinDir();
  if (!bin) {
    process.stderr.write('PostgreSQL e2e tests skipped: no initdb (Debian: apt-get install postgresql; .ci/run installs it)\n');
    return null;
  }
  const { root, data, as, env, run } = initCluster(bin, 'svc-pg-');
  const pgCtl = (args: string[]) =>
    new Promise<void>((resolve, reject) =>
      execFile(join(bin, 'pg_ctl'), args, { cwd: root, env, ...as }, (err, _out, stderr) =>
        err ? reject(new Error(`pg_ctl ${args[0]}: ${err.message} ${stderr}`)) : resolve(),
      ),
    );
  /** The postmaster of data directory `dir` on `port`: started, stopped, and started again. */
  const serve = (dir: string, port: number) => {
    let server: ChildProcess | null = null;
    const start = async () => {
      const args = ['-D', dir, '-p', String(port), '-k', root, '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off', '-c', 'max_connections=200'];
      server = spawn(join(bin, 'postgres'), args, { stdio: 'ignore', cwd: root, env, ...as });
      await waitForPostgres(port, 20_000);
    };
    const stop = async (mode?: 'smart' | 'fast' | 'immediate') => {
      const s = server;
      server = null;
      if (!s || s.exitCode !== null) return;
      const exited = new Promise<void>((resolve) => s.once('exit', () => resolve()));
      if (!mode)
        s.kill('SIGINT'); // fast shutdown
      else await pgCtl(['stop', '-D', dir, '-m', mode, '-w']);
      await exited;
    };
    return { start, stop };
  };
  const port = await freePort();
  const primary = serve(data, port);
  const standbys: Array<ReturnType<typeof serve>> = [];
  let counter = 0;
  const { start: startServer, stop: stopServer } = primary;
  await startServer();
  const url = (database: string) => `postgres://svc@127.0.0.1:${port}/${database}`;
  return {
    port,
    url,
    startServer,
    stopServer,
    async newDatabase() {
      const name = `svc_test_${process.pid}_${++counter}`;
      const c = new Client({ host: '127.0.0.1', port, user: 'svc', database: 'postgres' });
      await c.connect();
      await c.query(`CREATE DATABASE ${name}`);
      await c.end();
      return url(name);
    },
    async terminateBackends(database: string) {
      const c = new Client({ host: '127.0.0.1', port, user: 'svc', database: 'postgres' });
      await c.connect();
      try {
        const r = await c.query<{ ok: boolean }>(
          'SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
          [database],
        );
        return r.rows.filter((x) => x.ok).length;
      } finally {
        await c.end();
      }
    },
    async startStandby(options: { synchronous?: boolean } = {}) {
      const dir = join(root, `standby-${standbys.length + 1}`);
      run('pg_basebackup', ['-h', '127.0.0.1', '-p', String(port), '-U', 'svc', '-D', dir, '-R', '-X', 'stream', '-c', 'fast', '--no-sync']);
      const standbyPort = await freePort();
      const standby = serve(dir, standbyPort);
      standbys.push(standby);
      await standby.start();
      const c = new Client({ host: '127.0.0.1', port, user: 'svc', database: 'postgres' });
      await c.connect();
      try {
        // streaming before anything relies on it
        for (const deadline = Date.now() + 10_000; ;) {
          const r = await c.query("SELECT 1 FROM pg_stat_replication WHERE state = 'streaming'");
          if (r.rowCount) break;
          if (Date.now() > deadline) throw new Error(`the standby on port ${standbyPort} did not stream within 10 s`);
          await new Promise((r) => setTimeout(r, 50));
        }
        if (options.synchronous) {
          await c.query("ALTER SYSTEM SET synchronous_standby_names = '*'");
          await c.query('SELECT pg_reload_conf()');
          for (const deadline = Date.now() + 10_000; ;) {
            const r = await c.query("SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'");
            if (r.rowCount) break;
            if (Date.now() > deadline) throw new Error(`the standby on port ${standbyPort} did not become synchronous within 10 s`);
            await new Promise((r) => setTimeout(r, 50));
          }
        }
      } finally {
        await c.end();
      }
      return {
        port: standbyPort,
        stop: (mode: 'smart' | 'fast' | 'immediate' = 'fast') => standby.stop(mode),
        promote: () => pgCtl(['promote', '-D', dir, '-w']),
      };
    },
    async close() {
      for (const s of standbys) await s.stop();
      await stopServer();
      rmSync(root, { recursive: true, force: true });
    },
  };
}
