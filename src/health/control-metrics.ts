/**
 * Control-plane metrics, all with the `svc_` prefix: sessions, requests by
 * type and result, request duration, nodes, nodes online, projects, mounts by state, catalog
 * services and watchers. Gauges
 * are computed when scraped, from the live state; no secret is ever a label.
 */
import { Injectable } from '@nestjs/common';
import { RequestMetrics, scrapedGauge } from '@svc/ops';
import { SessionRegistry } from '@svc/transport';
import { Clock } from '../common/clock';
import { StateService } from '../persistence/state.service';
import { nodeIsOnline } from '../persistence/state.model';
import { AvailabilityService } from '../projects/availability.service';
import { CatalogService } from '../catalog/catalog.service';
import { controlLocals } from '../common/actor';

@Injectable()
export class ControlMetrics {
  /** Observer handed to the envelope adapter. */
  readonly requests = new RequestMetrics('svc_requests');

  constructor(sessions: SessionRegistry, store: StateService, clock: Clock, availability: AvailabilityService, catalog: CatalogService) {
    scrapedGauge('svc_sessions', 'Open WebSocket sessions', (g) => g.set(sessions.size));
    scrapedGauge('svc_nodes', 'Nodes known to the control plane', (g) => g.set(store.state.nodes.size));
    scrapedGauge('svc_nodes_online', 'Nodes online: lease not expired and, for a node with a daemon, its session open', (g) => {
      const now = clock.now();
      let n = 0;
      for (const node of store.state.nodes.values()) if (nodeIsOnline(node, now)) n++;
      g.set(n);
    });
    scrapedGauge('svc_projects', 'Projects', (g) => g.set(store.state.projects.size));
    scrapedGauge('svc_catalog_services', 'Service entries in the node service catalog', (g) => g.set(catalog.servicesTotal()));
    scrapedGauge('svc_catalog_watchers', 'Sessions watching the node service catalog', (g) =>
      g.set(sessions.all().filter((s) => controlLocals(s).watch !== null).length),
    );
    scrapedGauge(
      'svc_mounts',
      'Configured project mounts by availability state',
      (g) => {
        const counts = { online: 0, degraded: 0, missing: 0 };
        for (const m of availability.snapshot()) counts[m.state]++;
        for (const [state, n] of Object.entries(counts)) g.set({ state }, n);
      },
      ['state'],
    );
  }
}
