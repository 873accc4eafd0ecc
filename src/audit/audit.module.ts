/**
 * AuditModule: the audit log (docs/protocol.md "Audit log" `control.audit_list`). Global, because every
 * control gateway's guard, interceptor and filter (declared by `ControlChannelGateway`) record
 * through {@link AuditService}.
 */
import { Global, Module } from '@nestjs/common';
import { AuditGateway } from './audit.gateway';
import { AuditService } from './audit.service';

@Global()
@Module({
  providers: [AuditService, AuditGateway],
  exports: [AuditService],
})
export class AuditModule {}
