/**
 * Steps the two servers (`svc`, `svc-fs-node`) take alike when they start and stop: the ops
 * HTTP listener, warnings to the operator, and the SIGTERM/SIGINT handler.
 */
import type { INestApplication, LoggerService } from '@nestjs/common';
import type { Server } from 'node:http';
import type { ReadinessService } from './readiness.service';

/**
 * Starts the ops HTTP listener (`/livez`, `/readyz`, `/metrics`) of `app` on `bind:port` and logs
 * its URL (`ops endpoints listening`, context `Bootstrap`); with `port` null there is no listener
 * and `app` is only initialised.
 * @param port TCP port (0 picks a free one), or null for none
 * @param onListenError called with what `app.listen` throws (e.g. EADDRINUSE); without it, that is thrown
 */
export async function startOpsListener(
  app: INestApplication,
  logger: LoggerService,
  bind: string,
  port: number | null,
  onListenError?: (e: unknown) => never,
): Promise<void> {
  if (port === null) {
    await app.init();
    return;
  }
  try {
    await app.listen(port, bind);
  } catch (e) {
    if (!onListenError) throw e;
    onListenError(e);
  }
  const addr = (app.getHttpServer() as Server).address();
  logger.log({ msg: 'ops endpoints listening', url: `http://${bind}:${typeof addr === 'object' && addr ? addr.port : port}` }, 'Bootstrap');
}

/** Logs `message` as a warning (context `Bootstrap`) and writes `<program>: warning: <message>` on stderr. */
export function warnOperator(logger: LoggerService, program: string, message: string): void {
  logger.warn({ msg: message }, 'Bootstrap');
  process.stderr.write(`${program}: warning: ${message}\n`);
}

/**
 * Installs the SIGTERM/SIGINT handler of a server. On the first signal it logs
 * `received <signal>; shutting down`, turns readiness false for good, awaits `shutdown` and exits
 * the process with 0; later signals do nothing.
 */
export function onStopSignal(logger: LoggerService, readiness: ReadinessService, shutdown: () => Promise<void>): void {
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.log({ msg: `received ${signal}; shutting down` }, 'Bootstrap');
    readiness.beginShutdown();
    await shutdown();
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}
