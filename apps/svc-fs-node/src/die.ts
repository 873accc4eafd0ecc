/**
 * Ends `svc-fs-node` with a message: `svc-fs-node: <message>` on stderr, then `process.exit(code)`.
 * @param code exit code (see main.ts): 2 by default (configuration), 1 fatal, 3 daemon
 */
export function die(message: string, code = 2): never {
  process.stderr.write(`svc-fs-node: ${message}\n`);
  process.exit(code);
}
