#!/usr/bin/env node
/**
 * `svc-fs-node`: the FS node: configuration (config.ts, program.ts), then the exports
 * (directories and terminal services), the envelope WebSocket adapter on `/v2/fs`, the ops HTTP
 * listener, the control daemon with `--control-url` (pairing, lease, catalog), and graceful
 * shutdown (serve.ts; docs/protocol.md "Transport" and "FS sessions on `svc-fs-node` (`/v2/fs`)").
 *
 * Prints exactly one stdout line, `listening on ws://HOST:PORT/v2/fs` (`wss://` with
 * `--tls-cert`/`--tls-key`), once it accepts sessions; logs are JSON lines on stderr. On
 * SIGTERM/SIGINT in control daemon mode the node first releases its lease
 * (`control.node_lease_release`, docs/protocol.md "Nodes"; at most 2 s, a failure only logged), then
 * drains FS requests. Exit codes: 0 after a clean shutdown (SIGTERM, SIGINT); 2 for an invalid
 * configuration (malformed --export or --label, an export path that does not exist or is not a
 * directory, an invalid service manifest, a bad port, a TLS certificate, key or CA file that
 * cannot be used, a `--bind` beyond loopback without TLS or `--insecure-transport`) or a port
 * that cannot be bound; 3 when the control daemon cannot go on (join request denied, invite used up
 * after the node was deleted, role token refused).
 *
 * Runs `program.ts` from the bundle `npm run build` made of it, with its V8 code cache
 * (libs/ops/src/bundled-program.ts); without a bundle, `program.ts` itself.
 */
import { runBundled } from '../../../libs/ops/src/bundled-program';

// eslint-disable-next-line @typescript-eslint/no-require-imports -- program.ts is loaded only when there is no bundle to run
runBundled(__dirname, () => require('./program'));
