// One Job: phase, timeline of attempts, logs, progress and cost plots, checkpoints, gang, outputs, YAML, Cancel.
//
// The Job and its Attempts are watched (fieldSelector metadata.name, labelSelector nodus.dev/job), so every
// section but the plots redraws from the watched objects as they change; the plots re-read the progress history
// (GET .../jobs/NAME/progress) at most every 5 s while the Job changes. Cancel is offered only when the server's
// authorizer says the reader may update Jobs (/console/api/access) and the Job has not finished; it sends the
// merge patch {"spec": {"state": "Cancelled"}} that `nodus cancel` sends.

import {access, APIError, getJSON, getText, ok, request} from './api.js';
import {epoch, plot} from './charts.js';
import {
  apiPath, bytes, errorBox, facts, FINISHED, fill, h, phaseBadge, route, section, table, usd, when,
} from './dom.js';
import {logPanel} from './joblogs.js';
import {attemptRows, timeline} from './timeline.js';
import {watchMap} from './watch.js';

const PLOT_INTERVAL_MS = 5000;

function summary(job) {
  const spec = job.spec || {};
  const status = job.status || {};
  const resources = spec.resources || {};
  const gpu = resources.gpu ? `${resources.gpu.count ?? 1}× ${[resources.gpu.type || 'GPU'].flat().join(' or ')}` : null;
  return facts([
    ['Image', status.image?.reference || spec.image],
    ['Command', [...(spec.command || []), ...(spec.args || [])].join(' ')],
    ['Completions', `${status.succeeded ?? 0} of ${spec.completions ?? 1} succeeded, ${status.active ?? 0} active, `
      + `${status.failed ?? 0} failed (parallelism ${spec.parallelism ?? 1})`],
    ['Resources', [gpu, resources.cpu ? `${resources.cpu} CPU` : null, resources.memory].filter(Boolean).join(', ')],
    ['Offering', status.placement?.offering
      ? `${status.placement.offering}${status.placement.interruptible ? ' (interruptible)' : ''}` : null],
    // A running Job's rate: the final charge writes a zero rate, which is no rate to show.
    ['Rate', Number(status.cost?.rateUSDPerHour) > 0 && !status.cost.final ? `${usd(status.cost.rateUSDPerHour)}/h` : null],
    ['State', spec.state],
    ['Created', when(job.metadata.creationTimestamp)],
    ['Started', status.startTime ? when(status.startTime) : null],
    ['Finished', status.completionTime ? when(status.completionTime) : null],
    ['Progress', status.progress?.units
      ? `${status.progress.units.completed ?? 0}${status.progress.units.total ? ` of ${status.progress.units.total}` : ''} units`
        + `${status.progress.stage ? ` (${status.progress.stage})` : ''}` : null],
    ['Metrics', status.progress?.metrics
      ? Object.entries(status.progress.metrics).map(([key, value]) => `${key} ${value}`).join(', ') : null],
  ]);
}

function checkpoints(job, attempts) {
  const checkpoint = job.status?.checkpoint;
  const rows = attempts.filter((a) => a.status?.checkpoint?.seq !== undefined || a.spec?.restore).map((a) => [
    h('span', {class: 'mono'}, a.metadata.name),
    a.status?.checkpoint?.seq ?? '—',
    a.status?.checkpoint?.size !== undefined ? bytes(a.status.checkpoint.size) : '—',
    a.status?.checkpoint?.time ? when(a.status.checkpoint.time) : '—',
    a.spec?.restore ? `seq ${a.spec.restore.seq}` : '—',
  ]);
  if (!checkpoint && !rows.length) return h('p', {class: 'muted'}, 'No checkpoint yet.');
  return [
    checkpoint ? facts([
      ['Latest', checkpoint.seq !== undefined ? `seq ${checkpoint.seq}` : null],
      ['Size', checkpoint.size !== undefined ? bytes(checkpoint.size) : null],
      ['Committed', checkpoint.time ? when(checkpoint.time) : null],
      ['Interval', checkpoint.interval],
      ['Restored from', checkpoint.restoredFromSeq !== undefined ? `seq ${checkpoint.restoredFromSeq}` : null],
    ]) : null,
    rows.length ? table('Checkpoints by attempt', ['Attempt', 'Seq', 'Size', 'Committed', 'Restored'], rows) : null,
  ];
}

