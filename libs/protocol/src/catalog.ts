/**
 * The node service catalog record and its validation. One validator, shared by the
 * control plane (`control.node_service_upsert`) and by `svc-fs-node` (manifests are checked
 * before publication with the same rules).
 */
import { isAbsolutePath, isIdentifierSafe } from './identifiers';
import { ProtocolError } from './errors';
import { forbiddenKeyPath } from './forbidden-keys';
import type { Platform } from './records';

/** A mount entry with defaults applied. */
export interface CatalogMount {
  mount_id: string;
  mount_path: string;
  /** Defaults to the state of the owning service. */
  state: string;
}

/** A service entry with defaults applied. */
export interface ServiceEntry {
  service_id: string;
  kind: string;
  version: string;
  state: string;
  endpoints: string[];
  capabilities: Record<string, unknown>;
  mounts: CatalogMount[];
  ops: Record<string, unknown>;
  runtime: Record<string, unknown>;
  permissions: Record<string, unknown>;
  schema: Record<string, unknown>;
  help_md?: string;
}

/** The catalog record of one node as returned by `control.node_service_get`. */
export interface CatalogView {
  node_id: string;
  node_name: string;
  platform: Platform;
  labels: Record<string, string>;
  services: ServiceEntry[];
}

/** Limits of one record. */
export const CATALOG_LIMITS = {
  services: 256,
  endpoints: 64,
  mounts: 64,
  labels: 64,
  labelKeyChars: 128,
  labelValueChars: 1024,
  stateChars: 64,
  pathChars: 4096,
  helpBytes: 64 * 1024,
} as const;

const OBJECT_FIELDS = ['capabilities', 'ops', 'runtime', 'permissions', 'schema'] as const;

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Validates one service entry and applies the defaults.
 * @param raw the entry as received
 * @param where the field prefix used in messages, e.g. `services[2]`
 * @throws ProtocolError `invalid_payload` / `missing_field` naming `<where>.<field>`
 */
export function validateServiceEntry(raw: unknown, where: string): ServiceEntry {
  const bad = (field: string, rule: string): never => {
    throw new ProtocolError('invalid_payload', `${where}${field ? `.${field}` : ''} ${rule}`);
  };
  const missing = (field: string): never => {
    throw new ProtocolError('missing_field', `missing field: ${where}.${field}`);
  };
  if (!isObject(raw)) bad('', 'must be a JSON object');
  const e = raw as Record<string, unknown>;
  for (const f of ['service_id', 'kind', 'state', 'endpoints']) if (e[f] === undefined || e[f] === null) missing(f);
  if (typeof e.service_id !== 'string') bad('service_id', 'must be a string');
  if (typeof e.kind !== 'string') bad('kind', 'must be a string');
  if (!isIdentifierSafe(e.service_id)) bad('service_id', 'must be identifier-safe (1 to 128 characters of A-Z a-z 0-9 . _ -, not starting with ".")');
  if (!isIdentifierSafe(e.kind)) bad('kind', 'must be identifier-safe (1 to 128 characters of A-Z a-z 0-9 . _ -, not starting with ".")');
  if (e.version !== undefined && (typeof e.version !== 'string' || e.version.length === 0 || e.version.length > 64))
    bad('version', 'must be a string of 1 to 64 characters');
  if (typeof e.state !== 'string' || e.state.length === 0 || e.state.length > CATALOG_LIMITS.stateChars)
    bad('state', `must be a string of 1 to ${CATALOG_LIMITS.stateChars} characters`);
  if (!Array.isArray(e.endpoints)) bad('endpoints', 'must be an array of absolute paths');
  const endpoints = e.endpoints as unknown[];
  if (endpoints.length > CATALOG_LIMITS.endpoints) bad('endpoints', `must have at most ${CATALOG_LIMITS.endpoints} items`);
  endpoints.forEach((p, i) => {
    if (!isAbsolutePath(p) || p.length > CATALOG_LIMITS.pathChars) bad(`endpoints[${i}]`, 'must be an absolute path (start with "/")');
  });
  for (const f of OBJECT_FIELDS) if (e[f] !== undefined && !isObject(e[f])) bad(f, 'must be a JSON object');
  if (e.help_md !== undefined && (typeof e.help_md !== 'string' || Buffer.byteLength(e.help_md) > CATALOG_LIMITS.helpBytes)) {
    bad('help_md', `must be a string of at most ${CATALOG_LIMITS.helpBytes} bytes`);
  }
  const state = e.state as string;
  let mounts: CatalogMount[] = [];
  if (e.mounts !== undefined) {
    if (!Array.isArray(e.mounts)) bad('mounts', 'must be an array of mount entries');
    const list = e.mounts as unknown[];
    if (list.length > CATALOG_LIMITS.mounts) bad('mounts', `must have at most ${CATALOG_LIMITS.mounts} items`);
    mounts = list.map((m, i) => {
      if (!isObject(m)) bad(`mounts[${i}]`, 'must be a JSON object');
      const mm = m as Record<string, unknown>;
      if (mm.mount_id === undefined) missing(`mounts[${i}].mount_id`);
      if (mm.mount_path === undefined) missing(`mounts[${i}].mount_path`);
      if (typeof mm.mount_id !== 'string' || mm.mount_id.length === 0 || mm.mount_id.length > 128)
        bad(`mounts[${i}].mount_id`, 'must be a string of 1 to 128 characters');
      if (!isAbsolutePath(mm.mount_path) || mm.mount_path.length > CATALOG_LIMITS.pathChars) bad(`mounts[${i}].mount_path`, 'must be absolute');
      if (mm.state !== undefined && (typeof mm.state !== 'string' || mm.state.length === 0 || mm.state.length > CATALOG_LIMITS.stateChars)) {
        bad(`mounts[${i}].state`, `must be a string of 1 to ${CATALOG_LIMITS.stateChars} characters`);
      }
      return { mount_id: mm.mount_id as string, mount_path: mm.mount_path as string, state: (mm.state as string | undefined) ?? state };
    });
  }
  const entry: ServiceEntry = {
    service_id: e.service_id as string,
    kind: e.kind as string,
    version: (e.version as string | undefined) ?? '1',
    state,
    endpoints: endpoints as string[],
    capabilities: (e.capabilities as Record<string, unknown> | undefined) ?? {},
    mounts,
    ops: (e.ops as Record<string, unknown> | undefined) ?? {},
    runtime: (e.runtime as Record<string, unknown> | undefined) ?? {},
    permissions: (e.permissions as Record<string, unknown> | undefined) ?? {},
    schema: (e.schema as Record<string, unknown> | undefined) ?? {},
  };
  if (e.help_md !== undefined) entry.help_md = e.help_md as string;
  return entry;
}

