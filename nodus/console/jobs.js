// The Jobs of a project, kept live by a watch: phase, progress, completions, cost so far and age.
//
// The table is redrawn from the watched map (at most every 50 ms), newest first; a row's phase, progress bar and
// cost change in place without a reload. Each row carries data-testid="job-row-NAME" and its phase
// data-testid="job-phase" (the browser tests find them).

import {access} from './api.js';
import {age, errorBox, fill, h, phaseBadge, route, section, usd} from './dom.js';
import {watchMap} from './watch.js';

/** A <progress> bar for status.progress.units, or the completions when the program reports no units. */
export function progressBar(job) {
  const units = job.status?.progress?.units;
  const completions = job.spec?.completions ?? 1;
  if (units && units.total) {
    const completed = Math.min(units.completed ?? 0, units.total);
    return h('span', {class: 'progress'},
      h('progress', {max: units.total, value: completed, 'aria-label': `${completed} of ${units.total} units`}),
      ` ${completed}/${units.total}`);
  }
  if (units && units.completed !== undefined && units.completed !== null) return `${units.completed} units`;
  const succeeded = job.status?.succeeded ?? 0;
  return h('span', {class: 'progress'},
    h('progress', {max: completions, value: succeeded, 'aria-label': `${succeeded} of ${completions} completions`}),
    ` ${succeeded}/${completions}`);
}

function row(project, job) {
  const name = job.metadata.name;
  const phase = job.status?.phase || 'Pending';
  return h('tr', {'data-testid': `job-row-${name}`},
    h('td', {}, h('a', {href: route('projects', project, 'jobs', name)}, name)),
    h('td', {}, phaseBadge(phase, {'data-testid': 'job-phase'}),
      job.status?.reason && job.status.reason !== phase ? h('span', {class: 'reason'}, ` ${job.status.reason}`) : null),
    h('td', {}, progressBar(job)),
    h('td', {class: 'num'}, `${job.status?.succeeded ?? 0}/${job.spec?.completions ?? 1}`),
    h('td', {class: 'num'}, usd(job.status?.cost?.totalUSD)),
    h('td', {}, job.status?.placement?.offering || job.spec?.placement?.pool || '—'),
    h('td', {class: 'num'}, age(job.metadata.creationTimestamp)));
}

export async function render(main, {project}, {signal}) {
  document.title = `Jobs · ${project} · Nodus`;
  const state = h('span', {class: 'live', role: 'status'}, 'connecting…');
  const body = h('tbody', {});
  const empty = h('p', {class: 'muted'}, 'No Jobs yet.');
  const allowed = await access(project);
  fill(main,
    h('div', {class: 'title'}, h('h1', {}, 'Jobs in ', h('span', {class: 'mono'}, project)), state,
      allowed['jobs/create'] ? h('a', {class: 'button', href: route('projects', project, 'estimate')}, 'New Job') : null),
    section('Jobs',
      h('table', {class: 'jobs'},
        h('thead', {}, h('tr', {}, ['Name', 'Phase', 'Progress', 'Completions', 'Cost so far', 'Offering', 'Age']
          .map((title, i) => h('th', {scope: 'col', class: [3, 4, 6].includes(i) ? 'num' : null}, title)))),
        body),
      empty));
  const draw = (items) => {
    const jobs = [...items.values()].sort((a, b) =>
      (b.metadata.creationTimestamp || '').localeCompare(a.metadata.creationTimestamp || '')
      || a.metadata.name.localeCompare(b.metadata.name));
    fill(body, jobs.map((job) => row(project, job)));
    empty.hidden = jobs.length > 0;
  };
  const items = watchMap(`namespaces/${encodeURIComponent(project)}/jobs`, {}, draw, signal, (text, error) => {
    if (error) {
      fill(main, h('h1', {}, 'Jobs in ', h('span', {class: 'mono'}, project)), errorBox(error),
        h('p', {}, h('a', {href: route('projects')}, 'See the projects you belong to.')));
      return;
    }
    state.textContent = text === 'live' ? '● live' : 'reconnecting…';
    state.title = text;
    state.className = text === 'live' ? 'live on' : 'live off';
  });
  // Ages move with the clock, not with events.
  const ticker = setInterval(() => draw(items), 10000);
  signal.addEventListener('abort', () => clearInterval(ticker), {once: true});
}
