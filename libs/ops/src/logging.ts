/**
 * Structured logging: one JSON line per event on stderr (docs/operations.md "Logs"), level from
 * `SVC_LOG_LEVEL`, through nestjs-pino. Secrets are redacted by path as a second line of
 * defence; code never passes them to the logger in the first place.
 */
import { Injectable } from '@nestjs/common';
import { Logger, LoggerModule, Params, PinoLogger } from 'nestjs-pino';
import pino from 'pino';
import type { DynamicModule } from '@nestjs/common';

/** Paths redacted from every log line. */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  '*.token',
  '*.admin_token',
  '*.user_token',
  '*.project_token',
  '*.node_secret',
  '*.fs_auth_token',
  '*.operator_token',
  '*.invite_token',
  '*.request_secret',
  '*.auth_token',
];

/** Framework contexts whose `log`-level chatter is demoted to `debug`. */
const FRAMEWORK_CONTEXTS = new Set([
  'NestFactory',
  'InstanceLoader',
  'RoutesResolver',
  'RouterExplorer',
  'WebSocketsController',
  'NestApplication',
  'NestApplicationContext',
]);

/** Builds the nestjs-pino module for a program. */
export function loggerModule(service: string, level: string): DynamicModule {
  const params: Params = {
    pinoHttp: [
      {
        level,
        autoLogging: false,
        quietReqLogger: true,
        base: { service, pid: process.pid },
        timestamp: pino.stdTimeFunctions.isoTime,
        redact: { paths: REDACT_PATHS, censor: '[redacted]' },
        formatters: { level: (label: string) => ({ level: label }) },
      },
      pino.destination({ dest: 2, sync: true }),
    ],
  };
  return LoggerModule.forRoot(params);
}

/**
 * The application logger: nestjs-pino's Logger, with Nest's own start-up messages demoted to
 * debug so an operator's info log shows what the service does, not how Nest wires it.
 */
@Injectable()
export class AppLogger extends Logger {
  constructor(logger: PinoLogger) {
    super(logger, {});
  }

  override log(message: unknown, ...optionalParams: unknown[]): void {
    const context = optionalParams[optionalParams.length - 1];
    if (typeof context === 'string' && FRAMEWORK_CONTEXTS.has(context)) return super.debug(message, ...optionalParams);
    return super.log(message, ...optionalParams);
  }
}
