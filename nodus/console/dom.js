// DOM building and formatting shared by every page.
//
// Everything the API returns is shown as text: h() turns strings into text nodes and attributes are set with
// setAttribute, so a Job name, a log line or a message can never become markup. Nothing here reads the
// network; pages pass in what they fetched.

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(element, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') element.addEventListener(key.slice(2), value);
    else if (key === 'text') element.textContent = String(value);
    else element.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** An HTML element: h('a', {href: '#/x', class: 'c'}, 'text', otherNode, [more]). */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element, as h(). */
export function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

/** Replace everything inside `element` with `children`. */
export function fill(element, ...children) {
  element.replaceChildren();
  return build(element, {}, children);
}

/** A table with a header row; each row is an array of cells (nodes or text) or {attrs, cells}. */
export function table(caption, headers, rows, attrs = {}) {
  return h('table', attrs,
    caption ? h('caption', {}, caption) : null,
    h('thead', {}, h('tr', {}, headers.map((title) => h('th', {scope: 'col'}, title)))),
    h('tbody', {}, rows.map((row) => Array.isArray(row)
      ? h('tr', {}, row.map((cell) => h('td', {}, cell)))
      : h('tr', row.attrs, row.cells.map((cell) => h('td', {}, cell))))));
}

/** A definition list from [term, value] pairs; pairs whose value is empty are left out. */
export function facts(pairs) {
  return h('dl', {class: 'facts'}, pairs
    .filter(([, value]) => value !== undefined && value !== null && value !== '')
    .map(([term, value]) => [h('dt', {}, term), h('dd', {}, value)]));
}

/** A section with a heading. */
export function section(title, ...children) {
  const id = `s-${title.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;
  return h('section', {class: 'panel', 'aria-labelledby': id}, h('h2', {id}, title), children);
}

/** An error box for an APIError (or any Error): the message, and the fix when the server gave one. */
export function errorBox(error) {
  return h('div', {class: 'error', role: 'alert'},
    h('p', {}, error.message || String(error)),
    error.fix ? h('p', {class: 'fix'}, error.fix) : null);
}

const PHASE_CLASS = {
  Pending: 'waiting', Queued: 'waiting', Waiting: 'waiting', Provisioning: 'starting', Starting: 'starting',
  Running: 'running', Recovering: 'warning', Suspending: 'warning', Suspended: 'paused',
  Succeeded: 'good', Failed: 'bad', Lost: 'bad', Cancelled: 'muted', Stopped: 'muted', Skipped: 'muted',
  Active: 'good', Terminating: 'warning',
};

/** The CSS class (phase-good, phase-bad, ...) that colours a phase of a Job, Attempt, stage or Pipeline. */
export function phaseClass(phase) {
  return `phase-${PHASE_CLASS[phase] || 'waiting'}`;
}

/** A coloured phase badge. */
export function phaseBadge(phase, attrs = {}) {
  return h('span', {...attrs, class: `badge ${phaseClass(phase)}`}, phase || 'Pending');
}

export const FINISHED = new Set(['Succeeded', 'Failed', 'Cancelled']);

/** A decimal USD string as $1.23 (four decimals below a dollar); an em dash when absent. */
export function usd(value) {
  if (value === undefined || value === null || value === '') return '—';
  const amount = Number(value);
  if (!Number.isFinite(amount)) return String(value);
  const digits = Math.abs(amount) >= 1 || amount === 0 ? 2 : 4;
  return `${amount < 0 ? '-' : ''}$${Math.abs(amount).toFixed(digits)}`;
}

/** Bytes as 1.5 MiB. */
export function bytes(value) {
  if (value === undefined || value === null) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let amount = Number(value);
  let unit = 0;
  while (amount >= 1024 && unit < units.length - 1) { amount /= 1024; unit += 1; }
  return `${unit ? amount.toFixed(1) : amount} ${units[unit]}`;
}

/** Seconds as 1h 2m, 3m 4s or 5s. */
export function duration(seconds) {
  if (!Number.isFinite(seconds) || seconds < 0) return '—';
  const s = Math.round(seconds);
  if (s >= 86400) return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
  if (s >= 3600) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${s}s`;
}

/** How long ago an RFC 3339 time was, as kubectl's AGE column. */
export function age(time, now = Date.now()) {
  if (!time) return '—';
  return duration((now - Date.parse(time)) / 1000);
}

/** An RFC 3339 time in the reader's local time, with a machine-readable <time> element. */
export function when(time) {
  if (!time) return '—';
  const date = new Date(time);
  if (Number.isNaN(date.getTime())) return String(time);
  return h('time', {datetime: time, title: time}, date.toLocaleString());
}

/** The API path of a project's collection: apiPath('p', 'jobs', 'n') = /apis/nodus.dev/v1/namespaces/p/jobs/n. */
export function apiPath(project, plural, name, sub) {
  const parts = ['/apis/nodus.dev/v1/namespaces', encodeURIComponent(project), plural];
  if (name !== undefined) parts.push(encodeURIComponent(name));
  if (sub) parts.push(sub);
  return parts.join('/');
}

/** A console link: link('#/projects', p, 'jobs', name) with each part escaped. */
export function route(...parts) {
  return `#/${parts.map((part) => encodeURIComponent(part)).join('/')}`;
}
