/**
 * The node service catalog: upsert with
 * the shared validator and the node secret, permission-filtered views, and catalog events.
 */
import { Injectable, OnModuleDestroy } from '@nestjs/common';
import { Subject, Subscription } from 'rxjs';
import {
  CatalogEvent,
  CatalogView,
  fail,
  isIdentifierSafe,
  Platform,
  ProtocolError,
  ServiceEntry,
  validateLabels,
  validatePlatform,
  validateServiceEntries,
} from '@svc/protocol';
import { Clock } from '../common/clock';
import { StateService } from '../persistence/state.service';
import { NodesService } from './nodes.service';
import { serviceVisible, Viewer } from './permissions';

/** A catalog change, before per-viewer filtering. */
export type CatalogChange =
  { event: 'upsert'; node_id: string; before: ServiceEntry[]; after: ServiceEntry[]; ts_ms: number } | { event: 'delete'; node_id: string; ts_ms: number };

/**
 * The event a viewer receives for a change: ids of services that became visible to it
 * (added), stopped being visible (removed) or changed while visible.
 */
export function eventFor(change: CatalogChange, viewer: Viewer): CatalogEvent {
  if (change.event === 'delete') return change;
  const visible = (list: ServiceEntry[]) => new Map(list.filter((s) => serviceVisible(s, viewer)).map((s) => [s.service_id, JSON.stringify(s)]));
  const before = visible(change.before);
  const after = visible(change.after);
  return {
    event: 'upsert',
    node_id: change.node_id,
    added: [...after.keys()].filter((id) => !before.has(id)),
    removed: [...before.keys()].filter((id) => !after.has(id)),
    changed: [...after.keys()].filter((id) => before.has(id) && before.get(id) !== after.get(id)),
    ts_ms: change.ts_ms,
  };
}

@Injectable()
export class CatalogService implements OnModuleDestroy {
  /** Every catalog change, after its commit (also the commits of other processes on a shared store). */
  readonly changes$ = new Subject<CatalogChange>();
  private readonly sub: Subscription;

  constructor(
    private readonly store: StateService,
    private readonly nodes: NodesService,
    private readonly clock: Clock,
  ) {
    // Events follow commits, whoever made them: a node deleted, or its catalog record changed.
    this.sub = this.store.applied$.subscribe(({ changes, prior }) => {
      const ts = this.clock.now();
      const deletedNodes = new Set<string>();
      for (const [id, n] of changes.nodes ?? []) if (!n && prior.nodes?.get(id)) deletedNodes.add(id);
      for (const [id, record] of changes.catalog ?? []) {
        if (deletedNodes.has(id)) continue;
        this.changes$.next({
          event: 'upsert',
          node_id: id,
          before: prior.catalog?.get(id)?.services ?? [],
          after: record?.services ?? [],
          ts_ms: record?.updated_at_ms ?? ts,
        });
      }
      for (const id of deletedNodes) this.changes$.next({ event: 'delete', node_id: id, ts_ms: ts });
    });
  }

  onModuleDestroy(): void {
    this.sub.unsubscribe();
  }

  /**
   * `control.node_service_upsert`: checks the node secret, validates the whole payload
   * (nothing of a rejected payload is stored), replaces the node's service list (when
   * `services` is given), platform and labels, and returns the stored record.
   * @param raw payload `{node_id, node_secret, platform?, labels?, services?}`
   * @throws ProtocolError `missing_field`, `invalid_payload` (naming `services[i].field`),
   *   `node_not_found`, `node_auth_failed`
   */
  async upsert(raw: Record<string, unknown>): Promise<CatalogView> {
    if (raw.node_id === undefined) fail('missing_field', 'missing field: node_id');
    if (raw.node_secret === undefined) fail('missing_field', 'missing field: node_secret');
    if (typeof raw.node_id !== 'string') fail('invalid_payload', 'node_id must be a string');
    if (!isIdentifierSafe(raw.node_id)) fail('invalid_payload', 'node_id must be identifier-safe');
    if (typeof raw.node_secret !== 'string' || raw.node_secret.length === 0) fail('invalid_payload', 'node_secret must be a non-empty string');
    const platform = raw.platform === undefined ? undefined : validatePlatform(raw.platform);
    const labels = raw.labels === undefined ? undefined : validateLabels(raw.labels);
    const services = raw.services === undefined ? undefined : validateServiceEntries(raw.services);
    const nodeId = raw.node_id;
    await this.nodes.authenticateFresh(nodeId, raw.node_secret);
    return this.store.mutate((s) => {
      const node = s.nodes.get(nodeId);
      if (!node) throw new ProtocolError('node_not_found', `node ${nodeId} not found; pair again`);
      const now = this.clock.now();
      const prior = s.catalog.get(nodeId);
      const record = s.catalog.put({
        node_id: nodeId,
        platform: platform ?? prior?.platform ?? node.platform,
        labels: labels ?? prior?.labels ?? node.labels,
        services: services ?? prior?.services ?? [],
        updated_at_ms: now,
      });
      s.nodes.put({ ...node, platform: platform ?? node.platform, labels: labels ?? node.labels, last_seen_ms: now });
      return { node_id: nodeId, node_name: node.node_name, platform: record.platform, labels: record.labels, services: record.services };
    });
  }

  /**
   * `control.node_service_get`: the node's record, services filtered for the viewer
   * (admins see everything). A node that never upserted has no services.
   * @throws ProtocolError `node_not_found`
   */
  view(nodeId: string, viewer: Viewer): CatalogView {
    const s = this.store.state;
    const node = s.nodes.get(nodeId);
    if (!node) fail('node_not_found', `node ${nodeId} not found`);
    const record = s.catalog.get(nodeId);
    const platform: Platform = record?.platform ?? node.platform;
    return {
      node_id: nodeId,
      node_name: node.node_name,
      platform,
      labels: record?.labels ?? node.labels,
      services: (record?.services ?? []).filter((svc) => serviceVisible(svc, viewer)),
    };
  }

  /** The services of a node, unfiltered (for the control plane's own rules); [] when none. */
  servicesOf(nodeId: string): ServiceEntry[] {
    return this.store.state.catalog.get(nodeId)?.services ?? [];
  }

  /** Number of services over all nodes. */
  servicesTotal(): number {
    let n = 0;
    for (const r of this.store.state.catalog.values()) n += r.services.length;
    return n;
  }
}
