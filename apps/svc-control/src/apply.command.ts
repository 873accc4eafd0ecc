/**
 * `svc-control apply -f FILE|- [--dry-run] [--no-prune] [--json]` (docs/protocol.md "Declarative workspaces"): sends a workspace
 * file (YAML or JSON, see workspace-file.ts) as one `control.project_up` and prints the plan, then the result:
 *
 * ```
 * + /docs node-a:docs
 * - /old node-b:old
 * 1 to add, 1 to remove, 2 unchanged
 * applied: project "demo" updated
 * project_id: proj-...
 * workspace_root: /projects/proj-.../fs
 * ```
 *
 * The plan is the server's answer to the one request (what it did, or with `--dry-run` what it
 * would do), so what is printed is what happened. A project created by the call gets its
 * `project_token` printed once. `--json` prints the reply payload instead.
 *
 * Exit codes: 0 applied (or planned); 1 the server refused it (`error: CODE: FILE:LINE: message`
 * when the error names an entry of the file); 2 a file error (`svc-control: FILE:LINE: FIELD:
 * message`), usage, connection or authentication.
 */
import { readFileSync } from 'node:fs';
import { Command, Option } from 'nest-commander';
import { ControlError } from '@svc/client';
import type { MountSpec, ProjectUpResult } from '@svc/protocol/wire';
import { UsageError } from './payload';
import { SessionCommand } from './session-command';
import { fieldOfServerMessage, parseWorkspaceFile, WorkspaceFile, WorkspaceFileError } from './workspace-file';
import { commanderOption } from '../../../libs/ops/src/option-specs';
import { CONTROL_OPTIONS } from './option-table';

/** One plan line: `+ /path node:export` (node by name, else id). */
export function planLine(sign: '+' | '-', m: MountSpec): string {
  return `${sign} ${m.mount_path} ${m.node_name ?? m.node_id}:${m.export_name}`;
}

/** The plan and result lines of a `project_up` reply (without the token line). */
export function describeResult(name: string, r: ProjectUpResult, dryRun: boolean): string[] {
  const lines = [...r.changes.added.map((m) => planLine('+', m)), ...r.changes.removed.map((m) => planLine('-', m))];
  const { added, removed, unchanged } = r.changes;
  lines.push(`${added.length} to add, ${removed.length} to remove, ${unchanged} unchanged`);
  const changed = r.created || added.length > 0 || removed.length > 0;
  if (dryRun) lines.push(`dry run: nothing was changed${r.created ? ` (project "${name}" would be created)` : ''}`);
  else lines.push(`applied: project "${name}" ${r.created ? 'created' : changed ? 'updated' : 'unchanged'}`);
  if (r.project_id !== null) lines.push(`project_id: ${r.project_id}`);
  if (r.workspace_root) lines.push(`workspace_root: ${r.workspace_root}`);
  return lines;
}

@Command({
  name: 'apply',
  description: 'make a project and its mounts equal to a workspace file (YAML or JSON): control.project_up',
})
export class ApplyCommand extends SessionCommand {
  @Option(commanderOption(CONTROL_OPTIONS.file))
  parseFile(v: string): string {
    return v;
  }

  @Option(commanderOption(CONTROL_OPTIONS.dryRun))
  parseDryRun(): boolean {
    return true;
  }

  @Option(commanderOption(CONTROL_OPTIONS.noPrune))
  parseNoPrune(): boolean {
    return false;
  }

  @Option(commanderOption(CONTROL_OPTIONS.applyJson))
  parseJson(): boolean {
    return true;
  }

  async run(_params: string[], options?: Record<string, unknown>): Promise<void> {
    const o = this.resolved(options);
    const opts = options ?? {};
    let ws: WorkspaceFile | null = null;
    await this.withSession(
      o,
      async (open) => {
        const file = opts.file as string | undefined;
        if (!file) throw new UsageError('apply needs -f FILE (YAML or JSON; - for standard input)');
        ws = this.read(file);
        const payload: Record<string, unknown> = { ...ws.payload };
        const dryRun = opts.dryRun === true;
        if (dryRun) payload.dry_run = true;
        if (opts.prune === false) payload.prune = false;
        if (o.operatorToken) payload.operator_token = o.operatorToken;
        const client = await open();
        const reply = await client.request<ProjectUpResult>('control.project_up', payload);
        if (opts.json === true) {
          this.out.json(reply);
          return;
        }
        for (const line of describeResult(String(ws.payload.name), reply, dryRun)) this.out.line(line);
        if (reply.project_token) this.out.line(`project_token: ${reply.project_token} (shown once: keep it)`);
      },
      (e) => {
        if (e instanceof WorkspaceFileError) {
          this.out.fail(`svc-control: ${e.message}`, 2);
          return true;
        }
        if (e instanceof ControlError && ws) {
          const field = fieldOfServerMessage(e.message);
          const line = field ? ws.lineOf(field) : null;
          this.out.fail(`error: ${e.code}: ${line !== null ? `${ws.file}:${line}: ` : ''}${e.message}`, 1);
          return true;
        }
        return false;
      },
    );
  }

  /** @throws WorkspaceFileError when the file cannot be read or is not a valid workspace */
  private read(file: string): WorkspaceFile {
    const name = file === '-' ? 'standard input' : file;
    let text: string;
    try {
      text = readFileSync(file === '-' ? 0 : file, 'utf8');
    } catch (e) {
      const err = e as NodeJS.ErrnoException;
      throw new WorkspaceFileError(name, null, null, `cannot be read (${err.code ?? err.message})`);
    }
    return parseWorkspaceFile(text, name);
  }
}
