/**
 * `svc-fs-mount [global options] <command> [args]`: the workspace seen through
 * a {@link WorkspaceRouter}, one command per run.
 *
 * Global options (accepted before or after the command name):
 * `--workspace-url URL`, `--project-id ID`, `--project-token T`, `--auth-token T`,
 * `--agent-id A`, `--workspace-sync-interval-ms MS`, `--endpoint name=ws-url[#export][@/mount]`
 * (repeatable), `--tls-ca FILE`, `--no-binary`, `--fs-features LIST`, `--json`, and the deadlines
 * `--connect-timeout-ms`, `--request-timeout-ms`, `--keepalive-ms`, `--keepalive-timeout-ms`,
 * `--op-deadline-ms`. `mount MOUNTPOINT` (FUSE) sits beside the others on
 * the same router.
 */
import { Option, RootCommand } from 'nest-commander';
import { MountCommand } from './commands/base.command';
import { CatCommand, WriteCommand } from './commands/data.commands';
import { GetattrCommand, MkdirCommand, ReaddirCommand, RenameCommand, RmdirCommand, TruncateCommand, UnlinkCommand } from './commands/path.commands';
import { StatusCommand } from './commands/status.command';
import { FuseMountCommand } from './commands/fuse.command';
import { ROUTER_DEADLINES } from '../../../libs/fs/src/router';
import { DEFAULT_WORKSPACE_URL, msArg, UsageError } from './mount-options';

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
  @Option({ flags: '--workspace-url <url>', description: `control-plane URL (workspace mode; default $SVC_URL or ${DEFAULT_WORKSPACE_URL})` })
  parseWorkspaceUrl(v: string): string {
    return v;
  }

  @Option({ flags: '--project-id <id>', description: 'pin this project (default: the agent binding selects it)' })
  parseProjectId(v: string): string {
    return v;
  }

  @Option({ flags: '--project-token <token>', description: 'its project token (default $SVC_PROJECT_TOKEN); not needed with a binding' })
  parseProjectToken(v: string): string {
    return v;
  }

  @Option({
    flags: '--auth-token <token>',
    description:
      'workspace mode: role token (default $SVC_AUTH_TOKEN, else ${SVC_STATE_DIR:-./.svc}/auth_tokens.json); endpoint mode: FS session token (default $SVC_FS_AUTH_TOKEN)',
  })
  parseAuthToken(v: string): string {
    return v;
  }

  @Option({ flags: '--agent-id <id>', description: 'agent whose binding selects the project (default "default")' })
  parseAgentId(v: string): string {
    return v;
  }

  @Option({ flags: '--workspace-sync-interval-ms <ms>', description: 're-read the whole workspace status this often (default 30000; 0 = only on deltas)' })
  parseSyncInterval(v: string): number {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new UsageError('--workspace-sync-interval-ms must be a non-negative integer');
    return n;
  }

  @Option({
    flags: '--endpoint <spec>',
    description: 'endpoint mode: name=ws-url[#export][@/mount] (repeatable; repeat a mount path for failover; export "work", mount /<name> by default)',
  })
  parseEndpoint(v: string, previous?: string[]): string[] {
    return [...(previous ?? []), v];
  }

  @Option({
    flags: '--tls-ca <file>',
    description: 'CA certificates (PEM) trusted for wss:// URLs besides the system CAs (default $SVC_TLS_CA); verification cannot be turned off',
  })
  parseTlsCa(v: string): string {
    return v;
  }

  @Option({ flags: '--no-binary', description: 'use JSON + base64 for data instead of binary frames' })
  parseNoBinary(): boolean {
    return false;
  }

  @Option({
    flags: '--fs-features <list>',
    description:
      'FS extensions to ask nodes for: comma-separated names (open_read, prefetch, dir_estale), all (default) or none (default $SVC_FS_CLIENT_FEATURES)',
  })
  parseFsFeatures(v: string): string {
    return v;
  }

  @Option({
    flags: '--connect-timeout-ms <ms>',
    description: `connect + hello limit per endpoint; a node that lets it pass is hung (default ${ROUTER_DEADLINES.connectTimeoutMs})`,
  })
  parseConnectTimeout(v: string): number {
    return msArg(v, '--connect-timeout-ms', 1);
  }

  @Option({
    flags: '--request-timeout-ms <ms>',
    description: `limit of one request on a node that still answers keepalive pings (default ${ROUTER_DEADLINES.requestTimeoutMs})`,
  })
  parseRequestTimeout(v: string): number {
    return msArg(v, '--request-timeout-ms', 1);
  }

  @Option({
    flags: '--keepalive-ms <ms>',
    description: `while requests wait, ping the node after this long without an answer (default ${ROUTER_DEADLINES.keepaliveMs}; 0 off)`,
  })
  parseKeepalive(v: string): number {
    return msArg(v, '--keepalive-ms', 0);
  }

  @Option({
    flags: '--keepalive-timeout-ms <ms>',
    description: `a node that answered nothing (reply, push, pong) for this long while requests wait is hung: its session is dropped and reads fail over (default ${ROUTER_DEADLINES.keepaliveTimeoutMs})`,
  })
  parseKeepaliveTimeout(v: string): number {
    return msArg(v, '--keepalive-timeout-ms', 1);
  }

  @Option({
    flags: '--op-deadline-ms <ms>',
    description: `budget of one operation from its start for connects and retries on other candidates (default ${ROUTER_DEADLINES.opDeadlineMs})`,
  })
  parseOpDeadline(v: string): number {
    return msArg(v, '--op-deadline-ms', 1);
  }

  @Option({ flags: '--json', description: 'print results as JSON' })
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
