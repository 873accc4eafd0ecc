/**
 * Parameter decorators for gateway handlers on the envelope adapter.
 *
 * - `@Payload()` the request payload, validated against the parameter's DTO class
 *   (`invalid_payload` / `missing_field`, docs/protocol.md "Envelope and errors");
 * - `@Frame()` the whole parsed frame (acheron root fields: `fid`, `path`, `node`, `h`, ...);
 * - `@Session()` the connection's {@link WsSession};
 * - `@Ctx()` the {@link RequestContext} (for handlers that send their own binary reply).
 */
import { createParamDecorator, ExecutionContext, Injectable, PipeTransform, ArgumentMetadata } from '@nestjs/common';
import { validatePayload } from '@svc/protocol';
import { RequestContext } from './request-context';

function contextOf(ctx: ExecutionContext): RequestContext {
  return ctx.switchToWs().getData<RequestContext>();
}

/** Validates a payload against the DTO class of the parameter it decorates. */
@Injectable()
export class PayloadValidationPipe implements PipeTransform {
  transform(value: unknown, metadata: ArgumentMetadata): unknown {
    const cls = metadata.metatype;
    if (!cls || cls === Object) return value;
    return validatePayload(cls as new () => object, value as Record<string, unknown>);
  }
}

export const Payload = (): ParameterDecorator =>
  createParamDecorator((_data: unknown, ctx: ExecutionContext) => contextOf(ctx).frame.payload)(undefined, PayloadValidationPipe);

export const Frame = createParamDecorator((_data: unknown, ctx: ExecutionContext) => contextOf(ctx).frame);

export const Session = createParamDecorator((_data: unknown, ctx: ExecutionContext) => contextOf(ctx).session);

export const Ctx = createParamDecorator((_data: unknown, ctx: ExecutionContext) => contextOf(ctx));
