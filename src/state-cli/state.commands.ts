/**
 * `svc state export [--out FILE]` and `svc state import FILE` (docs/operations.md "State"): backups and
 * moves of the control plane's state (also between SQLite and PostgreSQL). Both find the
 * store as the server does, through the server's own parser and store factory
 * (`--state-dir` / `SVC_STATE_DIR`, `--database-url` / `SVC_DATABASE_URL`,
 * `SVC_CONTROL_STATE_KEY_HEX`, `SVC_STATE_SYNC`; the same defaults, and an invalid value is
 * refused with exit 2). Export writes a consistent snapshot
 * (encrypted when a key is set), also while a server runs on the store; import loads one (this
 * version's export, or an earlier version's `state.json`) into an empty store with no server
 * on it; `SVC_CONTROL_STATE_IMPORT_KEY_HEX` names the key of the file when it differs from the
 * store's (key rotation: export with the old key, import into a fresh directory with the new
 * one). Exit codes: 0 done; 2 usage, a busy or non-empty store, an unreadable file or a wrong key.
 */
import { Command, CommandRunner, Option, SubCommand } from 'nest-commander';
import { parseStateConfig, parseStateKey } from '../config';
import { createStateStore } from '../persistence/state-store.factory';
import type { StateStore } from '../persistence/state-store.port';

interface StoreFlags {
  stateDir?: string;
  databaseUrl?: string;
  out?: string;
}

/**
 * The store the flags and environment name, as the server finds it (not yet open).
 * @throws ConfigError on an invalid value (see parseStateConfig)
 */
function storeOf(flags: StoreFlags): StateStore {
  return createStateStore(parseStateConfig(flags, process.env));
}

function fail(message: string): never {
  process.stderr.write(`svc state: ${message}\n`);
  process.exit(2);
}

function summary(counts: Record<string, number>): string {
  return Object.entries(counts)
    .filter(([, n]) => n > 0)
    .map(([t, n]) => `${t} ${n}`)
    .join(', ');
}

abstract class StoreCommand extends CommandRunner {
  @Option({ flags: '--state-dir <dir>', description: 'state directory (default $SVC_STATE_DIR, else ./.svc)' })
  parseStateDir(v: string): string {
    return v;
  }

  @Option({ flags: '--database-url <url>', description: 'PostgreSQL store (default $SVC_DATABASE_URL; else SQLite in the state directory)' })
  parseDatabaseUrl(v: string): string {
    return v;
  }
}

@SubCommand({ name: 'export', description: 'write a consistent snapshot of the store (encrypted when a key is set)' })
export class StateExportCommand extends StoreCommand {
  @Option({ flags: '--out <file>', description: 'write to FILE (mode 0600) instead of stdout' })
  parseOut(v: string): string {
    return v;
  }

  async run(_args: string[], flags: StoreFlags): Promise<void> {
    try {
      const counts = await storeOf(flags).exportTo(flags.out ?? null);
      if (flags.out) process.stderr.write(`svc state: exported ${summary(counts) || 'an empty store'} to ${flags.out}\n`);
    } catch (e) {
      fail((e as Error).message);
    }
  }
}

@SubCommand({ name: 'import', arguments: '<file>', description: 'load a snapshot into an empty store with no server on it' })
export class StateImportCommand extends StoreCommand {
  async run([file]: string[], flags: StoreFlags): Promise<void> {
    try {
      const fileKey = process.env.SVC_CONTROL_STATE_IMPORT_KEY_HEX ? parseStateKey(process.env.SVC_CONTROL_STATE_IMPORT_KEY_HEX) : undefined;
      const counts = await storeOf(flags).importFrom(file, fileKey);
      process.stderr.write(`svc state: imported ${summary(counts) || 'nothing'} from ${file}\n`);
    } catch (e) {
      fail((e as Error).message);
    }
  }
}

@Command({ name: 'state', description: 'export or import the control-plane state', subCommands: [StateExportCommand, StateImportCommand] })
export class StateCommand extends CommandRunner {
  async run(): Promise<void> {
    fail('usage: svc state export [--out FILE] [--state-dir DIR] | svc state import FILE [--state-dir DIR]');
  }
}
