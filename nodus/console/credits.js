// A project's credits and statement: the ledger's live figures and the spend per day, plotted.
//
// Credits come from GET .../projects/P/credits (balance, held, available); the spend from
// GET .../namespaces/P/ledger/spend?days=N (charges per UTC day, aggregated by the server, and the month to
// date). Members see aggregates only; the line-by-line statement is an administrator's
// (`nodus billing statement`).

import {getJSON} from './api.js';
import {epoch, plot} from './charts.js';
import {apiPath, facts, fill, h, section, table, usd} from './dom.js';

const PERIODS = [7, 30, 90, 366];

export async function render(main, {project}, {signal}) {
  document.title = `Credits · ${project} · Nodus`;
  const period = h('select', {id: 'spend-days'}, PERIODS.map((days) => h('option', {value: String(days)}, `${days} days`)));
  period.value = '30';
  const credits = h('div', {});
  const spend = h('div', {});
  fill(main, h('h1', {}, 'Credits of ', h('span', {class: 'mono'}, project)),
    section('Credit', credits),
    section('Spend per day', h('div', {class: 'controls'}, h('label', {for: 'spend-days'}, 'Period'), period), spend));
  const live = await getJSON(`/apis/nodus.dev/v1/projects/${encodeURIComponent(project)}/credits`, {signal});
  fill(credits, facts([['Available', usd(live.availableUSD)], ['Balance', usd(live.balanceUSD)],
    ['Held for running work', usd(live.heldUSD)]]));
  const draw = async () => {
    const answer = await getJSON(`${apiPath(project, 'ledger/spend')}?days=${period.value}`, {signal});
    const days = answer.days || [];
    const total = days.reduce((sum, day) => sum + Number(day.chargedUSD), 0);
    fill(spend,
      facts([['This month', usd(answer.monthToDateUSD)], [`Last ${period.value} days`, usd(total)]]),
      plot({caption: `Charged per UTC day, last ${period.value} days`, yLabel: 'USD', bars: true,
        x: days.map((day) => epoch(`${day.date}T00:00:00Z`)),
        series: [{label: 'charged (USD)', values: days.map((day) => Number(day.chargedUSD))}]}),
      h('details', {}, h('summary', {}, 'Statement by day'),
        table(null, ['Day (UTC)', 'Charged'], [...days].reverse().map((day) => [day.date, usd(day.chargedUSD)]))));
  };
  period.addEventListener('change', () => draw().catch((error) => fill(spend, h('p', {class: 'error'}, error.message))));
  await draw();
}
