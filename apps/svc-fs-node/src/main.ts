#!/usr/bin/env node
/**
 * `svc-fs-node`: the FS node (standalone mode). Bootstrap only: configuration, the exports,
 * the envelope WebSocket adapter on `/v2/fs`, the ops HTTP listener, and graceful shutdown
 * (PROTOCOL.md 1, 8).
 *
 * Prints exactly one stdout line, `listening on ws://HOST:PORT/v2/fs`, once it accepts
 * sessions; logs are JSON lines on stderr. Exit codes: 0 after a clean shutdown (SIGTERM,
 * SIGINT); 2 for an invalid configuration (malformed --export, an export path that does not
 * exist or is not a directory, a bad port) or a port that cannot be bound.
 */
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ExportDefinition, FsMetrics, FsEndpointProfile, LocalDirBackend } from '@svc/fs';
import { AppLogger, ReadinessService } from '@svc/ops';
import { EnvelopeWsAdapter, SessionRegistry } from '@svc/transport';
import { ConfigError, FS_NODE_USAGE, FsNodeConfig, loadFsNodeConfig } from './config';
import { FsNodeAppModule } from './fs-node.module';

function die(message: string, code = 2): never {
  process.stderr.write(`svc-fs-node: ${message}\n`);
  process.exit(code);
}

/** The package version, for `node.ver` in the hello. */
function version(): string {
  try {
    return (JSON.parse(readFileSync(join(__dirname, '..', '..', '..', '..', 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return '0.0.0';
  }
}

async function main(): Promise<void> {
  let config: FsNodeConfig;
  try {
    config = loadFsNodeConfig(process.argv.slice(2), process.env);
  } catch (e) {
    if (e instanceof ConfigError) die(e.message);
    throw e;
  }
  if (config.help) {
    process.stdout.write(FS_NODE_USAGE);
    return;
  }

  const exports: ExportDefinition[] = [];
  for (const spec of config.exports) {
    try {
      const backend = await LocalDirBackend.at(spec.path, { ro: spec.ro });
      exports.push({ name: spec.name, ro: spec.ro, desc: `${spec.ro ? 'read-only' : 'read-write'} directory ${backend.root}`, backend });
    } catch (e) {
      die(`--export ${spec.name}: ${spec.path}: ${(e as Error).message}`);
    }
  }

  const app = await NestFactory.create(
    FsNodeAppModule.forRoot(config, { exports, authToken: config.authToken, nodeName: config.nodeName, version: version() }),
    { bufferLogs: true, abortOnError: false },
  );
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
  });
  app.useWebSocketAdapter(adapter);

  if (config.metricsPort !== null) {
    try {
      await app.listen(config.metricsPort, config.bind);
    } catch (e) {
      die(`cannot listen on ${config.bind}:${config.metricsPort} (SVC_METRICS_PORT): ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    const addr = app.getHttpServer().address();
    logger.log({ msg: 'ops endpoints listening', url: `http://${config.bind}:${typeof addr === 'object' && addr ? addr.port : config.metricsPort}` }, 'Bootstrap');
  } else {
    await app.init();
  }
  app.flushLogs();

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.log({ msg: `received ${signal}; shutting down` }, 'Bootstrap');
    readiness.beginShutdown();
    await adapter.shutdown(config.shutdownGraceMs);
    await app.close();
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));

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
      fs_auth: config.authToken !== null,
    },
    'Bootstrap',
  );
  process.stdout.write(`listening on ${url}\n`);
}

main().catch((e) => die(`fatal: ${(e as Error).stack ?? String(e)}`, 1));
