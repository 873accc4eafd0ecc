/**
 * The catalog record `svc-fs-node` publishes in control daemon mode: platform, labels, the `fs`
 * service, one `terminal-<id>` per `--terminal-id`, then the manifest services, all checked
 * with the same validator the control plane uses before anything is published.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { arch, platform as osPlatform } from 'node:os';
import { join, resolve } from 'node:path';
import { Platform, ProtocolError, ServiceEntry, validateServiceEntries, validateServiceEntry } from '@svc/protocol';

/** What the record is built from. */
export interface CatalogInputs {
  nodeId: string;
  /** Exports served by this node (name, read-only). */
  exports: Array<{ name: string; ro: boolean }>;
  /** Advertise the `fs` service (false with `--no-fs-service`). */
  fsService: boolean;
  /** `--terminal-id` values. */
  terminalIds: string[];
  /** `--terminal-allow-user`: terminals visible to users holding a project token. */
  terminalAllowUser: boolean;
  /** Manifest services (already loaded and validated). */
  manifests: ServiceEntry[];
  labels: Record<string, string>;
}

/** A manifest that cannot be published: names the file and the field. */
export class ManifestError extends Error {}

/** The node's platform: `os`, `arch`, `runtime_kind: "native"`. */
export function nodePlatform(): Platform {
  return { os: osPlatform(), arch: arch(), runtime_kind: 'native' };
}

/** The built-in `fs` service entry. */
export function fsServiceEntry(nodeId: string, exports: Array<{ name: string; ro: boolean }>): ServiceEntry {
  const mountPath = `/nodes/${nodeId}/fs`;
  return validateServiceEntry(
    {
      service_id: 'fs',
      kind: 'fs',
      state: 'online',
      endpoints: [mountPath],
      capabilities: { rw: exports.some((e) => !e.ro), export_count: exports.length },
      mounts: [{ mount_id: 'fs', mount_path: mountPath }],
    },
    'fs',
  );
}

/** The built-in `terminal-<id>` service entry. */
export function terminalServiceEntry(nodeId: string, terminalId: string, allowUser: boolean): ServiceEntry {
  const mountPath = `/nodes/${nodeId}/terminal/${terminalId}`;
  return validateServiceEntry(
    {
      service_id: `terminal-${terminalId}`,
      kind: 'terminal',
      state: 'online',
      endpoints: [mountPath],
      capabilities: { pty: true, terminal_id: terminalId, invoke: true },
      ops: { invoke: 'control/invoke.json', paths: { exec: 'control/invoke.json' } },
      runtime: { kind: 'native_proc', entry: 'internal-terminal-invoke' },
      permissions: allowUser ? { allow_roles: ['admin', 'user'], require_project_token: true } : { default: 'deny-by-default' },
      mounts: [{ mount_id: `terminal-${terminalId}`, mount_path: mountPath }],
    },
    `terminal-${terminalId}`,
  );
}

/**
 * The services of the record, built-ins first, then manifests.
 * @throws ManifestError when a manifest service repeats a built-in or another manifest's id
 */
export function buildServices(inputs: CatalogInputs): ServiceEntry[] {
  const services: ServiceEntry[] = [];
  if (inputs.fsService) services.push(fsServiceEntry(inputs.nodeId, inputs.exports));
  for (const id of inputs.terminalIds) services.push(terminalServiceEntry(inputs.nodeId, id, inputs.terminalAllowUser));
  const all = [...services, ...inputs.manifests];
  try {
    return validateServiceEntries(all);
  } catch (e) {
    throw new ManifestError(`manifest services conflict with the node's services: ${(e as Error).message}`);
  }
}

/**
 * Reads one manifest file: one service entry object, or `{"services":[entries]}`,
 * validated like an upsert.
 * @throws ManifestError naming the file and the field
 */
export function loadManifestFile(file: string): ServiceEntry[] {
  let doc: unknown;
  try {
    doc = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new ManifestError(`${file}: ${(e as Error).message}`);
  }
  const list = typeof doc === 'object' && doc !== null && !Array.isArray(doc) && 'services' in doc ? doc.services : [doc];
  try {
    return validateServiceEntries(list);
  } catch (e) {
    throw new ManifestError(`${file}: ${e instanceof ProtocolError ? e.message : String(e)}`);
  }
}

/**
 * The `service_id`s of the built-in providers a node publishes:
 * `fs` unless `--no-fs-service`, and `terminal-<id>` per `--terminal-id`. Manifests cannot use them.
 */
export function builtInServiceIds(fsService: boolean, terminalIds: readonly string[]): string[] {
  return [...(fsService ? ['fs'] : []), ...terminalIds.map((id) => `terminal-${id}`)];
}

/**
 * Loads `--service-manifest` files then every `*.json` in `--services-dir` (sorted by name).
 * @param reserved service ids of the node's built-in providers ({@link builtInServiceIds})
 * @throws ManifestError naming the file and field of the first invalid manifest, a
 *   `service_id` that two manifests share, or one that a built-in provider has
 */
export function loadManifests(files: string[], servicesDir: string | null, reserved: readonly string[] = []): ServiceEntry[] {
  const paths = files.map((f) => resolve(f));
  if (servicesDir) {
    let names: string[];
    try {
      if (!statSync(servicesDir).isDirectory()) throw new Error('not a directory');
      names = readdirSync(servicesDir)
        .filter((n) => n.endsWith('.json'))
        .sort();
    } catch (e) {
      throw new ManifestError(`--services-dir ${servicesDir}: ${(e as Error).message}`);
    }
    paths.push(...names.map((n) => join(resolve(servicesDir), n)));
  }
  const out: ServiceEntry[] = [];
  const origin = new Map<string, string>();
  for (const file of paths) {
    for (const entry of loadManifestFile(file)) {
      if (reserved.includes(entry.service_id)) {
        throw new ManifestError(
          `${file}: service_id "${entry.service_id}" is a built-in service of this node (choose another id${entry.service_id === 'fs' ? ', or run with --no-fs-service' : ''})`,
        );
      }
      const first = origin.get(entry.service_id);
      if (first) throw new ManifestError(`${file}: service_id "${entry.service_id}" is also defined in ${first}`);
      origin.set(entry.service_id, file);
      out.push(entry);
    }
  }
  return out;
}
