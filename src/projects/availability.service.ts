/**
 * Availability and topology tracking (PROTOCOL.md 6, 10), as a commit hook of the state
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
import { Subject } from 'rxjs';
import { Availability, AvailabilityEvent, MountState, MountView, TopologyChangeDelta } from '@svc/protocol';
import { Clock } from '../common/clock';
import { ServerConfig } from '../config';
import { MountRecord, ProjectRecord, StateView } from '../persistence/state.model';
import { StateDraft } from '../persistence/state.draft';
import { StateService } from '../persistence/state.service';
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
  private started = false;
  private sweeping = false;

  constructor(
    private readonly store: StateService,
    private readonly clock: Clock,
    private readonly config: ServerConfig,
  ) {}

  onModuleInit(): void {
    this.store.addCommitHook((draft, after) => this.onCommit(draft, after));
    this.store.addOpenHook(() => this.start());
    this.timer = setInterval(() => this.sweep(), this.config.sweepIntervalMs);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) clearInterval(this.timer);
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
      const stored = (v: MountView, m: MountRecord): MountView => {
        const s = state.mountStates.get(m.mount_id)?.state;
        return s && s !== v.state ? { ...v, state: s, online: s === 'online' } : v;
      };
      const update = this.compute(state, project, null, now, stored);
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
   * (PROTOCOL.md 6): the changed paths' selected mounts and configured mounts, the paths gone.
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
    return { project_id: change.project_id, revision: change.revision, changed, desired, removed, availability: { ...(pub?.counts[cls] ?? zero()) }, ts_ms: this.clock.now() };
  }

  /** Runs lease expiries through the commit hook (nodes whose lease ran out since the last sweep). */
  sweep(): void {
    if (!this.started || this.sweeping) return;
    const now = this.clock.now();
    const nodes = this.store.state.nodes;
    const due = this.heap.popDue(now).filter(([at, id]) => nodes.get(id)?.lease_expires_at_ms === at);
    if (due.length === 0) return;
    this.sweeping = true;
    this.store
      .mutate((d) => {
        for (const [, id] of due) d.touch('nodes', id);
      })
      .catch((e: Error) => {
        // Not stored: try again at the next sweep.
        for (const [at, id] of due) this.heap.push(at, id);
        this.logger.warn({ msg: 'availability sweep could not be stored; retrying', error: e.message });
      })
      .finally(() => {
        this.sweeping = false;
      });
  }

  /** The commit hook (see the module comment). */
  private onCommit(draft: StateDraft, after: (fn: () => void) => void): void {
    const now = this.clock.now();
    const affected = new Map<string, Set<string> | 'all'>();
    const addPath = (projectId: string, path: string) => {
      const set = affected.get(projectId);
      if (set === 'all') return;
      if (set) set.add(path);
      else affected.set(projectId, new Set([path]));
    };
    const addNode = (nodeId: string) => {
      for (const id of draft.mountIdsOfNode(nodeId)) {
        const m = draft.mounts.get(id);
        if (m) addPath(m.project_id, m.mount_path);
      }
    };
    for (const id of draft.nodes.writes.keys()) addNode(id);
    for (const id of draft.nodes.touched) addNode(id);
    for (const id of draft.catalog.writes.keys()) addNode(id);
    for (const [id, m] of draft.mounts.writes) {
      const old = draft.mounts.before(id);
      if (old) addPath(old.project_id, old.mount_path);
      if (m) addPath(m.project_id, m.mount_path);
      else if (draft.mountStates.has(id)) draft.mountStates.delete(id);
    }
    const pinCheck = new Set<string>();
    const deleted = new Set<string>();
    for (const [id, p] of draft.projects.writes) {
      const old = draft.projects.before(id);
      if (!p) {
        deleted.add(id);
        continue;
      }
      if (old && old.access_policy.invoke !== p.access_policy.invoke) affected.set(id, 'all');
      if (old && old.token_sha256 !== p.token_sha256) pinCheck.add(id);
    }
    for (const id of draft.projects.touched) affected.set(id, 'all');
    for (const [key, b] of draft.bindings.writes) {
      const old = draft.bindings.before(key);
      if (old) pinCheck.add(old.project_id);
      if (b) pinCheck.add(b.project_id);
    }

    const updates: Array<{ projectId: string; entries: Map<string, PathEntry | null>; paths: string[]; revision: number }> = [];
    const transitions: Array<Omit<AvailabilityEvent, 'availability'>> = [];
    for (const [projectId, paths] of affected) {
      const project = draft.projects.get(projectId);
      if (!project || deleted.has(projectId)) continue;
      const { entries, changed } = this.compute(draft, project, paths, now, undefined, transitions);
      let revision = project.revision;
      if (changed.length > 0) draft.projects.put({ ...project, revision: ++revision });
      updates.push({ projectId, entries, paths: changed, revision });
    }
    if (updates.length === 0 && deleted.size === 0 && pinCheck.size === 0) return;

    const expiries: Array<[number, string]> = [];
    for (const n of draft.nodes.writes.values()) if (n && n.lease_expires_at_ms > now) expiries.push([n.lease_expires_at_ms, n.node_id]);
    after(() => {
      for (const [at, id] of expiries) this.heap.push(at, id);
      for (const u of updates) this.publish(u.projectId, u.entries);
      for (const id of deleted) this.published.delete(id);
      for (const t of transitions) this.emit({ ...t, availability: { ...(this.published.get(t.project_id)?.counts.admin ?? zero()) } });
      const changes = new Map<string, TopologyChange>();
      for (const u of updates) {
        if (u.paths.length > 0 || pinCheck.has(u.projectId)) {
          changes.set(u.projectId, { project_id: u.projectId, revision: u.revision, paths: u.paths, deleted: false, pinCheck: pinCheck.has(u.projectId) });
        }
      }
      for (const id of pinCheck) {
        if (changes.has(id) || deleted.has(id)) continue;
        const p = this.store.state.projects.get(id);
        if (p) changes.set(id, { project_id: id, revision: p.revision, paths: [], deleted: false, pinCheck: true });
      }
      for (const id of deleted) changes.set(id, { project_id: id, revision: -1, paths: [], deleted: true, pinCheck: true });
      for (const c of changes.values()) this.topologyChanged$.next(c);
    });
  }

  /**
   * Recomputes paths of a project (all when `paths` is `'all'` or null): their views for
   * both classes, which of them changed against what is published, and (when `transitions`
   * is given) the mount states to store in `state` (a draft) with their transitions.
   */
  private compute(
    state: StateView,
    project: ProjectRecord,
    paths: Set<string> | 'all' | null,
    now: number,
    adjust?: (v: MountView, m: MountRecord) => MountView,
    transitions?: Array<Omit<AvailabilityEvent, 'availability'>>,
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
      if (transitions) {
        const draft = state as StateDraft;
        mounts.forEach((m, i) => {
          const prev = draft.mountStates.get(m.mount_id);
          const st = views[i].state;
          if (prev?.state === st) return;
          draft.mountStates.put({ mount_id: m.mount_id, project_id: m.project_id, state: st, ts_ms: now });
          transitions.push({ project_id: m.project_id, mount_path: m.mount_path, node_id: m.node_id, previous_state: prev?.state ?? null, state: st, ts_ms: now });
        });
      }
      const entry: PathEntry | null = views.length === 0 ? null : { admin: pathViewOf(views), other: pathViewOf(views.filter((v) => !gated(state, project, v))) };
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
        pub!.counts[cls].mounts_total += sign;
        pub!.counts[cls][v.selected.state] += sign;
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
