// The offerings of the price book: what each host type costs and how many the providers can run.
//
// Read from GET /apis/nodus.dev/v1/offerings (cluster-scoped, any signed-in user). A filter narrows the rows
// by any text in them (accelerator, region, provider); the table is sorted by hourly rate, cheapest first.

import {getJSON} from './api.js';
import {fill, h, section, usd} from './dom.js';

function row(offering) {
  const spec = offering.spec || {};
  const perGPU = spec.gpus ? Number(spec.rateUSDPerHour) / spec.gpus : null;
  const capacity = offering.status?.capacity;
  return [
    h('span', {class: 'mono'}, offering.metadata.name),
    spec.accelerator || (spec.gpus ? '?' : 'CPU only'),
    spec.gpus ? `${spec.gpus}${spec.gpuMemory ? ` × ${spec.gpuMemory}` : ''}` : '0',
    `${spec.vcpu} vCPU, ${spec.memory}`,
    `${spec.provider} ${spec.region} (${spec.regionClass})`,
    spec.interruptible ? 'interruptible' : 'on-demand',
    `${usd(spec.rateUSDPerHour)}/h`,
    perGPU === null ? '—' : `${usd(perGPU)}/h`,
    capacity === undefined || capacity === null ? 'unlimited' : String(capacity),
    spec.boot ? `${spec.boot.p50} / ${spec.boot.p90}` : '—',
  ];
}

const HEADERS = ['Offering', 'Accelerator', 'GPUs', 'Host', 'Provider and region', 'Capacity type', 'Rate',
  'Per GPU', 'Hosts available', 'Boot P50 / P90'];

export async function render(main, _params, {signal}) {
  document.title = 'Offerings · Nodus';
  const list = await getJSON('/apis/nodus.dev/v1/offerings', {signal});
  const items = (list.items || []).sort((a, b) =>
    Number(a.spec?.rateUSDPerHour) - Number(b.spec?.rateUSDPerHour) || a.metadata.name.localeCompare(b.metadata.name));
  const filter = h('input', {id: 'offering-filter', type: 'search', placeholder: 'h100 eu interruptible'});
  const body = h('tbody', {});
  const count = h('p', {class: 'muted', role: 'status'});
  const draw = () => {
    const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    const rows = items.map(row).filter((cells) => {
      const text = cells.map((cell) => (cell instanceof Node ? cell.textContent : String(cell))).join(' ').toLowerCase();
      return words.every((word) => text.includes(word));
    });
    fill(body, rows.map((cells) => h('tr', {}, cells.map((cell) => h('td', {}, cell)))));
    count.textContent = `${rows.length} of ${items.length} offerings`;
  };
  filter.addEventListener('input', draw);
  fill(main, h('h1', {}, 'Offerings'),
    h('p', {}, 'Host types the providers offer, from the price book ', h('span', {class: 'mono'},
      items[0]?.spec?.pricebookVersion || ''), ', cheapest first. A Job is placed on one of them (or on a Pool).'),
    h('div', {class: 'controls'}, h('label', {for: 'offering-filter'}, 'Filter'), filter), count,
    section('Prices and capacity', h('table', {class: 'offerings'},
      h('thead', {}, h('tr', {}, HEADERS.map((title) => h('th', {scope: 'col'}, title)))), body)));
  draw();
}
