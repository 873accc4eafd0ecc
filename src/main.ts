#!/usr/bin/env node
/**
 * `svc`: the control-plane server. Bootstrap only: configuration, the
 * envelope WebSocket adapter, the ops HTTP listener, state loading, and graceful shutdown
 * (docs/protocol.md "Transport").
 *
 * Exit codes: 0 after a clean shutdown; 2 when the configuration is invalid (including a TLS
 * certificate, key or CA file that cannot be used, or a `--bind` beyond loopback without TLS
 * or `--insecure-transport`), the state cannot
 * be loaded (wrong key, foreign or damaged store, a schema newer than this code) or the port
 * cannot be bound. `svc state export|import` are the backup commands (src/state-cli).
 */
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { AppLogger, onStopSignal, ReadinessService, startOpsListener, warnOperator } from '@svc/ops';
import { EnvelopeWsAdapter, insecureTransportWarning, ServerTls, SessionRegistry } from '@svc/transport';
import { AppModule } from './app.module';
import { ConfigError, loadServerConfig, SERVER_USAGE, ServerConfig } from './config';
import { ControlEndpointProfile } from './control/control-endpoint.profile';
import { ControlMetrics } from './health/control-metrics';
import { DashboardHttp } from './dashboard/dashboard.http';
import { stateLocation } from './persistence/state-store.factory';
import { StateService } from './persistence/state.service';
import { NodePresenceService } from './catalog/node-presence.service';

function die(message: string, code = 2): never {
  process.stderr.write(`svc: ${message}\n`);
  process.exit(code);
}

/** `svc state export|import ...`: the state commands (nest-commander), loaded only for them. */
async function stateCommand(): Promise<void> {
  const { CommandFactory } = await import('nest-commander');
  const { StateCliModule } = await import('./state-cli/state-cli.module');
  await CommandFactory.run(StateCliModule, {
    logger: false,
    cliName: 'svc',
    errorHandler: (err: Error & { code?: string }) => {
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') process.exit(0);
      process.exit(2);
    },
  });
}

async function main(): Promise<void> {
  if (process.argv[2] === 'state') return stateCommand();
  let config: ServerConfig;
  try {
    config = loadServerConfig(process.argv.slice(2), process.env);
  } catch (e) {
    if (e instanceof ConfigError) die(e.message);
    throw e;
  }
  if (config.help) {
    process.stdout.write(SERVER_USAGE);
    return;
  }

  const app = await NestFactory.create(AppModule.forRoot(config), { bufferLogs: true, abortOnError: false });
  const logger = app.get(AppLogger);
  app.useLogger(logger);
  const readiness = app.get(ReadinessService);
  readiness.require('state_loaded');
  readiness.require('ws_listening');
  const adapter = new EnvelopeWsAdapter(app, {
    bind: config.bind,
    port: config.port,
    maxMessageBytes: config.maxMessageBytes,
    profile: app.get(ControlEndpointProfile),
    sessions: app.get(SessionRegistry),
    http: app.get(DashboardHttp),
    observer: app.get(ControlMetrics).requests,
    tls: config.tls ? ServerTls.from(config.tls) : null,
  });
  app.useWebSocketAdapter(adapter);

  await startOpsListener(app, logger, config.bind, config.metricsPort);
  app.flushLogs();

  const store = app.get(StateService);
  onStopSignal(logger, readiness, async () => {
    // Sessions closed by this shutdown are not node failures: their daemons reconnect elsewhere.
    app.get(NodePresenceService).stop();
    await adapter.shutdown(config.shutdownGraceMs);
    await store.close();
    await app.close();
  });

  try {
    await store.open();
  } catch (e) {
    die((e as Error).message);
  }
  readiness.set('state_loaded', true);
  // A shared database that stops answering makes this replica not ready until it answers again.
  readiness.require('store_reachable');
  readiness.set('store_reachable', true);
  setInterval(() => readiness.set('store_reachable', store.isReachable), 250).unref();
  let url: string;
  try {
    url = await adapter.listen();
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    await store.close();
    die(`cannot listen on ${config.bind}:${config.port}: ${err.code === 'EADDRINUSE' ? 'address already in use' : err.message}`);
  }
  readiness.set('ws_listening', true);
  logger.log(
    {
      msg: 'svc ready',
      url,
      state: stateLocation(config),
      encrypted: config.stateKey !== null,
      operator_gate: config.operatorToken !== null,
      tls: config.tls ? { fingerprint256: config.tls.material.fingerprint256, not_after: config.tls.material.validTo.toISOString() } : null,
    },
    'Bootstrap',
  );
  process.stdout.write(`listening on ${url}\n`);
  if (config.insecureTransport) warnOperator(logger, 'svc', insecureTransportWarning(url));
}

main().catch((e) => die(`fatal: ${(e as Error).stack ?? String(e)}`, 1));
