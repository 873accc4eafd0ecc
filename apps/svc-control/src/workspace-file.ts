/**
 * Workspace files of `svc-control apply -f` (docs/protocol.md "Declarative workspaces"): the payload of
 * `control.project_up` in YAML (the `yaml` package) or JSON, checked before anything is sent,
 * with errors that name the file, the line and the field.
 *
 * ```yaml
 * name: demo                     # required: the project, created when absent
 * vision: one tree over several machines
 * access_policy: { invoke: deny }
 * prune: true                    # remove mounts not listed (default true; --no-prune)
 * activate: true                 # bind this agent to the project (default true)
 * mounts:                        # required (may be empty)
 *   - mount_path: /docs          # absolute
 *     node_name: node-a          # or node_id: node-...
 *     export_name: docs
 * ```
 *
 * Checked here (file errors, exit 2): syntax, unknown fields, wrong types, a relative mount
 * path or one with `.`/`..`, both or neither of `node_id`/`node_name`, one mount path given
 * twice for one node. Checked by the server (exit 1, mapped back to the entry's line): nodes
 * that do not exist or whose name is shared.
 */
import { isMap, isPair, isScalar, isSeq, LineCounter, Node as YamlNode, parseDocument } from 'yaml';
import { normalizeMountPath, ProtocolError } from '@svc/protocol/wire';

/** Largest workspace file, bytes (the server's default message limit is 8 MiB). */
export const MAX_WORKSPACE_FILE_BYTES = 4 * 1024 * 1024;

/** A problem with a workspace file: `FILE:LINE: FIELD: message`. */
export class WorkspaceFileError extends Error {
  constructor(
    readonly file: string,
    readonly line: number | null,
    readonly field: string | null,
    readonly detail: string,
  ) {
    super(`${file}${line !== null ? `:${line}` : ''}: ${field ? `${field}: ` : ''}${detail}`);
    this.name = 'WorkspaceFileError';
  }
}

/** A checked workspace file. */
export interface WorkspaceFile {
  /** Name of the file as given (`-` reads as `standard input`). */
  file: string;
  /** The `control.project_up` payload (without `dry_run`, `operator_token`). */
  payload: Record<string, unknown>;
  /**
   * The line (1-based) where a field is written, e.g. `mounts[2].node_name`; falls back to
   * the enclosing entry (`mounts[2]`), then null.
   */
  lineOf(field: string): number | null;
}

const TOP_FIELDS = ['name', 'vision', 'access_policy', 'mounts', 'prune', 'activate'];
const MOUNT_FIELDS = ['mount_path', 'node_id', 'node_name', 'export_name'];
const IDENT = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;
// eslint-disable-next-line no-control-regex -- matching control characters is its purpose
const CONTROL = /[\u0000-\u001f\u007f]/;

/** What a field that is not allowed gets told. */
function unknownField(field: string): string {
  if (field === 'operator_token')
    return 'is not a workspace field: pass --operator-token or set SVC_CONTROL_OPERATOR_TOKEN (keep secrets out of workspace files)';
  if (field === 'dry_run') return 'is not a workspace field: use svc-control apply --dry-run';
  return 'is not a workspace field';
}

/** The JSON type name of a value, for messages. */
function typeName(v: unknown): string {
  if (v === null) return 'empty (null)';
  if (Array.isArray(v)) return 'a list';
  return typeof v === 'object' ? 'a mapping' : `a ${typeof v}`;
}

/**
 * Reads and checks a workspace file's text.
 * @param text the file's content
 * @param file its name, for messages (`standard input` for `-`)
 * @throws WorkspaceFileError naming the line and field of the first problem
 */
