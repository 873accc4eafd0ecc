/**
 * WorkspaceRouterModule: builds {@link WorkspaceRouter}s from a configuration, so CLI commands
 * (and later the FUSE mount) receive the factory by injection.
 */
import { Injectable, Module } from '@nestjs/common';
import { ClientModule, ClientTls, ControlClientFactory, FsClient } from '@svc/client';
import { EndpointSpec } from './topology';
import { StaticTopologySource, TopologySource, WorkspaceSourceOptions, WorkspaceTopologySource } from './topology-source';
import { WorkspaceRouter, WorkspaceRouterOptions } from './workspace-router';

/**
 * Where the topology comes from, and how to reach the FS endpoints; `tls` is the trust of
 * `wss://` URLs, the control plane's and the nodes' (default: the system CAs). Workspace mode
 * takes the control session's fields of {@link WorkspaceSourceOptions}.
 */
export type RouterConfig = WorkspaceRouterOptions & { tls?: ClientTls } & (
    | ({ mode: 'workspace' } & Pick<WorkspaceSourceOptions, 'url' | 'token' | 'agentId' | 'projectId' | 'projectToken' | 'syncIntervalMs'>)
    | {
        mode: 'endpoints';
        endpoints: EndpointSpec[];
        /** FS session token for every endpoint. */
        fsAuthToken?: string;
      }
  );

/** Creates started routers. */
@Injectable()
export class WorkspaceRouterFactory {
  constructor(private readonly control: ControlClientFactory) {}

  /** The topology source of a configuration (not started). */
  source(config: RouterConfig): TopologySource {
    if (config.mode === 'endpoints') return new StaticTopologySource(config.endpoints, config.fsAuthToken);
    return new WorkspaceTopologySource({
      url: config.url,
      token: config.token,
      agentId: config.agentId,
      projectId: config.projectId,
      projectToken: config.projectToken,
      syncIntervalMs: config.syncIntervalMs,
      connect: (o) => this.control.connect({ ...o, tls: config.tls }),
    });
  }

  /**
   * Builds a router and reads the first topology.
   * @throws ConnectionError / ControlError from the control plane (workspace mode)
   */
  async open(config: RouterConfig): Promise<WorkspaceRouter> {
    const tls = config.tls;
    const router = new WorkspaceRouter(this.source(config), { ...config, connect: config.connect ?? ((o) => FsClient.connect({ ...o, tls })) });
    try {
      await router.start();
    } catch (e) {
      router.close();
      throw e;
    }
    return router;
  }
}

@Module({ imports: [ClientModule], providers: [WorkspaceRouterFactory], exports: [WorkspaceRouterFactory] })
export class WorkspaceRouterModule {}
