/**
 * `svc-fs-mount [global options] <command> [args]`: the workspace seen through
 * a {@link WorkspaceRouter}, one command per run.
 *
 * Global options (accepted before or after the command name) are the entries of
 * {@link MOUNT_OPTIONS} without a section (option-table.ts; docs/configuration.md).
 * `mount MOUNTPOINT` (FUSE) sits beside the others on the same router.
 */
import { Option, RootCommand } from 'nest-commander';
import { MountCommand } from './commands/base.command';
import { CatCommand, WriteCommand } from './commands/data.commands';
import { GetattrCommand, MkdirCommand, ReaddirCommand, RenameCommand, RmdirCommand, TruncateCommand, UnlinkCommand } from './commands/path.commands';
import { StatusCommand } from './commands/status.command';
import { FuseMountCommand } from './commands/fuse.command';
import { commanderOption } from '../../../libs/ops/src/option-specs';
import { msArg, UsageError } from './mount-options';
import { MOUNT_OPTIONS } from './option-table';

export const COMMANDS = [
  GetattrCommand,
  ReaddirCommand,
  CatCommand,
  WriteCommand,
  MkdirCommand,
  RmdirCommand,
  UnlinkCommand,
  RenameCommand,
  TruncateCommand,
  StatusCommand,
  FuseMountCommand,
];

@RootCommand({
  name: 'svc-fs-mount',
  description: 'the workspace filesystem from the command line: workspace mode (topology from svc) or endpoint mode (--endpoint)',
  subCommands: COMMANDS,
})
export class MountRootCommand extends MountCommand {
  @Option(commanderOption(MOUNT_OPTIONS.workspaceUrl))
  parseWorkspaceUrl(v: string): string {
    return v;
  }

  @Option(commanderOption(MOUNT_OPTIONS.projectId))
  parseProjectId(v: string): string {
    return v;
  }

  @Option(commanderOption(MOUNT_OPTIONS.projectToken))
  parseProjectToken(v: string): string {
    return v;
  }

  @Option(commanderOption(MOUNT_OPTIONS.authToken))
  parseAuthToken(v: string): string {
    return v;
  }

  @Option(commanderOption(MOUNT_OPTIONS.agentId))
  parseAgentId(v: string): string {
    return v;
  }

  @Option(commanderOption(MOUNT_OPTIONS.workspaceSyncInterval))
  parseSyncInterval(v: string): number {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new UsageError('--workspace-sync-interval-ms must be a non-negative integer');
    return n;
  }

  @Option(commanderOption(MOUNT_OPTIONS.endpoint))
  parseEndpoint(v: string, previous?: string[]): string[] {
    return [...(previous ?? []), v];
  }

  @Option(commanderOption(MOUNT_OPTIONS.tlsCa))
  parseTlsCa(v: string): string {
    return v;
  }

  @Option(commanderOption(MOUNT_OPTIONS.noBinary))
  parseNoBinary(): boolean {
    return false;
  }

  @Option(commanderOption(MOUNT_OPTIONS.fsFeatures))
  parseFsFeatures(v: string): string {
    return v;
  }

  @Option(commanderOption(MOUNT_OPTIONS.connectTimeout))
  parseConnectTimeout(v: string): number {
    return msArg(v, '--connect-timeout-ms', 1);
  }

  @Option(commanderOption(MOUNT_OPTIONS.requestTimeout))
  parseRequestTimeout(v: string): number {
    return msArg(v, '--request-timeout-ms', 1);
  }

  @Option(commanderOption(MOUNT_OPTIONS.keepalive))
  parseKeepalive(v: string): number {
    return msArg(v, '--keepalive-ms', 0);
  }

  @Option(commanderOption(MOUNT_OPTIONS.keepaliveTimeout))
  parseKeepaliveTimeout(v: string): number {
    return msArg(v, '--keepalive-timeout-ms', 1);
  }

  @Option(commanderOption(MOUNT_OPTIONS.opDeadline))
  parseOpDeadline(v: string): number {
    return msArg(v, '--op-deadline-ms', 1);
  }

  @Option(commanderOption(MOUNT_OPTIONS.json))
  parseJson(): boolean {
    return true;
  }

  async run(params: string[]): Promise<void> {
    if (params.length > 0) this.out.fail(`svc-fs-mount: unknown command ${JSON.stringify(params[0])} (see --help)`, 2);
    else {
      this.command.outputHelp({ error: true });
      process.exitCode = 2;
    }
  }
}
