/**
 * The server of `svc-fs-node` (see main.ts for what it prints and its exit codes): the exports
 * (directories and terminal services), the envelope WebSocket adapter on `/v2/fs`, the ops HTTP
 * listener, the control daemon with `--control-url` (pairing, lease, catalog), and graceful
 * shutdown (docs/protocol.md "Transport" and "FS sessions on `svc-fs-node` (`/v2/fs`)"). program.ts loads this module only once the
 * configuration is valid and is not `--help`, so those load none of Nest.
 */
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { ExportDefinition, FsEndpointProfile, FsMetrics, FsNodeOptions, LocalDirBackend, TerminalBackend } from '@svc/fs';
import { AppLogger, onStopSignal, ReadinessService, startOpsListener, warnOperator } from '@svc/ops';
import { CloseCode } from '@svc/protocol/wire';
import { EnvelopeWsAdapter, insecureTransportWarning, ServerTls, SessionRegistry } from '@svc/transport';
import { FsNodeConfig, isLoopbackBind } from './config';
import { die } from './die';
import { FsNodeAppModule } from './fs-node.module';
import { builtInServiceIds, ManifestError, loadManifests } from './daemon/catalog-record';
import { ControlDaemon, DaemonFatal, LEASE_RELEASE_TIMEOUT_MS } from './daemon/control-daemon';

