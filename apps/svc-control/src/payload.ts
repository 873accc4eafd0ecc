/**
 * The payload argument of `svc-control`: a JSON object literal, `@file` (JSON read from a
 * file) or `-` (JSON read from stdin). Absent means `{}`.
 */
import { readFileSync } from 'node:fs';

/** A usage error: printed as `svc-control: <message>`, exit code 2. */
export class UsageError extends Error {}

/**
 * @param arg the argument as given, or undefined
 * @param readStdin reads all of standard input (injected for tests)
 * @returns the payload object
 * @throws UsageError when the text is not a JSON object or the file cannot be read
 */
export function readPayloadArg(arg: string | undefined, readStdin: () => string = () => readFileSync(0, 'utf8')): Record<string, unknown> {
  if (arg === undefined) return {};
  let text: string;
  let source: string;
  if (arg === '-') {
    text = readStdin();
    source = 'standard input';
  } else if (arg.startsWith('@')) {
    source = arg.slice(1);
    try {
      text = readFileSync(source, 'utf8');
    } catch (e) {
      throw new UsageError(`cannot read payload file ${source}: ${(e as Error).message}`);
    }
  } else {
    text = arg;
    source = 'the payload argument';
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new UsageError(`${source} is not valid JSON: ${(e as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new UsageError(`${source} must be a JSON object`);
  return value as Record<string, unknown>;
}
