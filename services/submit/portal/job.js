// One job: status, exit and trigger, retries and attempts, every task, its config (a v2 job's masked v2
// document), its usage (usage.js), task logs, and Stop.

import { follow, paths, refresher, request } from './api.js';
import {
  DASH, errorNotice, exitCode, facts, formatDuration, h, heading, notice, orDash, replace, row, stateBadge, table, time,
} from './dom.js';
import { reasonText } from './jobs.js';
import { openLog } from './tasklog.js';
import { usageSection } from './usage.js';

const ACTIVE = ['WAITING', 'RUNNING'];

function ports(map) {
  const entries = Object.entries(map || {});
  return entries.length ? entries.map(([label, list]) => `${label}: ${list}`).join('; ') : DASH;
}

function exitSection(s, ui) {
  if (s.appExitCode === null || s.appExitCode === undefined) return null;
  const spec = s.appExitSpec;
  const trigger = s.appExitTriggerTaskRoleName !== null && s.appExitTriggerTaskRoleName !== undefined
    ? `${s.appExitTriggerTaskRoleName}[${s.appExitTriggerTaskIndex}]` : null;
  return h('section', { class: 'card', 'aria-labelledby': 'exit-title', id: 'exit' },
    h('h2', { id: 'exit-title' }, 'Exit'),
    facts([
      ['Exit code', exitCode(s.appExitCode)],
      ['Meaning', spec ? h('span', { id: 'exit-phrase' }, spec.phrase || DASH) : null],
      ['Type', spec ? h('span', { id: 'exit-type' }, spec.type || DASH) : null],
      ['Why', spec && spec.reason && spec.reason !== s.appExitTriggerMessage ? spec.reason : null],
      ['Triggered by task', trigger],
    ]),
    s.appExitTriggerMessage ? h('div', {}, h('h3', {}, 'Trigger message'),
      h('pre', { class: 'message', id: 'trigger-message' }, s.appExitTriggerMessage)) : null,
    s.appExitDiagnostics ? h('details', { open: ui.diagnosticsOpen, ontoggle: (e) => { ui.diagnosticsOpen = e.target.open; } },
      h('summary', {}, 'Diagnostics (last output lines)'),
      h('pre', { class: 'message', id: 'diagnostics' }, s.appExitDiagnostics)) : null);
}

function retries(s) {
  const d = s.retryDetails || {};
  return `${s.retries} (user ${d.user ?? 0}, platform ${d.platform ?? 0}, resource ${d.resource ?? 0})`;
}

function statusSection(job) {
  const s = job.jobStatus;
  const end = s.completedTime || (s.appLaunchedTime ? Date.now() : null);
  return h('section', { class: 'card', 'aria-labelledby': 'status-title', id: 'status' },
    h('h2', { id: 'status-title' }, 'Status'),
    facts([
      ['State', h('span', {}, stateBadge(s.state), ' ', orDash(s.subState))],
      ['Reason', reasonText(s) || null],
      ['User', s.username],
      ['Virtual cluster', s.virtualCluster],
      ['Execution type', s.executionType],
      ['Created', time(s.createdTime)],
      ['Launched', time(s.appLaunchedTime)],
      ['Completed', time(s.completedTime)],
      ['Run time', s.appLaunchedTime ? formatDuration(end - s.appLaunchedTime) : null],
      ['Attempt', s.attempt ?? null],
      ['Retries', retries(s)],
      ['Next retry at', s.retryAt ? time(s.retryAt) : null],
    ]));
}

function taskRows(job, role, tasks, mayReadLogs, onLog) {
  return tasks.map((t) => row([
    String(t.taskIndex),
    stateBadge(t.taskState),
    orDash(t.subState),
    orDash(t.containerNodeId),
    orDash(t.containerIp),
    ports(t.containerPorts),
    orDash(t.containerGpus),
    h('td', { class: 'num' }, exitCode(t.containerExitCode)),
    t.containerExitReason ? h('div', { class: 'reason', title: t.containerExitReason }, t.containerExitReason) : DASH,
    time(t.launchedTime),
    mayReadLogs ? h('button', { type: 'button', class: 'small', id: `log-${role}-${t.taskIndex}`,
      onclick: () => onLog(role, t.taskIndex, null) }, 'Log') : DASH,
  ], { 'data-task': `${role}/${t.taskIndex}`, 'data-state': t.taskState }));
}

