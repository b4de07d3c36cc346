// A Job's timeline: its phase changes and every Attempt on one time axis.
//
// The top row marks the Job's own moments (created, first Running, finished, and each condition's last
// transition). Below, one row per Attempt (index-number): a light bar while it was being provisioned and
// started, a bar coloured by its phase while it ran, labelled with the node, offering and reason. A lost
// attempt (preempted, node lost) ends with a ✕ marker; an attempt that restored a checkpoint starts with a ↺
// marker. The same facts are in the attempts table below it, for reading without the picture.

import {FINISHED, h, phaseClass, svg} from './dom.js';

const WIDTH = 1000;
const LABEL = 150;
const ROW = 34;

function ms(time) {
  const value = Date.parse(time || '');
  return Number.isNaN(value) ? null : value;
}

function attemptName(attempt) {
  const spec = attempt.spec || {};
  const rank = spec.rank !== undefined && spec.rank !== null ? ` r${spec.rank}` : '';
  return `#${spec.index ?? 0}-${spec.number ?? 1}${rank}`;
}

/** What marks an attempt's end: 'preempted', 'lost' or null. */
export function lossOf(attempt) {
  const status = attempt.status || {};
  if (status.reason === 'Preempted') return 'preempted';
  if (status.phase === 'Lost') return 'lost';
  return null;
}

/** An SVG timeline of `job` and its `attempts` (Attempt objects) at time `now` (ms). */
export function timeline(job, attempts, now = Date.now()) {
  const start = ms(job.metadata.creationTimestamp) ?? now;
  const finished = FINISHED.has(job.status?.phase);
  const end = Math.max(start + 1000, (finished && ms(job.status?.completionTime)) || now);
  const scale = (t) => LABEL + ((Math.min(Math.max(t, start), end) - start) / (end - start)) * (WIDTH - LABEL - 10);
  const sorted = [...attempts].sort((a, b) =>
    (a.spec.index - b.spec.index) || (a.spec.number - b.spec.number) || ((a.spec.rank ?? 0) - (b.spec.rank ?? 0)));
  const height = 50 + ROW * (sorted.length + 1);
  const children = [];
  // The axis: five ticks, labelled with the local time.
  for (let i = 0; i <= 4; i += 1) {
    const t = start + ((end - start) * i) / 4;
    const x = scale(t);
    children.push(svg('line', {x1: x, x2: x, y1: 20, y2: height - 4, class: 'grid'}),
      svg('text', {x, y: 14, class: 'tick', 'text-anchor': i === 0 ? 'start' : i === 4 ? 'end' : 'middle'},
        new Date(t).toLocaleTimeString()));
  }
  // The Job's row.
  const jobY = 30;
  children.push(svg('text', {x: 4, y: jobY + 13, class: 'label'}, 'Job'),
    svg('rect', {x: scale(start), y: jobY + 6, width: Math.max(1, scale(end) - scale(start)), height: 6,
      class: `bar ${phaseClass(job.status?.phase)}`}));
  const marks = [['created', job.metadata.creationTimestamp], ['running', job.status?.startTime],
    [job.status?.phase || 'finished', finished ? job.status?.completionTime : null]];
  for (const condition of job.status?.conditions || []) {
    marks.push([`${condition.type}=${condition.status}${condition.reason ? ` (${condition.reason})` : ''}`,
      condition.lastTransitionTime]);
  }
  for (const [label, time] of marks) {
    const t = ms(time);
    if (t === null) continue;
    children.push(svg('circle', {cx: scale(t), cy: jobY + 9, r: 5, class: 'mark'},
      svg('title', {}, `${label}: ${time}`)));
  }
  // One row per attempt.
  sorted.forEach((attempt, i) => {
    const y = jobY + ROW * (i + 1);
    const status = attempt.status || {};
    const spec = attempt.spec || {};
    const begin = ms(status.scheduledTime) ?? ms(attempt.metadata.creationTimestamp) ?? start;
    const running = ms(status.startTime);
    const stop = ms(status.finishTime) ?? now;
    const where = [spec.node || status.placement?.node, spec.offering || status.placement?.offering]
      .filter(Boolean).join(' · ');
    const text = `${attemptName(attempt)} ${status.phase || 'Pending'}${status.reason ? ` (${status.reason})` : ''}`
      + `${where ? ` on ${where}` : ''}`;
    children.push(svg('text', {x: 4, y: y + 13, class: 'label'}, attemptName(attempt)));
    const group = svg('g', {}, svg('title', {}, text));
    group.append(svg('rect', {x: scale(begin), y: y + 4, width: Math.max(2, scale(running ?? stop) - scale(begin)),
      height: 12, class: 'bar phase-starting faint'}));
    if (running !== null) {
      group.append(svg('rect', {x: scale(running), y: y + 4, width: Math.max(2, scale(stop) - scale(running)),
        height: 12, class: `bar ${phaseClass(status.phase)}`}));
    }
    if (spec.restore) {
      group.append(svg('text', {x: scale(begin) - 2, y: y + 15, class: 'marker', 'text-anchor': 'end'}, '↺',
        svg('title', {}, `restored checkpoint ${spec.restore.seq}`)));
    }
    const loss = lossOf(attempt);
    if (loss) {
      group.append(svg('text', {x: scale(stop) + 2, y: y + 15, class: 'marker bad'}, '✕',
        svg('title', {}, `${loss}: ${status.message || status.reason || ''}`)));
    }
    // The node, offering and reason under the bar, from its start (kept inside the picture).
    group.append(svg('text', {x: Math.min(scale(begin), WIDTH - 320), y: y + 28, class: 'note'},
      `${where}${status.reason ? ` · ${status.reason}` : ''}`));
    children.push(group);
  });
  return h('figure', {class: 'timeline'},
    h('figcaption', {}, `Phase timeline: the Job and its ${sorted.length} attempt${sorted.length === 1 ? '' : 's'}`),
    svg('svg', {viewBox: `0 0 ${WIDTH} ${height}`, role: 'img',
      'aria-label': `Timeline of ${job.metadata.name} from creation to ${finished ? 'completion' : 'now'}; `
        + 'the attempts table below lists the same attempts'}, children));
}

/** Rows for the attempts table: the same facts as the timeline, as text. */
export function attemptRows(attempts) {
  return [...attempts]
    .sort((a, b) => (a.spec.index - b.spec.index) || (a.spec.number - b.spec.number) || ((a.spec.rank ?? 0) - (b.spec.rank ?? 0)))
    .map((attempt) => {
      const status = attempt.status || {};
      const spec = attempt.spec || {};
      const loss = lossOf(attempt);
      return [
        h('span', {class: 'mono'}, attempt.metadata.name),
        h('span', {class: `badge ${phaseClass(status.phase)}`}, status.phase || 'Pending'),
        spec.node || status.placement?.node || '—',
        spec.offering || status.placement?.offering || '—',
        status.startTime ? new Date(status.startTime).toLocaleTimeString() : '—',
        status.finishTime ? new Date(status.finishTime).toLocaleTimeString() : '—',
        loss ? `✕ ${loss}${status.reason && status.reason.toLowerCase() !== loss ? ` (${status.reason})` : ''}` : status.reason || '',
        spec.restore ? `↺ checkpoint ${spec.restore.seq}` : '—',
      ];
    });
}
