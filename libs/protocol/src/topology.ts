/**
 * The mount selection rule (docs/protocol.md "Workspace status"), shared by
 * the control plane (which mount is selected) and the workspace router (failover order).
 */
import type { Availability, MountState, MountView } from './records';

const STATE_RANK: Record<MountState, number> = { online: 0, degraded: 1, missing: 2 };

/**
 * Orders the candidates of one mount path: online before degraded before missing; among
 * equals the later lease expiry first; remaining ties keep the configured order.
 * @param mounts candidates in configured order
 * @returns a new array, best first
 */
export function rankMounts<T extends Pick<MountView, 'state' | 'lease_expires_at_ms'>>(mounts: T[]): T[] {
  return mounts
    .map((m, i) => ({ m, i }))
    .sort(
      (a, b) => STATE_RANK[a.m.state] - STATE_RANK[b.m.state] || (b.m.lease_expires_at_ms ?? -Infinity) - (a.m.lease_expires_at_ms ?? -Infinity) || a.i - b.i,
    )
    .map(({ m }) => m);
}

/**
 * Groups mounts by `mount_path` (configured order kept within a group) and ranks each group.
 * @returns groups by path, paths sorted; each group best first
 */
export function groupAndRank<T extends Pick<MountView, 'mount_path' | 'state' | 'lease_expires_at_ms'>>(mounts: T[]): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const m of mounts) {
    const g = groups.get(m.mount_path);
    if (g) g.push(m);
    else groups.set(m.mount_path, [m]);
  }
  const out = new Map<string, T[]>();
  for (const path of [...groups.keys()].sort()) out.set(path, rankMounts(groups.get(path)!));
  return out;
}

/** Availability counters of the selected mounts. */
export function availabilityOf(selected: Array<Pick<MountView, 'state'>>): Availability {
  const a: Availability = { mounts_total: selected.length, online: 0, degraded: 0, missing: 0 };
  for (const m of selected) a[m.state]++;
  return a;
}
