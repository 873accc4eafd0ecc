/**
 * `svc-control [--url URL] [--auth-token T] [--operator-token T] [--agent-id A] [--watch]
 * <op> [payload JSON | @file | -]` (issue 2 item 10): negotiates, sends one control operation
 * (`control.` prefix optional), prints the reply payload as JSON.
 *
 * Exit codes: 0 success; 1 the server answered `control.error` (printed as
 * `error: <code>: <message>` on stderr); 2 usage, connection or authentication failure.
 */
import { CommandRunner, Option, RootCommand } from 'nest-commander';
import { ClientModule, ControlClient, ControlClientFactory, ControlError, ConnectionError, resolveAuthToken } from '@svc/client';
import { DEFAULT_SVC_PORT, PROTECTED_OPERATIONS } from '@svc/protocol';
import { readPayloadArg, UsageError } from './payload';

export interface ControlOptions {
  url: string;
  authToken?: string;
  operatorToken?: string;
  agentId?: string;
  watch?: boolean;
  timeoutMs?: number;
}

export const DEFAULT_URL = `ws://127.0.0.1:${DEFAULT_SVC_PORT}/`;

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
 * Opens the control session for a command.
 * @throws UsageError when no token can be found
 */
export async function openSession(factory: ControlClientFactory, options: ControlOptions): Promise<ControlClient> {
  const token = resolveAuthToken(options.authToken);
  if (!token) {
    throw new UsageError('no auth token: pass --auth-token, set SVC_AUTH_TOKEN, or run where ${SVC_STATE_DIR:-./.svc}/auth_tokens.json is readable');
  }
  return factory.connect({ url: options.url, token, agentId: options.agentId, requestTimeoutMs: options.timeoutMs });
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
  @Option({ flags: '--url <url>', description: `control-plane WebSocket URL (default ${DEFAULT_URL}, or $SVC_URL)` })
  parseUrl(v: string): string {
    return v;
  }

  @Option({ flags: '--auth-token <token>', description: 'role token (default $SVC_AUTH_TOKEN, else the admin token in ${SVC_STATE_DIR:-./.svc}/auth_tokens.json)' })
  parseAuthToken(v: string): string {
    return v;
  }

  @Option({ flags: '--operator-token <token>', description: 'operator token for protected operations (default $SVC_CONTROL_OPERATOR_TOKEN)' })
  parseOperatorToken(v: string): string {
    return v;
  }

  @Option({ flags: '--agent-id <id>', description: 'agent id for control.connect (default "default")' })
  parseAgentId(v: string): string {
    return v;
  }

  @Option({ flags: '--timeout-ms <ms>', description: 'per-request time limit in ms (default 30000)' })
  parseTimeout(v: string): number {
    const n = Number(v);
    if (!Number.isInteger(n) || n <= 0) throw new UsageError('--timeout-ms must be a positive integer');
    return n;
  }

  /** Options with defaults from the environment applied. */
  protected resolved(options: Record<string, unknown> | undefined): ControlOptions {
    const o = (options ?? {}) as Partial<ControlOptions>;
    return {
      url: o.url ?? process.env.SVC_URL ?? DEFAULT_URL,
      authToken: o.authToken,
      operatorToken: o.operatorToken ?? (process.env.SVC_CONTROL_OPERATOR_TOKEN || undefined),
      agentId: o.agentId,
      watch: o.watch,
      timeoutMs: o.timeoutMs,
    };
  }
}

@RootCommand({
  name: 'svc-control',
  arguments: '[op] [payload]',
  description: 'send one control operation to svc and print the reply payload as JSON',
  argsDescription: {
    op: 'operation, e.g. node_list or control.project_create',
    payload: 'JSON object, @file, or - for standard input (default {})',
  },
})
export class ControlCommand extends SessionCommand {
  constructor(
    private readonly factory: ControlClientFactory,
    private readonly out: CliOutput,
  ) {
    super();
  }

  @Option({ flags: '--watch', description: 'after the reply, keep the session open and print pushed events as JSON lines' })
  parseWatch(): boolean {
    return true;
  }

  async run(params: string[], options?: Record<string, unknown>): Promise<void> {
    const [op, payloadArg] = params;
    if (!op) {
      this.command.outputHelp();
      process.exitCode = 2;
      return;
    }
    const o = this.resolved(options);
    let client: ControlClient | null = null;
    try {
      const payload = readPayloadArg(payloadArg);
      const type = op.startsWith('control.') ? op : `control.${op}`;
      if (o.operatorToken && PROTECTED_OPERATIONS.includes(type) && payload.operator_token === undefined) {
        payload.operator_token = o.operatorToken;
      }
      client = await openSession(this.factory, o);
      const reply = await client.request(type, payload);
      this.out.json(reply);
      if (o.watch) await this.watch(client);
    } catch (e) {
      reportFailure(this.out, e);
    } finally {
      client?.close();
    }
  }

  private watch(client: ControlClient): Promise<void> {
    return new Promise((resolve) => {
      client.on('event', (type: string, payload: unknown) => process.stdout.write(`${JSON.stringify({ type, payload })}\n`));
      const stop = () => resolve();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      client.once('close', (code: number, reason: string) => {
        if (code !== 1000) this.out.fail(`svc-control: session closed by the server (${code}${reason ? `: ${reason}` : ''})`, 2);
        resolve();
      });
    });
  }
}

export { ClientModule };
