/**
 * What every svc-control command shares: the session options (`--url`, `--auth-token`,
 * `--operator-token`, `--agent-id`, `--timeout-ms`, `--tls-ca`; option-table.ts), opening the control session,
 * and the mapping of failures to messages and exit codes (1: the server refused; 2: usage,
 * connection, TLS verification or authentication).
 */
import { Option, CommandRunner } from 'nest-commander';
import { clientTlsFrom, ControlClient, ControlClientFactory, ControlError, ConnectionError, resolveAuthToken } from '@svc/client';
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

/** Writes to stdout/stderr and sets the exit code; shared by the svc-control commands. */
export class CliOutput {
  json(value: unknown): void {
    process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
  }
  line(text: string): void {
    process.stdout.write(`${text}\n`);
  }
  fail(message: string, code: number): void {
    process.stderr.write(`${message}\n`);
    process.exitCode = code;
  }
}

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

/** Options shared by every svc-control command (declared once, parsed by commander). */
export abstract class SessionCommand extends CommandRunner {
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
}