function gang(job) {
  const status = job.status?.gang;
  if (!status) return h('p', {class: 'muted'}, 'Not a distributed Job.');
  return [
    facts([['Phase', status.phase], ['Epoch', status.epoch], ['Ready', `${status.ready ?? 0} of ${status.size ?? '?'}`],
      ['Restarts', status.restarts], ['Rendezvous', status.rendezvous], ['Transport', status.transport]]),
    table('Gang members', ['Rank', 'Attempt', 'Phase', 'Offering', 'Region', 'Path'], (status.members || []).map((m) => [
      m.rank ?? '—', m.attempt ?? '—', m.phase ? phaseBadge(m.phase) : '—', m.offering ?? '—', m.regionClass ?? '—',
      m.path ?? '—'])),
  ];
}

function outputs(project, job) {
  const list = job.status?.outputs || [];
  if (!list.length) return h('p', {class: 'muted'}, 'No committed output yet.');
  return table(null, ['Output', 'Index', 'Rank', 'Size', 'Committed', 'Download'], list.map((output) => {
    const query = new URLSearchParams({index: output.index ?? 0});
    if (output.rank !== undefined && output.rank !== null) query.set('rank', output.rank);
    const href = `${apiPath(project, 'jobs', job.metadata.name, `outputs/${encodeURIComponent(output.name)}`)}?${query}`;
    return [output.name, output.index ?? 0, output.rank ?? '—', bytes(output.size),
      output.committedTime ? when(output.committedTime) : '—',
      h('a', {href, download: '', 'aria-label': `Download ${output.name} of index ${output.index ?? 0}`}, 'Download')];
  }));
}

function plots(job, history) {
  const samples = history.samples || [];
  const x = samples.map((s) => epoch(s.time));
  const figures = [];
  const withUnits = samples.some((s) => s.completed !== null && s.completed !== undefined);
  if (withUnits) {
    figures.push(plot({caption: 'Progress (units completed)', x, yLabel: 'units', series: [
      {label: 'completed', values: samples.map((s) => s.completed ?? null)},
      {label: 'total', values: samples.map((s) => s.total ?? null), dash: [6, 4]}]}));
  }
  const metricNames = [...new Set(samples.flatMap((s) => Object.keys(s.metrics || {})))].sort();
  if (metricNames.length) {
    figures.push(plot({caption: `Metrics: ${metricNames.join(', ')}`, x, series: metricNames.map((name) => ({
      label: name, values: samples.map((s) => (s.metrics?.[name] !== undefined ? Number(s.metrics[name]) : null))}))}));
  }
  if (!figures.length) figures.push(h('p', {class: 'muted'}, 'The program has reported no progress (docs/checkpoints.md: /nodus/progress).'));
  const band = job.status?.estimate?.costUSD;
  const costs = samples.map((s) => (s.costUSD !== null && s.costUSD !== undefined ? Number(s.costUSD) : null));
  const series = [{label: 'cost so far (USD)', values: costs}];
  if (band?.p90 !== undefined) series.push({label: 'estimate P90', values: x.map(() => Number(band.p90)), dash: [4, 4], colour: '#b45309'});
  if (band?.p50 !== undefined) series.push({label: 'estimate P50', values: x.map(() => Number(band.p50)), dash: [2, 3], colour: '#92400e'});
  const cost = plot({caption: 'Cost so far against the estimate', x, yLabel: 'USD', series,
    band: series.length === 3 ? [1, 2] : undefined,
    summary: `${usd(job.status?.cost?.totalUSD)} so far; estimate P50 ${usd(band?.p50)}, P90 ${usd(band?.p90)}.`});
  return {figures, cost};
}

function cancelButton(project, job, box) {
  const button = h('button', {type: 'button', class: 'danger', 'data-testid': 'cancel-job'}, 'Cancel Job');
  button.addEventListener('click', async () => {
    if (!window.confirm(`Cancel Job ${job.metadata.name}? Its attempts stop and it cannot be resumed.`)) return;
    button.disabled = true;
    try {
      await ok(await request('PATCH', apiPath(project, 'jobs', job.metadata.name), {
        json: {spec: {state: 'Cancelled'}}, headers: {'Content-Type': 'application/merge-patch+json'}}));
      fill(box, h('p', {role: 'status'}, 'Cancel requested: the attempts are stopping.'));
    } catch (error) {
      button.disabled = false;
      fill(box, errorBox(error));
    }
  });
  return button;
}

