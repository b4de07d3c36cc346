// The estimate page: paste a Job (or Pipeline) as YAML or JSON, see what it would cost, create it bound to that.
//
// The text is parsed in the browser by the vendored `yaml` package (YAML 1.2; one document; at most 100 alias
// expansions) and sent as JSON, because the API server takes YAML only for server-side apply. "Estimate" is the
// server's dry run (POST ...?dryRun=All): the response's status.estimate is the table and its ETag seals that
// estimate and spec. "Create" sends the same body with If-Match: ETag, so the Job is bound to the estimate shown
// (never placed above its rate plus 10 %; a changed spec is refused with 412). Editing the text after an estimate
// withdraws the Create button until the next estimate, so what is created is always what was estimated.

import {access, APIError, getJSON, ok, request} from './api.js';
import {apiPath, errorBox, facts, fill, h, route, section, table, usd} from './dom.js';
import {parseAllDocuments} from './vendor/yaml/index.js';

const PLURALS = {Job: 'jobs', Pipeline: 'pipelines'};

/** The object in `text` (YAML or JSON), checked to be one Job or Pipeline for `project`; throws Error. */
export function parseObject(text, project) {
  const documents = parseAllDocuments(text, {maxAliasCount: 100}).filter((doc) => doc.contents !== null);
  if (documents.length !== 1) throw new Error(`Paste exactly one Job or Pipeline; the text holds ${documents.length} documents.`);
  const [document] = documents;
  if (document.errors.length) {
    const first = document.errors[0];
    throw new Error(`YAML error: ${first.message}`);
  }
  const object = document.toJS();
  if (!object || typeof object !== 'object' || Array.isArray(object)) throw new Error('The text is not a YAML mapping.');
  object.apiVersion ??= 'nodus.dev/v1';
  if (object.apiVersion !== 'nodus.dev/v1') throw new Error(`apiVersion must be nodus.dev/v1, not "${object.apiVersion}".`);
  if (!PLURALS[object.kind]) throw new Error(`kind must be Job or Pipeline, not "${object.kind ?? ''}".`);
  object.metadata ??= {};
  if (object.metadata.namespace && object.metadata.namespace !== project) {
    throw new Error(`metadata.namespace is "${object.metadata.namespace}" but this page estimates in project "${project}": `
      + 'remove the namespace or switch project.');
  }
  if (!object.metadata.name && !object.metadata.generateName) object.metadata.generateName = `${object.kind.toLowerCase()}-`;
  return object;
}

function duration(band) {
  return band ? `${band.p50 ?? '—'} (P50) / ${band.p90 ?? '—'} (P90)` : null;
}

function estimateView(estimate) {
  const preview = estimate.placementPreview || {};
  const parts = [facts([
    ['Cost P50', usd(estimate.costUSD?.p50)],
    ['Cost P90', usd(estimate.costUSD?.p90)],
    ['First hold', estimate.holdUSD !== undefined ? usd(estimate.holdUSD) : null],
    ['Largest concurrent hold', estimate.largestConcurrentHoldUSD !== undefined ? usd(estimate.largestConcurrentHoldUSD) : null],
    ['Rate', estimate.rateUSDPerHour !== undefined ? `${usd(estimate.rateUSDPerHour)}/h` : null],
    ['Offering', preview.offering || (preview.pool ? `pool ${preview.pool}${preview.node ? `, host ${preview.node}` : ''}` : null)],
    ['Region class', preview.regionClass],
    ['Interruptible', preview.interruptible === undefined ? null : preview.interruptible ? 'yes' : 'no'],
    ['Startup (cold)', duration(estimate.startup?.cold)],
    ['Startup (warm)', duration(estimate.startup?.warm)],
    ['Price book', estimate.pricebookVersion],
    ['Valid until', estimate.validUntil],
  ])];
  if (estimate.stages?.length) {
    parts.push(table('Stages', ['Stage', 'Cost P50', 'Cost P90', 'Hold', 'Rate', 'Offering'], estimate.stages.map((stage) => [
      stage.name, usd(stage.costUSD?.p50), usd(stage.costUSD?.p90), usd(stage.holdUSD),
      stage.rateUSDPerHour !== undefined ? `${usd(stage.rateUSDPerHour)}/h` : '—', stage.placementPreview?.offering || '—'])));
  }
  if (estimate.warnings?.length) {
    parts.push(table('Warnings', ['Code', 'Message'], estimate.warnings.map((w) => [w.code || '', w.message || ''])));
  }
  if (estimate.blockingReasons?.length) {
    parts.push(h('div', {class: 'error', role: 'alert'}, h('p', {}, 'This would not start:'),
      table(null, ['Reason', 'Message', 'Fix'], estimate.blockingReasons.map((b) => [b.code || '', b.message || '', b.fix || '']))));
  }
  return parts;
}

