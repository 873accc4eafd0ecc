/**
 * The topology picture: nodes on the left, each project's mount paths on the right, one line
 * per configured mount (solid: the selected one of its path; dashed: a standby), coloured by
 * the mount's state; every box says its state in words too.
 */
import { s } from './dom.js';
import type { NodeInfo, ProjectSummary, WorkspaceStatus } from './types.js';

const ROW = 34;
const BOX_H = 26;
const LEFT_X = 10;
const BOX_W = 250;
const RIGHT_X = 560;
const WIDTH = RIGHT_X + BOX_W + 10;

/** Builds the SVG for the fleet as known now. */
export function topologySvg(nodes: NodeInfo[], projects: ProjectSummary[], status: Map<string, WorkspaceStatus>): SVGElement {
  const targets: Array<{ key: string; label: string; state: string; project_id: string; mount_path: string }> = [];
  for (const p of projects) {
    const st = status.get(p.project_id);
    if (!st) continue;
    for (const m of st.mounts)
      targets.push({
        key: `${p.project_id}\0${m.mount_path}`,
        label: `${p.name} ${m.mount_path}`,
        state: m.state,
        project_id: p.project_id,
        mount_path: m.mount_path,
      });
  }
  const nodeIds = new Set(nodes.map((n) => n.node_id));
  // Mounts on nodes that no longer exist: a "missing" box on the left.
  const missing = new Map<string, string>();
  for (const st of status.values()) for (const m of st.desired_mounts) if (!nodeIds.has(m.node_id)) missing.set(m.node_id, m.node_id);
  const left = [
    ...nodes.map((n) => ({ id: n.node_id, label: n.node_name, state: n.state })),
    ...[...missing.keys()].map((id) => ({ id, label: id, state: 'missing' })),
  ];
  const rows = Math.max(left.length, targets.length, 1);
  const height = rows * ROW + 20;
  const svg = s('svg', { class: 'topology', viewBox: `0 0 ${WIDTH} ${height}`, role: 'img', 'aria-label': 'Topology: nodes and the mount paths they serve' });
  const yOf = (i: number) => 10 + i * ROW;
  const leftY = new Map(left.map((n, i) => [n.id, yOf(i)]));
  const rightY = new Map(targets.map((t, i) => [t.key, yOf(i)]));
  for (const st of status.values()) {
    const selected = new Map(st.mounts.map((m) => [m.mount_path, m]));
    for (const m of st.desired_mounts) {
      const y1 = leftY.get(m.node_id);
      const y2 = rightY.get(`${st.project_id}\0${m.mount_path}`);
      if (y1 === undefined || y2 === undefined) continue;
      const sel = selected.get(m.mount_path);
      const isSelected = sel?.node_id === m.node_id && sel.export_name === m.export_name;
      const x1 = LEFT_X + BOX_W;
      const x2 = RIGHT_X;
      const path = s(
        'path',
        {
          class: `edge ${m.state}${isSelected ? '' : ' standby'}`,
          d: `M${x1},${y1 + BOX_H / 2} C${(x1 + x2) / 2},${y1 + BOX_H / 2} ${(x1 + x2) / 2},${y2 + BOX_H / 2} ${x2},${y2 + BOX_H / 2}`,
          'data-node': m.node_id,
          'data-mount': m.mount_path,
          'data-state': m.state,
        },
        s('title', {}, `${m.node_name ?? m.node_id}:${m.export_name} -> ${m.mount_path}: ${m.state}${isSelected ? ' (selected)' : ' (standby)'}`),
      );
      svg.append(path);
    }
  }
  left.forEach((n) => svg.append(box(LEFT_X, leftY.get(n.id)!, n.label, n.state, 'node', n.id)));
  targets.forEach((t) => svg.append(box(RIGHT_X, rightY.get(t.key)!, t.label, t.state, 'mount', t.key.replace('\0', ' '))));
  return svg;
}

function box(x: number, y: number, label: string, state: string, kind: string, id: string): SVGElement {
  const shown = label.length > 26 ? `${label.slice(0, 25)}…` : label;
  return s(
    'g',
    { class: `t-${kind}`, 'data-id': id, 'data-state': state },
    s('rect', { class: `box ${state}`, x, y, width: BOX_W, height: BOX_H, rx: 5 }),
    s('text', { x: x + 8, y: y + 17 }, shown),
    s('text', { x: x + BOX_W - 8, y: y + 17, 'text-anchor': 'end', class: `st-${state}` }, state),
    s('title', {}, `${label}: ${state}`),
  );
}
