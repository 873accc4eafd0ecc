import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Logger } from '@nestjs/common';
import type { ServiceEntry, WorkspaceStatus } from '@svc/protocol';
import { Actor, ControlLocals } from '../common/actor';
import { Clock } from '../common/clock';
import { ServerConfig } from '../config';
import { SqliteStateStore } from '../persistence/sqlite-state.store';
import { MountRecord, NodeRecord, ProjectRecord } from '../persistence/state.model';
import { StateService } from '../persistence/state.service';
import { AvailabilityService } from './availability.service';
import { ProjectsService } from './projects.service';
import { WorkspaceService } from './workspace.service';

/** A clock the test moves by hand (ms). */
class ManualClock extends Clock {
  t = 1_000_000;
  override now(): number {
    return this.t;
  }
}

const T0 = 1_000_000;
const admin: Actor = { role: 'admin', agentId: 'ops', sessionId: 's1' };
const user: Actor = { role: 'user', agentId: 'dev', sessionId: 's2' };

function node(id: string, leaseExpiresAt: number): NodeRecord {
  return {
    node_id: id,
    node_name: `name-${id}`,
    fs_url: `ws://127.0.0.1:1/${id}/v2/fs`,
    platform: { os: 'linux', arch: 'x64', runtime_kind: 'native' },
    labels: {},
    secret_sha256: '0'.repeat(64),
    fs_auth_token: `fs-token-${id}`,
    lease_token: 'l',
    lease_expires_at_ms: leaseExpiresAt,
    joined_at_ms: T0,
    last_seen_ms: T0,
  };
}

const project: ProjectRecord = {
  project_id: 'p1',
  name: 'p',
  vision: '',
  access_policy: { invoke: 'deny' },
  token_sha256: null,
  token_updated_at_ms: T0,
  created_at_ms: T0,
  updated_at_ms: T0,
  revision: 0,
};

const mounts: MountRecord[] = [
  { mount_id: 'm1', project_id: 'p1', mount_path: '/a', node_id: 'n1', export_name: 'work', seq: 1, added_at_ms: T0 },
  { mount_id: 'm2', project_id: 'p1', mount_path: '/a', node_id: 'n2', export_name: 'work', seq: 2, added_at_ms: T0 },
  { mount_id: 'm3', project_id: 'p1', mount_path: '/t', node_id: 'n2', export_name: 'terminal-1', seq: 3, added_at_ms: T0 },
  { mount_id: 'm4', project_id: 'p1', mount_path: '/gone', node_id: 'n9', export_name: 'work', seq: 4, added_at_ms: T0 },
];

const terminal = { service_id: 'terminal-1', capabilities: { invoke: true } } as unknown as ServiceEntry;

describe('WorkspaceService topology cache (SQLite store)', () => {
  beforeAll(() => {
    Logger.overrideLogger(false);
  });
  let dir: string;
  let store: StateService;
  let clock: ManualClock;
  let cached: WorkspaceService;
  let availability: AvailabilityService;
  const locals = (): ControlLocals => ({ pin: null, debug: false, watch: null });

  /** What a service with an empty cache computes now: the reference. */
  const fresh = (actor: Actor) => new WorkspaceService(store, new ProjectsService(store, clock), clock, availability).statusOf(actor, 'p1');
  /** The encoded reply of the long-lived service, decoded. */
  const encoded = (actor: Actor) => JSON.parse(cached.statusJson(actor, locals(), { project_id: 'p1' }).json) as WorkspaceStatus;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ws-cache-'));
    store = new StateService(new SqliteStateStore({ dir, key: null }));
    clock = new ManualClock();
    availability = new AvailabilityService(store, clock, { sweepIntervalMs: 60_000 } as ServerConfig);
    availability.onModuleInit();
    await store.open();
    cached = new WorkspaceService(store, new ProjectsService(store, clock), clock, availability);
    await store.mutate((s) => {
      s.nodes.put(node('n1', T0 + 5_000));
      s.nodes.put(node('n2', T0 + 1_000));
      s.catalog.put({ node_id: 'n2', platform: { os: 'linux', arch: 'x64', runtime_kind: 'native' }, labels: {}, services: [terminal], updated_at_ms: T0 });
      s.projects.put(project);
      for (const m of mounts) s.mounts.put(m);
      for (const a of [admin, user, { role: 'admin' as const, agentId: 'second' }]) {
        s.bindings.put({ role: a.role, agent_id: a.agentId, project_id: 'p1', bound_at_ms: T0 });
      }
    });
  });
  afterEach(async () => {
    availability.onModuleDestroy();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers what a fresh computation answers, for admin and gated callers', () => {
    for (const actor of [admin, user]) {
      expect(encoded(actor)).toEqual(fresh(actor));
      expect(encoded(actor)).toEqual(fresh(actor)); // second answer comes from the cache
      expect(cached.statusOf(actor, 'p1')).toEqual(fresh(actor));
    }
    expect(encoded(admin).desired_mounts.map((m) => m.mount_path)).toContain('/t');
    expect(encoded(user).desired_mounts.map((m) => m.mount_path)).not.toContain('/t');
  });

  it('reuses one topology while nothing changed', () => {
    const first = cached.topology(admin, store.state.projects.get('p1')!);
    expect(cached.topology(admin, store.state.projects.get('p1')!)).toBe(first);
  });

  it('recomputes when a lease of an online mount expires, with no mutation in between', () => {
    expect(encoded(admin).mounts.find((m) => m.mount_path === '/t')?.state).toBe('online');
    clock.t = T0 + 1_000; // n2's lease ends now
    const after = encoded(admin);
    expect(after).toEqual(fresh(admin));
    expect(after.mounts.find((m) => m.mount_path === '/t')?.state).toBe('degraded');
    expect(after.mounts.find((m) => m.mount_path === '/a')?.node_id).toBe('n1');
  });

  it('recomputes after every mutation (lease refresh, policy change, mount removal)', async () => {
    encoded(admin);
    encoded(user);
    await store.mutate((s) => s.nodes.put({ ...s.nodes.get('n1')!, lease_expires_at_ms: T0 + 500 }));
    await store.mutate((s) => s.nodes.put({ ...s.nodes.get('n2')!, lease_expires_at_ms: T0 + 9_000 }));
    expect(encoded(admin)).toEqual(fresh(admin));
    expect(encoded(admin).mounts.find((m) => m.mount_path === '/a')?.node_id).toBe('n2');
    await store.mutate((s) => s.projects.put({ ...s.projects.get('p1')!, access_policy: { invoke: 'allow' } }));
    expect(encoded(user)).toEqual(fresh(user));
    expect(encoded(user).desired_mounts.map((m) => m.mount_path)).toContain('/t');
    await store.mutate((s) => ['m1', 'm2'].forEach((id) => s.mounts.delete(id)));
    expect(encoded(user)).toEqual(fresh(user));
    expect(encoded(user).mounts.map((m) => m.mount_path)).toEqual(['/gone', '/t']);
  });

  it('keeps the agent of each caller and the empty status for a caller without a project', () => {
    const other: Actor = { role: 'admin', agentId: 'second', sessionId: 's3' };
    expect(encoded(admin).agent_id).toBe('ops');
    expect(encoded(other).agent_id).toBe('second');
    const none = JSON.parse(cached.statusJson({ role: 'user', agentId: 'nobody', sessionId: 's4' }, locals(), {}).json) as WorkspaceStatus;
    expect(none).toMatchObject({ agent_id: 'nobody', project_id: null, mounts: [] });
  });
});
