/**
 * Maps whatever a handler, guard or pipe threw to a {@link ProtocolError} and records it on
 * the request's {@link RequestContext}; the adapter then sends the one error reply.
 */
import { ArgumentsHost, Catch, Logger, LoggerService, WsExceptionFilter } from '@nestjs/common';
import { WsException } from '@nestjs/websockets';
import { randomBytes } from 'node:crypto';
import { ProtocolError } from '@svc/protocol';
import { RequestContext } from './request-context';

/**
 * Converts any thrown value to a ProtocolError. Unknown errors become `internal_error` with a
 * reference id that is also logged with the stack; the stack never reaches the client.
 */
export function toProtocolError(e: unknown, logger: LoggerService): ProtocolError {
  if (e instanceof ProtocolError) return e;
  if (e instanceof WsException) return new ProtocolError('forbidden', String(e.message));
  const ref = randomBytes(4).toString('hex');
  const err = e instanceof Error ? e : new Error(String(e));
  logger.error({ ref, err: { name: err.name, message: err.message, stack: err.stack }, msg: 'unhandled error in handler' });
  return new ProtocolError('internal_error', `internal error (ref ${ref})`);
}

@Catch()
export class EnvelopeExceptionFilter implements WsExceptionFilter {
  private readonly logger = new Logger('EnvelopeExceptionFilter');

  catch(exception: unknown, host: ArgumentsHost): void {
    const ctx = host.switchToWs().getData<unknown>();
    const err = toProtocolError(exception, this.logger);
    if (ctx instanceof RequestContext) ctx.error = err;
  }
}
