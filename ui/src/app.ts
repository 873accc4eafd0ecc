/**
 * The svc dashboard, loaded by the signed-in application shell. It speaks
 * the control protocol over one WebSocket session, authenticated as admin by the HttpOnly
 * session cookie:
 *
 * - `node_list`, `project_list`, `node_join_pending_list`, `node_service_get`, and each
 *   project's `/projects/<id>/STATUS.json` from the runtime namespace (selected mounts,
 *   standbys, drift), re-read every {@link POLL_MS} and at once after a push;
 * - pushes: `control.workspace_availability` (after `debug_subscribe`) and
 *   `control.node_service_event` (after `node_service_watch`), shown in the live feed when
 *   they arrive; the feed starts with `/debug/events.ndjson`;
 * - approve/deny buttons (`node_join_approve` / `node_join_deny`; the operator token, when the
 *   server wants one, is asked for and kept in this tab's memory only);
 * - `control.audit_list` with filters and paging.
 *
 * Nothing secret is shown: mount `auth_token`s are dropped on receipt, and join approval
 * credentials are discarded.
 */
import { ControlSession, RequestError } from './control-session.js';
import { badge, clock, duration, fill, h, table, when } from './dom.js';
import { topologySvg } from './topology.js';
import type { AuditEntry, AvailabilityEvent, CatalogEvent, NodeInfo, PendingJoin, ProjectSummary, ServiceEntry, WorkspaceStatus } from './types.js';

/** Full re-read period, ms (pushes cause an immediate re-read of what they touch). */
const POLL_MS = 3000;
/** Events kept in the feed. */
const MAX_EVENTS = 200;
const AUDIT_PAGE = 50;
/** The first page of the audit log is re-read this often, ms (not once older pages are shown). */
const AUDIT_POLL_MS = 10_000;

interface FeedItem {
  ts_ms: number;
  kind: 'availability' | 'catalog' | 'node' | 'join';
  text: string;
  state?: string;
}

const model = {
  nodes: [] as NodeInfo[],
  projects: [] as ProjectSummary[],
  status: new Map<string, WorkspaceStatus>(),
  services: new Map<string, ServiceEntry[]>(),
  pending: [] as PendingJoin[],
  events: [] as FeedItem[],
  lastRead: 0,
};

let session: ControlSession | null = null;
let operatorToken = '';
let refreshQueued: number | null = null;
let auditCursor: string | null = null;
let auditAvailable = true;
/** Pages of the audit log on screen (re-reads only while it is 1). */
let auditPages = 0;

// ---- helpers ------------------------------------------------------------------------------

function nodeName(id: string): string {
  return model.nodes.find((n) => n.node_id === id)?.node_name ?? id;
}

function projectName(id: string): string {
  return model.projects.find((p) => p.project_id === id)?.name ?? id;
}

/**
 * Parses a project's STATUS.json without the FS tokens it carries (`auth_token` of every mount
 * view, in `mounts`, `desired_mounts` and `actual_mounts`): the dashboard never shows them, and
 * does not keep them in memory.
 */
function parseStatus(text: string): WorkspaceStatus {
  return JSON.parse(text, (key: string, value: unknown) => (key === 'auth_token' ? undefined : value)) as WorkspaceStatus;
}

function addEvent(item: FeedItem): void {
  model.events.unshift(item);
  if (model.events.length > MAX_EVENTS) model.events.length = MAX_EVENTS;
  renderEvents(true);
}

function setConn(text: string, up: boolean): void {
  const el = document.getElementById('conn');
  if (!el) return;
  el.textContent = text;
  el.className = `conn ${up ? 'up' : 'down'}`;
}

/** The payload of a protected mutation: with the operator token when one was entered. */
function gated(payload: Record<string, unknown>): Record<string, unknown> {
  return operatorToken ? { ...payload, operator_token: operatorToken } : payload;
}

// ---- reading ------------------------------------------------------------------------------

async function readStatus(s: ControlSession, projectId: string): Promise<void> {
  try {
    const st = parseStatus(await s.readFile(`/projects/${projectId}/STATUS.json`));
    model.status.set(projectId, st);
  } catch (e) {
    if (e instanceof RequestError && e.code === 'enoent') model.status.delete(projectId);
    else throw e;
  }
}