function tasksSection(job, mayReadLogs, onLog) {
  const roles = Object.entries(job.taskRoles || {});
  return h('section', { class: 'card', 'aria-labelledby': 'tasks-title', id: 'tasks' },
    h('h2', { id: 'tasks-title' }, 'Tasks'),
    mayReadLogs ? null : h('p', { class: 'hint' }, 'Task logs are shown to the job\u2019s owner and administrators.'),
    roles.map(([role, { taskStatuses }]) => h('div', { class: 'role' },
      h('h3', {}, `${role} `, h('span', { class: 'muted' }, `(${taskStatuses.length} task${taskStatuses.length === 1 ? '' : 's'})`)),
      table(['Index', 'State', 'Sub-state', 'Node', 'IP', 'Ports', 'GPUs', 'Exit code', 'Reason', 'Started', 'Log'],
        taskRows(job, role, taskStatuses, mayReadLogs, onLog), { class: 'tasks' }))));
}

function attemptsSection(s, mayReadLogs, onLog) {
  const attempts = s.attempts || [];
  if (!attempts.length) return null;
  const rows = attempts.map((a) => row([
    String(a.attempt),
    time(a.launchedTime),
    time(a.completedTime),
    h('td', { class: 'num' }, exitCode(a.exitCode)),
    orDash(a.exitPhrase),
    orDash(a.exitType),
    a.exitReason ? h('div', { class: 'reason', title: a.exitReason }, a.exitReason) : DASH,
    h('span', {}, (a.taskStatuses || []).map((t) => h('span', { class: 'attempt-task' },
      mayReadLogs
        ? h('button', { type: 'button', class: 'link-button', id: `log-${a.attempt}-${t.taskRoleName}-${t.taskIndex}`,
          onclick: () => onLog(t.taskRoleName, t.taskIndex, a.attempt) },
          `${t.taskRoleName}[${t.taskIndex}]`)
        : `${t.taskRoleName}[${t.taskIndex}]`,
      ': ', exitCode(t.containerExitCode)))),
  ], { 'data-attempt': String(a.attempt) }));
  return h('section', { class: 'card', 'aria-labelledby': 'attempts-title', id: 'attempts' },
    h('h2', { id: 'attempts-title' }, 'Earlier attempts'),
    table(['Attempt', 'Launched', 'Completed', 'Exit code', 'Meaning', 'Type', 'Reason', 'Tasks (exit code; log)'], rows));
}

// Stop, with a confirmation step in the page (no dialog box). `ui.confirming` survives live refreshes.
function stopControls(job, ctx, ui, status, redraw, reload) {
  const s = job.jobStatus;
  const mine = ctx.session.user === s.username || ctx.session.admin;
  if (!mine || !ACTIVE.includes(s.state)) return null;
  if (s.executionType === 'STOP') return h('span', { class: 'muted' }, 'Stop requested; stopping\u2026');
  const set = (confirming) => {
    ui.confirming = confirming;
    redraw(confirming ? 'stop-confirm' : 'stop');
  };
  async function confirm() {
    ui.confirming = false;
    replace(status, 'Stopping\u2026');
    try {
      const { data } = await request('PUT', paths.executionType(s.username, job.name),
        { body: JSON.stringify({ value: 'STOP' }), signal: ctx.signal });
      replace(status, notice('ok', data.message));
    } catch (err) {
      if (!ctx.signal.aborted) replace(status, errorNotice(err, 'Could not stop the job'));
    }
    reload();
  }
  if (!ui.confirming) return h('button', { type: 'button', class: 'danger', id: 'stop', onclick: () => set(true) }, 'Stop job');
  return h('span', { class: 'stop-confirm', role: 'group', 'aria-label': 'Confirm stop' },
    `Stop ${job.name}? `,
    h('button', { type: 'button', class: 'danger', id: 'stop-confirm', onclick: confirm }, 'Yes, stop it'),
    h('button', { type: 'button', onclick: () => set(false) }, 'Cancel'));
}


