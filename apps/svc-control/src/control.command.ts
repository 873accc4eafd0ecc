/**
 * `svc-control [--url URL] [--auth-token T] [--operator-token T] [--agent-id A] [--tls-ca FILE] [--watch]
 * <op> [payload JSON | @file | -]`: negotiates, sends one control operation
 * (`control.` prefix optional), prints the reply payload as JSON.
 *
 * Exit codes: 0 success; 1 the server answered `control.error` (printed as
 * `error: <code>: <message>` on stderr); 2 usage, connection or authentication failure.
 */
import { Option, RootCommand } from 'nest-commander';
import { ControlClient } from '@svc/client';
import { PROTECTED_OPERATIONS } from '@svc/protocol/wire';
import { readPayloadArg } from './payload';
import { AcheronCommand } from './acheron.command';
import { ApplyCommand } from './apply.command';
import { AuditCommand } from './audit.command';
import { SessionCommand } from './session-command';
import { commanderOption } from '../../../libs/ops/src/option-specs';
import { CONTROL_OPTIONS } from './option-table';

@RootCommand({
  name: 'svc-control',
  subCommands: [AcheronCommand, ApplyCommand, AuditCommand],
  arguments: '[op] [payload]',
  description: 'send one control operation to svc and print the reply payload as JSON',
  argsDescription: {
    op: 'operation, e.g. node_list or control.project_create',
    payload: 'JSON object, @file, or - for standard input (default {})',
  },
})
export class ControlCommand extends SessionCommand {
  @Option(commanderOption(CONTROL_OPTIONS.watch))
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
    await this.withSession(o, async (open) => {
      const payload = readPayloadArg(payloadArg);
      const type = op.startsWith('control.') ? op : `control.${op}`;
      if (o.operatorToken && PROTECTED_OPERATIONS.includes(type) && payload.operator_token === undefined) {
        payload.operator_token = o.operatorToken;
      }
      const client = await open();
      const reply = await client.request(type, payload);
      this.out.json(reply);
      if (o.watch) await this.watch(client);
    });
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
