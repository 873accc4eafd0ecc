/**
 * Availability detection (PROTOCOL.md 6): a sweep every `SVC_SWEEP_INTERVAL_MS` (1 s) and
 * after every committed mutation recomputes each configured mount's state (a timer sweep
 * with no mutation since the last one and no lease run out since is skipped: nothing can
 * have changed). Each change is a
 * `control.workspace_availability` transition; a change of a project's selected mounts,
 * states, endpoints or gating inputs is a topology change (pinned sessions get a delta).
 */
import { Injectable, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { Subject, Subscription } from 'rxjs';
import { Availability, availabilityOf, AvailabilityEvent, groupAndRank, MountState, MountView, sha256Hex } from '@svc/protocol';
import { ProjectRecord } from '../persistence/state.model';
import { Clock } from '../common/clock';
import { StateService } from '../persistence/state.service';
import { ServerConfig } from '../config';
import { mountView } from './projects.service';

/** How many transitions `/debug/events.ndjson` keeps. */
export const RECENT_EVENTS = 1000;

/** Current state of one configured mount, for `/debug/availability.json`. */
export interface MountAvailability {
  project_id: string;
  mount_path: string;
  node_id: string;
  export_name: string;
  state: MountState;
}

@Injectable()
export class AvailabilityService implements OnModuleInit, OnModuleDestroy {
  /** Every detected mount state change. */
  readonly transitions$ = new Subject<AvailabilityEvent>();
  /** Project ids whose topology changed (or which were deleted). */
  readonly topologyChanged$ = new Subject<string>();
  private readonly recent: AvailabilityEvent[] = [];
  private readonly lastState = new Map<string, MountState>();
  private readonly lastTopology = new Map<string, string>();
  private current: MountAvailability[] = [];
  private baselined = false;
  private sweptVersion = -1;
  /** Clock time (ms) of the last full sweep, and the first lease expiry after it. */
  private sweptAt = 0;
  private nextExpiry = 0;
  private timer: NodeJS.Timeout | null = null;
  private sub: Subscription | null = null;

  constructor(
    private readonly store: StateService,
    private readonly clock: Clock,
    private readonly config: ServerConfig,
  ) {}

  onModuleInit(): void {
    this.timer = setInterval(() => this.sweep(), this.config.sweepIntervalMs);
    this.timer.unref();
    this.sub = this.store.changes$.subscribe(() => this.sweep());
  }

  onModuleDestroy(): void {
    if (this.timer) clearInterval(this.timer);
    this.sub?.unsubscribe();
  }

  /** The current state of every configured mount of every project. */
  snapshot(): MountAvailability[] {
    return this.current;
  }

  /** The last {@link RECENT_EVENTS} transitions, oldest first. */
  recentEvents(): AvailabilityEvent[] {
    return [...this.recent];
  }

  /**
   * Recomputes every mount's state; emits transitions and topology changes. The first sweep
   * after the state is loaded only records the baseline.
   */
  sweep(): void {
    if (!this.store.isLoaded) return;
    const state = this.store.state;
    const now = this.clock.now();
    // Topology inputs other than mount states change only with the state itself.
    const stateChanged = this.store.version !== this.sweptVersion;
    // Without a mutation, states change only when a lease runs out: nothing to do before that.
    if (!stateChanged && now >= this.sweptAt && now < this.nextExpiry) return;
    this.sweptVersion = this.store.version;
    this.sweptAt = now;
    this.nextExpiry = Infinity;
    for (const node of state.nodes.values()) {
      if (node.lease_expires_at_ms > now && node.lease_expires_at_ms < this.nextExpiry) this.nextExpiry = node.lease_expires_at_ms;
    }
    const seenKeys = new Set<string>();
    const seenProjects = new Set<string>();
    const current: MountAvailability[] = [];
    for (const project of state.projects.values()) {
      seenProjects.add(project.project_id);
      const views = project.mounts.map((m) => mountView(state, m, now, false));
      let availability: Availability | null = null;
      let statesChanged = false;
      for (const v of views) {
        const key = `${project.project_id}\0${v.mount_path}\0${v.node_id}\0${v.export_name}`;
        seenKeys.add(key);
        current.push({ project_id: project.project_id, mount_path: v.mount_path, node_id: v.node_id, export_name: v.export_name, state: v.state });
        const previous = this.lastState.get(key);
        if (previous === v.state) continue;
        this.lastState.set(key, v.state);
        statesChanged = true;
        if (!this.baselined) continue;
        availability ??= availabilityOf([...groupAndRank(views).values()].map((g) => g[0]));
        this.emit({
          project_id: project.project_id,
          mount_path: v.mount_path,
          node_id: v.node_id,
          previous_state: previous ?? null,
          state: v.state,
          availability,
          ts_ms: now,
        });
      }
      if (!stateChanged && !statesChanged) continue;
      const signature = this.signatureOf(project, views);
      if (this.lastTopology.get(project.project_id) !== signature) {
        this.lastTopology.set(project.project_id, signature);
        if (this.baselined) this.topologyChanged$.next(project.project_id);
      }
    }
    for (const key of this.lastState.keys()) if (!seenKeys.has(key)) this.lastState.delete(key);
    for (const projectId of [...this.lastTopology.keys()]) {
      if (!seenProjects.has(projectId)) {
        this.lastTopology.delete(projectId);
        this.topologyChanged$.next(projectId);
      }
    }
    this.current = current;
    this.baselined = true;
  }

  /** Everything a pinned session's view of a project depends on, as one string. */
  private signatureOf(project: ProjectRecord, views: MountView[]): string {
    const state = this.store.state;
    const parts = [project.access_policy.invoke, project.token_sha256 ?? '-'];
    for (const v of views) {
      const node = state.nodes.get(v.node_id);
      parts.push(v.mount_path, v.node_id, v.export_name, v.state, v.fs_url ?? '-', node?.fs_auth_token ?? '-', String(state.catalog.get(v.node_id)?.updated_at_ms ?? '-'));
    }
    return sha256Hex(parts.join('\0'));
  }

  private emit(event: AvailabilityEvent): void {
    this.recent.push(event);
    if (this.recent.length > RECENT_EVENTS) this.recent.splice(0, this.recent.length - RECENT_EVENTS);
    this.transitions$.next(event);
  }
}
