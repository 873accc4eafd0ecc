/** AuditGateway: `control.audit_list` (docs/protocol.md "Audit log"), admin only. */
import { SubscribeMessage } from '@nestjs/websockets';
import { AuditListDto } from '@svc/protocol';
import { Payload } from '@svc/transport';
import { AdminOnly, ControlChannelGateway } from '../control/gates';
import { AuditService } from './audit.service';

@ControlChannelGateway()
export class AuditGateway {
  constructor(private readonly audit: AuditService) {}

  /**
   * `control.audit_list` `{since_ms?, until_ms?, actor_agent_id?, type?, limit?, cursor?}` ->
   * `{entries:[AuditEntry], next_cursor}`, newest first (admin).
   */
  @SubscribeMessage('control.audit_list')
  @AdminOnly()
  list(@Payload() body: AuditListDto) {
    return this.audit.list(body);
  }
}
