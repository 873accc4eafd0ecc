/**
 * Parsing of configuration values shared by the server programs (`svc`, `svc-fs-node`):
 * flags from an option table, ports, integers from flags or the environment, log levels. Each
 * program throws its own error type, so these take the error constructor to use.
 */
import { parseArgs } from 'node:util';
import { OptionTable, parseArgsOptions } from './option-specs';

/** pino levels accepted in `SVC_LOG_LEVEL`. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;

/** `SVC_LOG_LEVEL` when unset. */
export const DEFAULT_LOG_LEVEL = 'info';

/** How long shutdown waits for requests in flight, ms, unless `SVC_SHUTDOWN_GRACE_MS` says otherwise. */
export const DEFAULT_SHUTDOWN_GRACE_MS = 5000;

type ErrorType = new (message: string) => Error;

/** Flag values by long flag name: a string (a list for a repeatable flag), or true for a switch given. */
export type FlagValues = Record<string, string | string[] | boolean | undefined>;

/**
 * Parses a server program's command line: exactly the flags of its option table, no positional
 * argument.
 * @param argv the arguments after the program name
 * @param table the program's option table (every entry with a flag is accepted)
 * @param usage the program's usage text, appended to the error message
 * @throws Err naming the unknown flag, the missing value or the stray argument, then the usage
 */
export function parseFlags(argv: string[], table: OptionTable, usage: string, Err: ErrorType): FlagValues {
  try {
    // Only a repeatable string flag gives a list, and only of strings: the options are built so.
    return parseArgs({ args: argv, options: parseArgsOptions(table), strict: true, allowPositionals: false }).values as FlagValues;
  } catch (e) {
    throw new Err(`${(e as Error).message}\n\n${usage}`);
  }
}

/** `undefined` and `''` become null (an unset environment variable). */
export function nonEmpty(value: string | undefined): string | null {
  return value === undefined || value === '' ? null : value;
}

/**
 * Parses a TCP port.
 * @param what the flag or variable named in the error, e.g. `--port`
 * @throws Err unless an integer 0..65535
 */
export function parsePortValue(value: string, what: string, Err: ErrorType): number {
  if (!/^\d{1,5}$/.test(value) || Number(value) > 65535) throw new Err(`${what} must be a port number 0-65535 (got "${value}")`);
  return Number(value);
}

/**
 * Parses a non-negative integer (`fallback` when unset).
 * @throws Err unless an integer >= `min`
 */
export function parseIntValue(value: string | undefined, fallback: number, what: string, min: number, Err: ErrorType): number {
  if (value === undefined || value === '') return fallback;
  if (!/^\d+$/.test(value) || Number(value) < min) throw new Err(`${what} must be an integer >= ${min} (got "${value}")`);
  return Number(value);
}

/**
 * The log level from `SVC_LOG_LEVEL` (default {@link DEFAULT_LOG_LEVEL}).
 * @throws Err for an unknown level
 */
export function parseLogLevel(value: string | undefined, Err: ErrorType): string {
  const level = (nonEmpty(value) ?? DEFAULT_LOG_LEVEL).toLowerCase();
  if (!(LOG_LEVELS as readonly string[]).includes(level)) throw new Err(`SVC_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}`);
  return level;
}
