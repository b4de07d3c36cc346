// The console's shell: the session, the navigation and the hash router.
//
// Routes (docs/console.md): #/projects, #/projects/P/jobs, #/projects/P/jobs/NAME, #/projects/P/estimate,
// #/offerings, #/projects/P/credits, #/projects/P/pipelines, #/projects/P/pipelines/NAME. Each page is a
// module whose render(view, params, context) draws into a fresh element of <main>; context.signal aborts when the
// reader leaves the page, which ends its watches and log streams. A page still waiting for an answer when the
// reader moves on draws into its own view, no longer in the document, so it can never overwrite the next page. Route parts are checked against the API's name rules
// before any request is made, and always escaped when they are put into a path.

import {request, session} from './api.js';
import {errorBox, fill, h, route} from './dom.js';
import * as credits from './credits.js';
import * as estimate from './estimate.js';
import * as job from './job.js';
import * as jobs from './jobs.js';
import * as offerings from './offerings.js';
import * as pipelines from './pipelines.js';
import * as projects from './projects.js';

// A DNS subdomain (RFC 1123), as the API server requires of every object name.
const NAME = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;

const ROUTES = [
  {pattern: ['projects'], page: projects, nav: 'projects'},
  {pattern: ['offerings'], page: offerings, nav: 'offerings'},
  {pattern: ['projects', ':project', 'jobs'], page: jobs, nav: 'jobs'},
  {pattern: ['projects', ':project', 'jobs', ':name'], page: job, nav: 'jobs'},
  {pattern: ['projects', ':project', 'estimate'], page: estimate, nav: 'estimate'},
  {pattern: ['projects', ':project', 'credits'], page: credits, nav: 'credits'},
  {pattern: ['projects', ':project', 'pipelines'], page: pipelines.list, nav: 'pipelines'},
  {pattern: ['projects', ':project', 'pipelines', ':name'], page: pipelines.detail, nav: 'pipelines'},
];

/** The route and its parameters for a location hash; null when none matches or a name is malformed. */
export function match(hash) {
  const parts = hash.replace(/^#\/?/, '').split('/').filter((part) => part !== '');
  let decoded;
  try {
    decoded = parts.map((part) => decodeURIComponent(part));
  } catch {
    return null;
  }
  for (const candidate of ROUTES) {
    if (candidate.pattern.length !== decoded.length) continue;
    const params = {};
    const fits = candidate.pattern.every((want, i) => {
      if (!want.startsWith(':')) return want === decoded[i];
      params[want.slice(1)] = decoded[i];
      return NAME.test(decoded[i]);
    });
    if (fits) return {route: candidate, params};
  }
  return null;
}

// The project of the last page that named one, for the navigation of pages that do not (kept for this tab).
let lastProject = window.sessionStorage.getItem('nodus.project') || 'default';
let current = null;

function navigation(active, project) {
  const item = (key, label, href) => h('li', {},
    h('a', {href, 'aria-current': key === active ? 'page' : null}, label));
  return h('ul', {},
    item('projects', 'Projects', route('projects')),
    item('jobs', 'Jobs', route('projects', project, 'jobs')),
    item('estimate', 'Estimate', route('projects', project, 'estimate')),
    item('pipelines', 'Pipelines', route('projects', project, 'pipelines')),
    item('credits', 'Credits', route('projects', project, 'credits')),
    item('offerings', 'Offerings', route('offerings')),
    h('li', {class: 'project'}, 'Project ', h('strong', {}, project)));
}

async function show() {
  current?.abort();
  const controller = new AbortController();
  current = controller;
  const main = document.getElementById('main');
  if (!window.location.hash || window.location.hash === '#' || window.location.hash === '#/') {
    window.location.replace(route('projects', lastProject, 'jobs'));
    return;
  }
  const found = match(window.location.hash);
  const project = found?.params.project || lastProject;
  lastProject = project;
  window.sessionStorage.setItem('nodus.project', project);
  fill(document.getElementById('nav'), navigation(found?.route.nav, project));
  if (!found) {
    document.title = 'Not found · Nodus';
    fill(main, h('h1', {}, 'Not found'),
      h('p', {}, 'The console has no page at this address. ', h('a', {href: route('projects')}, 'See your projects.')));
    return;
  }
  const view = h('div', {class: 'page'});
  fill(main, view);
  try {
    await found.route.page.render(view, found.params, {signal: controller.signal});
  } catch (error) {
    if (!controller.signal.aborted) fill(view, h('h1', {}, 'Something went wrong'), errorBox(error));
  }
}

async function logout() {
  const response = await request('POST', '/console/logout');
  if (response.ok) window.location.assign('/console/login');
}

async function start() {
  document.getElementById('logout').addEventListener('click', logout);
  window.addEventListener('hashchange', show);
  try {
    const me = await session();
    document.getElementById('user').textContent = me.user;
  } catch (error) {
    fill(document.getElementById('main'), errorBox(error));
    return;
  }
  await show();
}

start();
