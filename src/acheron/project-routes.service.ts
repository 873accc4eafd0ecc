/**
 * Project filesystems of the runtime namespace (docs/namespace.md `/projects/<project_id>/fs`):
 * each runtime session gets, per project it opens, a WorkspaceRouter whose topology is this
 * session's own view of the project (the control plane's workspace status for its actor, with
 * invoke gating for non-admin sessions), kept current from topology changes. The router gives
 * longest-prefix routing, the synthetic tree above mount paths and failover between the
 * candidates of a mount path.
 */
import { Injectable } from '@nestjs/common';
import { EventEmitter } from 'node:events';
import { Subscription } from 'rxjs';
import { FsClient } from '@svc/client';
import { Errno, FsError } from '@svc/protocol';
import { applyTopologyDelta, Topology, TopologySource, TopologySourceInfo, topologyFromStatus, WorkspaceRouter } from '@svc/fs/router';
import type { WsSession } from '@svc/transport';
import { Actor } from '../common/actor';
import { ServerConfig } from '../config';
import { AvailabilityService } from '../projects/availability.service';
import { WorkspaceService } from '../projects/workspace.service';
import { FsAttr, openFlagsOf, RoutedFs, RoutedHandle, runtimeHandle, withRuntimeErrors } from './node-routes.service';

/**
 * A topology source fed by the control plane itself: the workspace status of `actor` for
 * `projectId`, then the topology deltas of its class of caller applied as they commit
 * (docs/protocol.md "Workspace status"), re-read on a revision gap, a deletion or a token/binding change.
 */
export class ControlPlaneTopologySource extends EventEmitter implements TopologySource {
  current: Topology;
  private sub: Subscription | null = null;

  constructor(
    private readonly workspace: WorkspaceService,
    private readonly availability: AvailabilityService,
    private readonly actor: Actor,
    private readonly projectId: string,
  ) {
    super();
  }

  private read(): Topology {
    return topologyFromStatus(this.workspace.statusOf(this.actor, this.projectId));
  }

  async start(): Promise<Topology> {
    this.current = this.read();
    this.sub = this.availability.topologyChanged$.subscribe((change) => {
      if (change.project_id !== this.projectId) return;
      if (change.deleted || change.pinCheck) return void this.refresh();
      if (change.paths.length === 0) return;
      const next = applyTopologyDelta(this.current, this.availability.deltaFor(change, this.actor.role === 'admin' ? 'admin' : 'other'));
      if (next === null) return void this.refresh();
      if (next === this.current) return;
      this.current = next;
      this.emit('topology', next);
    });
    return this.current;
  }

  async refresh(): Promise<void> {
    this.current = this.read();
    this.emit('topology', this.current);
  }

  info(): TopologySourceInfo {
    return { kind: 'workspace', url: null, connected: true, last_sync_ms: this.current?.ts_ms ?? null, last_error: null };
  }

  close(): void {
    this.sub?.unsubscribe();
  }
}

/** A project's workspace as a {@link RoutedFs}, over a WorkspaceRouter. */
class ProjectFs implements RoutedFs {
  constructor(
    private readonly router: WorkspaceRouter,
    readonly label: string,
  ) {}

  private pathOf(rel: string[]): string {
    return `/${rel.join('/')}`;
  }

  walk(rel: string[]): Promise<FsAttr> {
    return withRuntimeErrors(this.label, async () => this.router.getattr(this.pathOf(rel)));
  }

  list(rel: string[]): Promise<Array<{ name: string; kind: 'dir' | 'file'; size: number }>> {
    return withRuntimeErrors(this.label, async () => {
      const entries = await this.router.readdirAll(this.pathOf(rel));
      return entries.map((e) => ({ name: e.name, kind: e.attr.k === 2 ? 'dir' : 'file', size: e.attr.sz }));
    });
  }

  async open(rel: string[], mode: 'r' | 'w' | 'rw'): Promise<RoutedHandle> {
    const router = this.router;
    const { fh } = await withRuntimeErrors(this.label, () => router.open(this.pathOf(rel), openFlagsOf(mode)));
    return runtimeHandle(this.label, {
      read: (offset, count) => router.read(fh, offset, count),
      write: (offset, data) => router.write(fh, offset, data),
      close: async () => {
        try {
          await router.release(fh);
        } catch (e) {
          if (!(e instanceof FsError && e.errno === Errno.EBADF)) throw e;
        }
      },
    });
  }
}

const PROJECT_ROUTERS = Symbol('project-routers');

@Injectable()
export class ProjectRoutesService {
  constructor(
    private readonly workspace: WorkspaceService,
    private readonly availability: AvailabilityService,
    private readonly config: ServerConfig,
  ) {}

  /**
   * The project's workspace for this session (created on first use, closed with the session).
   * @param actor the session's actor (its view decides the mounts and their gating)
   */
  async fsOf(session: WsSession, actor: Actor, projectId: string): Promise<RoutedFs> {
    let routers = session.locals.get(PROJECT_ROUTERS) as Map<string, Promise<WorkspaceRouter>> | undefined;
    if (!routers) {
      const created = new Map<string, Promise<WorkspaceRouter>>();
      routers = created;
      session.locals.set(PROJECT_ROUTERS, created);
      session.once('close', () => {
        for (const r of created.values()) void r.then((router) => router.close()).catch(() => undefined);
      });
    }
    let router = routers.get(projectId);
    if (!router) {
      const source = new ControlPlaneTopologySource(this.workspace, this.availability, actor, projectId);
      const tls = this.config.clientTls;
      const r = new WorkspaceRouter(source, { ...this.config.fsDeadlines, connect: (o) => FsClient.connect({ ...o, tls }) });
      router = r.start().then(() => r);
      routers.set(projectId, router);
      router.catch(() => routers.delete(projectId));
    }
    return new ProjectFs(await router, `project ${projectId}`);
  }
}