/**
 * Validates a list of service entries: each entry, then `service_id` unique in the list.
 * @param raw the `services` value as received
 * @param field the field name used in messages (`services`)
 * @returns the entries with defaults applied, in the given order
 * @throws ProtocolError `invalid_payload` naming `services[<i>].<field>`
 */
export function validateServiceEntries(raw: unknown, field = 'services'): ServiceEntry[] {
  if (!Array.isArray(raw)) throw new ProtocolError('invalid_payload', `${field} must be an array of service entries`);
  if (raw.length > CATALOG_LIMITS.services) throw new ProtocolError('invalid_payload', `${field} must have at most ${CATALOG_LIMITS.services} entries`);
  // Payloads were checked by the envelope parser already; manifests read from files were not.
  const forbidden = forbiddenKeyPath(raw, field);
  if (forbidden !== null) throw new ProtocolError('invalid_payload', `${forbidden}: this key is not accepted in a payload`);
  const seen = new Map<string, number>();
  return raw.map((r, i) => {
    const entry = validateServiceEntry(r, `${field}[${i}]`);
    const first = seen.get(entry.service_id);
    if (first !== undefined) {
      throw new ProtocolError('invalid_payload', `${field}[${i}].service_id "${entry.service_id}" repeats ${field}[${first}].service_id`);
    }
    seen.set(entry.service_id, i);
    return entry;
  });
}

/**
 * Validates node labels: an object of strings (keys identifier-safe).
 * @throws ProtocolError `invalid_payload` naming `labels.<key>`
 */
export function validateLabels(raw: unknown): Record<string, string> {
  if (!isObject(raw)) throw new ProtocolError('invalid_payload', 'labels must be an object of strings');
  const entries = Object.entries(raw);
  if (entries.length > CATALOG_LIMITS.labels) throw new ProtocolError('invalid_payload', `labels must have at most ${CATALOG_LIMITS.labels} entries`);
  const out: Record<string, string> = {};
  for (const [k, v] of entries) {
    if (!isIdentifierSafe(k) || k.length > CATALOG_LIMITS.labelKeyChars)
      throw new ProtocolError('invalid_payload', `labels key "${k}" must be identifier-safe`);
    if (typeof v !== 'string' || v.length > CATALOG_LIMITS.labelValueChars)
      throw new ProtocolError('invalid_payload', `labels.${k} must be a string of at most ${CATALOG_LIMITS.labelValueChars} characters`);
    out[k] = v;
  }
  return out;
}

/**
 * Validates a platform object: members `os`, `arch`, `runtime_kind`, each an optional string.
 * @throws ProtocolError `invalid_payload` naming `platform.<member>`
 */
export function validatePlatform(raw: unknown): Platform {
  if (!isObject(raw)) throw new ProtocolError('invalid_payload', 'platform must be an object');
  const out: Platform = {};
  for (const k of ['os', 'arch', 'runtime_kind'] as const) {
    const v = raw[k];
    if (v === undefined) continue;
    if (typeof v !== 'string' || v.length > 64) throw new ProtocolError('invalid_payload', `platform.${k} must be a string of at most 64 characters`);
    out[k] = v;
  }
  return out;
}

/**
 * The resolved invoke path of a service: `ops.invoke`, else
 * `ops.paths.invoke`, else `control/invoke.json`.
 */
export function invokePathOf(service: Pick<ServiceEntry, 'ops'>): string {
  const ops = service.ops ?? {};
  if (typeof ops.invoke === 'string') return ops.invoke;
  const paths = ops.paths;
  if (isObject(paths) && typeof paths.invoke === 'string') return paths.invoke;
  return 'control/invoke.json';
}
