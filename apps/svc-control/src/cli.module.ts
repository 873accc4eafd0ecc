/** Root module of `svc-control`: the commands and the protocol clients they are given. */
import { Module } from '@nestjs/common';
import { ClientModule } from '@svc/client';
import { AcheronCommand } from './acheron.command';
import { ControlCommand } from './control.command';
import { CliOutput } from './session-command';

@Module({
  imports: [ClientModule],
  providers: [ControlCommand, AcheronCommand, CliOutput],
})
export class CliModule {}
