/**
 * A throwaway PostgreSQL for the benchmarks (`BENCH_POSTGRES=1`), started the way the e2e tests
 * start theirs (bench/support/postgres.ts, a separate copy of the same steps):
 * Debian's `postgresql` binaries, `initdb` into a temporary directory (as the unprivileged
 * `postgres` user when running as root), listening on a free loopback port only, trust auth for
 * the user `svc`, stopped and removed at the end.
 *
 * Unlike the tests' server, this one keeps PostgreSQL's durability defaults (fsync on,
 * synchronous_commit on, full_page_writes on): only listen_addresses, port, the unix socket
 * directory and max_connections=200 are set, so the benchmark measures durable commits.
 * (`initdb --no-sync` only skips flushing the freshly created data directory once, before the
 * server starts; it changes nothing about how the server commits.)
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chownSync, closeSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';

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

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

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
  const root = mkdtempSync(join(tmpdir(), 'svc-bench-pg-'));
  const data = join(root, 'data');
  let server: ChildProcess | null = null;
  let removed = false;
  const remove = () => {
    if (removed) return;
    removed = true;
    rmSync(root, { recursive: true, force: true });
  };
  try {
    // PostgreSQL refuses to run as root: then run it as the unprivileged `postgres` user.
    const as: { uid?: number; gid?: number } = {};
    if (process.getuid?.() === 0) {
      as.uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
      as.gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
      chownSync(root, as.uid, as.gid);
    }
    const env = { ...process.env, HOME: root, LC_ALL: 'C' };
    execFileSync(join(bin, 'initdb'), ['-D', data, '-U', 'svc', '--auth=trust', '-E', 'UTF8', '--no-sync'], { stdio: 'pipe', cwd: root, env, ...as });
    const port = await freePort();
    const logPath = join(root, 'postgres.log');
    const log = openSync(logPath, 'a');
    const args = ['-D', data, '-p', String(port), '-k', root, '-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=200'];
    server = spawn(join(bin, 'postgres'), args, { stdio: ['ignore', log, log], cwd: root, env, ...as });
    closeSync(log);
    const url = `postgres://svc@127.0.0.1:${port}/postgres`;
    const deadline = Date.now() + 30_000;
    let version = '';
    for (;;) {
      if (server.exitCode !== null || server.signalCode !== null) {
        throw new Error(`PostgreSQL exited (${server.exitCode ?? server.signalCode}) while starting: ${readFileSync(logPath, 'utf8').slice(-2000)}`);
      }
      const c = new Client({ connectionString: url });
      try {
        await c.connect();
        version = (await c.query<{ v: string }>('SELECT version() AS v')).rows[0].v;
        await c.end();
        break;
      } catch (e) {
        await c.end().catch(() => undefined);
        if (Date.now() > deadline) throw new Error(`PostgreSQL did not start on port ${port}: ${(e as Error).message}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
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