/** The package version, for `node.ver` in the hello. */
function version(): string {
  try {
    return (JSON.parse(readFileSync(join(__dirname, '..', '..', '..', '..', 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return '0.0.0';
  }
}

/**
 * The FS URL to advertise when `--fs-url` is not given: the listening URL, with a wildcard bind
 * address replaced by the host name (other machines cannot dial 0.0.0.0).
 */
function advertisedUrl(url: string, bind: string): string {
  if (bind !== '0.0.0.0' && bind !== '::') return url;
  return url.replace(/^(wss?):\/\/(\[::\]|0\.0\.0\.0)/, `$1://${hostname()}`);
}

/**
 * Serves the node `config` describes until SIGTERM/SIGINT: opens the exports, starts Nest, the
 * `/v2/fs` listener (then prints `listening on <url>`), the ops listener and, in control daemon
 * mode, the control daemon. Exits the process itself (see main.ts for the exit codes): with 2 via
 * {@link die} for an export, manifest or port that cannot be used, 3 when the daemon cannot go on,
 * 0 after a clean shutdown.
 * @param config a validated configuration without `help`
 */
export async function serve(config: FsNodeConfig): Promise<void> {
  const exports: ExportDefinition[] = [];
  for (const spec of config.exports) {
    try {
      const backend = await LocalDirBackend.at(spec.path, { ro: spec.ro, metaIo: config.metaIo });
      exports.push({ name: spec.name, ro: spec.ro, desc: `${spec.ro ? 'read-only' : 'read-write'} directory ${backend.root}`, backend });
    } catch (e) {
      die(`--export ${spec.name}: ${spec.path}: ${(e as Error).message}`);
    }
  }
  const terminalBase = config.terminalCwd ?? config.exports.find((e) => !e.ro)?.path ?? null;
  for (const id of config.terminalIds) {
    exports.push({
      name: `terminal-${id}`,
      ro: false,
      desc: `terminal ${id}: write control/invoke.json, read the result`,
      backend: new TerminalBackend(id, terminalBase!),
    });
  }
  if (config.daemon) {
    // An invalid manifest is a startup error naming the file and field; nothing is published.
    try {
      loadManifests(config.daemon.manifestFiles, config.daemon.servicesDir, builtInServiceIds(config.daemon.fsService, config.terminalIds));
    } catch (e) {
      if (e instanceof ManifestError) die(`invalid service manifest: ${e.message}`);
      throw e;
    }
  }
  const fsOptions: FsNodeOptions = {
    exports,
    authToken: config.authToken,
    authRequired: config.daemon !== null,
    nodeName: config.nodeName,
    version: version(),
    features: config.features,
  };

  const app = await NestFactory.create(FsNodeAppModule.forRoot(config, fsOptions), { bufferLogs: true, abortOnError: false });
  const logger = app.get(AppLogger);
  app.useLogger(logger);
  const readiness = app.get(ReadinessService);
  readiness.require('ws_listening');
  const adapter = new EnvelopeWsAdapter(app, {
    bind: config.bind,
    port: config.port,
    maxMessageBytes: config.maxMessageBytes,
    profile: app.get(FsEndpointProfile),
    sessions: app.get(SessionRegistry),
    observer: app.get(FsMetrics).requests,
    tls: config.tls ? ServerTls.from(config.tls) : null,
  });
  app.useWebSocketAdapter(adapter);

  await startOpsListener(app, logger, config.bind, config.metricsPort, (e) =>
    die(`cannot listen on ${config.bind}:${config.metricsPort} (SVC_METRICS_PORT): ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`),
  );
  app.flushLogs();

  let daemon: ControlDaemon | null = null;
  onStopSignal(logger, readiness, async () => {
    // Release the lease first (bounded, 2 s) so the node's mounts fail over while FS requests
    // in flight drain; a failed release is logged and does not change the exit code.
    await daemon?.stop({ releaseLease: true, releaseTimeoutMs: LEASE_RELEASE_TIMEOUT_MS });
    await adapter.shutdown(config.shutdownGraceMs);
    await app.close();
  });

  let url: string;
  try {
    url = await adapter.listen();
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    die(`cannot listen on ${config.bind}:${config.port}: ${err.code === 'EADDRINUSE' ? 'address already in use' : err.message}`);
  }
  readiness.set('ws_listening', true);
  logger.log(
    {
      msg: 'svc-fs-node ready',
      url,
      node_name: config.nodeName,
      exports: exports.map((e) => ({ name: e.name, ro: e.ro, root: (e.backend as LocalDirBackend).root })),
      fs_auth: config.authToken !== null || config.daemon !== null,
      control_url: config.daemon?.controlUrl ?? null,
      tls: config.tls ? { fingerprint256: config.tls.material.fingerprint256, not_after: config.tls.material.validTo.toISOString() } : null,
    },
    'Bootstrap',
  );
  process.stdout.write(`listening on ${url}\n`);
  if (config.insecureTransport) warnOperator(logger, 'svc-fs-node', insecureTransportWarning(url));
  if (config.authToken === null && config.daemon === null && !isLoopbackBind(config.bind)) {
    const warning = `FS session auth is off and ${url} is reachable from other hosts: anyone who reaches it can ${exports.some((e) => !e.ro) ? 'read and write' : 'read'} the exports; give --auth-token T (or SVC_FS_NODE_AUTH_TOKEN)`;
    warnOperator(logger, 'svc-fs-node', warning);
  }

  if (config.daemon) {
    const d = config.daemon;
    daemon = new ControlDaemon(
      {
        ...d,
        nodeName: config.nodeName,
        fsUrl: d.fsUrl ?? advertisedUrl(url, config.bind),
        fixedFsAuthToken: config.authToken,
        terminalIds: config.terminalIds,
      },
      {
        exports: () => exports.filter((e) => e.backend instanceof LocalDirBackend).map((e) => ({ name: e.name, ro: e.ro })),
        setFsAuthToken: (token) => {
          const previous = fsOptions.authToken;
          fsOptions.authToken = token;
          if (previous === null || previous === token) return;
          // Sessions admitted with the replaced token (re-pairing after node_delete) end now;
          // clients reconnect with the token the topology hands out.
          const open = app.get(SessionRegistry).all();
          for (const session of open) session.close(CloseCode.POLICY_VIOLATION, 'FS auth token replaced; reconnect with the current one');
          if (open.length > 0)
            logger.log({ msg: 'FS auth token replaced; closed the sessions admitted with the old one', sessions: open.length }, 'ControlDaemon');
        },
      },
    );
    daemon.on('fatal', (e: DaemonFatal) => {
      logger.error({ msg: `control daemon stopped: ${e.message}` }, 'ControlDaemon');
      process.stderr.write(`svc-fs-node: ${e.message}\n`);
      void adapter.shutdown(0).finally(() => process.exit(3));
    });
    try {
      await daemon.start();
    } catch (e) {
      die((e as Error).message);
    }
  }
}
