/**
 * e2e: `svc-control apply -f FILE|- [--dry-run] [--no-prune]` (docs/protocol.md "Declarative workspaces"),
 * the built CLI against the built `svc`: YAML and JSON files, the plan and the result,
 * exit codes, and every bad-input case (a duplicate mount path for one node, a
 * relative path, an unknown node name, a name shared by two nodes, wrong types) answered with
 * the file, line and field, and nothing changed on the server.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client, closeSessions, Credentials, session } from './helpers/control';
import { ADMIN_TOKEN, BIN, cleanupTmp, killAll, ROOT, runCli, Running, startSvc, tmpDir } from './support/processes';

const OP = 'op-secret-apply';
let svc: Running;
let admin: Client;
let dir: string;
let a: Credentials;

const apply = (args: string[], input?: string) =>
  runCli(BIN.control, ['--url', svc.url, 'apply', ...args], { env: { SVC_AUTH_TOKEN: ADMIN_TOKEN, SVC_CONTROL_OPERATOR_TOKEN: OP }, input, timeoutMs: 60_000 });
const file = (name: string, text: string) => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};
/** Everything a workspace change could touch, to prove that nothing changed. */
const serverState = async () =>
  JSON.stringify(
    await Promise.all([admin.request('project_list'), admin.request('node_list'), admin.request('workspace_status')]).then(async ([list, nodes, ws]) => {
      const projects = (list as { projects: Array<{ project_id: string }> }).projects;
      return [projects, await Promise.all(projects.map((p) => admin.request('project_get', { project_id: p.project_id }))), nodes, ws];
    }),
  );

beforeAll(async () => {
  svc = await startSvc({ env: { SVC_CONTROL_OPERATOR_TOKEN: OP } });
  admin = await session(svc.url);
  dir = tmpDir('svc-apply-');
  const join = async (name: string) => {
    const { invite_token } = await admin.request<{ invite_token: string }>('node_invite_create', { operator_token: OP });
    return admin.request<Credentials>('node_join', { invite_token, node_name: name, fs_url: 'ws://127.0.0.1:1/v2/fs', lease_ttl_ms: 3_600_000 });
  };
  a = await join('node-a');
  await join('node-b');
  await join('twin');
  await join('twin');
}, 60_000);
afterAll(async () => {
  closeSessions();
  await killAll();
  cleanupTmp();
});

const YAML = `# the workspace of the test
name: apply-yaml
vision: from a file
mounts:
  - mount_path: /docs
    node_name: node-a
    export_name: docs
  - mount_path: /shared
    node_name: node-a
    export_name: shared
  - mount_path: /shared
    node_name: node-b
    export_name: shared
`;

