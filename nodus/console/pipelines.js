// Pipelines: the list, and one Pipeline's stages as a graph coloured by phase.
//
// The graph is drawn from spec.stages: a stage's upstream stages are its dependsOn and the stage of each
// fromStage input (as the server's stage graph reads them, docs/pipelines.md). Stages are laid out in columns by
// their longest path from a stage with no upstream, edges run left to right (an edge that skips a column bends
// below the boxes, so it never runs through a stage it does not touch), and each box links to the stage's
// Job once it exists. Phases come from status.stages (the latest run of each stage). Both pages watch, so phases
// change in place.

import {errorBox, facts, fill, h, phaseBadge, phaseClass, route, section, svg, table, usd, when} from './dom.js';
import {watchMap} from './watch.js';

const BOX_W = 170;
const BOX_H = 52;
const GAP_X = 70;
const GAP_Y = 24;
const BEND = 44;

/** The upstream stage names of a stage (dependsOn and fromStage inputs), without duplicates. */
export function upstreamOf(stage) {
  const from = (stage.template?.spec?.inputs || []).map((input) => input.fromStage?.stage).filter(Boolean);
  return [...new Set([...(stage.dependsOn || []), ...from])];
}

/** Column (longest path from a root) of every stage; a cycle or unknown name is placed in column 0. */
export function columns(stages) {
  const byName = new Map(stages.map((stage) => [stage.name, stage]));
  const depth = new Map();
  const visit = (name, trail) => {
    if (depth.has(name)) return depth.get(name);
    if (trail.has(name) || !byName.has(name)) return 0;
    trail.add(name);
    const ups = upstreamOf(byName.get(name)).filter((up) => byName.has(up));
    const value = ups.length ? 1 + Math.max(...ups.map((up) => visit(up, trail))) : 0;
    trail.delete(name);
    depth.set(name, value);
    return value;
  };
  for (const stage of stages) visit(stage.name, new Set());
  return depth;
}

function latestStatus(pipeline) {
  const latest = new Map();
  for (const stage of pipeline.status?.stages || []) {
    const known = latest.get(stage.name);
    if (!known || (stage.run ?? 1) >= (known.run ?? 1)) latest.set(stage.name, stage);
  }
  return latest;
}

