/**
 * The Acheron runtime namespace (docs/namespace.md): the control plane's catalog, nodes, projects
 * and debug state projected as a tree, computed per session (role, agent, pinned or bound
 * project) at every resolution and never cached across sessions. Hidden services and
 * projects are absent (`enoent`), so their existence does not leak.
 *
 * ```
 * /nodes/<node_id>/NODE.json | STATUS.json | services/<service_id>/{SCHEMA,STATUS,CAPS,OPS,RUNTIME,PERMISSIONS,MOUNTS}.json, HELP.md
 * /nodes/<node_id>/<catalog mount roots>   routed to the node's FS export
 * /projects/<project_id>/STATUS.json | fs/<mount_path>...
 * /debug/availability.json | events.ndjson (admin)
 * ```
 */
import { Injectable } from '@nestjs/common';
import { invokePathOf, pathSegments, ProtocolError, ServiceEntry } from '@svc/protocol';
import { Actor, controlLocals, heldProjectId, pinIsValid } from '../common/actor';
import { Clock } from '../common/clock';
import { CatalogService } from '../catalog/catalog.service';
import { NodesService } from '../catalog/nodes.service';
import { serviceVisible, Viewer } from '../catalog/permissions';
import { StateService } from '../persistence/state.service';
import { AvailabilityService } from '../projects/availability.service';
import { WorkspaceService } from '../projects/workspace.service';
import type { WsSession } from '@svc/transport';
import { actorOf } from '../common/actor';

/** One entry of a directory read (docs/namespace.md: `{"entries":[{name, kind, size}]}`). */
export interface NsEntry {
  name: string;
  kind: 'dir' | 'file';
  size: number;
}

/** A resolved projected directory. */
export interface NsDir {
  kind: 'dir';
  name: string;
  /** Children, computed now for this session. */
  list(): Promise<NsEntry[]>;
}

/** A resolved projected (read-only) file; its content is captured at open. */
export interface NsFile {
  kind: 'file';
  name: string;
  content(): Promise<Buffer>;
}

/**
 * A path inside a routed filesystem: a node export (`/nodes/<id>/fs/<export>/...`,
 * `/nodes/<id>/terminal/<tid>/...`) or a project workspace (`/projects/<id>/fs/...`).
 */
export interface NsRouted {
  kind: 'routed';
  name: string;
  target: { type: 'node'; node_id: string; export_name: string | null; rel: string[] } | { type: 'project'; project_id: string; rel: string[] };
}

export type NsNode = NsDir | NsFile | NsRouted;

/** The per-session view used to resolve paths. */
export interface NsView {
  actor: Actor;
  viewer: Viewer;
}

const SERVICE_FILES = ['SCHEMA.json', 'STATUS.json', 'CAPS.json', 'OPS.json', 'RUNTIME.json', 'PERMISSIONS.json', 'MOUNTS.json', 'HELP.md'] as const;

function json(value: unknown): Buffer {
  return Buffer.from(`${JSON.stringify(value, null, 2)}\n`);
}

function notFound(path: string[]): never {
  throw new ProtocolError('enoent', `/${path.join('/')}: no such file or directory`);
}

/**
 * The resolved invoke path of a service (docs/namespace.md `STATUS.json`): the invoke path
 * joined to the service's first endpoint; an absolute invoke path stands alone.
 */
export function resolvedInvokePath(service: Pick<ServiceEntry, 'ops' | 'endpoints'>): string | null {
  const invoke = invokePathOf(service);
  if (invoke.startsWith('/')) return invoke;
  const base = service.endpoints[0];
  if (base === undefined) return null;
  return `${base.replace(/\/+$/, '')}/${invoke.replace(/^\.\//, '')}`;
}

@Injectable()
export class NamespaceService {
  constructor(
    private readonly store: StateService,
    private readonly nodes: NodesService,
    private readonly catalog: CatalogService,
    private readonly workspace: WorkspaceService,
    private readonly availability: AvailabilityService,
    private readonly clock: Clock,
  ) {}

  /** The view of a session, computed now. */
  viewOf(session: WsSession): NsView {
    const actor = actorOf(session);
    const held = heldProjectId(this.store.state, actor, controlLocals(session).pin);
    return { actor, viewer: { role: actor.role, holdsProjectToken: held !== null } };
  }

