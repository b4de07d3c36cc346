// A Job's logs, streamed per index (and rank) and attempt, as `nodus logs -f` shows them.
//
// The reader picks an index, a rank for a distributed Job, and an attempt ("latest" by default). The view
// follows GET .../jobs/NAME/log?index=&rank=&attempt=&follow=true&tailLines=N; the server ends the stream once
// the attempt has finished and every line is sent. On "latest", the view then waits for the index's next
// attempt (a replacement after a preemption, a retry) and follows it too, under a separator line. An index
// with no attempt yet is a 404 whose details.retryAfterSeconds says waiting makes sense: the view says so and
// asks again then. A connection that breaks (not an answer of the server) is made again after a second, and the
// view starts over from the attempt's last TAIL_LINES lines, so it never shows a line twice.

import {APIError, lines, request, sleep} from './api.js';
import {apiPath, h} from './dom.js';

const TAIL_LINES = 5000;
const KEPT_LINES = 20000;

/**
 * The log panel of a Job. `state()` returns {job, attempts} as the page's watches last saw them; `refresh()`
 * rebuilds the attempt choices when they change. Streams end when `signal` aborts.
 */
export function logPanel(project, name, state, signal) {
  const view = h('pre', {class: 'log', 'data-testid': 'log-view', tabindex: '0', 'aria-label': 'Log lines'});
  const note = h('p', {class: 'muted', role: 'status'});
  const index = h('select', {id: 'log-index'});
  const rank = h('select', {id: 'log-rank'});
  const attempt = h('select', {id: 'log-attempt'});
  const rankField = h('span', {class: 'field'}, h('label', {for: 'log-rank'}, 'Rank'), rank);
  let stream = null;

  const numbersOf = (chosenIndex, chosenRank) => [...new Set(state().attempts
    .filter((a) => a.spec.index === chosenIndex && (a.spec.rank ?? 0) === chosenRank)
    .map((a) => a.spec.number))].sort((a, b) => a - b);

  function options(select, values, label, keep) {
    const previous = select.value;
    select.replaceChildren(...values.map((value) => h('option', {value: String(value)}, label(value))));
    if (keep && values.map(String).includes(previous)) select.value = previous;
  }

  function refresh() {
    const {job} = state();
    const completions = job.spec?.completions ?? 1;
    const nodes = job.status?.topology?.nodes ?? job.status?.gang?.size ?? 1;
    if (index.options.length !== completions) options(index, [...Array(completions).keys()], (i) => `${i}`, true);
    if (rank.options.length !== nodes) options(rank, [...Array(nodes).keys()], (r) => `${r}`, true);
    rankField.hidden = nodes <= 1;
    const numbers = numbersOf(Number(index.value || 0), Number(rank.value || 0));
    const values = ['latest', ...numbers];
    if (attempt.options.length !== values.length) options(attempt, values, (n) => (n === 'latest' ? 'latest' : `${n}`), true);
  }

  function append(text) {
    const atBottom = view.scrollTop + view.clientHeight >= view.scrollHeight - 4;
    view.append(document.createTextNode(`${text}\n`));
    while (view.childNodes.length > KEPT_LINES) view.firstChild.remove();
    if (atBottom) view.scrollTop = view.scrollHeight;
  }

  async function follow(streamSignal) {
    const chosenIndex = Number(index.value || 0);
    const chosenRank = Number(rank.value || 0);
    const latest = attempt.value === 'latest';
    let number = latest ? numbersOf(chosenIndex, chosenRank).at(-1) : Number(attempt.value);
    view.replaceChildren();
    while (!streamSignal.aborted) {
      const query = new URLSearchParams({index: chosenIndex, follow: 'true', tailLines: TAIL_LINES});
      if (chosenRank) query.set('rank', chosenRank);
      if (number !== undefined) query.set('attempt', number);
      let response;
      try {
        response = await request('GET', `${apiPath(project, 'jobs', name, 'log')}?${query}`,
          {signal: streamSignal, accept: 'text/plain'});
      } catch (error) {
        if (streamSignal.aborted || error instanceof APIError) throw error;
        note.textContent = `Reconnecting (${error.message})…`;
        await sleep(1000, streamSignal);
        continue;
      }
      if (response.status === 404) {
        const error = await APIError.from(response);
        const wait = error.details.retryAfterSeconds;
        if (!wait) { note.textContent = error.message; return; }
        note.textContent = `Waiting for index ${chosenIndex}'s ${number ? `attempt ${number}` : 'first attempt'}…`;
        await sleep(wait * 1000, streamSignal);
        continue;
      }
      if (!response.ok) throw await APIError.from(response);
      // Asked for the latest attempt before the page knew any: the server says which one this is, so the
      // replacement that follows is recognised even when it already exists once this stream ends.
      const served = Number(response.headers.get('Nodus-Attempt'));
      if (number === undefined && Number.isInteger(served) && served > 0) number = served;
      note.textContent = `Following index ${chosenIndex}${number ? `, attempt ${number}` : ''}.`;
      const start = view.childNodes.length;
      try {
        for await (const line of lines(response.body)) append(line);
      } catch (error) {
        if (streamSignal.aborted) return;
        // Broken mid-stream: drop this attempt's lines and read its tail again.
        while (view.childNodes.length > start) view.lastChild.remove();
        note.textContent = `Reconnecting (${error.message})…`;
        await sleep(1000, streamSignal);
        continue;
      }
      if (!latest) { note.textContent = 'The attempt has ended; its log is complete.'; return; }
      // The attempt ended: on "latest", wait for the index's next attempt unless the Job is done.
      const current = number ?? numbersOf(chosenIndex, chosenRank).at(-1);
      note.textContent = 'The attempt has ended; waiting for another attempt of this index…';
      for (;;) {
        if (streamSignal.aborted) return;
        const newer = numbersOf(chosenIndex, chosenRank).filter((n) => current === undefined || n > current);
        if (newer.length) { number = newer[0]; append(`──── attempt ${number} ────`); break; }
        if (['Succeeded', 'Failed', 'Cancelled'].includes(state().job.status?.phase)) {
          note.textContent = 'The Job has finished; this is its whole log for this index.';
          return;
        }
        await sleep(1000, streamSignal);
      }
    }
  }

  function restart() {
    stream?.abort();
    const controller = new AbortController();
    stream = controller;
    signal.addEventListener('abort', () => controller.abort(), {once: true});
    follow(controller.signal).catch((error) => {
      if (!controller.signal.aborted) note.textContent = `The log stream stopped: ${error.message}`;
    });
  }

  for (const select of [index, rank, attempt]) select.addEventListener('change', () => { refresh(); restart(); });
  refresh();
  restart();
  const element = h('div', {class: 'logs'},
    h('div', {class: 'controls'},
      h('span', {class: 'field'}, h('label', {for: 'log-index'}, 'Index'), index),
      rankField,
      h('span', {class: 'field'}, h('label', {for: 'log-attempt'}, 'Attempt'), attempt)),
    note, view);
  return {element, refresh};
}
