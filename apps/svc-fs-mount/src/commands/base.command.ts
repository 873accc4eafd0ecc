/** Shared behaviour of the svc-fs-mount commands. */
import { Injectable } from '@nestjs/common';
import { Command } from 'commander';
import { CommandRunner } from 'nest-commander';
import { CliOutput } from '../cli-output';
import { MountSession } from '../mount-session';

/**
 * A command of svc-fs-mount, given the router runner ({@link MountSession}) and the output
 * ({@link CliOutput}). Usage errors of a command (missing argument, unknown option) exit 2 like
 * the root command's; `--help` exits 0. Commander's subcommands do not inherit the root's exit
 * override, so each command installs it when nest-commander hands it its commander instance.
 */
@Injectable()
export abstract class MountCommand extends CommandRunner {
  constructor(
    protected readonly session: MountSession,
    protected readonly out: CliOutput,
  ) {
    super();
  }

  override setCommand(command: Command): this {
    command.exitOverride((err) => {
      process.exit(err.code === 'commander.helpDisplayed' || err.code === 'commander.version' ? 0 : 2);
    });
    return super.setCommand(command);
  }
}