describe('svc-control apply', () => {
  it('plans with --dry-run, applies a YAML file, and applying again changes nothing', async () => {
    const f = file('ws.yaml', YAML);
    const before = await serverState();
    const dry = await apply(['-f', f, '--dry-run']);
    expect(dry.code).toBe(0);
    expect(dry.stdout).toBe(
      '+ /docs node-a:docs\n+ /shared node-a:shared\n+ /shared node-b:shared\n3 to add, 0 to remove, 0 unchanged\ndry run: nothing was changed (project "apply-yaml" would be created)\n',
    );
    expect(await serverState()).toBe(before);

    const applied = await apply(['-f', f]);
    expect(applied.code).toBe(0);
    const lines = applied.stdout.split('\n');
    expect(lines.slice(0, 5)).toEqual([
      '+ /docs node-a:docs',
      '+ /shared node-a:shared',
      '+ /shared node-b:shared',
      '3 to add, 0 to remove, 0 unchanged',
      'applied: project "apply-yaml" created',
    ]);
    const projectId = /^project_id: (proj-[0-9a-f]+)$/m.exec(applied.stdout)![1];
    expect(applied.stdout).toContain(`workspace_root: /projects/${projectId}/fs`);
    const token = /^project_token: (\S+) \(shown once: keep it\)$/m.exec(applied.stdout)![1];
    // the printed token is the project's
    const user = await session(svc.url, 'user', 'apply-user');
    await expect(user.request('project_get', { project_id: projectId, project_token: token })).resolves.toMatchObject({
      name: 'apply-yaml',
      vision: 'from a file',
    });

    const again = await apply(['-f', f]);
    expect(again.code).toBe(0);
    expect(again.stdout).toBe(
      `0 to add, 0 to remove, 3 unchanged\napplied: project "apply-yaml" unchanged\nproject_id: ${projectId}\nworkspace_root: /projects/${projectId}/fs\n`,
    );
    expect(again.stdout).not.toContain('project_token');

    // a smaller file removes what it no longer lists; --no-prune keeps it
    const smaller = file(
      'ws2.yaml',
      'name: apply-yaml\nmounts:\n  - {mount_path: /docs, node_name: node-a, export_name: docs}\n  - {mount_path: /more, node_id: ' +
        a.node_id +
        ', export_name: more}\n',
    );
    const kept = await apply(['-f', smaller, '--no-prune']);
    expect(kept.stdout.split('\n').slice(0, 3)).toEqual(['+ /more node-a:more', '1 to add, 0 to remove, 3 unchanged', 'applied: project "apply-yaml" updated']);
    const pruned = await apply(['-f', smaller]);
    expect(pruned.stdout.split('\n').slice(0, 4)).toEqual([
      '- /shared node-a:shared',
      '- /shared node-b:shared',
      '0 to add, 2 to remove, 2 unchanged',
      'applied: project "apply-yaml" updated',
    ]);
    const detail = await admin.request<{ mounts: Array<{ mount_path: string }> }>('project_get', { project_id: projectId });
    expect(detail.mounts.map((m) => m.mount_path).sort()).toEqual(['/docs', '/more']);
  }, 120_000);

  it('reads JSON, from a file or standard input, and --json prints the reply', async () => {
    const json = JSON.stringify({ name: 'apply-json', mounts: [{ mount_path: '/w', node_name: 'node-b', export_name: 'work' }] }, null, 2);
    const fromFile = await apply(['-f', file('ws.json', json)]);
    expect(fromFile.code).toBe(0);
    expect(fromFile.stdout).toMatch(/^\+ \/w node-b:work\n1 to add, 0 to remove, 0 unchanged\napplied: project "apply-json" created\n/);
    const fromStdin = await apply(['-f', '-', '--json'], json);
    expect(fromStdin.code).toBe(0);
    const reply = JSON.parse(fromStdin.stdout) as { created: boolean; changes: { unchanged: number } };
    expect(reply).toMatchObject({ created: false, changes: { added: [], removed: [], unchanged: 1 } });
  }, 60_000);

  describe('bad input: file, line and field named; nothing changed on the server', () => {
    const cases: Array<[string, string, string, number, RegExp]> = [
      [
        'a duplicate mount path for one node',
        'dup.yaml',
        'name: apply-bad\nmounts:\n  - mount_path: /a\n    node_name: node-a\n    export_name: x\n  - mount_path: /a/\n    node_name: node-a\n    export_name: y\n',
        2,
        /^svc-control: .*dup\.yaml:6: mounts\[1\]\.mount_path: \/a is given twice for node node-a \(also mounts\[0\], line 3\)\n$/,
      ],
      [
        'a relative path',
        'rel.yaml',
        'name: apply-bad\nmounts:\n  - mount_path: /ok\n    node_name: node-a\n    export_name: x\n  - node_name: node-a\n    mount_path: docs\n    export_name: y\n',
        2,
        /^svc-control: .*rel\.yaml:7: mounts\[1\]\.mount_path: must be absolute \(start with "\/"\)\n$/,
      ],
      [
        'an unknown node name',
        'unknown.yaml',
        'name: apply-bad\nmounts:\n  - mount_path: /ok\n    node_name: node-a\n    export_name: x\n  - mount_path: /b\n    node_name: node-z\n    export_name: y\n',
        1,
        /^error: node_not_found: .*unknown\.yaml:7: mounts\[1\]\.node_name: no node is named "node-z"\n$/,
      ],
      [
        'a name shared by two nodes',
        'twin.yaml',
        'name: apply-bad\nmounts:\n  - mount_path: /t\n    export_name: x\n    node_name: twin\n',
        1,
        /^error: invalid_payload: .*twin\.yaml:5: mounts\[0\]\.node_name: 2 nodes are named "twin" \(node-[0-9a-f]+, node-[0-9a-f]+\); name the node by node_id\n$/,
      ],
      [
        'a name of the wrong type',
        'type1.yaml',
        'name: 42\nmounts: []\n',
        2,
        /^svc-control: .*type1\.yaml:1: name: must be a string, not a number \(quote it\)\n$/,
      ],
      [
        'mounts of the wrong type',
        'type2.yaml',
        'name: apply-bad\nmounts:\n  mount_path: /a\n',
        2,
        /^svc-control: .*type2\.yaml:2: mounts: must be a list of mounts, not a mapping\n$/,
      ],
      [
        'prune of the wrong type',
        'type3.json',
        '{\n  "name": "apply-bad",\n  "prune": "false",\n  "mounts": []\n}\n',
        2,
        /^svc-control: .*type3\.json:3: prune: must be true or false, not a string\n$/,
      ],
      [
        'an export name of the wrong type',
        'type4.json',
        '{"name": "apply-bad",\n "mounts": [\n  {"mount_path": "/a",\n   "node_name": "node-a",\n   "export_name": 7}]}\n',
        2,
        /^svc-control: .*type4\.json:5: mounts\[0\]\.export_name: must be a string, not a number/,
      ],
      [
        'a syntax error',
        'syntax.yaml',
        'name: apply-bad\nmounts:\n  - mount_path: /a\n   node_name: [\n',
        2,
        /^svc-control: .*syntax\.yaml:\d+: not valid YAML or JSON: /,
      ],
      [
        'an unknown field',
        'field.yaml',
        'name: apply-bad\nmount_points: []\nmounts: []\n',
        2,
        /^svc-control: .*field\.yaml:2: mount_points: is not a workspace field\n$/,
      ],
    ];

    it.each(cases)(
      '%s',
      async (_label, name, text, code, stderr) => {
        const before = await serverState();
        const r = await apply(['-f', file(name, text)]);
        expect({ code: r.code, stderr: r.stderr, stdout: r.stdout }).toEqual({ code, stderr: expect.stringMatching(stderr), stdout: '' });
        expect(await serverState()).toBe(before);
      },
      60_000,
    );

    it('an unreadable file, and no file at all', async () => {
      const missing = await apply(['-f', join(dir, 'nope.yaml')]);
      expect(missing.code).toBe(2);
      expect(missing.stderr).toMatch(/nope\.yaml: cannot be read \(ENOENT\)/);
      const none = await apply([]);
      expect(none.code).toBe(2);
      expect(none.stderr).toContain('apply needs -f FILE');
    }, 60_000);

    it('the operator gate: exit 1, nothing changed', async () => {
      const before = await serverState();
      const r = await runCli(BIN.control, ['--url', svc.url, 'apply', '-f', join(ROOT, 'docs', 'workspace.example.yaml')], {
        env: { SVC_AUTH_TOKEN: ADMIN_TOKEN, SVC_CONTROL_OPERATOR_TOKEN: 'wrong' },
      });
      expect(r.code).toBe(1);
      expect(r.stderr).toBe('error: operator_auth_failed: operator_token does not match\n');
      expect(await serverState()).toBe(before);
    }, 60_000);
  });
});
