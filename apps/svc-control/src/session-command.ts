/**
 * What every svc-control command shares: the session options (`--url`, `--auth-token`,
 * `--operator-token`, `--agent-id`, `--timeout-ms`, `--tls-ca`; option-table.ts), opening the control session and
 * closing it when a command ends ({@link SessionCommand.withSession}),
 * and the mapping of failures to messages and exit codes (1: the server refused; 2: usage,
 * connection, TLS verification or authentication).
 */
import { Injectable } from '@nestjs/common';
import { Option, CommandRunner } from 'nest-commander';
import { clientTlsFrom, ControlClient, ControlClientFactory, ControlError, ConnectionError, resolveAuthToken } from '@svc/client';
import { CliOutput } from '../../../libs/ops/src/cli-output';
import { UsageError } from './payload';
import { commanderOption } from '../../../libs/ops/src/option-specs';
import { CONTROL_OPTIONS, DEFAULT_URL } from './option-table';

export interface ControlOptions {
  url: string;
  authToken?: string;
  operatorToken?: string;
  agentId?: string;
  watch?: boolean;
  timeoutMs?: number;
  /** Extra CA file for a `wss://` URL (`--tls-ca`, else `SVC_TLS_CA`). */
  tlsCa?: string;
}

export { DEFAULT_URL };

/**
 * Opens the control session for a command; a `wss://` URL is verified against the system CAs
 * plus `--tls-ca` (docs/operations.md "Transport security (TLS)").
 * @throws UsageError when no token can be found
 * @throws TlsCaError when the CA file cannot be used; ConnectionError `tls` when the server's
 *   certificate is refused (the token is not sent)
 */
export async function openSession(factory: ControlClientFactory, options: ControlOptions): Promise<ControlClient> {
  const token = resolveAuthToken(options.authToken);
  if (!token) {
    throw new UsageError('no auth token: pass --auth-token, set SVC_AUTH_TOKEN, or run where ${SVC_STATE_DIR:-./.svc}/auth_tokens.json is readable');
  }
  return factory.connect({ url: options.url, token, agentId: options.agentId, requestTimeoutMs: options.timeoutMs, tls: clientTlsFrom(options.tlsCa) });
}

/** Maps a failure to the CLI's message and exit code. */
export function reportFailure(out: CliOutput, e: unknown, prefix = 'error'): void {
  if (e instanceof ControlError) out.fail(`${prefix}: ${e.code}: ${e.message}`, 1);
  else if (e instanceof UsageError) out.fail(`svc-control: ${e.message}`, 2);
  else if (e instanceof ConnectionError) out.fail(`svc-control: ${e.message}`, 2);
  else out.fail(`svc-control: ${(e as Error).message ?? String(e)}`, 2);
}

/**
 * What every svc-control command has: the session options (declared once, parsed by commander),
 * the session factory and the output, and {@link SessionCommand.withSession}.
 */
@Injectable()
export abstract class SessionCommand extends CommandRunner {
  constructor(
    protected readonly factory: ControlClientFactory,
    protected readonly out: CliOutput,
  ) {
    super();
  }

  @Option(commanderOption(CONTROL_OPTIONS.url))
  parseUrl(v: string): string {
    return v;
  }

  @Option(commanderOption(CONTROL_OPTIONS.authToken))
  parseAuthToken(v: string): string {
    return v;
  }

  @Option(commanderOption(CONTROL_OPTIONS.operatorToken))
  parseOperatorToken(v: string): string {
    return v;
  }

  @Option(commanderOption(CONTROL_OPTIONS.agentId))
  parseAgentId(v: string): string {
    return v;
  }

  @Option(commanderOption(CONTROL_OPTIONS.tlsCa))
  parseTlsCa(v: string): string {
    return v;
  }

  @Option(commanderOption(CONTROL_OPTIONS.timeout))
  parseTimeout(v: string): number {
    const n = Number(v);
    if (!Number.isInteger(n) || n <= 0) throw new UsageError('--timeout-ms must be a positive integer');
    return n;
  }

  /** Options with defaults from the environment applied. */
  protected resolved(options: Record<string, unknown> | undefined): ControlOptions {
    // Options given before a subcommand (`svc-control --url U acheron ls /`) belong to the root.
    const globals = this.command?.optsWithGlobals?.() ?? {};
    const o = { ...globals, ...(options ?? {}) } as Partial<ControlOptions>;
    return {
      url: o.url ?? process.env.SVC_URL ?? DEFAULT_URL,
      authToken: o.authToken,
      operatorToken: o.operatorToken ?? (process.env.SVC_CONTROL_OPERATOR_TOKEN || undefined),
      agentId: o.agentId,
      watch: o.watch,
      timeoutMs: o.timeoutMs,
      tlsCa: o.tlsCa,
    };
  }

  /**
   * Runs a command's work: `work` makes its own checks, then calls `open` for the control session
   * (see {@link openSession}), which is closed when `work` ends. A failure is reported by
   * `report` when it returns true for it, else by {@link reportFailure}; nothing is thrown.
   */
  protected async withSession(
    options: ControlOptions,
    work: (open: () => Promise<ControlClient>) => Promise<void>,
    report: (e: unknown) => boolean = () => false,
  ): Promise<void> {
    const opened: ControlClient[] = [];
    try {
      await work(async () => {
        const client = await openSession(this.factory, options);
        opened.push(client);
        return client;
      });
    } catch (e) {
      if (!report(e)) reportFailure(this.out, e);
    } finally {
      for (const client of opened) client.close();
    }
  }
}