async function readServices(s: ControlSession, nodeId: string): Promise<void> {
  try {
    const r = await s.request<{ services: ServiceEntry[] }>('control.node_service_get', { node_id: nodeId });
    model.services.set(nodeId, r.services);
  } catch (e) {
    if (e instanceof RequestError && e.code === 'node_not_found') model.services.delete(nodeId);
    else throw e;
  }
}

/** Notes node transitions seen between two reads (nodes with no mounts have no other event). */
function diffNodes(before: NodeInfo[], after: NodeInfo[]): void {
  if (model.lastRead === 0) return;
  const old = new Map(before.map((n) => [n.node_id, n]));
  for (const n of after) {
    const o = old.get(n.node_id);
    if (!o) addEvent({ ts_ms: Date.now(), kind: 'node', text: `${n.node_name} (${n.node_id}) joined`, state: n.state });
    else if (o.state !== n.state) addEvent({ ts_ms: Date.now(), kind: 'node', text: `${n.node_name}: ${o.state} → ${n.state}`, state: n.state });
  }
  const now = new Set(after.map((n) => n.node_id));
  for (const o of before) if (!now.has(o.node_id)) addEvent({ ts_ms: Date.now(), kind: 'node', text: `${o.node_name} (${o.node_id}) deleted` });
}

/** Re-reads everything and re-renders. */
async function refreshAll(): Promise<void> {
  const s = session;
  if (!s) return;
  const [nodes, projects, pending] = await Promise.all([
    s.request<{ nodes: NodeInfo[] }>('control.node_list'),
    s.request<{ projects: ProjectSummary[] }>('control.project_list'),
    s.request<{ pending: PendingJoin[] }>('control.node_join_pending_list'),
  ]);
  diffNodes(model.nodes, nodes.nodes);
  model.nodes = nodes.nodes;
  model.projects = projects.projects;
  model.pending = pending.pending;
  const ids = new Set(model.projects.map((p) => p.project_id));
  for (const id of [...model.status.keys()]) if (!ids.has(id)) model.status.delete(id);
  await Promise.all([
    ...model.projects.map((p) => readStatus(s, p.project_id)),
    ...model.nodes.filter((n) => !model.services.has(n.node_id)).map((n) => readServices(s, n.node_id)),
  ]);
  model.lastRead = Date.now();
  render();
}

/** A re-read soon (pushes come in bursts: one re-read for a burst). */
function refreshSoon(): void {
  if (refreshQueued !== null) return;
  refreshQueued = window.setTimeout(() => {
    refreshQueued = null;
    refreshAll().catch(() => undefined);
  }, 50);
}

// ---- pushes -------------------------------------------------------------------------------

function onPush(type: string, payload: Record<string, unknown>): void {
  if (type === 'control.workspace_availability') {
    const e = payload as unknown as AvailabilityEvent;
    addEvent({
      ts_ms: e.ts_ms,
      kind: 'availability',
      state: e.state,
      text: `${projectName(e.project_id)} ${e.mount_path} on ${nodeName(e.node_id)}: ${e.previous_state ?? 'new'} → ${e.state}`,
    });
    refreshSoon();
  } else if (type === 'control.node_service_event') {
    const e = payload as unknown as CatalogEvent;
    const parts =
      e.event === 'delete'
        ? ['node deleted']
        : [...(e.added ?? []).map((x) => `+${x}`), ...(e.removed ?? []).map((x) => `-${x}`), ...(e.changed ?? []).map((x) => `~${x}`)];
    addEvent({ ts_ms: e.ts_ms, kind: 'catalog', text: `catalog of ${nodeName(e.node_id)}: ${parts.length > 0 ? parts.join(' ') : 'republished, unchanged'}` });
    model.services.delete(e.node_id);
    refreshSoon();
  }
}

// ---- rendering ----------------------------------------------------------------------------

function render(): void {
  renderOverview();
  fill(
    'topology',
    model.nodes.length + model.status.size > 0
      ? topologySvg(model.nodes, model.projects, model.status)
      : h('p', { class: 'muted' }, 'Nothing to draw yet: no nodes and no projects.'),
  );
  renderNodes();
  renderProjects();
  renderJoins();
  renderEvents(false);
  const updated = document.getElementById('updated');
  if (updated) updated.textContent = `updated ${clock(model.lastRead)}`;
}

