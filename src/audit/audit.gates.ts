/**
 * How control requests reach the audit log (docs/protocol.md "Audit log" `control.audit_list`), declared
 * once for every control gateway by `ControlChannelGateway` (src/control/gates.ts):
 *
 * 1. {@link AuditGate}, the first guard, opens the request's audit record; it never refuses.
 *    `@Audited()` on a handler makes every outcome recorded; without it only refused
 *    authentications are.
 * 2. {@link AuditInterceptor} runs the handler inside that record ({@link auditScope}), so the
 *    request's first successful `StateService.mutate` commits the `"ok"` entry with its
 *    changes; an audited request that succeeded without a mutation is recorded after it.
 * 3. {@link AuditExceptionFilter} maps the error as the envelope filter does, then records it
 *    when the request is audited or the error is a refused authentication, from the guards
 *    (operator token, role, project token) or the handler (node secret, project token).
 */
import { CallHandler, CanActivate, Catch, ExecutionContext, Injectable, NestInterceptor, SetMetadata, ArgumentsHost } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { Observable, tap } from 'rxjs';
import { EnvelopeExceptionFilter, RequestContext } from '@svc/transport';
import { actorOf } from '../common/actor';
import { auditScope } from '../persistence/audit-log';
import { AuditService } from './audit.service';

/** Metadata key of {@link Audited}. */
export const AUDITED = 'svc:audit';

/** Options of {@link Audited}. */
export interface AuditedOptions {
  /** A payload for which the request changes nothing (a dry run): then only refusals are recorded. */
  unless?: (payload: Record<string, unknown>) => boolean;
}

/** The handler is a control mutation: every outcome is recorded in the audit log. */
export const Audited = (options: AuditedOptions = {}): MethodDecorator => SetMetadata(AUDITED, options);

type Scope = ReturnType<AuditService['scope']>;
const scopes = new WeakMap<RequestContext, Scope>();

/** The audit record of a request (opened by {@link AuditGate}). */
function scopeOf(req: RequestContext, audit: AuditService): Scope {
  let scope = scopes.get(req);
  if (!scope) {
    scope = audit.scope(actorOf(req.session), req.frame.type, req.frame.payload, false);
    scopes.set(req, scope);
  }
  return scope;
}

/** Opens the audit record of each control request (first guard; always lets it through). */
@Injectable()
export class AuditGate implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    private readonly audit: AuditService,
  ) {}

  canActivate(ctx: ExecutionContext): boolean {
    const req = ctx.switchToWs().getData<RequestContext>();
    const options = this.reflector.get<AuditedOptions | undefined>(AUDITED, ctx.getHandler());
    const audited = options !== undefined && !(options.unless?.(req.frame.payload) ?? false);
    scopes.set(req, this.audit.scope(actorOf(req.session), req.frame.type, req.frame.payload, audited));
    return true;
  }
}

/** Runs the handler inside its audit record; records an audited success that made no mutation. */
@Injectable()
export class AuditInterceptor implements NestInterceptor {
  constructor(private readonly audit: AuditService) {}

  intercept(ctx: ExecutionContext, next: CallHandler): Observable<unknown> {
    const scope = scopeOf(ctx.switchToWs().getData<RequestContext>(), this.audit);
    // only an audited request has an entry to commit with its mutation (reads and heartbeats
    // skip this)
    if (!scope.audited) return next.handle();
    // `handle()` binds the handler to the async context it is called in: this record's.
    return auditScope
      .run(scope, () => next.handle())
      .pipe(
        tap((result) => {
          if (scope.audited && !scope.recorded) void this.audit.settle(scope, result, null);
        }),
      );
  }
}

/** The envelope exception filter, plus: records refusals and failed audited requests. */
@Catch()
export class AuditExceptionFilter extends EnvelopeExceptionFilter {
  constructor(private readonly audit: AuditService) {
    super();
  }

  override catch(exception: unknown, host: ArgumentsHost): void {
    super.catch(exception, host);
    const req = host.switchToWs().getData<unknown>();
    if (!(req instanceof RequestContext) || !req.error) return;
    void this.audit.settle(scopeOf(req, this.audit), null, req.error.code);
  }
}
