/**
 * `svc-control audit [--since 1h] [--until T] [--agent A] [--type T] [--limit N] [--json]`:
 * the audit log (`control.audit_list`, docs/protocol.md "Audit log"), newest first, as a
 * table: time (UTC), role, agent, type (without `control.`), target, result. `--since` and
 * `--until` take a duration back from now (`90s`, `15m`, `1h`, `7d`) or a date
 * (`2025-01-31T12:00:00Z`). `--json` prints one entry per line as JSON.
 *
 * Exit codes: 0; 1 the server refused (e.g. `forbidden` for a user token); 2 usage,
 * connection or authentication.
 */
import { Command, Option } from 'nest-commander';
import { AUDIT_LIST_DEFAULT_LIMIT, AUDIT_LIST_MAX_LIMIT, AuditEntry, AuditListResult } from '@svc/protocol/wire';
import { UsageError } from './payload';
import { SessionCommand } from './session-command';
import { commanderOption } from '../../../libs/ops/src/option-specs';
import { CONTROL_OPTIONS } from './option-table';

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/**
 * A point in time from `--since`/`--until`: a duration back from `now` (`90s`, `15m`, `1h`,
 * `7d`, `2w`) or a date `Date.parse` reads.
 * @returns ms since the epoch
 * @throws UsageError otherwise
 */
export function parseTimeArg(value: string, flag: string, now: number): number {
  const d = /^(\d+)(ms|s|m|h|d|w)$/.exec(value.trim());
  if (d) return now - Number(d[1]) * UNITS[d[2]];
  if (/^\d{4}-\d{2}-\d{2}/.test(value)) {
    const t = Date.parse(value);
    if (!Number.isNaN(t)) return t;
  }
  throw new UsageError(`${flag} takes a duration (90s, 15m, 1h, 7d) or a date (2025-01-31T12:00:00Z), not ${JSON.stringify(value)}`);
}

/** The target column: `project=… node=… path=… request=…`, or `-`. */
export function targetText(t: AuditEntry['target']): string {
  const parts: string[] = [];
  if (t.project_id) parts.push(`project=${t.project_id}`);
  if (t.node_id) parts.push(`node=${t.node_id}`);
  if (t.mount_path) parts.push(`path=${t.mount_path}`);
  if (t.request_id) parts.push(`request=${t.request_id}`);
  return parts.length > 0 ? parts.join(' ') : '-';
}

/** The entries as an aligned table with a header line. */
export function auditTable(entries: AuditEntry[]): string[] {
  const rows = entries.map((e) => [new Date(e.ts_ms).toISOString(), e.role, e.agent_id, e.type.replace(/^control\./, ''), targetText(e.target), e.result]);
  const header = ['TIME', 'ROLE', 'AGENT', 'TYPE', 'TARGET', 'RESULT'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const fmt = (r: string[]) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join('  ');
  return [fmt(header), ...rows.map(fmt)];
}

@Command({
  name: 'audit',
  description: 'print the audit log (control.audit_list), newest first: --since 1h --agent A --type T',
})
export class AuditCommand extends SessionCommand {
  @Option(commanderOption(CONTROL_OPTIONS.since))
  parseSince(v: string): string {
    return v;
  }

  @Option(commanderOption(CONTROL_OPTIONS.until))
  parseUntil(v: string): string {
    return v;
  }

  @Option(commanderOption(CONTROL_OPTIONS.agent))
  parseAgent(v: string): string {
    return v;
  }

  @Option(commanderOption(CONTROL_OPTIONS.type))
  parseType(v: string): string {
    return v;
  }

  @Option(commanderOption(CONTROL_OPTIONS.limit))
  parseLimit(v: string): number {
    const n = Number(v);
    if (!Number.isInteger(n) || n <= 0) throw new UsageError('--limit must be a positive integer');
    return n;
  }

  @Option(commanderOption(CONTROL_OPTIONS.auditJson))
  parseJson(): boolean {
    return true;
  }

  async run(_params: string[], options?: Record<string, unknown>): Promise<void> {
    const o = this.resolved(options);
    const opts = options ?? {};
    await this.withSession(o, async (open) => {
      const now = Date.now();
      const filter: Record<string, unknown> = {};
      if (typeof opts.since === 'string') filter.since_ms = parseTimeArg(opts.since, '--since', now);
      if (typeof opts.until === 'string') filter.until_ms = parseTimeArg(opts.until, '--until', now);
      if (typeof opts.agent === 'string') filter.actor_agent_id = opts.agent;
      if (typeof opts.type === 'string') filter.type = opts.type.includes('.') ? opts.type : `control.${opts.type}`;
      const want = (opts.limit as number | undefined) ?? AUDIT_LIST_DEFAULT_LIMIT;
      const client = await open();
      const entries: AuditEntry[] = [];
      let cursor: string | null = null;
      do {
        const page: AuditListResult = await client.request<AuditListResult>('control.audit_list', {
          ...filter,
          limit: Math.min(AUDIT_LIST_MAX_LIMIT, want - entries.length),
          ...(cursor ? { cursor } : {}),
        });
        entries.push(...page.entries);
        cursor = page.next_cursor;
      } while (cursor && entries.length < want);
      if (opts.json === true) for (const e of entries) this.out.line(JSON.stringify(e));
      else if (entries.length === 0) this.out.line('no audit entries match');
      else for (const line of auditTable(entries)) this.out.line(line);
    });
  }
}