// The job's config, fetched once when first opened: a v2 job's is its masked v2 document (secrets "******").
function configPanel(ctx, user, name, ui) {
  const content = h('pre', { id: 'job-config-text', class: 'config' }, 'Loading\u2026');
  const title = h('summary', {}, 'Config');
  let loaded = false;
  const load = async () => {
    try {
      const { data } = await request('GET', paths.config(user, name), { signal: ctx.signal });
      const v2 = data && (data.protocolVersion === 2 || data.protocolVersion === '2');
      replace(title, v2 ? 'Config (protocol v2, secrets masked)' : 'Config (as submitted)');
      replace(content, JSON.stringify(data, null, 2));
    } catch (err) {
      if (!ctx.signal.aborted) replace(content, errorNotice(err, 'Could not load the config'));
    }
  };
  return h('details', { id: 'job-config-panel', open: ui.configOpen, ontoggle: (e) => {
    ui.configOpen = e.target.open;
    if (e.target.open && !loaded) { loaded = true; load(); }
  } }, title, content);
}

export function renderJob(view, ctx) {
  const [user, name] = ctx.args;
  ctx.setTitle(`${name} (${user})`);
  const actions = h('span', { class: 'actions' });
  const status = h('div', { class: 'form-status', 'aria-live': 'polite' });
  const body = h('div', { id: 'job-body' }, h('p', { class: 'muted' }, 'Loading the job\u2026'));
  const logPanel = h('div', { id: 'log-panel' });
  const badge = h('span', { id: 'job-state' });
  const mayReadLogs = ctx.session.user === user || ctx.session.admin;
  const ui = { confirming: false, diagnosticsOpen: false };
  const live = h('span', { class: 'live', 'aria-live': 'polite' });
  const onLog = (role, index, attempt) => openLog(logPanel, ctx, { user, name, role, index, attempt });
  // Outside the body, which each refresh redraws: the usage section keeps its picked task and charts.
  const usage = usageSection(ctx, { user, name });
  const configSection = configPanel(ctx, user, name, ui);
  view.append(
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/jobs' }, 'Jobs'), ' / ',
      h('a', { href: `#/jobs?user=${encodeURIComponent(user)}` }, user), ' / ', name),
    h('div', { class: 'title-row' }, heading(name, ' ', badge), h('div', { class: 'actions' }, live, actions)),
    status, body, configSection, usage.element, logPanel);

  let last = null;
  const draw = (focusId) => {
    const job = last;
    replace(badge, stateBadge(job.jobStatus.state));
    replace(actions, stopControls(job, ctx, ui, status, draw, () => refresh.now()),
      h('a', { class: 'button', href: `#/submit?from=${encodeURIComponent(user)}/${encodeURIComponent(name)}` }, 'Clone'),
      h('a', { class: 'button', href: paths.config(user, name), target: '_blank', rel: 'noopener' }, 'Config'));
    replace(body, statusSection(job), exitSection(job.jobStatus, ui), tasksSection(job, mayReadLogs, onLog),
      attemptsSection(job.jobStatus, mayReadLogs, onLog));
    const focus = focusId && document.getElementById(focusId);
    if (focus) focus.focus();
  };
  const load = async () => {
    try {
      const { data } = await request('GET', paths.job(user, name), { signal: ctx.signal });
      // A refresh that brings nothing new leaves the page alone: redrawing it would replace the buttons under
      // a user's pointer (a click pressed on one and released on its replacement is lost).
      const unchanged = last !== null && JSON.stringify(data) === JSON.stringify(last);
      last = data;
      if (!unchanged) {
        // Keep the keyboard focus on the same control across a live refresh.
        const focused = document.activeElement;
        draw(focused && focused.id && view.contains(focused) ? focused.id : null);
      }
      usage.update(last);
    } catch (err) {
      if (ctx.signal.aborted) return;
      last = null; // the next answer draws the page again, over this notice
      replace(body, errorNotice(err, err.code === 'NoJobError' ? 'No such job' : 'Could not load the job'));
    }
  };
  const refresh = refresher(load);
  ctx.onCleanup(refresh.stop);
  ctx.onCleanup(follow({ user, job: name }, refresh.kick, (state) => {
    replace(live, state === 'live' ? '\u25cf live' : '\u25cb offline, retrying');
    live.className = `live live-${state}`;
  }));
  refresh.now();
}
