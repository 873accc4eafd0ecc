/**
 * Parsing of configuration values shared by the server programs (`svc`, `svc-fs-node`):
 * ports, integers from flags or the environment, log levels. Each program throws its own
 * error type, so these take the error constructor to use.
 */

/** pino levels accepted in `SVC_LOG_LEVEL`. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;

type ErrorType = new (message: string) => Error;

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
 * The log level from `SVC_LOG_LEVEL` (default `info`).
 * @throws Err for an unknown level
 */
export function parseLogLevel(value: string | undefined, Err: ErrorType): string {
  const level = (nonEmpty(value) ?? 'info').toLowerCase();
  if (!(LOG_LEVELS as readonly string[]).includes(level)) throw new Err(`SVC_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}`);
  return level;
}
