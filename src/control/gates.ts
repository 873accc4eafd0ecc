/**
 * Gates of control operations (docs/protocol.md "Gates"), declared per handler:
 * `@AdminOnly()` (role admin, else `forbidden`), `@Protected()` (operator token when
 * `SVC_CONTROL_OPERATOR_TOKEN` is set, else `operator_auth_failed`) and `@ProjectScoped()`
 * (a non-admin caller needs the matching project token or a binding, else
 * `project_auth_failed`). The guards run in that order; no handler re-checks.
 */
import { applyDecorators, CanActivate, ExecutionContext, Injectable, SetMetadata, Type, UseFilters, UseGuards, UseInterceptors } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { WebSocketGateway } from '@nestjs/websockets';
import { isIdentifierSafe, ProtocolError, secretsEqual } from '@svc/protocol';
import { RequestContext } from '@svc/transport';
import { AuditExceptionFilter, AuditGate, AuditInterceptor } from '../audit/audit.gates';
import { actorOf } from '../common/actor';
import { ServerConfig } from '../config';
import { ProjectsService } from '../projects/projects.service';

const ADMIN_ONLY = 'svc:gate:admin';
const PROTECTED = 'svc:gate:operator';
const PROJECT_SCOPED = 'svc:gate:project';

/** The handler needs an admin session. */
export const AdminOnly = (): MethodDecorator => SetMetadata(ADMIN_ONLY, true);
/** The handler is a protected mutation: operator token when the gate is on. */
export const Protected = (): MethodDecorator => SetMetadata(PROTECTED, true);
/** The handler acts on `payload.project_id`: non-admins need its token or a binding. */
export const ProjectScoped = (): MethodDecorator => SetMetadata(PROJECT_SCOPED, true);

function requestOf(ctx: ExecutionContext): RequestContext {
  return ctx.switchToWs().getData<RequestContext>();
}

@Injectable()
export class AdminGuard implements CanActivate {
  constructor(private readonly reflector: Reflector) {}

  canActivate(ctx: ExecutionContext): boolean {
    if (!this.reflector.get<boolean>(ADMIN_ONLY, ctx.getHandler())) return true;
    const req = requestOf(ctx);
    if (req.session.role !== 'admin') throw new ProtocolError('forbidden', `${req.frame.type} requires the admin role`);
    return true;
  }
}

@Injectable()
export class OperatorTokenGuard implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    private readonly config: ServerConfig,
  ) {}

  canActivate(ctx: ExecutionContext): boolean {
    const expected = this.config.operatorToken;
    if (expected === null || !this.reflector.get<boolean>(PROTECTED, ctx.getHandler())) return true;
    const req = requestOf(ctx);
    const presented = req.frame.payload.operator_token;
    if (typeof presented !== 'string' || presented.length === 0) {
      throw new ProtocolError('operator_auth_failed', `${req.frame.type} is a protected mutation: payload.operator_token is required`);
    }
    if (!secretsEqual(presented, expected)) throw new ProtocolError('operator_auth_failed', 'operator_token does not match');
    return true;
  }
}

@Injectable()
export class ProjectTokenGuard implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    private readonly projects: ProjectsService,
  ) {}

  async canActivate(ctx: ExecutionContext): Promise<boolean> {
    if (!this.reflector.get<boolean>(PROJECT_SCOPED, ctx.getHandler())) return true;
    const req = requestOf(ctx);
    const { project_id: projectId, project_token: token } = req.frame.payload;
    if (projectId === undefined || projectId === null) throw new ProtocolError('missing_field', 'missing field: project_id');
    if (!isIdentifierSafe(projectId)) throw new ProtocolError('invalid_payload', 'project_id must be identifier-safe');
    if (token !== undefined && typeof token !== 'string') throw new ProtocolError('invalid_payload', 'project_token must be a string');
    await this.projects.authorizeFresh(actorOf(req.session), projectId, token, true);
    return true;
  }
}

/**
 * Declares a gateway of the `control` channel on `/`: the envelope exception filter (which
 * also records refusals in the audit log), the gate guards in their fixed order (the audit
 * record, admin, operator token, then `extra`), and the audit interceptor (src/audit).
 */
export function ControlChannelGateway(...extra: Array<Type<CanActivate>>): ClassDecorator {
  return applyDecorators(
    WebSocketGateway({ path: '/' }),
    UseFilters(AuditExceptionFilter),
    UseGuards(AuditGate, AdminGuard, OperatorTokenGuard, ...extra),
    UseInterceptors(AuditInterceptor),
  );
}
