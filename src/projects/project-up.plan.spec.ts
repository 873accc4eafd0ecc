/**
 * Unit tests of the `control.project_up` rules (docs/protocol.md "Declarative workspaces"): node references, duplicates,
 * the project by name, and the mount diff with and without prune.
 */
import { ProtocolError } from '@svc/protocol';
import { projectRecord as project } from '../../test/fixtures/records';
import { ControlState, MountRecord, NodeRecord, ProjectRecord } from '../persistence/state.model';
import { MountSpecInput, planMounts, projectNamed, resolveMounts, specOfMount } from './project-up.plan';

function node(id: string, name: string): NodeRecord {
  return {
    node_id: id,
    node_name: name,
    fs_url: 'ws://127.0.0.1:1/v2/fs',
    platform: {},
    labels: {},
    secret_sha256: '0'.repeat(64),
    fs_auth_token: 't',
    lease_token: 'l',
    lease_expires_at_ms: 0,
    joined_at_ms: 0,
    last_seen_ms: 0,
  };
}

function mount(id: string, path: string, nodeId: string, exp: string, seq: number): MountRecord {
  return { mount_id: id, project_id: 'p1', mount_path: path, node_id: nodeId, export_name: exp, seq, added_at_ms: 0 };
}

function stateOf(nodes: NodeRecord[], projects: ProjectRecord[] = [], mounts: MountRecord[] = []): ControlState {
  const s = new ControlState();
  s.apply({
    nodes: new Map(nodes.map((n) => [n.node_id, n])),
    projects: new Map(projects.map((p) => [p.project_id, p])),
    mounts: new Map(mounts.map((m) => [m.mount_id, m])),
  });
  return s;
}

function errorOf(fn: () => unknown): { code: string; message: string } {
  try {
    fn();
  } catch (e) {
    if (e instanceof ProtocolError) return { code: e.code, message: e.message };
    throw e;
  }
  throw new Error('expected a ProtocolError');
}

const nodes = [node('node-1', 'alpha'), node('node-2', 'beta'), node('node-3', 'twin'), node('node-4', 'twin')];

describe('resolveMounts', () => {
  const state = stateOf(nodes);

  it('resolves nodes by name or id and normalises paths', () => {
    const out = resolveMounts(state, [
      { mount_path: '//src//', node_name: 'alpha', export_name: 'work' },
      { mount_path: '/src', node_id: 'node-2', export_name: 'work' },
    ]);
    expect(out.map((d) => [d.index, d.mount_path, d.node.node_id, d.export_name])).toEqual([
      [0, '/src', 'node-1', 'work'],
      [1, '/src', 'node-2', 'work'],
    ]);
  });

  it.each<[string, MountSpecInput[], string, RegExp]>([
    ['a relative path', [{ mount_path: 'src', node_name: 'alpha', export_name: 'w' }], 'invalid_payload', /^mounts\[0\]\.mount_path must be absolute/],
    [
      'a ".." segment',
      [{ mount_path: '/a/../b', node_name: 'alpha', export_name: 'w' }],
      'invalid_payload',
      /^mounts\[0\]\.mount_path must not contain "\." or "\.\."/,
    ],
    ['an unknown name', [{ mount_path: '/a', node_name: 'gamma', export_name: 'w' }], 'node_not_found', /^mounts\[0\]\.node_name: no node is named "gamma"$/],
    ['an unknown id', [{ mount_path: '/a', node_id: 'node-9', export_name: 'w' }], 'node_not_found', /^mounts\[0\]\.node_id: node node-9 not found$/],
    [
      'a shared name',
      [{ mount_path: '/a', node_name: 'twin', export_name: 'w' }],
      'invalid_payload',
      /^mounts\[0\]\.node_name: 2 nodes are named "twin" \(node-3, node-4\)/,
    ],
    [
      'both node fields',
      [{ mount_path: '/a', node_name: 'alpha', node_id: 'node-1', export_name: 'w' }],
      'invalid_payload',
      /^mounts\[0\]\.node_name: give node_id or node_name, not both$/,
    ],
    ['no node field', [{ mount_path: '/a', export_name: 'w' }], 'missing_field', /^missing field: mounts\[0\]\.node_id or mounts\[0\]\.node_name$/],
  ])('refuses %s, naming the entry', (_label, mounts, code, message) => {
    const e = errorOf(() => resolveMounts(state, mounts));
    expect(e.code).toBe(code);
    expect(e.message).toMatch(message);
  });

  it('refuses a path given twice for one node, even by name and id, and reports the first bad entry', () => {
    const e = errorOf(() =>
      resolveMounts(state, [
        { mount_path: '/a', node_name: 'alpha', export_name: 'w' },
        { mount_path: '/b', node_name: 'beta', export_name: 'w' },
        { mount_path: '/a/', node_id: 'node-1', export_name: 'other' },
        { mount_path: '/z', node_name: 'gamma', export_name: 'w' },
      ]),
    );
    expect(e).toEqual({ code: 'invalid_payload', message: 'mounts[2].mount_path: /a is given twice for node alpha (mounts[0] and mounts[2])' });
    // one path on two nodes is a failover group, not a duplicate
    expect(
      resolveMounts(state, [
        { mount_path: '/a', node_name: 'alpha', export_name: 'w' },
        { mount_path: '/a', node_name: 'beta', export_name: 'w' },
      ]),
    ).toHaveLength(2);
  });
});