  /**
   * Export names of a node claimed by catalog services other than `fs` (their `service_id`
   * and `mounts[].mount_id`), whatever the viewer may see.
   */
  claimedExports(nodeId: string): Set<string> {
    const out = new Set<string>();
    for (const s of this.catalog.servicesOf(nodeId)) {
      if (s.kind === 'fs') continue;
      out.add(s.service_id);
      for (const m of s.mounts) out.add(m.mount_id);
    }
    return out;
  }

  /** Roots of the namespace for a session. */
  roots(view: NsView): string[] {
    return view.actor.role === 'admin' ? ['nodes', 'projects', 'debug'] : ['nodes', 'projects'];
  }

  /**
   * Projects a session may see: admin all; others the bound project and a validly pinned one.
   */
  visibleProjects(session: WsSession, view: NsView): string[] {
    const state = this.store.state;
    if (view.actor.role === 'admin') return [...state.projects.keys()].sort();
    const out = new Set<string>();
    const held = heldProjectId(state, view.actor, null);
    if (held) out.add(held);
    const pin = controlLocals(session).pin;
    if (pinIsValid(state, view.actor, pin)) out.add(pin.project_id);
    return [...out].sort();
  }

  /**
   * Resolves a path for a session.
   * @throws ProtocolError `enoent` for anything missing or hidden from this session
   */
  resolve(session: WsSession, path: string[]): NsNode {
    const view = this.viewOf(session);
    const [top, ...rest] = path;
    if (top === undefined) {
      return { kind: 'dir', name: '/', list: async () => this.roots(view).map((name) => ({ name, kind: 'dir' as const, size: 0 })) };
    }
    if (top === 'nodes') return this.resolveNodes(view, path, rest);
    if (top === 'projects') return this.resolveProjects(session, view, path, rest);
    if (top === 'debug' && view.actor.role === 'admin') return this.resolveDebug(path, rest);
    return notFound(path);
  }

  private dir(name: string, entries: () => NsEntry[]): NsDir {
    return { kind: 'dir', name, list: async () => entries() };
  }

  private file(name: string, content: () => Buffer): NsFile {
    return { kind: 'file', name, content: async () => content() };
  }

  private resolveNodes(view: NsView, path: string[], rest: string[]): NsNode {
    const state = this.store.state;
    const [nodeId, what, ...more] = rest;
    if (nodeId === undefined) {
      return this.dir('nodes', () => [...state.nodes.keys()].sort().map((name) => ({ name, kind: 'dir', size: 0 })));
    }
    const node = state.nodes.get(nodeId);
    if (!node) return notFound(path);
    const services = this.catalog.servicesOf(nodeId).filter((s) => serviceVisible(s, view.viewer));
    const mountRoots = this.mountRootsOf(nodeId, services);
    if (what === undefined) {
      return this.dir(nodeId, () => {
        const names = new Set(['NODE.json', 'STATUS.json', 'services']);
        const entries: NsEntry[] = [
          { name: 'NODE.json', kind: 'file', size: 0 },
          { name: 'STATUS.json', kind: 'file', size: 0 },
          { name: 'services', kind: 'dir', size: services.length },
        ];
        for (const m of mountRoots) {
          const first = m.segments[0];
          if (!names.has(first)) {
            names.add(first);
            entries.push({ name: first, kind: 'dir', size: 0 });
          }
        }
        return entries;
      });
    }
    if (what === 'NODE.json' && more.length === 0) return this.file(what, () => json(this.nodes.info(node)));
    if (what === 'STATUS.json' && more.length === 0) {
      return this.file(what, () => {
        const info = this.nodes.info(node);
        return json({ state: info.state, online: info.online, lease_expires_at_ms: info.lease_expires_at_ms });
      });
    }
    if (what === 'services') return this.resolveServices(path, services, more);
    // dynamic mount roots: the longest catalog mount path that prefixes the rest of the path
    const tail = [what, ...more];
    let best: (typeof mountRoots)[number] | undefined;
    for (const m of mountRoots) {
      if (m.segments.length <= tail.length && m.segments.every((s, i) => s === tail[i]) && (!best || m.segments.length > best.segments.length)) best = m;
    }
    if (best) {
      const rel = tail.slice(best.segments.length);
      return { kind: 'routed', name: tail[tail.length - 1], target: { type: 'node', node_id: nodeId, export_name: best.exportName, rel } };
    }
    // a directory above deeper mount roots (e.g. /nodes/<id>/terminal)
    const below = mountRoots.filter((m) => m.segments.length > tail.length && tail.every((s, i) => m.segments[i] === s));
    if (below.length > 0) {
      return this.dir(tail[tail.length - 1], () =>
        [...new Set(below.map((m) => m.segments[tail.length]))].sort().map((name) => ({ name, kind: 'dir', size: 0 })),
      );
    }
    return notFound(path);
  }