export function parseWorkspaceFile(text: string, file: string): WorkspaceFile {
  if (Buffer.byteLength(text) > MAX_WORKSPACE_FILE_BYTES) throw new WorkspaceFileError(file, null, null, `larger than ${MAX_WORKSPACE_FILE_BYTES} bytes`);
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter, uniqueKeys: true, prettyErrors: true });
  const lineAt = (offset: number | undefined) => (offset === undefined ? null : counter.linePos(offset).line);
  if (doc.errors.length > 0) {
    const e = doc.errors[0];
    const message = e.message.split('\n')[0].replace(/ at line \d+, column \d+:?$/, '');
    throw new WorkspaceFileError(file, e.linePos?.[0]?.line ?? lineAt(e.pos?.[0]), null, `not valid YAML or JSON: ${message}`);
  }
  const lines = new Map<string, number>();
  const mark = (node: YamlNode | null | undefined, field: string) => {
    if (!node) return;
    const line = lineAt(node.range?.[0]);
    if (line !== null && !lines.has(field)) lines.set(field, line);
    if (isMap(node)) {
      for (const pair of node.items) {
        if (!isPair(pair) || !isScalar(pair.key)) continue;
        const child = field ? `${field}.${String(pair.key.value)}` : String(pair.key.value);
        const keyLine = lineAt(pair.key.range?.[0]);
        if (keyLine !== null) lines.set(child, keyLine);
        if (pair.value && (isMap(pair.value) || isSeq(pair.value))) mark(pair.value, child);
      }
    } else if (isSeq(node)) {
      node.items.forEach((item, i) => mark(item as YamlNode, `${field}[${i}]`));
    }
  };
  mark(doc.contents, '');
  const lineOf = (field: string): number | null => {
    for (let f: string | null = field; f; f = parent(f)) {
      const line = lines.get(f);
      if (line !== undefined) return line;
    }
    return null;
  };
  const bad = (field: string | null, detail: string): never => {
    // a field not written (a required one missing) is reported at the start of the document
    throw new WorkspaceFileError(file, (field === null ? null : lineOf(field)) ?? lineAt(doc.contents?.range?.[0]) ?? 1, field, detail);
  };

  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: 100 });
  } catch (e) {
    return bad(null, `cannot be read: ${(e as Error).message}`);
  }
  if (value === null || value === undefined) bad(null, 'is empty: a workspace needs at least name and mounts');
  if (typeof value !== 'object' || Array.isArray(value)) bad(null, `must be a mapping (name, mounts, ...), not ${typeName(value)}`);
  const root = value as Record<string, unknown>;
  for (const key of Object.keys(root)) if (!TOP_FIELDS.includes(key)) bad(key, unknownField(key));

  const str = (field: string, v: unknown, required: boolean): void => {
    if (v === undefined) {
      if (required) bad(field, 'is required');
      return;
    }
    if (typeof v !== 'string') bad(field, `must be a string, not ${typeName(v)}${typeof v === 'number' || typeof v === 'boolean' ? ' (quote it)' : ''}`);
  };
  const bool = (field: string, v: unknown): void => {
    if (v !== undefined && typeof v !== 'boolean') bad(field, `must be true or false, not ${typeName(v)}`);
  };

  str('name', root.name, true);
  const name = root.name as string;
  if (name.length < 1 || name.length > 256) bad('name', 'must be 1 to 256 characters');
  if (CONTROL.test(name)) bad('name', 'must not contain control characters');
  str('vision', root.vision, false);
  if (typeof root.vision === 'string' && root.vision.length > 4096) bad('vision', 'must be at most 4096 characters');
  if (root.access_policy !== undefined) {
    const ap = root.access_policy;
    if (ap === null || typeof ap !== 'object' || Array.isArray(ap)) bad('access_policy', `must be a mapping (invoke: allow|deny), not ${typeName(ap)}`);
    for (const key of Object.keys(ap as object)) if (key !== 'invoke') bad(`access_policy.${key}`, 'is not an access_policy field (only invoke)');
    const invoke = (ap as Record<string, unknown>).invoke;
    if (invoke !== undefined && invoke !== 'allow' && invoke !== 'deny') bad('access_policy.invoke', `must be allow or deny, not ${JSON.stringify(invoke)}`);
  }
  bool('prune', root.prune);
  bool('activate', root.activate);

  if (root.mounts === undefined) bad('mounts', 'is required (a list; [] for none)');
  if (!Array.isArray(root.mounts)) bad('mounts', `must be a list of mounts, not ${typeName(root.mounts)}`);
  const mounts = root.mounts as unknown[];
  const seen = new Map<string, number>();
  mounts.forEach((m, i) => {
    const at = `mounts[${i}]`;
    if (m === null || typeof m !== 'object' || Array.isArray(m))
      bad(at, `must be a mapping (mount_path, node_name or node_id, export_name), not ${typeName(m)}`);
    const entry = m as Record<string, unknown>;
    for (const key of Object.keys(entry)) if (!MOUNT_FIELDS.includes(key)) bad(`${at}.${key}`, unknownField(key));
    str(`${at}.mount_path`, entry.mount_path, true);
    let path: string;
    try {
      path = normalizeMountPath(entry.mount_path, 'mount_path');
    } catch (e) {
      return bad(`${at}.mount_path`, (e as ProtocolError).message.replace(/^mount_path /, ''));
    }
    if (entry.node_id !== undefined && entry.node_name !== undefined) bad(`${at}.node_name`, 'give node_id or node_name, not both');
    if (entry.node_id === undefined && entry.node_name === undefined) bad(at, 'needs node_name (or node_id)');
    if (entry.node_id !== undefined) {
      str(`${at}.node_id`, entry.node_id, true);
      if (!IDENT.test(entry.node_id as string)) bad(`${at}.node_id`, 'must be identifier-safe (A-Z a-z 0-9 . _ -, not starting with ".")');
    } else {
      str(`${at}.node_name`, entry.node_name, true);
      const n = entry.node_name as string;
      if (n.length < 1 || n.length > 128 || CONTROL.test(n)) bad(`${at}.node_name`, 'must be 1 to 128 characters, without control characters');
    }
    str(`${at}.export_name`, entry.export_name, true);
    if (!IDENT.test(entry.export_name as string)) bad(`${at}.export_name`, 'must be identifier-safe (A-Z a-z 0-9 . _ -, not starting with ".")');
    const node = entry.node_id !== undefined ? `id:${entry.node_id as string}` : `name:${entry.node_name as string}`;
    const key = `${path}\0${node}`;
    const first = seen.get(key);
    if (first !== undefined) {
      const firstLine = lineOf(`mounts[${first}]`);
      bad(
        `${at}.mount_path`,
        `${path} is given twice for node ${String(entry.node_id ?? entry.node_name)} (also mounts[${first}]${firstLine !== null ? `, line ${firstLine}` : ''})`,
      );
    }
    seen.set(key, i);
  });
  return { file, payload: root, lineOf };
}

/** `mounts[2].node_name` -> `mounts[2]` -> `mounts` -> null. */
function parent(field: string): string | null {
  const m = /^(.*)(\.[^.[\]]+|\[\d+\])$/.exec(field);
  return m ? m[1] : null;
}

/**
 * The field a server error message names (`mounts[2].node_name: no node ...`,
 * `mounts[0].mount_path must be absolute`, `missing field: mounts[1].node_id ...`,
 * `name: 2 projects ...`), or null.
 */
export function fieldOfServerMessage(message: string): string | null {
  const m = /mounts\[\d+\](?:\.[a-z_]+)?/.exec(message);
  if (m) return m[0];
  const top = /^(name|vision|access_policy(?:\.invoke)?|mounts|prune|activate)\b/.exec(message);
  return top ? top[1] : null;
}
