// The job list, newest first, refreshed live from the event feed.

import { follow, paths, refresher, request } from './api.js';
import { DASH, errorNotice, exitCode, h, heading, jobHref, orDash, replace, row, stateBadge, table, time } from './dom.js';

const PAGE = 100;
const STATES = ['WAITING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'STOPPED'];
const HEADERS = ['Name', 'User', 'State', 'Sub-state', 'Reason / queue position', 'Virtual cluster', 'Tasks', 'GPUs',
  'Exit code', 'Created'];

// Why a job is where it is: its reason, which names its queue position while it is queued.
export function reasonText(job) {
  const reason = job.reason || '';
  if (!job.queuePosition || /position \d+/.test(reason)) return reason;
  return [`position ${job.queuePosition} in the queue`, reason].filter(Boolean).join(': ');
}

function jobRow(job) {
  const reason = reasonText(job);
  const retries = job.retries ? h('span', { class: 'muted' }, ` \u00b7 ${job.retries} ${job.retries === 1 ? 'retry' : 'retries'}`) : null;
  return row([
    h('td', { class: 'name' }, h('a', { href: jobHref(job.username, job.name), class: 'job-link' }, job.name)),
    job.username,
    h('span', {}, stateBadge(job.state), job.executionType === 'STOP' && ['WAITING', 'RUNNING'].includes(job.state)
      ? h('span', { class: 'muted' }, ' stopping') : null),
    h('td', { class: 'nowrap' }, orDash(job.subState), retries),
    reason ? h('div', { class: 'reason', title: reason }, reason) : DASH,
    job.virtualCluster,
    h('td', { class: 'num' }, String(job.totalTaskNumber)),
    h('td', { class: 'num' }, String(job.totalGpuNumber)),
    h('td', { class: 'num' }, exitCode(job.appExitCode)),
    time(job.createdTime),
  ], { 'data-job': job.name, 'data-user': job.username, 'data-state': job.state });
}

function counts(jobs) {
  const by = {};
  for (const job of jobs) by[job.state] = (by[job.state] || 0) + 1;
  return STATES.filter((s) => by[s]).map((s) => `${by[s]} ${s.toLowerCase()}`).join(', ');
}

export function renderJobs(view, ctx) {
  // The filters live in the address (#/jobs?user=U&state=S) and change in place: no re-render, no lost focus.
  const filter = { user: ctx.params.get('user') || '', state: ctx.params.get('state') || '' };
  const userInput = h('input', { id: 'filter-user', type: 'search', value: filter.user, placeholder: 'all users',
    autocomplete: 'off', spellcheck: 'false' });
  const stateSelect = h('select', { id: 'filter-state' },
    h('option', { value: '' }, 'any state'),
    STATES.map((s) => h('option', { value: s, selected: s === filter.state }, s)));
  const live = h('span', { class: 'live', 'aria-live': 'polite' }, 'connecting\u2026');
  const summary = h('p', { class: 'summary', id: 'jobs-summary', 'aria-live': 'polite' });
  const list = h('div', { id: 'jobs-list' }, h('p', { class: 'muted' }, 'Loading jobs\u2026'));

  // The newest page (as many jobs as are shown, at least PAGE), then more pages on demand: the server
  // pages by cursor, so a long history costs nothing until asked for.
  let shown = [];
  let next = null;
  let drawn = null; // what the list shows (filter, jobs, cursor), as JSON: a refresh bringing nothing new keeps it
  const render = () => {
    drawn = JSON.stringify([filter, shown, next]);
    const { user, state } = filter;
    const whose = user ? ` of ${user}` : '';
    replace(summary, `${shown.length}${next ? ' newest' : ''} job${shown.length === 1 ? '' : 's'}${whose}`,
      shown.length ? ` \u2014 ${counts(shown)}` : '');
    const more = next ? h('button', { type: 'button', id: 'jobs-more', onclick: loadMore }, 'Show older jobs') : null;
    replace(list, shown.length
      ? [table(HEADERS, shown.map(jobRow), { class: 'jobs', 'aria-describedby': 'jobs-summary' }), more]
      : h('p', { class: 'empty' }, user || state ? 'No job matches the filter.' : 'No jobs yet. ',
        user || state ? null : h('a', { href: '#/submit' }, 'Submit one')));
  };
  const fetchPage = async (limit, cursor) => {
    const { user, state } = filter;
    const { data, headers } = await request('GET', paths.jobs(user, { state, limit, cursor }), { signal: ctx.signal });
    const fresh = user === filter.user && state === filter.state; // else the filter changed meanwhile
    return fresh ? { data, cursor: headers.get('X-Next-Cursor') } : null;
  };
  const load = async () => {
    try {
      const page = await fetchPage(Math.min(10000, Math.max(PAGE, shown.length)), '');
      if (!page) return;
      [shown, next] = [page.data, page.cursor];
      // Redrawing an unchanged list would replace the links under a user's pointer and lose a click.
      if (JSON.stringify([filter, shown, next]) !== drawn) render();
    } catch (err) {
      if (ctx.signal.aborted) return;
      drawn = null;
      replace(list, errorNotice(err, 'Could not load the jobs'), list.querySelector('.table-wrap'));
    }
  };
  async function loadMore() {
    try {
      const page = next && await fetchPage(PAGE, next);
      if (!page) return;
      [shown, next] = [shown.concat(page.data), page.cursor];
      render();
    } catch (err) {
      if (ctx.signal.aborted) return;
      drawn = null;
      replace(list, errorNotice(err, 'Could not load older jobs'), list.querySelector('.table-wrap'));
    }
  }
  const refresh = refresher(load, 500);
  ctx.onCleanup(refresh.stop);
  let stopFeed = () => {};
  const feed = () => {
    stopFeed();
    stopFeed = follow(filter.user ? { user: filter.user } : {}, refresh.kick, (state) => {
      replace(live, state === 'live' ? '\u25cf live' : '\u25cb offline, retrying');
      live.className = `live live-${state}`;
    });
  };
  ctx.onCleanup(() => stopFeed());

  function apply(user, state) {
    const userChanged = user !== filter.user;
    Object.assign(filter, { user, state });
    shown = [];
    userInput.value = user;
    stateSelect.value = state;
    const query = new URLSearchParams(Object.entries(filter).filter(([, v]) => v));
    history.replaceState(null, '', `#/jobs${query.toString() ? `?${query}` : ''}`);
    if (userChanged) feed();
    refresh.now();
  }

  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter jobs',
    onsubmit: (e) => { e.preventDefault(); apply(userInput.value.trim(), stateSelect.value); } },
  h('label', { for: 'filter-user' }, 'User'), userInput,
  h('button', { type: 'button', id: 'only-mine', onclick: () => apply(ctx.session.user, stateSelect.value) }, 'Only mine'),
  h('label', { for: 'filter-state' }, 'State'), stateSelect,
  h('button', { type: 'submit' }, 'Filter'),
  h('button', { type: 'button', onclick: () => apply('', '') }, 'Clear'),
  live);
  stateSelect.addEventListener('change', () => apply(userInput.value.trim(), stateSelect.value));

  view.append(h('div', { class: 'title-row' }, heading('Jobs'), h('a', { class: 'button primary', href: '#/submit' }, 'Submit a job')),
    form, summary, list);
  feed();
  refresh.now();
}
