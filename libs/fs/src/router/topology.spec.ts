/**
 * Unit tests of {@link applyTopologyDelta} (docs/protocol.md "Workspace status" `control.workspace_topology_delta`):
 * consecutive deltas apply, stale ones are ignored, gaps and other projects ask for a re-read,
 * removed paths go, a failover reorders the candidates, `access_ended` empties; the input
 * topology is never modified.
 */
import { MountView, TopologyDelta } from '@svc/protocol/wire';
import { NO_AVAILABILITY as AVAIL, mountView as mv, workspaceStatus as status } from '../../../../test/fixtures/workspace-status';
import { applyTopologyDelta, candidatesFingerprint, Topology, topologyFromEndpoints, topologyFromStatus } from './topology';

function delta(revision: number, changed: MountView[], desired: MountView[], removed: string[] = [], project_id = 'p'): TopologyDelta {
  return { project_id, revision, changed, desired, removed, availability: AVAIL, ts_ms: 1 };
}

/** Everything routing sees of a topology, to compare without object identity. */
function view(t: Topology): Array<[string, string]> {
  return [...t.mounts].map(([p, l]) => [p, candidatesFingerprint(l)]);
}

// /a served by A (online) with standby B (online, older lease); /b served by C
const A = mv('/a', 'A', 'online', 2000, { auth_token: 'ta' });
const B = mv('/a', 'B', 'online', 1000, { auth_token: 'tb' });
const C = mv('/b', 'C', 'online', 1000);
const base = () => topologyFromStatus(status([A, C], [A, B, C], 5), 100);

describe('applyTopologyDelta', () => {
  it('applies a consecutive delta: only the changed path is rebuilt, the others keep their lists', () => {
    const cur = base();
    const before = view(cur);
    const C2 = mv('/b', 'C', 'degraded', 1000);
    const next = applyTopologyDelta(cur, delta(6, [C2], [C2]), 200)!;
    expect(next).not.toBeNull();
    expect(next.revision).toBe(6);
    expect(next.ts_ms).toBe(200);
    expect(next.mounts.get('/b')).toEqual([expect.objectContaining({ node_id: 'C', state: 'degraded', selected: true })]);
    expect(next.mounts.get('/a')).toBe(cur.mounts.get('/a'));
    // the input is untouched
    expect(view(cur)).toEqual(before);
    expect(cur.revision).toBe(5);
    expect(cur.mounts.get('/b')![0].state).toBe('online');
  });

  it('gives what a full read of the same state gives (paths added in order, candidates ranked)', () => {
    const D1 = mv('/0', 'D1', 'degraded', 900);
    const D2 = mv('/0', 'D2', 'online', 100);
    const D3 = mv('/0', 'D3', 'missing', null);
    const next = applyTopologyDelta(base(), delta(6, [D1], [D3, D1, D2]))!;
    const full = topologyFromStatus(status([D1, A, C], [D3, D1, D2, A, B, C], 6));
    expect([...next.mounts.keys()]).toEqual(['/0', '/a', '/b']);
    expect(view(next)).toEqual(view(full));
    expect(next.mounts.get('/0')!.map((c) => c.node_id)).toEqual(['D1', 'D2', 'D3']);
  });

  it('ignores a stale delta (revision not newer): the same object comes back', () => {
    const cur = base();
    expect(applyTopologyDelta(cur, delta(5, [], [], ['/a']))).toBe(cur);
    expect(applyTopologyDelta(cur, delta(3, [], [], ['/a']))).toBe(cur);
    expect(cur.mounts.has('/a')).toBe(true);
  });

  it('returns null (re-read) on a revision gap, an unknown revision or another project', () => {
    expect(applyTopologyDelta(base(), delta(7, [], []))).toBeNull();
    expect(applyTopologyDelta(topologyFromStatus(status([A, C], [A, B, C], undefined)), delta(1, [], []))).toBeNull();
    expect(applyTopologyDelta(base(), delta(6, [], [], [], 'q'))).toBeNull();
    expect(applyTopologyDelta(topologyFromStatus(status([], [], 0, null as unknown as string)), delta(1, [], []))).toBeNull();
    expect(applyTopologyDelta(topologyFromEndpoints([{ name: 'x', url: 'ws://x/v2/fs', export_name: 'work', mount_path: '/x' }]), delta(1, [], []))).toBeNull();
    // a server without revisions leaves the topology's revision unknown
    expect(topologyFromStatus(status([A], [A], undefined)).revision).toBeNull();
  });

  it('drops removed paths', () => {
    const cur = base();
    const next = applyTopologyDelta(cur, delta(6, [], [], ['/b', '/never']))!;
    expect([...next.mounts.keys()]).toEqual(['/a']);
    expect(next.revision).toBe(6);
    expect([...cur.mounts.keys()]).toEqual(['/a', '/b']);
  });

  it('a failover from A to standby B puts B first, then A', () => {
    const cur = base();
    expect(cur.mounts.get('/a')!.map((c) => c.node_id)).toEqual(['A', 'B']);
    const A2 = mv('/a', 'A', 'degraded', 2000, { auth_token: 'ta' });
    const next = applyTopologyDelta(cur, delta(6, [B], [A2, B]))!;
    expect(next.mounts.get('/a')!.map((c) => [c.node_id, c.state, c.selected, c.auth_token])).toEqual([
      ['B', 'online', true, 'tb'],
      ['A', 'degraded', false, 'ta'],
    ]);
    expect(cur.mounts.get('/a')!.map((c) => c.node_id)).toEqual(['A', 'B']);
  });

  it('access_ended empties the topology of that project and forgets its revision', () => {
    const cur = base();
    const end: TopologyDelta = { project_id: 'p', changed: [], desired: [], removed: [], availability: AVAIL, ts_ms: 1, reason: 'access_ended' };
    const next = applyTopologyDelta(cur, end, 300)!;
    expect(next.mounts.size).toBe(0);
    expect(next.revision).toBeNull();
    expect(next).toMatchObject({ project_id: 'p', source: 'workspace', ts_ms: 300 });
    expect(cur.mounts.size).toBe(2);
    expect(applyTopologyDelta(cur, { ...end, project_id: 'q' })).toBeNull();
  });
});
