// The projects the reader can see: credit available, spend this month and how many Jobs run now.
//
// Projects are listed from GET /apis/nodus.dev/v1/projects (the server lists only those the reader may read).
// For each, three reads run side by side: the ledger's live credits (.../projects/P/credits), the month's
// spend (.../namespaces/P/ledger/spend?days=1: monthToDateUSD) and the Running Jobs (fieldSelector
// status.phase=Running). A figure the reader may not see, or that fails, shows its error on its own.

import {getJSON} from './api.js';
import {apiPath, fill, h, phaseBadge, route, section, usd} from './dom.js';

async function figure(cell, load) {
  try {
    fill(cell, await load());
  } catch (error) {
    fill(cell, h('span', {class: 'muted', title: error.fix || ''}, error.message));
  }
}

export async function render(main, _params, {signal}) {
  document.title = 'Projects · Nodus';
  const list = await getJSON('/apis/nodus.dev/v1/projects', {signal});
  const projects = (list.items || []).sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  const rows = projects.map((project) => {
    const name = project.metadata.name;
    const cells = {credit: h('td', {class: 'num'}, '…'), spend: h('td', {class: 'num'}, '…'), running: h('td', {class: 'num'}, '…')};
    figure(cells.credit, async () => {
      const credits = await getJSON(`/apis/nodus.dev/v1/projects/${encodeURIComponent(name)}/credits`, {signal});
      return `${usd(credits.availableUSD)} available of ${usd(credits.balanceUSD)}`;
    });
    figure(cells.spend, async () => usd((await getJSON(`${apiPath(name, 'ledger/spend')}?days=1`, {signal})).monthToDateUSD));
    figure(cells.running, async () => {
      const running = await getJSON(`${apiPath(name, 'jobs')}?fieldSelector=${encodeURIComponent('status.phase=Running')}`, {signal});
      return String((running.items || []).length);
    });
    return h('tr', {'data-testid': `project-row-${name}`},
      h('td', {}, h('a', {href: route('projects', name, 'jobs')}, name),
        project.spec?.displayName ? h('span', {class: 'muted'}, ` ${project.spec.displayName}`) : null),
      h('td', {}, phaseBadge(project.status?.phase || 'Active')),
      cells.credit, cells.spend, cells.running,
      h('td', {}, h('a', {href: route('projects', name, 'credits')}, 'Credits and statement')));
  });
  fill(main, h('h1', {}, 'Projects'),
    section('Your projects', projects.length
      ? h('table', {}, h('thead', {}, h('tr', {}, ['Project', 'Phase', 'Credit', 'Spend this month', 'Running Jobs', '']
        .map((title, i) => h('th', {scope: 'col', class: i >= 2 && i <= 4 ? 'num' : null},
          title || h('span', {class: 'visually-hidden'}, 'Links'))))),
      h('tbody', {}, rows))
      : h('p', {class: 'muted'}, 'You are not a member of any project yet: an administrator adds you (docs/auth.md).')));
}
