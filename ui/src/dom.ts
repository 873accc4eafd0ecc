/**
 * DOM helpers of the dashboard: elements are built with text nodes only (never HTML from
 * data), so nothing a node or project name holds can run in the page.
 */

type Child = Node | string | number | null | undefined | false;

/** Creates `<tag>` with attributes (string values; `class` for the class list) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | undefined> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined) el.setAttribute(k, v);
  append(el, children);
  return el;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

/** Creates an SVG element with attributes and children. */
export function s(tag: string, attrs: Record<string, string | number> = {}, ...children: Child[]): SVGElement {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  append(el, children);
  return el;
}

function append(el: Element, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
}

/** Replaces the children of the element with id `id`. */
export function fill(id: string, ...children: Child[]): void {
  const el = document.getElementById(id);
  if (!el) return;
  el.replaceChildren();
  append(el, children);
}

/** A state badge: the state word, coloured by class (`state-online`, ...): never colour alone. */
export function badge(state: string): HTMLElement {
  return h('span', { class: `state state-${state}`, 'data-state': state }, state);
}

/** A table with a header row. */
export function table(headers: string[], rows: HTMLTableRowElement[], attrs: Record<string, string> = {}): HTMLTableElement {
  return h('table', attrs, h('thead', {}, h('tr', {}, ...headers.map((x) => h('th', {}, x)))), h('tbody', {}, ...rows));
}

/** Local time of day, `HH:MM:SS`. */
export function clock(ms: number): string {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

/** Local date and time. */
export function when(ms: number): string {
  return new Date(ms).toLocaleString([], { hour12: false });
}

/** A duration in words: `42 s`, `3 min 5 s`, `2 h 10 min`. */
export function duration(ms: number): string {
  const sec = Math.max(0, Math.round(ms / 1000));
  if (sec < 60) return `${sec} s`;
  if (sec < 3600) return `${Math.floor(sec / 60)} min ${sec % 60} s`;
  if (sec < 86400) return `${Math.floor(sec / 3600)} h ${Math.floor((sec % 3600) / 60)} min`;
  return `${Math.floor(sec / 86400)} d ${Math.floor((sec % 86400) / 3600)} h`;
}