function renderOverview(): void {
  const online = model.nodes.filter((n) => n.state === 'online').length;
  const mounts = { online: 0, degraded: 0, missing: 0 };
  for (const st of model.status.values()) for (const k of ['online', 'degraded', 'missing'] as const) mounts[k] += st.availability[k];
  const card = (id: string, title: string, n: number, ...detail: Array<Node | string>) =>
    h('div', { class: 'card', id }, h('div', { class: 'muted' }, title), h('div', { class: 'n' }, n), h('div', {}, ...detail));
  fill(
    'overview',
    h(
      'div',
      { class: 'cards' },
      card('card-nodes', 'Nodes', model.nodes.length, `${online} online, ${model.nodes.length - online} degraded`),
      card('card-projects', 'Projects', model.projects.length, `${model.pending.length} join request(s) pending`),
      card(
        'card-mounts',
        'Mount paths',
        mounts.online + mounts.degraded + mounts.missing,
        `${mounts.online} online, ${mounts.degraded} degraded, ${mounts.missing} missing`,
      ),
    ),
  );
}

function renderNodes(): void {
  if (model.nodes.length === 0) return fill('nodes', h('p', { class: 'muted' }, 'No nodes have joined.'));
  const now = Date.now();
  const rows = model.nodes.map((n) =>
    h(
      'tr',
      { 'data-node-id': n.node_id, 'data-node-name': n.node_name },
      h('td', {}, h('strong', {}, n.node_name), h('div', { class: 'muted mono' }, n.node_id)),
      h('td', {}, badge(n.state)),
      h('td', { class: 'lease', 'data-expires': String(n.lease_expires_at_ms) }, leaseText(n.lease_expires_at_ms, now)),
      h('td', {}, ...Object.entries(n.labels ?? {}).map(([k, v]) => h('div', { class: 'mono' }, `${k}=${v}`))),
      h('td', {}, ...(model.services.get(n.node_id) ?? []).map((sv) => h('div', {}, h('span', { class: 'mono' }, sv.service_id), ` ${sv.kind}, ${sv.state}`))),
      h('td', { class: 'mono' }, n.fs_url),
      h('td', {}, [n.platform?.os, n.platform?.arch].filter(Boolean).join('/')),
    ),
  );
  fill('nodes', table(['Node', 'State', 'Lease', 'Labels', 'Services', 'FS URL', 'Platform'], rows, { id: 'nodes-table' }));
}

function leaseText(expires: number, now: number): string {
  return expires > now ? `expires in ${duration(expires - now)}` : `expired ${duration(now - expires)} ago`;
}

/** Ticks the lease countdowns between reads. */
function tickLeases(): void {
  const now = Date.now();
  for (const td of document.querySelectorAll<HTMLElement>('td.lease')) td.textContent = leaseText(Number(td.dataset.expires), now);
}

function renderProjects(): void {
  if (model.projects.length === 0) return fill('projects', h('p', { class: 'muted' }, 'No projects.'));
  const blocks = model.projects.map((p) => {
    const st = model.status.get(p.project_id);
    const head = h('h3', {}, p.name, ' ', h('span', { class: 'muted mono' }, p.project_id));
    if (!st) return h('div', { class: 'project', 'data-project-id': p.project_id }, head, h('p', { class: 'muted' }, 'status not available'));
    const drift = new Map(st.drift.items.map((d) => [d.mount_path, d]));
    const rows = st.mounts.map((m) => {
      const standbys = st.desired_mounts.filter((d) => d.mount_path === m.mount_path && !(d.node_id === m.node_id && d.export_name === m.export_name));
      const d = drift.get(m.mount_path);
      return h(
        'tr',
        { 'data-mount-path': m.mount_path, 'data-state': m.state },
        h('td', { class: 'mono' }, m.mount_path),
        h('td', {}, `${m.node_name ?? m.node_id}:${m.export_name}`),
        h('td', { class: 'mount-state' }, badge(m.state)),
        h(
          'td',
          {},
          ...(standbys.length === 0 ? ['none'] : standbys.map((sb) => h('div', {}, `${sb.node_name ?? sb.node_id}:${sb.export_name} `, badge(sb.state)))),
        ),
        h('td', { class: d ? `drift ${d.severity}` : 'muted' }, d ? `${d.kind.replace('_', ' ')}: ${d.message}` : 'none'),
      );
    });
    const a = st.availability;
    return h(
      'div',
      { class: 'project', 'data-project-id': p.project_id },
      head,
      h('p', {}, `${a.mounts_total} mount path(s): ${a.online} online, ${a.degraded} degraded, ${a.missing} missing; revision ${st.revision}`),
      rows.length > 0 ? table(['Mount path', 'Selected node', 'State', 'Standbys', 'Failover'], rows) : h('p', { class: 'muted' }, 'No mounts.'),
    );
  });
  fill('projects', ...blocks);
}

