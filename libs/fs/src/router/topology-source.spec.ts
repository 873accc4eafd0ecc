/**
 * Unit tests of {@link WorkspaceTopologySource} following `control.workspace_topology_delta`
 * (docs/protocol.md "Workspace status"), over a stub control session (the `connect` option): consecutive deltas are
 * applied without a read, stale ones ignored, a gap re-reads the status, `access_ended`
 * empties the topology, and a read reply older than the deltas already applied is not
 * published.
 */
import { EventEmitter } from 'node:events';
import { ControlClient } from '@svc/client';
import { MountView, TopologyDelta, WorkspaceStatus } from '@svc/protocol/wire';
import { NO_AVAILABILITY as AVAIL, mountView as mv, workspaceStatus } from '../../../../test/fixtures/workspace-status';
import { Topology } from './topology';
import { WorkspaceTopologySource } from './topology-source';

/** The status at `revision` with `mounts` desired and selected. */
const status = (revision: number, mounts: MountView[]): WorkspaceStatus => workspaceStatus(mounts, mounts, revision);

/** The parts of ControlClient the source uses; `status` is what the next read returns. */
class StubClient extends EventEmitter {
  isOpen = true;
  reads = 0;
  status: WorkspaceStatus = status(1, [mv('/a', 'A')]);
  /** When set, reads wait for it (to interleave deltas with a read). */
  gate: Promise<void> | null = null;

  async request<T>(type: string): Promise<T> {
    if (type !== 'control.workspace_status') throw new Error(`unexpected ${type}`);
    this.reads++;
    const reply = this.status; // computed now, delivered after the gate
    if (this.gate) await this.gate;
    return reply as T;
  }

  close(): void {
    this.isOpen = false;
    this.emit('close');
  }

  delta(d: Partial<TopologyDelta>): void {
    this.emit('event', 'control.workspace_topology_delta', { project_id: 'p', changed: [], desired: [], removed: [], availability: AVAIL, ts_ms: 1, ...d });
  }
}

const settle = () => new Promise((r) => setImmediate(r));
const nodes = (t: Topology) => [...t.mounts].map(([p, l]) => `${p}:${l.map((c) => c.node_id).join(',')}`);

describe('WorkspaceTopologySource and topology deltas', () => {
  let client: StubClient;
  let source: WorkspaceTopologySource;
  let published: Topology[];

  beforeEach(async () => {
    client = new StubClient();
    source = new WorkspaceTopologySource({
      url: 'ws://stub/',
      token: 't',
      projectId: 'p',
      syncIntervalMs: 0,
      connect: async () => client as unknown as ControlClient,
    });
    const first = await source.start();
    expect(first.revision).toBe(1);
    expect(client.reads).toBe(1);
    published = [];
    source.on('topology', (t: Topology) => published.push(t));
  });
  afterEach(() => source.close());

  it('applies consecutive deltas without reading, ignores stale ones, re-reads on a gap', async () => {
    client.delta({ revision: 2, changed: [mv('/b', 'B')], desired: [mv('/b', 'B')] });
    await settle();
    expect(client.reads).toBe(1);
    expect(source.current.revision).toBe(2);
    expect(nodes(source.current)).toEqual(['/a:A', '/b:B']);

    client.delta({ revision: 2, removed: ['/a'] });
    await settle();
    expect(published).toHaveLength(1); // the stale delta published nothing

    client.status = status(5, [mv('/c', 'C')]);
    client.delta({ revision: 5, removed: ['/a'] });
    await settle();
    expect(client.reads).toBe(2);
    expect(source.current.revision).toBe(5);
    expect(nodes(source.current)).toEqual(['/c:C']);
  });

  it('access_ended publishes an empty topology', async () => {
    client.delta({ reason: 'access_ended' });
    await settle();
    expect(source.current.mounts.size).toBe(0);
    expect(source.current.revision).toBeNull();
    expect(published).toHaveLength(1);
    expect(client.reads).toBe(1);
  });

  it('a read reply older than an applied delta is not published', async () => {
    let open!: () => void;
    client.gate = new Promise((r) => (open = r));
    const refreshing = source.refresh(); // its reply is computed now: revision 1
    await settle();
    client.status = status(2, [mv('/a', 'A'), mv('/b', 'B')]);
    client.delta({ revision: 2, changed: [mv('/b', 'B')], desired: [mv('/b', 'B')] });
    await settle();
    expect(source.current.revision).toBe(2);
    open();
    await refreshing;
    expect(client.reads).toBe(2);
    expect(source.current.revision).toBe(2);
    expect(nodes(source.current)).toEqual(['/a:A', '/b:B']);
  });
});
