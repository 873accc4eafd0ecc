/**
 * Availability and topology tracking (docs/protocol.md "Workspace status"), as a commit hook of the state
 * store: in the same transaction as any change that touches a mount (its node's lease, URL or
 * token, the mount itself, its node's catalog, the project's access policy), each affected
 * mount path is recomputed; mount states that changed are stored (`mount_states`, so a
 * restart neither repeats nor misses a transition) and the project's `revision` is increased
 * when its topology changed. After the commit, transitions go out as
 * `control.workspace_availability` and topology changes to pinned sessions as deltas that
 * carry only the changed paths.
 *
 * Leases run out without a mutation: a sweep every `SVC_SWEEP_INTERVAL_MS` takes the nodes
 * whose lease has expired from a heap ordered by expiry (its cost follows the expiries, not
 * the fleet) and runs them through the same hook.
 */
import { Injectable, Logger, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { Subject, Subscription } from 'rxjs';
import { Availability, AvailabilityEvent, MountState, MountView, TopologyChangeDelta } from '@svc/protocol';
import { Clock } from '../common/clock';
import { ServerConfig } from '../config';
import { ChangeSet, MountRecord, ProjectRecord, RecordOf, StateView, TableName } from '../persistence/state.model';
import { StateDraft } from '../persistence/state.draft';
import { AppliedChanges, StateService } from '../persistence/state.service';
import { mountView } from './projects.service';
import { gated, pathViewOf, PathView, ViewerClass } from './topology.rules';

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

/** What changed in one project with one commit. */
export interface TopologyChange {
  project_id: string;
  /** The project's revision after the commit (unchanged when only pins need checking). */
  revision: number;
  /** Mount paths whose topology changed (empty: none). */
  paths: string[];
  /** The project was deleted. */
  deleted: boolean;
  /** Token or bindings changed: pinned sessions must check that their pin still holds. */
  pinCheck: boolean;
}

interface PathEntry {
  admin: PathView | null;
  other: PathView | null;
}

interface Published {
  paths: Map<string, PathEntry>;
  counts: Record<ViewerClass, Availability>;
  /** Increased whenever any view of the project was recomputed (lease times included). */
  version: number;
}

/** A view adjuster that shows each mount in its stored state (what was last committed). */
function storedStates(state: StateView): (v: MountView, m: MountRecord) => MountView {
  return (v, m) => {
    const s = state.mountStates.get(m.mount_id)?.state;
    return s && s !== v.state ? { ...v, state: s, online: s === 'online' } : v;
  };
}

const zero = (): Availability => ({ mounts_total: 0, online: 0, degraded: 0, missing: 0 });

/** A min-heap of (lease expiry, node id). */
class ExpiryHeap {
  private readonly items: Array<[number, string]> = [];

  get size(): number {
    return this.items.length;
  }

  push(at: number, id: string): void {
    const a = this.items;
    a.push([at, id]);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (a[p][0] <= a[i][0]) break;
      [a[p], a[i]] = [a[i], a[p]];
      i = p;
    }
  }

  /** Removes and returns every entry due at or before `now`. */
  popDue(now: number): Array<[number, string]> {
    const out: Array<[number, string]> = [];
    const a = this.items;
    while (a.length > 0 && a[0][0] <= now) {
      out.push(a[0]);
      const last = a.pop()!;
      if (a.length === 0) break;
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && a[l][0] < a[m][0]) m = l;
        if (r < a.length && a[r][0] < a[m][0]) m = r;
        if (m === i) break;
        [a[m], a[i]] = [a[i], a[m]];
        i = m;
      }
    }
    return out;
  }
}

