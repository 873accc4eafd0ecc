/** Root module of `svc-control`: the commands and the protocol clients they are given. */
import { Module } from '@nestjs/common';
import { ClientModule } from '@svc/client';
import { CliOutput, ControlCommand } from './control.command';

@Module({
  imports: [ClientModule],
  providers: [ControlCommand, CliOutput],
})
export class CliModule {}
