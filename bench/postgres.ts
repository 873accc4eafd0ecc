/**
 * A throwaway PostgreSQL for the benchmarks (`BENCH_POSTGRES=1`), made with the e2e tests' steps
 * (test/support/postgres.ts: Debian's `postgresql` binaries, `initdb` into a temporary directory
 * as the unprivileged `postgres` user when running as root, a free loopback port only, trust
 * auth for the user `svc`), stopped and removed at the end.
 *
 * Unlike the tests' server, this one keeps PostgreSQL's durability defaults (fsync on,
 * synchronous_commit on, full_page_writes on): only listen_addresses, port, the unix socket
 * directory and max_connections=200 are set, so the benchmark measures durable commits.
 * (`initdb --no-sync` only skips flushing the freshly created data directory once, before the
 * server starts; it changes nothing about how the server commits.)
 */
import { ChildProcess, spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { initCluster, postgresBinDir, waitForPostgres } from '../test/support/postgres';
import { freePort } from '../test/support/processes';

/** Blocks the thread for `ms` (only for the synchronous last-resort cleanup). */
function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** True while `pid` runs (neither gone nor a zombie waiting to be reaped). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** A running server of {@link startPostgres}: on 127.0.0.1, superuser `svc` with trust auth, durability defaults. */
export interface BenchPostgres {
  /** URL of the server's `postgres` database as the superuser `svc` (loopback). */
  url: string;
  port: number;
  /** `PostgreSQL 15.x ...` */
  version: string;
  /** Stops the server (fast shutdown, SIGINT) and removes its directory. */
  close(): Promise<void>;
  /** Last resort from an `exit` handler: immediate shutdown (SIGQUIT), waits up to 5 s, removes the directory. */
  closeSync(): void;
}

/**
 * Starts a throwaway PostgreSQL.
 * @throws when PostgreSQL is not installed here or does not start within 30 s
 */
export async function startPostgres(): Promise<BenchPostgres> {
  const bin = postgresBinDir();
  if (!bin) throw new Error('BENCH_POSTGRES=1: no initdb found (Debian: apt-get install postgresql)');
  const { root, data, as, env } = initCluster(bin, 'svc-bench-pg-');
  let server: ChildProcess | null = null;
  let removed = false;
  const remove = () => {
    if (removed) return;
    removed = true;
    rmSync(root, { recursive: true, force: true });
  };
  try {
    const port = await freePort();
    const logPath = join(root, 'postgres.log');
    const log = openSync(logPath, 'a');
    const args = ['-D', data, '-p', String(port), '-k', root, '-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=200'];
    server = spawn(join(bin, 'postgres'), args, { stdio: ['ignore', log, log], cwd: root, env, ...as });
    closeSync(log);
    await waitForPostgres(port, 30_000, server, () => readFileSync(logPath, 'utf8').slice(-2000));
    const url = `postgres://svc@127.0.0.1:${port}/postgres`;
    const c = new Client({ connectionString: url });
    await c.connect();
    const version = (await c.query<{ v: string }>('SELECT version() AS v')).rows[0].v;
    await c.end();
    const proc = server;
    return {
      url,
      port,
      version,
      async close() {
        if (proc.exitCode === null && proc.signalCode === null) {
          await new Promise<void>((resolve) => {
            const kill = setTimeout(() => proc.kill('SIGQUIT'), 30_000); // immediate shutdown if fast is stuck
            proc.once('exit', () => {
              clearTimeout(kill);
              resolve();
            });
            proc.kill('SIGINT'); // fast shutdown
          });
        }
        remove();
      },
      closeSync() {
        if (proc.exitCode === null && proc.signalCode === null && proc.pid !== undefined) {
          proc.kill('SIGQUIT');
          for (let i = 0; i < 100 && running(proc.pid); i++) sleepSync(50);
        }
        remove();
      },
    };
  } catch (e) {
    const s = server;
    if (s && s.exitCode === null && s.signalCode === null) {
      await new Promise<void>((resolve) => {
        s.once('exit', () => resolve());
        s.kill('SIGQUIT');
      });
    }
    remove();
    throw e;
  }
}
