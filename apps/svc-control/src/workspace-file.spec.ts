/**
 * Unit tests of workspace files (`svc-control apply -f`, docs/protocol.md "Declarative workspaces"): what is accepted,
 * and that each problem names the line and the field.
 */
import { fieldOfServerMessage, parseWorkspaceFile, WorkspaceFileError } from './workspace-file';

const GOOD = `# a workspace
name: demo
vision: one tree
access_policy:
  invoke: allow
prune: false
mounts:
  - mount_path: /docs
    node_name: node-a
    export_name: docs
  - mount_path: /shared/
    node_id: node-0123
    export_name: shared
`;

function problem(text: string, file = 'ws.yaml'): { line: number | null; field: string | null; message: string } {
  try {
    parseWorkspaceFile(text, file);
  } catch (e) {
    if (e instanceof WorkspaceFileError) return { line: e.line, field: e.field, message: e.message };
    throw e;
  }
  throw new Error('expected a WorkspaceFileError');
}

describe('parseWorkspaceFile', () => {
  it('reads YAML into the project_up payload, with the line of every field', () => {
    const ws = parseWorkspaceFile(GOOD, 'ws.yaml');
    expect(ws.payload).toEqual({
      name: 'demo',
      vision: 'one tree',
      access_policy: { invoke: 'allow' },
      prune: false,
      mounts: [
        { mount_path: '/docs', node_name: 'node-a', export_name: 'docs' },
        { mount_path: '/shared/', node_id: 'node-0123', export_name: 'shared' },
      ],
    });
    expect(ws.lineOf('name')).toBe(2);
    expect(ws.lineOf('access_policy.invoke')).toBe(5);
    expect(ws.lineOf('mounts')).toBe(7);
    expect(ws.lineOf('mounts[0]')).toBe(8);
    expect(ws.lineOf('mounts[1].node_id')).toBe(12);
    // a field not written falls back to its entry
    expect(ws.lineOf('mounts[1].node_name')).toBe(11);
  });

  it('reads JSON, with lines too', () => {
    const json = '{\n  "name": "demo",\n  "mounts": [\n    {"mount_path": "/a", "node_name": "n", "export_name": "x"}\n  ]\n}\n';
    const ws = parseWorkspaceFile(json, 'ws.json');
    expect(ws.payload).toEqual({ name: 'demo', mounts: [{ mount_path: '/a', node_name: 'n', export_name: 'x' }] });
    expect(ws.lineOf('mounts[0].node_name')).toBe(4);
    expect(problem('{\n  "name": "demo",\n  "mounts": [\n    {"mount_path": "a", "node_name": "n", "export_name": "x"}\n  ]\n}\n', 'ws.json')).toEqual({
      line: 4,
      field: 'mounts[0].mount_path',
      message: 'ws.json:4: mounts[0].mount_path: must be absolute (start with "/")',
    });
  });

  it.each<[string, string, number, string | null, RegExp]>([
    ['a syntax error', 'name: demo\nmounts: [\n', 3, null, /not valid YAML or JSON/],
    ['a duplicate key', 'name: a\nname: b\nmounts: []\n', 2, null, /not valid YAML or JSON: Map keys must be unique/],
    ['an empty file', '', 1, null, /is empty/],
    ['a list at the top', '- a\n', 1, null, /must be a mapping/],
    ['no name', 'mounts: []\n', 1, 'name', /name: is required/],
    ['a name of the wrong type', 'name: 5\nmounts: []\n', 1, 'name', /name: must be a string, not a number \(quote it\)/],
    ['an unknown field', 'name: a\nmount:\n  - x\nmounts: []\n', 2, 'mount', /mount: is not a workspace field/],
    ['an operator token', 'name: a\noperator_token: s3cret\nmounts: []\n', 2, 'operator_token', /--operator-token/],
    ['prune of the wrong type', 'name: a\nprune: yes\nmounts: []\n', 2, 'prune', /prune: must be true or false, not a string/],
    ['a bad access policy', 'name: a\naccess_policy:\n  invoke: maybe\nmounts: []\n', 3, 'access_policy.invoke', /must be allow or deny/],
    ['no mounts', 'name: a\n', 1, 'mounts', /mounts: is required/],
    ['mounts not a list', 'name: a\nmounts: /docs\n', 2, 'mounts', /must be a list of mounts, not a string/],
    ['a mount that is not a mapping', 'name: a\nmounts:\n  - /docs\n', 3, 'mounts[0]', /must be a mapping/],
    ['a relative mount path', 'name: a\nmounts:\n  - mount_path: docs\n    node_name: n\n    export_name: x\n', 3, 'mounts[0].mount_path', /must be absolute/],
    [
      'a ".." mount path',
      'name: a\nmounts:\n  - export_name: x\n    node_name: n\n    mount_path: /a/../b\n',
      5,
      'mounts[0].mount_path',
      /must not contain "\." or "\.\."/,
    ],
    [
      'a mount path of the wrong type',
      'name: a\nmounts:\n  - mount_path: 7\n    node_name: n\n    export_name: x\n',
      3,
      'mounts[0].mount_path',
      /must be a string, not a number/,
    ],
    ['no node', 'name: a\nmounts:\n  - mount_path: /a\n    export_name: x\n', 3, 'mounts[0]', /needs node_name \(or node_id\)/],
    ['both node fields', 'name: a\nmounts:\n  - mount_path: /a\n    node_id: n1\n    node_name: n\n    export_name: x\n', 5, 'mounts[0].node_name', /not both/],
    ['a bad export name', 'name: a\nmounts:\n  - mount_path: /a\n    node_name: n\n    export_name: my docs\n', 5, 'mounts[0].export_name', /identifier-safe/],
    [
      'an unknown mount field',
      'name: a\nmounts:\n  - mount_path: /a\n    node_name: n\n    export_name: x\n    readonly: true\n',
      6,
      'mounts[0].readonly',
      /is not a workspace field/,
    ],
  ])('refuses %s, naming line and field', (_label, text, line, field, message) => {
    const p = problem(text);
    expect(p.message).toMatch(message);
    expect(p.field).toBe(field);
    expect(p.line).toBe(line);
    expect(p.message.startsWith(`ws.yaml:${line}: `)).toBe(true);
  });

  it('refuses one mount path given twice for one node, naming both lines', () => {
    const text =
      'name: a\nmounts:\n  - mount_path: /a\n    node_name: n\n    export_name: x\n  - mount_path: /b\n    node_name: n\n    export_name: x\n  - mount_path: /a/\n    node_name: n\n    export_name: y\n';
    expect(problem(text)).toEqual({
      line: 9,
      field: 'mounts[2].mount_path',
      message: 'ws.yaml:9: mounts[2].mount_path: /a is given twice for node n (also mounts[0], line 3)',
    });
    // the same path on two nodes is a failover group
    expect(() =>
      parseWorkspaceFile('name: a\nmounts:\n  - {mount_path: /a, node_name: n, export_name: x}\n  - {mount_path: /a, node_name: m, export_name: x}\n', 'f'),
    ).not.toThrow();
  });

  it('does not expand an alias bomb', () => {
    const bomb =
      'a: &a ["x","x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n';
    expect(problem(bomb).message).toMatch(/cannot be read|is not a workspace field/);
  });
});

describe('fieldOfServerMessage', () => {
  it.each([
    ['mounts[2].node_name: no node is named "x"', 'mounts[2].node_name'],
    ['mounts[0].mount_path must be absolute (start with "/")', 'mounts[0].mount_path'],
    ['missing field: mounts[1].node_id or mounts[1].node_name', 'mounts[1].node_id'],
    ['mounts[3] must be an object', 'mounts[3]'],
    ['name: 2 projects are named "a" (p1, p2); rename or delete all but one', 'name'],
    ['operator_token does not match', null],
  ])('%s -> %s', (message, field) => expect(fieldOfServerMessage(message)).toBe(field));
});
