// The portal's shell: the session, the hash routes, the header. Routes:
//   #/login  #/jobs[?user=U&state=S]  #/job/<user>/<name>  #/submit[?from=<user>/<name>]  #/clusters
//   #/usage[?from=YYYY-MM-DD&to=YYYY-MM-DD]  #/notify
// For scripts, `#token=T` or `#/<route>?token=T` logs in with a token (which then leaves the address).

import { ApiError, clearSession, getSession, saveSession, setUnauthorizedHandler, whoami } from './api.js';
import { h, notice, replace } from './dom.js';
import { renderClusters } from './clusters.js';
import { renderJob } from './job.js';
import { renderJobs } from './jobs.js';
import { renderLogin } from './login.js';
import { renderNotify } from './notify.js';
import { renderReports } from './reports.js';
import { renderSubmit } from './submit.js';

const ROUTES = [
  { pattern: /^\/login$/, render: renderLogin, title: 'Log in', public: true },
  { pattern: /^\/jobs$/, render: renderJobs, title: 'Jobs', nav: 'jobs' },
  { pattern: /^\/job\/([^/]+)\/([^/]+)$/, render: renderJob, title: 'Job', nav: 'jobs' },
  { pattern: /^\/submit$/, render: renderSubmit, title: 'Submit a job', nav: 'submit' },
  { pattern: /^\/clusters$/, render: renderClusters, title: 'Virtual clusters', nav: 'clusters' },
  { pattern: /^\/usage$/, render: renderReports, title: 'Usage', nav: 'usage' },
  { pattern: /^\/notify$/, render: renderNotify, title: 'Notifications', nav: 'notify' },
];

const main = document.getElementById('view');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
let current = null; // {controller, cleanups}
let sessionExpired = false;

function parseHash() {
  const raw = location.hash.replace(/^#/, '');
  if (raw.startsWith('token=')) return { path: '/jobs', params: new URLSearchParams(raw) };
  const [path, query] = raw.split('?', 2);
  return { path: path || '/jobs', params: new URLSearchParams(query || '') };
}

function go(path) {
  if (location.hash === `#${path}`) route(); // no hashchange for the same address
  else location.hash = `#${path}`;
}

function renderHeader(session, navKey) {
  nav.hidden = !session;
  for (const link of nav.querySelectorAll('a[data-nav]')) {
    if (link.dataset.nav === navKey) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  if (!session) {
    replace(who);
    return;
  }
  replace(who,
    h('span', { class: 'who-name' }, 'Signed in as ', h('strong', {}, session.user), session.admin ? ' (admin)' : ''),
    h('button', { type: 'button', class: 'link-button', onclick: logout }, 'Log out'));
}

function logout() {
  clearSession();
  go('/login');
}

// A token in the address: check it, keep it in the session, and take it out of the address and history.
async function adoptToken(params, path) {
  const token = params.get('token');
  params.delete('token');
  const rest = params.toString();
  history.replaceState(null, '', `#${path}${rest ? `?${rest}` : ''}`);
  try {
    saveSession(await whoami(token));
    return null;
  } catch (err) {
    clearSession();
    return err instanceof ApiError && err.status === 401
      ? 'The token in the address is unknown or has expired; log in.'
      : `Could not check the token in the address: ${err.message}`;
  }
}

async function route() {
  if (current) {
    current.controller.abort();
    current.cleanups.forEach((fn) => fn());
  }
  const controller = new AbortController();
  const cleanups = [];
  current = { controller, cleanups };
  const { path, params } = parseHash();
  let message = null;
  if (params.has('token')) {
    message = await adoptToken(params, path);
    if (controller.signal.aborted) return;
  }
  const session = getSession();
  let match = null;
  const spec = ROUTES.find((r) => (match = r.pattern.exec(path)));
  if (!spec) {
    history.replaceState(null, '', '#/jobs');
    return route();
  }
  if (!spec.public && !session) {
    sessionStorage.setItem('paiq.next', `${path}${params.toString() ? `?${params}` : ''}`);
    history.replaceState(null, '', '#/login');
    if (sessionExpired && !message) message = 'Your session has expired; log in again.';
    sessionExpired = false;
    return renderView(ROUTES[0], [], new URLSearchParams(), null, message, controller, cleanups);
  }
  let args;
  try {
    args = match.slice(1).map(decodeURIComponent);
  } catch {
    history.replaceState(null, '', '#/jobs'); // a malformed %-escape in a hand-edited address
    return route();
  }
  return renderView(spec, args, params, session, message, controller, cleanups);
}

function afterLogin() {
  const next = sessionStorage.getItem('paiq.next') || '/jobs';
  sessionStorage.removeItem('paiq.next');
  go(next);
}

function renderView(spec, args, params, session, message, controller, cleanups) {
  renderHeader(session, spec.nav);
  document.title = `${spec.title} \u00b7 paiq`;
  replace(main, message ? notice('error', message) : null);
  const ctx = {
    session,
    params,
    args,
    signal: controller.signal,
    onCleanup: (fn) => cleanups.push(fn),
    setTitle: (title) => { document.title = `${title} \u00b7 paiq`; },
    go,
    afterLogin,
  };
  const view = h('div', { class: 'view' });
  main.append(view);
  spec.render(view, ctx);
  // Move the focus to the new page (for keyboards and screen readers), unless the view chose a control.
  const title = main.querySelector('h1');
  if (title && !view.contains(document.activeElement)) title.focus({ preventScroll: true });
}

// A token kept from earlier in this tab may have expired since: find out now rather than at the next write.
async function checkSession() {
  const session = getSession();
  if (!session || location.hash.includes('token=')) return;
  try {
    await whoami(session.token);
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      clearSession();
      sessionExpired = true;
    }
  }
}

// A request with the session's token was refused with 401: log in again, then come back here.
function expired() {
  clearSession();
  sessionExpired = true;
  route();
}

// The skip link cannot be a plain #anchor: the address's fragment holds the route.
document.getElementById('skip').addEventListener('click', (event) => {
  event.preventDefault();
  main.focus();
});
setUnauthorizedHandler(expired);
window.addEventListener('hashchange', route);
checkSession().finally(route);