describe('projectNamed', () => {
  it('finds none, one, or refuses several naming them', () => {
    expect(projectNamed(stateOf([], [project('p1', 'one')]), 'two')).toBeNull();
    expect(projectNamed(stateOf([], [project('p1', 'one')]), 'one')?.project_id).toBe('p1');
    expect(errorOf(() => projectNamed(stateOf([], [project('p2', 'dup'), project('p1', 'dup')]), 'dup'))).toEqual({
      code: 'invalid_payload',
      message: 'name: 2 projects are named "dup" (p1, p2); rename or delete all but one',
    });
  });
});

describe('planMounts', () => {
  const current = [mount('m1', '/a', 'node-1', 'w', 1), mount('m2', '/b', 'node-2', 'w', 2), mount('m3', '/c', 'node-1', 'w', 3)];
  const state = stateOf(nodes, [project('p1', 'p')], current);
  const desired = resolveMounts(state, [
    { mount_path: '/a', node_name: 'alpha', export_name: 'w' },
    { mount_path: '/b', node_name: 'beta', export_name: 'other' },
    { mount_path: '/d', node_name: 'beta', export_name: 'w' },
  ]);

  it('adds what is missing in the order given and, with prune, removes what is not desired', () => {
    const plan = planMounts(current, desired, true);
    expect(plan.added.map((d) => `${d.mount_path} ${d.export_name}`)).toEqual(['/b other', '/d w']);
    expect(plan.removed.map((m) => m.mount_id)).toEqual(['m2', 'm3']);
    expect(plan.unchanged).toBe(1);
  });

  it('without prune only adds, and counts every kept mount as unchanged', () => {
    const plan = planMounts(current, desired, false);
    expect(plan.added).toHaveLength(2);
    expect(plan.removed).toEqual([]);
    expect(plan.unchanged).toBe(3);
  });

  it('is empty when the project already matches (idempotent)', () => {
    const same = resolveMounts(state, [
      { mount_path: '/a', node_id: 'node-1', export_name: 'w' },
      { mount_path: '/b', node_name: 'beta', export_name: 'w' },
      { mount_path: '/c', node_name: 'alpha', export_name: 'w' },
    ]);
    expect(planMounts(current, same, true)).toEqual({ added: [], removed: [], unchanged: 3 });
  });

  it('for a new project adds everything', () => {
    expect(planMounts([], desired, true)).toMatchObject({ removed: [], unchanged: 0 });
    expect(planMounts([], desired, true).added).toHaveLength(3);
  });

  it('reports a removed mount of a deleted node without a name', () => {
    expect(specOfMount(state, mount('m9', '/x', 'node-gone', 'w', 9))).toEqual({ mount_path: '/x', node_id: 'node-gone', node_name: null, export_name: 'w' });
  });
});