@Injectable()
export class AvailabilityService implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('Availability');
  /** Every detected mount state change, after its commit. */
  readonly transitions$ = new Subject<AvailabilityEvent>();
  /** Projects whose topology changed, which were deleted, or whose pins need checking. */
  readonly topologyChanged$ = new Subject<TopologyChange>();
  private readonly recent: AvailabilityEvent[] = [];
  private readonly published = new Map<string, Published>();
  private readonly heap = new ExpiryHeap();
  private timer: NodeJS.Timeout | null = null;
  private sub: Subscription | null = null;
  private started = false;
  private sweeping = false;
  /** Whether this process ran the sweep at the last tick (to notice taking it over). */
  private wasSweeper = true;

  constructor(
    private readonly store: StateService,
    private readonly clock: Clock,
    private readonly config: ServerConfig,
  ) {}

  onModuleInit(): void {
    this.store.addCommitHook((draft) => this.onCommit(draft));
    this.sub = this.store.applied$.subscribe((applied) => {
      try {
        if (this.started) this.onApplied(applied);
      } catch (e) {
        this.logger.error({ msg: 'availability update failed', error: (e as Error).message });
      }
    });
    this.store.addOpenHook(() => this.start());
    this.timer = setInterval(() => this.sweep(), this.config.sweepIntervalMs);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) clearInterval(this.timer);
    this.sub?.unsubscribe();
  }

  /**
   * Once the store is loaded: the published topology as it was last stored (each mount in its
   * stored state), then one pass over every project that stores and announces whatever
   * changed while no server ran (leases that ran out, mounts never seen).
   */
  private async start(): Promise<void> {
    const state = this.store.state;
    const now = this.clock.now();
    for (const project of state.projects.values()) {
      const update = this.compute(state, project, null, now, storedStates(state));
      this.publish(project.project_id, update.entries);
    }
    for (const node of state.nodes.values()) if (node.lease_expires_at_ms > now) this.heap.push(node.lease_expires_at_ms, node.node_id);
    this.started = true;
    await this.store.mutate((d) => {
      for (const id of state.projects.keys()) d.touch('projects', id);
    });
  }

  /** The current state of every configured mount of every project. */
  snapshot(): MountAvailability[] {
    const s = this.store.state;
    const out: MountAvailability[] = [];
    for (const ms of s.mountStates.values()) {
      const m = s.mounts.get(ms.mount_id);
      if (m) out.push({ project_id: m.project_id, mount_path: m.mount_path, node_id: m.node_id, export_name: m.export_name, state: ms.state });
    }
    return out;
  }

  /** The last {@link RECENT_EVENTS} transitions, oldest first. */
  recentEvents(): AvailabilityEvent[] {
    return [...this.recent];
  }

  /** Changes whenever any view of the project may have changed (for caches of its topology). */
  projectVersion(projectId: string): number {
    return this.published.get(projectId)?.version ?? -1;
  }

  /**
   * The `control.workspace_topology_delta` payload of a change for a class of caller
   * (docs/protocol.md "Workspace status"): the changed paths' selected mounts and configured mounts, the paths gone.
   */
  deltaFor(change: TopologyChange, cls: ViewerClass): TopologyChangeDelta {
    const pub = this.published.get(change.project_id);
    const changed: MountView[] = [];
    const desired: MountView[] = [];
    const removed: string[] = [];
    for (const path of change.paths) {
      const v = pub?.paths.get(path)?.[cls];
      if (v) {
        changed.push(v.selected);
        desired.push(...v.desired);
      } else removed.push(path);
    }
    return {
      project_id: change.project_id,
      revision: change.revision,
      changed,
      desired,
      removed,
      availability: { ...(pub?.counts[cls] ?? zero()) },
      ts_ms: this.clock.now(),
    };
  }

  /**
   * Runs lease expiries through the commit hook (nodes whose lease ran out since the last
   * sweep). On a shared store only the sweeper acts (the others drop what is due, which the
   * sweeper handles); a replica that becomes the sweeper first reconciles every project, so
   * expiries between the old sweeper's end and now are not missed (nor repeated: states are stored).
   */
  sweep(): void {
    if (!this.started || this.sweeping) return;
    const now = this.clock.now();
    const leader = this.store.isSweeper;
    const takeover = leader && !this.wasSweeper;
    this.wasSweeper = leader;
    const nodes = this.store.state.nodes;
    const due = this.heap.popDue(now).filter(([at, id]) => nodes.get(id)?.lease_expires_at_ms === at);
    if (!leader || (!takeover && due.length === 0)) return;
    this.sweeping = true;
    this.store
      .mutate((d) => {
        if (takeover) for (const id of this.store.state.projects.keys()) d.touch('projects', id);
        for (const [, id] of due) d.touch('nodes', id);
      })
      .catch((e: Error) => {
        // Not stored: try again at the next sweep.
        for (const [at, id] of due) this.heap.push(at, id);
        if (takeover) this.wasSweeper = false;
        this.logger.warn({ msg: 'availability sweep could not be stored; retrying', error: e.message });
      })
      .finally(() => {
        this.sweeping = false;
      });
  }

  /**
   * The commit hook (see the module comment): recomputes the paths the batch touches, stores
   * the mount states that changed and increases the revision of each project whose topology
   * changed, in the batch's own transaction.
   */
  private onCommit(draft: StateDraft): void {
    const now = this.clock.now();
    const a = this.affected(draft, draft.changes(), (t, id) => draft.table(t).before(id) ?? null, draft.nodes.touched, draft.projects.touched);
    for (const [id, m] of draft.mounts.writes) if (!m && draft.mountStates.has(id)) draft.mountStates.delete(id);
    for (const [projectId, paths] of a.paths) {
      const project = draft.projects.get(projectId);
      if (!project) continue;
      const { changed } = this.compute(draft, project, paths, now, undefined, draft);
      if (changed.length > 0) draft.projects.put({ ...project, revision: project.revision + 1 });
    }
  }

  /**
   * After any commit (this process's or, with a shared store, another's): the published
   * topology of the affected paths (with the stored mount states, so it is the same on every
   * process), transitions from the mount states that changed, and topology changes.
   */
  private onApplied({ changes, prior }: AppliedChanges): void {
    const now = this.clock.now();
    const state = this.store.state;
    const a = this.affected(state, changes, (t, id) => (prior[t]?.get(id) as never) ?? null);
    for (const n of changes.nodes?.values() ?? []) if (n && n.lease_expires_at_ms > now) this.heap.push(n.lease_expires_at_ms, n.node_id);
    const transitions: Array<Omit<AvailabilityEvent, 'availability'>> = [];
    for (const [id, ms] of changes.mount_states ?? []) {
      const before = prior.mount_states?.get(id) ?? null;
      const m = state.mounts.get(id);
      if (!ms || !m || before?.state === ms.state) continue;
      transitions.push({
        project_id: m.project_id,
        mount_path: m.mount_path,
        node_id: m.node_id,
        previous_state: before?.state ?? null,
        state: ms.state,
        ts_ms: ms.ts_ms,
      });
    }
    const out = new Map<string, TopologyChange>();
    for (const [projectId, paths] of a.paths) {
      const project = state.projects.get(projectId);
      if (!project || a.deleted.has(projectId)) continue;
      const { entries, changed } = this.compute(state, project, paths, now, storedStates(state));
      this.publish(projectId, entries);
      if (changed.length > 0 || a.pinCheck.has(projectId)) {
        out.set(projectId, { project_id: projectId, revision: project.revision, paths: changed, deleted: false, pinCheck: a.pinCheck.has(projectId) });
      }
    }
    for (const id of a.pinCheck) {
      const p = state.projects.get(id);
      if (!out.has(id) && p) out.set(id, { project_id: id, revision: p.revision, paths: [], deleted: false, pinCheck: true });
    }
    for (const id of a.deleted) {
      this.published.delete(id);
      out.set(id, { project_id: id, revision: -1, paths: [], deleted: true, pinCheck: true });
    }
    for (const t of transitions) this.emit({ ...t, availability: { ...(this.published.get(t.project_id)?.counts.admin ?? zero()) } });
    for (const c of out.values()) this.topologyChanged$.next(c);
  }

  /**
   * Which mount paths a change set touches (a node's lease, URL or token, its catalog, a
   * mount, a mount state, a project's access policy), which projects were deleted, and which
   * need their pinned sessions checked (token or binding changes).
   * @param before the record a change replaced (null: none)
   * @param touchedNodes,touchedProjects records marked affected without a write
   */
  private affected(
    state: StateView,
    changes: ChangeSet,
    before: <T extends TableName>(table: T, id: string) => RecordOf[T] | null,
    touchedNodes: Iterable<string> = [],
    touchedProjects: Iterable<string> = [],
  ): { paths: Map<string, Set<string> | 'all'>; pinCheck: Set<string>; deleted: Set<string> } {
    const paths = new Map<string, Set<string> | 'all'>();
    const addPath = (projectId: string, path: string) => {
      const set = paths.get(projectId);
      if (set === 'all') return;
      if (set) set.add(path);
      else paths.set(projectId, new Set([path]));
    };
    const addNode = (nodeId: string) => {
      for (const id of state.mountIdsOfNode(nodeId)) {
        const m = state.mounts.get(id);
        if (m) addPath(m.project_id, m.mount_path);
      }
    };
    for (const id of changes.nodes?.keys() ?? []) addNode(id);
    for (const id of touchedNodes) addNode(id);
    for (const id of changes.catalog?.keys() ?? []) addNode(id);
    for (const [id, m] of changes.mounts ?? []) {
      const old = before('mounts', id);
      if (old) addPath(old.project_id, old.mount_path);
      if (m) addPath(m.project_id, m.mount_path);
    }
    for (const id of changes.mount_states?.keys() ?? []) {
      const m = state.mounts.get(id);
      if (m) addPath(m.project_id, m.mount_path);
    }
    const pinCheck = new Set<string>();
    const deleted = new Set<string>();
    for (const [id, p] of changes.projects ?? []) {
      const old = before('projects', id);
      if (!p) {
        deleted.add(id);
        paths.delete(id);
        continue;
      }
      if (old && old.access_policy.invoke !== p.access_policy.invoke) paths.set(id, 'all');
      if (old && old.token_sha256 !== p.token_sha256) pinCheck.add(id);
    }
    for (const id of touchedProjects) paths.set(id, 'all');
    for (const [key, b] of changes.bindings ?? []) {
      const old = before('bindings', key);
      if (old) pinCheck.add(old.project_id);
      if (b) pinCheck.add(b.project_id);
    }
    for (const id of deleted) pinCheck.delete(id);
    return { paths, pinCheck, deleted };
  }

  /**
   * Recomputes paths of a project (all when `paths` is `'all'` or null): their views for
   * both classes and which of them changed against what is published; with `storeIn`, the
   * mount states that changed are written to that draft.
   */
  private compute(
    state: StateView,
    project: ProjectRecord,
    paths: Set<string> | 'all' | null,
    now: number,
    adjust?: (v: MountView, m: MountRecord) => MountView,
    storeIn?: StateDraft,
  ): { entries: Map<string, PathEntry | null>; changed: string[] } {
    const pub = this.published.get(project.project_id);
    const byPath = new Map<string, MountRecord[]>();
    for (const m of state.mountsOf(project.project_id)) {
      if (paths instanceof Set && !paths.has(m.mount_path)) continue;
      const g = byPath.get(m.mount_path);
      if (g) g.push(m);
      else byPath.set(m.mount_path, [m]);
    }
    const all = paths instanceof Set ? [...paths] : [...new Set([...byPath.keys(), ...(pub?.paths.keys() ?? [])])];
    const entries = new Map<string, PathEntry | null>();
    const changed: string[] = [];
    for (const path of all) {
      const mounts = byPath.get(path) ?? [];
      const views = mounts.map((m) => {
        const v = mountView(state, m, now, true);
        return adjust ? adjust(v, m) : v;
      });
      if (storeIn) {
        mounts.forEach((m, i) => {
          const st = views[i].state;
          if (storeIn.mountStates.get(m.mount_id)?.state !== st)
            storeIn.mountStates.put({ mount_id: m.mount_id, project_id: m.project_id, state: st, ts_ms: now });
        });
      }
      const entry: PathEntry | null =
        views.length === 0 ? null : { admin: pathViewOf(views), other: pathViewOf(views.filter((v) => !gated(state, project, v))) };
      const old = pub?.paths.get(path);
      if ((old?.admin?.sig ?? null) !== (entry?.admin?.sig ?? null) || (old?.other?.sig ?? null) !== (entry?.other?.sig ?? null)) changed.push(path);
      entries.set(path, entry);
    }
    return { entries, changed: changed.sort() };
  }

  /** Makes recomputed paths the published topology of a project, keeping its rollups. */
  private publish(projectId: string, entries: Map<string, PathEntry | null>): void {
    let pub = this.published.get(projectId);
    if (!pub) this.published.set(projectId, (pub = { paths: new Map(), counts: { admin: zero(), other: zero() }, version: 0 }));
    const count = (e: PathEntry | undefined | null, sign: 1 | -1) => {
      for (const cls of ['admin', 'other'] as const) {
        const v = e?.[cls];
        if (!v) continue;
        pub.counts[cls].mounts_total += sign;
        pub.counts[cls][v.selected.state] += sign;
      }
    };
    for (const [path, entry] of entries) {
      count(pub.paths.get(path), -1);
      if (entry) pub.paths.set(path, entry);
      else pub.paths.delete(path);
      count(entry, 1);
    }
    pub.version++;
  }

  private emit(event: AvailabilityEvent): void {
    this.recent.push(event);
    if (this.recent.length > RECENT_EVENTS) this.recent.splice(0, this.recent.length - RECENT_EVENTS);
    this.transitions$.next(event);
  }
}