async function example() {
  let image = 'python:3.11';
  try {
    const info = await getJSON('/serverinfo');
    if (info.defaultImage) image = info.defaultImage;
  } catch {
    // An older server without /serverinfo: the example keeps a public image name.
  }
  return ['apiVersion: nodus.dev/v1', 'kind: Job', 'metadata:', '  generateName: hello-', 'spec:', `  image: ${image}`,
    '  command: [python, -c, "print(42)"]', '  resources: {cpu: "1"}', '  expectedDuration: 1m', ''].join('\n');
}

function causes(error) {
  const list = error.details?.causes || [];
  return list.length ? h('ul', {}, list.map((c) => h('li', {}, `${c.field ? `${c.field}: ` : ''}${c.message || c.reason}`))) : null;
}

export async function render(main, {project}, {signal}) {
  document.title = `Estimate · ${project} · Nodus`;
  const allowed = await access(project);
  const text = h('textarea', {id: 'estimate-text', rows: '18', spellcheck: 'false', class: 'mono'});
  text.value = await example();
  const estimateButton = h('button', {type: 'submit'}, 'Estimate');
  const result = h('div', {'aria-live': 'polite'});
  let bound = null;
  const form = h('form', {class: 'estimate'},
    h('label', {for: 'estimate-text'}, 'A Job or Pipeline, as YAML or JSON'), text,
    h('div', {class: 'controls'}, estimateButton));
  text.addEventListener('input', () => {
    if (bound) { bound = null; fill(result, h('p', {class: 'muted'}, 'The text changed: estimate again to create it.')); }
  });
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    bound = null;
    let object;
    try {
      object = parseObject(text.value, project);
    } catch (error) {
      fill(result, errorBox(error));
      return;
    }
    estimateButton.disabled = true;
    fill(result, h('p', {class: 'muted'}, 'Estimating…'));
    try {
      const path = apiPath(project, PLURALS[object.kind]);
      const response = await ok(await request('POST', `${path}?dryRun=All`, {json: object, signal}));
      const estimated = await response.json();
      const etag = response.headers.get('ETag');
      const estimate = estimated.status?.estimate;
      bound = {object, etag, path};
      const create = h('button', {type: 'button', class: 'primary'}, `Create ${object.kind}`);
      const createBox = h('div', {});
      create.addEventListener('click', async () => {
        if (!bound) return;
        create.disabled = true;
        try {
          const made = await (await ok(await request('POST', bound.path, {json: bound.object, signal,
            headers: bound.etag ? {'If-Match': bound.etag} : {}}))).json();
          window.location.assign(route('projects', project, PLURALS[object.kind], made.metadata.name));
        } catch (error) {
          create.disabled = false;
          fill(createBox, errorBox(error), error instanceof APIError ? causes(error) : null);
        }
      });
      fill(result, section(`Estimate for ${estimated.metadata?.name || object.kind}`,
        estimate ? estimateView(estimate) : h('p', {class: 'muted'}, 'The server returned no estimate.'),
        allowed['jobs/create']
          ? h('div', {class: 'controls'}, create,
            h('span', {class: 'muted'}, etag ? ' bound to this estimate (If-Match)' : ' (the server sent no ETag: not bound)'))
          : h('p', {class: 'muted'}, 'You may not create Jobs in this project (ask an Owner for the Editor role).'),
        createBox));
    } catch (error) {
      fill(result, errorBox(error), error instanceof APIError ? causes(error) : null);
    } finally {
      estimateButton.disabled = false;
    }
  });
  fill(main, h('h1', {}, 'Estimate in ', h('span', {class: 'mono'}, project)),
    h('p', {}, 'What a Job would cost before it runs: the server places it on paper (a dry run) and prices it. ',
      '"Create" then creates exactly that spec, bound to the estimate.'),
    form, result);
}