function renderJoins(): void {
  if (model.pending.length === 0) return fill('joins', h('p', { class: 'muted' }, 'No pending join requests.'));
  const rows = model.pending.map((r) => {
    const approve = h('button', { type: 'button', class: 'approve', 'data-request-id': r.request_id }, 'Approve');
    const deny = h('button', { type: 'button', class: 'deny', 'data-request-id': r.request_id }, 'Deny');
    approve.addEventListener('click', () => void decide(r, 'approve'));
    deny.addEventListener('click', () => void decide(r, 'deny'));
    return h(
      'tr',
      { 'data-request-id': r.request_id, 'data-node-name': r.node_name },
      h('td', {}, h('strong', {}, r.node_name)),
      h('td', { class: 'mono' }, r.fs_url),
      h('td', {}, [r.platform?.os, r.platform?.arch].filter(Boolean).join('/')),
      h('td', {}, when(r.requested_at_ms)),
      h('td', { class: 'mono muted' }, r.request_id),
      h('td', {}, approve, ' ', deny),
    );
  });
  fill('joins', table(['Node name', 'FS URL', 'Platform', 'Requested', 'Request', ''], rows, { id: 'joins-table' }));
}

async function decide(r: PendingJoin, what: 'approve' | 'deny'): Promise<void> {
  const s = session;
  const out = document.getElementById('join-result');
  if (!s || !out) return;
  operatorToken = (document.getElementById('optoken-input') as HTMLInputElement | null)?.value ?? '';
  try {
    if (what === 'approve') {
      // The reply holds the node's credentials: only its id and name are kept.
      const c = await s.request<{ node_id: string; node_name: string }>('control.node_join_approve', gated({ request_id: r.request_id }));
      out.textContent = `Approved ${c.node_name} as ${c.node_id}.`;
      addEvent({ ts_ms: Date.now(), kind: 'join', text: `join request of ${c.node_name} approved: node ${c.node_id}` });
    } else {
      await s.request('control.node_join_deny', gated({ request_id: r.request_id }));
      out.textContent = `Denied the join request of ${r.node_name}.`;
      addEvent({ ts_ms: Date.now(), kind: 'join', text: `join request of ${r.node_name} denied` });
    }
  } catch (e) {
    const err = e as RequestError;
    if (err.code === 'operator_auth_failed') {
      const box = document.getElementById('optoken');
      if (box) box.hidden = false;
      out.textContent = `This server needs the operator token for that: enter it above and press ${what === 'approve' ? 'Approve' : 'Deny'} again.`;
    } else out.textContent = `${what} failed: ${err.code}: ${err.message}`;
  }
  await refreshAll().catch(() => undefined);
}

function renderEvents(fresh: boolean): void {
  if (model.events.length === 0) return fill('events', h('li', { class: 'muted' }, 'No events yet.'));
  fill(
    'events',
    ...model.events.map((e, i) =>
      h(
        'li',
        { class: fresh && i === 0 ? `ev-${e.kind} new` : `ev-${e.kind}`, 'data-kind': e.kind },
        h('span', { class: 'muted' }, clock(e.ts_ms)),
        ' ',
        e.kind,
        ': ',
        e.text,
        ' ',
        e.state ? badge(e.state) : null,
      ),
    ),
  );
}

// ---- audit ---------------------------------------------------------------------------------

