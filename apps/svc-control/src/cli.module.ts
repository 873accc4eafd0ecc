/** Root module of `svc-control`: the commands and the protocol clients they are given. */
import { Module } from '@nestjs/common';
import { ClientModule } from '@svc/client';
import { AcheronCommand } from './acheron.command';
import { ApplyCommand } from './apply.command';
import { AuditCommand } from './audit.command';
import { ControlCommand } from './control.command';
import { CliOutput } from '../../../libs/ops/src/cli-output';

@Module({
  imports: [ClientModule],
  providers: [ControlCommand, AcheronCommand, ApplyCommand, AuditCommand, CliOutput],
})
export class CliModule {}