  /**
   * Catalog mount roots under `/nodes/<node_id>/`, for visible services: segments below the
   * node and the FS export they route to (`null` for an fs service: its root lists exports).
   */
  private mountRootsOf(nodeId: string, services: ServiceEntry[]): Array<{ segments: string[]; exportName: string | null }> {
    const prefix = `/nodes/${nodeId}/`;
    const out: Array<{ segments: string[]; exportName: string | null }> = [];
    for (const s of services) {
      for (const m of s.mounts) {
        if (!m.mount_path.startsWith(prefix)) continue;
        const segments = pathSegments(m.mount_path.slice(prefix.length - 1));
        if (segments.length === 0 || ['NODE.json', 'STATUS.json', 'services'].includes(segments[0])) continue;
        out.push({ segments, exportName: s.kind === 'fs' ? null : m.mount_id });
      }
    }
    return out;
  }

  private resolveServices(path: string[], services: ServiceEntry[], rest: string[]): NsNode {
    const [serviceId, file, ...more] = rest;
    if (serviceId === undefined) {
      return this.dir('services', () => services.map((s) => ({ name: s.service_id, kind: 'dir', size: SERVICE_FILES.length })));
    }
    const service = services.find((s) => s.service_id === serviceId);
    if (!service) return notFound(path);
    if (file === undefined) return this.dir(serviceId, () => SERVICE_FILES.map((name) => ({ name, kind: 'file', size: 0 })));
    if (more.length > 0) throw new ProtocolError('enotdir', `/${path.slice(0, -more.length).join('/')} is not a directory`);
    switch (file) {
      case 'SCHEMA.json':
        return this.file(file, () => json(service.schema));
      case 'STATUS.json':
        return this.file(file, () => json({ state: service.state, invoke_path: resolvedInvokePath(service) }));
      case 'CAPS.json':
        return this.file(file, () => json(service.capabilities));
      case 'OPS.json':
        return this.file(file, () => json(service.ops));
      case 'RUNTIME.json':
        return this.file(file, () => json(service.runtime));
      case 'PERMISSIONS.json':
        return this.file(file, () => json(service.permissions));
      case 'MOUNTS.json':
        return this.file(file, () => json(service.mounts));
      case 'HELP.md':
        return this.file(file, () => Buffer.from(service.help_md ?? ''));
      default:
        return notFound(path);
    }
  }

  private resolveProjects(session: WsSession, view: NsView, path: string[], rest: string[]): NsNode {
    const visible = this.visibleProjects(session, view);
    const [projectId, what, ...more] = rest;
    if (projectId === undefined) return this.dir('projects', () => visible.map((name) => ({ name, kind: 'dir', size: 0 })));
    if (!visible.includes(projectId)) return notFound(path);
    if (what === undefined) {
      return this.dir(projectId, () => [
        { name: 'STATUS.json', kind: 'file', size: 0 },
        { name: 'fs', kind: 'dir', size: 0 },
      ]);
    }
    if (what === 'STATUS.json' && more.length === 0) return this.file(what, () => json(this.workspace.statusOf(view.actor, projectId)));
    if (what === 'fs') return { kind: 'routed', name: more[more.length - 1] ?? 'fs', target: { type: 'project', project_id: projectId, rel: more } };
    return notFound(path);
  }

  private resolveDebug(path: string[], rest: string[]): NsNode {
    const [file, ...more] = rest;
    if (file === undefined) {
      return this.dir('debug', () => [
        { name: 'availability.json', kind: 'file', size: 0 },
        { name: 'events.ndjson', kind: 'file', size: 0 },
      ]);
    }
    if (more.length > 0) return notFound(path);
    if (file === 'availability.json') return this.file(file, () => json({ ts_ms: this.clock.now(), mounts: this.availability.snapshot() }));
    if (file === 'events.ndjson') {
      return this.file(file, () =>
        Buffer.from(
          this.availability
            .recentEvents()
            .map((e) => `${JSON.stringify(e)}\n`)
            .join(''),
        ),
      );
    }
    return notFound(path);
  }
}