async function loadAudit(more: boolean): Promise<void> {
  const s = session;
  if (!s || !auditAvailable) return;
  const since = (document.getElementById('audit-since') as HTMLSelectElement).value;
  const agent = (document.getElementById('audit-agent') as HTMLInputElement).value.trim();
  const type = (document.getElementById('audit-type') as HTMLInputElement).value.trim();
  const payload: Record<string, unknown> = { limit: AUDIT_PAGE };
  if (since) payload.since_ms = Date.now() - Number(since);
  if (agent) payload.actor_agent_id = agent;
  if (type) payload.type = type.includes('.') ? type : `control.${type}`;
  if (more && auditCursor) payload.cursor = auditCursor;
  const moreButton = document.getElementById('audit-more') as HTMLButtonElement;
  try {
    const r = await s.request<{ entries: AuditEntry[]; next_cursor: string | null }>('control.audit_list', payload);
    auditCursor = r.next_cursor ?? null;
    moreButton.hidden = auditCursor === null;
    const rows = r.entries.map((e) =>
      h(
        'tr',
        { 'data-type': e.type, 'data-result': e.result },
        h('td', {}, when(e.ts_ms)),
        h('td', {}, e.role),
        h('td', { class: 'mono' }, e.agent_id),
        h('td', { class: 'mono' }, e.type),
        h(
          'td',
          { class: 'mono' },
          Object.entries(e.target ?? {})
            .map(([k, v]) => `${k}=${v}`)
            .join(' '),
        ),
        h('td', {}, e.result === 'ok' ? 'ok' : h('span', { class: 'drift critical' }, e.result)),
      ),
    );
    auditPages = more ? auditPages + 1 : 1;
    const tbody = document.querySelector<HTMLTableSectionElement>('#audit-table tbody');
    if (more && tbody) tbody.append(...rows);
    else
      fill(
        'audit',
        rows.length > 0
          ? table(['Time', 'Role', 'Agent', 'Type', 'Target', 'Result'], rows, { id: 'audit-table' })
          : h('p', { class: 'muted' }, 'No entries match.'),
      );
  } catch (e) {
    const err = e as RequestError;
    if (err.code === 'unknown_type') {
      auditAvailable = false;
      moreButton.hidden = true;
      fill('audit', h('p', { class: 'muted', id: 'audit-unavailable' }, 'audit log not available on this server'));
    } else fill('audit', h('p', { class: 'drift critical' }, `audit_list failed: ${err.code}: ${err.message}`));
  }
}

// ---- session lifecycle ---------------------------------------------------------------------

/** Reads the recent availability transitions the server kept, for a feed that is not empty at start. */
async function seedEvents(s: ControlSession): Promise<void> {
  try {
    const text = await s.readFile('/debug/events.ndjson');
    const lines = text
      .split('\n')
      .filter((l) => l.length > 0)
      .slice(-50);
    for (const l of lines) {
      const e = JSON.parse(l) as AvailabilityEvent;
      model.events.unshift({
        ts_ms: e.ts_ms,
        kind: 'availability',
        state: e.state,
        text: `${projectName(e.project_id)} ${e.mount_path} on ${nodeName(e.node_id)}: ${e.previous_state ?? 'new'} → ${e.state}`,
      });
    }
  } catch {
    /* no history: the feed starts empty */
  }
}

/** Still signed in? A script fetch without a session answers 401. */
async function signedIn(): Promise<boolean> {
  try {
    const r = await fetch('/ui/app.js', { method: 'HEAD', cache: 'no-store', credentials: 'same-origin' });
    return r.status !== 401;
  } catch {
    return true;
  }
}

async function connect(): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      setConn(attempt === 0 ? 'connecting' : 'reconnecting', false);
      const s = await ControlSession.open('dashboard', onPush);
      session = s;
      await s.request('control.debug_subscribe');
      await s.request('control.node_service_watch', {});
      await refreshAll();
      if (model.events.length === 0) await seedEvents(s);
      renderEvents(false);
      await loadAudit(false);
      setConn('live', true);
      await s.closed;
      session = null;
      setConn('disconnected', false);
      attempt = 0;
    } catch {
      session = null;
      if (!(await signedIn())) {
        location.replace('/ui/');
        return;
      }
    }
    await new Promise((r) => setTimeout(r, Math.min(10_000, 500 * 2 ** Math.min(attempt, 5))));
  }
}

function start(): void {
  document.getElementById('audit-filters')?.addEventListener('submit', (ev) => {
    ev.preventDefault();
    auditAvailable = true;
    auditCursor = null;
    void loadAudit(false);
  });
  document.getElementById('audit-more')?.addEventListener('click', () => void loadAudit(true));
  window.setInterval(() => {
    if (session) refreshAll().catch(() => undefined);
  }, POLL_MS);
  window.setInterval(tickLeases, 1000);
  window.setInterval(() => {
    if (session && auditPages === 1) void loadAudit(false);
  }, AUDIT_POLL_MS);
  void connect();
}

start();
