/** Root module of `svc-fs-mount`: the commands, the router factory and the output they use. */
import { Module } from '@nestjs/common';
import { WorkspaceRouterModule } from '../../../libs/fs/src/router';
import { CliOutput } from './cli-output';
import { MountSession } from './mount-session';
import { COMMANDS, MountRootCommand } from './root.command';

@Module({
  imports: [WorkspaceRouterModule],
  providers: [MountRootCommand, ...COMMANDS, CliOutput, MountSession],
})
export class MountCliModule {}