/** The stage graph of `pipeline` as an SVG figure. */
export function graph(project, pipeline) {
  const stages = pipeline.spec?.stages || [];
  const depth = columns(stages);
  const status = latestStatus(pipeline);
  const placed = new Map();
  const perColumn = [];
  for (const stage of stages) {
    const column = depth.get(stage.name) ?? 0;
    const row = perColumn[column] ?? 0;
    perColumn[column] = row + 1;
    placed.set(stage.name, {x: 10 + column * (BOX_W + GAP_X), y: 10 + row * (BOX_H + GAP_Y)});
  }
  const width = 20 + Math.max(1, perColumn.length) * (BOX_W + GAP_X) - GAP_X;
  const height = 20 + Math.max(1, ...perColumn) * (BOX_H + GAP_Y) - GAP_Y + BEND;
  const edges = [];
  for (const stage of stages) {
    const to = placed.get(stage.name);
    for (const up of upstreamOf(stage)) {
      const from = placed.get(up);
      if (!from) continue;
      const skips = (depth.get(stage.name) ?? 0) - (depth.get(up) ?? 0) > 1;
      if (skips) {
        const sx = from.x + BOX_W / 2;
        const tx = to.x + BOX_W / 2;
        const sy = from.y + BOX_H;
        const ty = to.y + BOX_H;
        edges.push(svg('path', {d: `M${sx},${sy} C${sx},${sy + BEND} ${tx},${ty + BEND} ${tx},${ty + 6}`, class: 'edge',
          'marker-end': 'url(#arrow)'}, svg('title', {}, `${up} → ${stage.name}`)));
        continue;
      }
      const x1 = from.x + BOX_W;
      const y1 = from.y + BOX_H / 2;
      const x2 = to.x;
      const y2 = to.y + BOX_H / 2;
      const mid = (x1 + x2) / 2;
      edges.push(svg('path', {d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2 - 6},${y2}`, class: 'edge',
        'marker-end': 'url(#arrow)'}, svg('title', {}, `${up} → ${stage.name}`)));
    }
  }
  const boxes = stages.map((stage) => {
    const {x, y} = placed.get(stage.name);
    const state = status.get(stage.name);
    const phase = state?.phase || 'Waiting';
    const box = svg('g', {class: `stage ${phaseClass(phase)}`},
      svg('title', {}, `${stage.name}: ${phase}${state?.message ? ` — ${state.message}` : ''}`),
      svg('rect', {x, y, width: BOX_W, height: BOX_H, rx: 6}),
      svg('text', {x: x + 10, y: y + 21, class: 'name'}, stage.name),
      svg('text', {x: x + 10, y: y + 40, class: 'phase'}, `${phase}${state?.reused ? ' (reused)' : ''}`));
    return state?.job ? svg('a', {href: route('projects', project, 'jobs', state.job)}, box) : box;
  });
  return h('figure', {class: 'graph'},
    h('figcaption', {}, `Stages of ${pipeline.metadata.name}, left to right in the order they can run`),
    // A group, not an image: its stage boxes are links a keyboard reaches.
    svg('svg', {viewBox: `0 0 ${width} ${height}`, width, height, role: 'group',
      'aria-label': `Graph of ${stages.length} stages; the stages table lists them with their phases`},
    svg('defs', {}, svg('marker', {id: 'arrow', viewBox: '0 0 10 10', refX: '8', refY: '5', markerWidth: '7',
      markerHeight: '7', orient: 'auto-start-reverse'}, svg('path', {d: 'M0,0 L10,5 L0,10 z', class: 'arrow'}))),
    edges, boxes));
}

export const list = {
  async render(main, {project}, {signal}) {
    document.title = `Pipelines · ${project} · Nodus`;
    const body = h('tbody', {});
    const empty = h('p', {class: 'muted'}, 'No Pipelines yet (docs/pipelines.md).');
    fill(main, h('h1', {}, 'Pipelines in ', h('span', {class: 'mono'}, project)),
      section('Pipelines', h('table', {}, h('thead', {}, h('tr', {},
        ['Name', 'Phase', 'Stages', 'Run', 'Cost', 'Estimate P50 / P90'].map((title) => h('th', {scope: 'col'}, title)))), body), empty));
    watchMap(`namespaces/${encodeURIComponent(project)}/pipelines`, {}, (items) => {
      const pipelines = [...items.values()].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
      fill(body, pipelines.map((p) => {
        const latest = latestStatus(p);
        const done = [...latest.values()].filter((s) => s.phase === 'Succeeded').length;
        const estimate = p.status?.estimate?.costUSD;
        return h('tr', {'data-testid': `pipeline-row-${p.metadata.name}`},
          h('td', {}, h('a', {href: route('projects', project, 'pipelines', p.metadata.name)}, p.metadata.name)),
          h('td', {}, phaseBadge(p.status?.phase || 'Pending')),
          h('td', {}, `${done}/${(p.spec?.stages || []).length} succeeded`),
          h('td', {class: 'num'}, String(p.status?.run ?? 1)),
          h('td', {class: 'num'}, usd(p.status?.costUSD)),
          h('td', {class: 'num'}, estimate ? `${usd(estimate.p50)} / ${usd(estimate.p90)}` : '—'));
      }));
      empty.hidden = pipelines.length > 0;
    }, signal);
  },
};

export const detail = {
  async render(main, {project, name}, {signal}) {
    document.title = `${name} · Pipelines · Nodus`;
    const holder = h('div', {});
    fill(main, h('p', {class: 'crumbs'}, h('a', {href: route('projects', project, 'pipelines')}, `Pipelines in ${project}`)),
      holder);
    watchMap(`namespaces/${encodeURIComponent(project)}/pipelines`, {fieldSelector: `metadata.name=${name}`}, (items) => {
      const pipeline = items.get(name);
      if (!pipeline) {
        fill(holder, h('h1', {}, name), h('p', {class: 'muted'}, `No Pipeline ${name} in project ${project}.`));
        return;
      }
      const status = pipeline.status || {};
      const latest = latestStatus(pipeline);
      try {
        fill(holder,
          h('div', {class: 'title'}, h('h1', {}, h('span', {class: 'mono'}, name)), phaseBadge(status.phase || 'Pending')),
          status.message ? h('p', {class: 'note'}, status.message) : null,
          facts([['Run', status.run], ['Cost so far', usd(status.costUSD)],
            ['Estimate', status.estimate?.costUSD ? `${usd(status.estimate.costUSD.p50)} (P50) / ${usd(status.estimate.costUSD.p90)} (P90)` : null],
            ['Limit', pipeline.spec?.maxCostUSD ? usd(pipeline.spec.maxCostUSD) : null],
            ['Finished', status.completionTime ? when(status.completionTime) : null]]),
          section('Graph', graph(project, pipeline)),
          section('Stages', table(null, ['Stage', 'Phase', 'Job', 'Upstream', 'Cost', 'Message'],
            (pipeline.spec?.stages || []).map((stage) => {
              const state = latest.get(stage.name);
              return [stage.name, phaseBadge(state?.phase || 'Waiting'),
                state?.job ? h('a', {href: route('projects', project, 'jobs', state.job)}, state.job) : '—',
                upstreamOf(stage).join(', ') || '—', usd(state?.costUSD), state?.message || ''];
            }))));
      } catch (error) {
        fill(holder, errorBox(error));
      }
    }, signal);
  },
};
