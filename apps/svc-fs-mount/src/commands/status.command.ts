/**
 * `svc-fs-mount status [--no-probe]`: the topology, each mount's candidates
 * and state, and (unless `--no-probe`) a probe of every candidate (connect, hello, export,
 * getattr of its root), as a table or, with `--json`, as JSON. Tokens are never printed.
 */
import { Option, SubCommand } from 'nest-commander';
import { availabilityOf } from '@svc/protocol/wire';
import { ProbeResult, WorkspaceRouter } from '../../../../libs/fs/src/router';
import { table } from '../format';
import { MOUNT_OPTIONS } from '../option-table';
import { commanderOption } from '../../../../libs/ops/src/option-specs';
import { MountCommand } from './base.command';

/** The JSON document of `status --json`. */
export interface StatusReport {
  mode: 'workspace' | 'endpoints';
  control: { url: string | null; connected: boolean; last_sync_ms: number | null; last_error: string | null } | null;
  project_id: string | null;
  agent_id: string | null;
  workspace_root: string | null;
  /** The project revision the topology reflects (docs/protocol.md "Workspace status"); null when unknown or in endpoint mode. */
  revision: number | null;
  binary_requested: boolean;
  availability: { mounts_total: number; online: number; degraded: number; missing: number } | null;
  mounts: Array<{
    mount_path: string;
    candidates: Array<{
      node_id: string | null;
      node_name: string | null;
      export_name: string;
      fs_url: string | null;
      state: string | null;
      selected: boolean;
      auth: boolean;
      probe?: ProbeResult;
    }>;
  }>;
}

/** Builds the status report of a router (probing unless `probe` is false). */
export async function statusReport(router: WorkspaceRouter, probe: boolean, binary: boolean): Promise<StatusReport> {
  const t = router.topology;
  const info = router.source.info();
  const probes = probe ? await router.probe() : null;
  const mounts = router.describe().map((m) => ({
    mount_path: m.mount_path,
    candidates: m.candidates.map((c, i) => {
      const { active: _active, last_error: _err, ...rest } = c;
      const out: StatusReport['mounts'][number]['candidates'][number] = { ...rest };
      const p = probes?.get(m.mount_path)?.[i];
      if (p) out.probe = { ...p, ms: Math.round(p.ms * 100) / 100 };
      return out;
    }),
  }));
  const selected = [...t.mounts.values()].map((l) => l[0]).filter((c) => c.state !== null);
  return {
    mode: info.kind,
    control: info.kind === 'workspace' ? { url: info.url, connected: info.connected, last_sync_ms: info.last_sync_ms, last_error: info.last_error } : null,
    project_id: t.project_id,
    agent_id: t.agent_id,
    workspace_root: t.workspace_root,
    revision: t.revision,
    binary_requested: binary,
    availability: info.kind === 'workspace' ? availabilityOf(selected.map((c) => ({ state: c.state! }))) : null,
    mounts,
  };
}

function probeCell(p: ProbeResult | undefined): string {
  if (!p) return '-';
  if (p.ok) return `ok ${p.ms.toFixed(1)} ms (${p.read_only ? 'ro' : 'rw'}${p.binary ? ', binary' : ', json'})`;
  return `FAILED: ${p.error}${p.errno ? ` (errno ${p.errno})` : ''}`;
}

/** The readable form of a status report. */
export function formatStatus(r: StatusReport): string {
  const lines: string[] = [];
  if (r.mode === 'workspace') {
    const c = r.control!;
    lines.push(`mode: workspace (${c.url}, control session ${c.connected ? 'open' : 'closed'}${c.last_error ? `, last error: ${c.last_error}` : ''})`);
    lines.push(
      r.project_id
        ? `project: ${r.project_id} (agent ${r.agent_id}), workspace root ${r.workspace_root}${r.revision !== null ? `, revision ${r.revision}` : ''}`
        : `project: none (agent ${r.agent_id} has no binding; pass --project-id)`,
    );
    const a = r.availability!;
    lines.push(`availability: ${a.mounts_total} mount path(s): ${a.online} online, ${a.degraded} degraded, ${a.missing} missing`);
  } else {
    lines.push(`mode: endpoints (${r.mounts.length} mount path(s))`);
  }
  lines.push(`data path: ${r.binary_requested ? 'binary when the node offers it' : 'JSON (--no-binary)'}`);
  lines.push('');
  const rows: string[][] = [];
  for (const m of r.mounts) {
    m.candidates.forEach((c, i) =>
      rows.push([
        i === 0 ? m.mount_path : '',
        c.node_name ?? c.node_id ?? '-',
        c.export_name,
        c.state ?? '-',
        i === 0 ? 'primary' : `standby ${i}`,
        c.auth ? 'token' : '-',
        c.fs_url ?? '-',
        probeCell(c.probe),
      ]),
    );
  }
  if (rows.length === 0) lines.push('(no mounts)');
  else lines.push(table(['MOUNT', 'NODE', 'EXPORT', 'STATE', 'ROLE', 'AUTH', 'ENDPOINT', 'PROBE'], rows));
  return lines.join('\n');
}

@SubCommand({ name: 'status', description: 'show the topology, each mount state and a probe of every candidate (--json for JSON)' })
export class StatusCommand extends MountCommand {
  @Option(commanderOption(MOUNT_OPTIONS.noProbe))
  parseNoProbe(): boolean {
    return false;
  }

  async run(_params: string[], options?: Record<string, unknown>): Promise<void> {
    const probe = options?.probe !== false;
    await this.session.run(this.command, null, async (router, o) => {
      const report = await statusReport(router, probe, o.binary !== false);
      if (o.json) this.out.json(report);
      else this.out.line(formatStatus(report));
      if (probe && report.mounts.some((m) => !m.candidates.some((c) => c.probe?.ok))) process.exitCode = 1;
    });
  }
}