export async function render(main, {project, name}, {signal}) {
  document.title = `${name} · Jobs · Nodus`;
  const allowed = await access(project);
  const heading = h('div', {class: 'title'});
  const actionBox = h('div', {});
  const message = h('div', {});
  const boxes = {summary: h('div'), timeline: h('div'), attempts: h('div'), plots: h('div'), cost: h('div'),
    checkpoints: h('div'), gang: h('div'), outputs: h('div')};
  const yaml = h('pre', {class: 'yaml', tabindex: '0', 'aria-label': 'The Job as YAML'});
  const yamlDetails = h('details', {}, h('summary', {}, 'YAML'), yaml);
  yamlDetails.addEventListener('toggle', async () => {
    if (!yamlDetails.open) return;
    try {
      yaml.textContent = await getText(apiPath(project, 'jobs', name), {accept: 'application/yaml', signal});
    } catch (error) {
      yaml.textContent = error.message;
    }
  });
  const logsHolder = h('div');
  fill(main,
    h('p', {class: 'crumbs'}, h('a', {href: route('projects', project, 'jobs')}, `Jobs in ${project}`)),
    heading, actionBox, message,
    section('Summary', boxes.summary),
    section('Timeline', boxes.timeline, boxes.attempts),
    section('Logs', logsHolder),
    section('Progress and metrics', boxes.plots),
    section('Cost', boxes.cost),
    section('Checkpoints', boxes.checkpoints),
    section('Gang', boxes.gang),
    section('Outputs', boxes.outputs),
    section('Definition', yamlDetails));

  let job = null;
  let attempts = [];
  let logs = null;
  let lastPlot = 0;
  let plotTimer = null;
  let plottedFinished = false;

  async function drawPlots() {
    plotTimer = null;
    lastPlot = Date.now();
    try {
      const history = await getJSON(apiPath(project, 'jobs', name, 'progress'), {signal});
      const {figures, cost} = plots(job, history);
      fill(boxes.plots, figures);
      fill(boxes.cost, cost);
    } catch (error) {
      if (signal.aborted) return;
      const box = errorBox(error instanceof APIError ? error : new Error(String(error)));
      fill(boxes.plots, box);
      fill(boxes.cost, facts([['So far', usd(job.status?.cost?.totalUSD)],
        ['Estimate P50', usd(job.status?.estimate?.costUSD?.p50)], ['Estimate P90', usd(job.status?.estimate?.costUSD?.p90)]]));
    }
  }

  function schedulePlots() {
    const finished = FINISHED.has(job.status?.phase);
    if (plotTimer || (finished && plottedFinished)) return;
    plottedFinished = finished;
    plotTimer = setTimeout(drawPlots, Math.max(0, lastPlot + PLOT_INTERVAL_MS - Date.now()));
  }

  function draw() {
    if (!job) {
      fill(heading, h('h1', {}, name));
      fill(message, h('p', {class: 'muted'}, `No Job ${name} in project ${project} (yet).`));
      return;
    }
    const status = job.status || {};
    const finished = FINISHED.has(status.phase);
    fill(heading, h('h1', {}, h('span', {class: 'mono'}, name)), phaseBadge(status.phase, {'data-testid': 'job-phase'}),
      allowed['jobs/update'] && !finished && job.spec?.state !== 'Cancelled'
        ? cancelButton(project, job, actionBox) : null);
    fill(message, status.message || status.reason
      ? h('div', {class: `note ${status.phase === 'Failed' ? 'error' : ''}`},
        h('p', {}, h('strong', {}, status.reason || ''), status.message ? ` ${status.message}` : ''),
        status.fix ? h('p', {class: 'fix'}, status.fix) : null)
      : null);
    fill(boxes.summary, summary(job));
    fill(boxes.timeline, timeline(job, attempts));
    fill(boxes.attempts, attempts.length
      ? table('Attempts', ['Attempt', 'Phase', 'Node', 'Offering', 'Started', 'Finished', 'Reason', 'Restored'],
        attemptRows(attempts))
      : h('p', {class: 'muted'}, 'No attempt yet.'));
    fill(boxes.checkpoints, checkpoints(job, attempts));
    fill(boxes.gang, gang(job));
    fill(boxes.outputs, outputs(project, job));
    if (!logs) {
      logs = logPanel(project, name, () => ({job, attempts}), signal);
      fill(logsHolder, logs.element);
    } else {
      logs.refresh();
    }
    schedulePlots();
  }

  watchMap(`namespaces/${encodeURIComponent(project)}/jobs`, {fieldSelector: `metadata.name=${name}`}, (items) => {
    job = items.get(name) || null;
    draw();
  }, signal, (_text, error) => {
    if (error) fill(main, h('h1', {}, name), errorBox(error), h('p', {}, h('a', {href: route('projects')}, 'See your projects.')));
  });
  watchMap(`namespaces/${encodeURIComponent(project)}/attempts`, {labelSelector: `nodus.dev/job=${name}`}, (items) => {
    attempts = [...items.values()];
    if (job) draw();
  }, signal);
  signal.addEventListener('abort', () => clearTimeout(plotTimer), {once: true});
}
