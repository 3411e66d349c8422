// A job's usage (paiq's profiling extension): the attempt's summary (GPU-hours used against held, CPU
// core-hours, the memory peak closest to its limit, idle-GPU warnings), each task's latest reading, and the
// picked task's series as charts. While the job runs it polls at the sampling interval (at least every
// 2 s): the job's profile, and only the picked task's points newer than those it has; it stops once the
// job is final.

import { paths, refresher, request } from './api.js';
import { formatBytes, formatCores, formatPercent, lineChart } from './charts.js';
import { DASH, errorNotice, facts, h, replace, row, table } from './dom.js';

const MIN_POLL_S = 2;
const REFETCH_AFTER = 60; // points appended before the whole series is read again (older ones coarsen)

const taskKey = (t) => `${t.taskRoleName}[${t.taskIndex}]`;

function formatCoreTime(hours) {
  if (hours >= 1) return `${Number(hours.toPrecision(3))} core-hours`;
  if (hours * 60 >= 1) return `${Number((hours * 60).toPrecision(3))} core-minutes`;
  return `${Number((hours * 3600).toPrecision(3))} core-seconds`;
}

const share = (part, whole) => (whole > 0 ? ` (${Math.round((100 * part) / whole)}%)` : '');

function gpuSummary(u) {
  if (!u.gpuHoursHeld) return 'no GPUs held';
  const held = `${Number(u.gpuHoursHeld.toPrecision(3))} GPU-hours held`;
  if (u.gpuHoursUsed === null) return `${held}; utilisation not measured`;
  return h('span', { id: 'usage-gpu' }, `${Number(u.gpuHoursUsed.toPrecision(3))} used of ${held}`,
    u.gpuUtilization === null ? '' : ` (${formatPercent(u.gpuUtilization)} utilisation)`);
}

function summary(profile) {
  const u = profile.usage;
  const memory = u.memoryPeakTask === null ? null : h('span', {},
    h('span', { id: 'usage-memory-peak', 'data-bytes': u.memoryPeakBytes }, formatBytes(u.memoryPeakBytes)),
    ` of ${formatBytes(u.memoryLimitBytes)}${share(u.memoryPeakBytes, u.memoryLimitBytes)}, task `,
    h('strong', { id: 'usage-memory-task' }, u.memoryPeakTask));
  return h('div', { id: 'usage-summary' },
    [...u.warnings, ...u.idleGpuTasks.filter((t) => !u.warnings.some((w) => w.includes(t)))
      .map((t) => `${t} holds GPUs it does not use`)]
      .map((w) => h('div', { class: 'notice notice-warn usage-warning', role: 'alert' }, h('strong', {}, 'Idle GPUs: '), w)),
    facts([
      ['GPU', gpuSummary(u)],
      ['CPU', formatCoreTime(u.cpuCoreHours)],
      ['Memory peak (closest to its limit)', memory],
      ['Tasks sampled', String(u.tasksSampled)],
    ]));
}

function gpuNow(t) {
  if (!t.gpus.length) return DASH;
  const util = t.last ? t.last.gpuUtilization : null;
  return `${util === null ? 'not measured' : formatPercent(util)} (GPU ${t.gpus.join(', ')})${t.gpuIdle ? ' idle' : ''}`;
}

function taskTable(tasks, picked, pick) {
  const rows = tasks.map((t) => {
    const key = taskKey(t);
    const last = t.last;
    return row([
      h('button', { type: 'button', class: 'link-button', id: `usage-pick-${t.taskRoleName}-${t.taskIndex}`,
        'aria-pressed': key === picked ? 'true' : 'false', onclick: () => pick(key) }, key),
      t.nodeId,
      h('td', { class: 'num' }, last ? `${formatCores(last.cpuCores)} of ${t.cpuNumber}` : DASH),
      h('td', { class: 'num' }, `${last ? formatBytes(last.memoryBytes) : DASH} / ${formatBytes(t.memoryLimitBytes)}`),
      gpuNow(t),
      h('td', { class: 'num' }, String(t.samples)),
    ], { 'data-usage-task': key, class: key === picked ? 'picked' : null, onclick: () => pick(key) });
  });
  return table(['Task', 'Node', 'CPU now', 'Memory now / limit', 'GPU now', 'Samples'], rows,
    { class: 'usage-tasks', id: 'usage-tasks' });
}

// A chart of some of the points' fields, or "not measured" when every value is null.
function chart(points, spec) {
  const series = spec.fields.map(([field, name]) => ({
    name, spans: points.map((p) => ({ start: p.time - p.spanMs, end: p.time, value: p[field] })),
  }));
  const measured = series.some((s) => s.spans.some((p) => p.value !== null && p.value !== undefined));
  const legend = spec.fields.length > 1 ? h('span', { class: 'legend' },
    spec.fields.map(([, name], i) => h('span', { class: `legend-item series-${i}` }, name))) : null;
  return h('figure', { class: 'chart-box', id: `chart-${spec.id}` },
    h('figcaption', {}, h('span', { class: 'chart-title' }, spec.title), legend),
    measured ? lineChart({ ...spec, series })
      : h('p', { class: 'not-measured', 'data-chart-missing': spec.id }, spec.missing || 'not measured'));
}

function charts(task, points) {
  const specs = [
    { id: 'cpu', title: 'CPU (cores)', kind: 'cores', fields: [['cpuCores', 'cores']],
      refs: [{ value: task.cpuNumber, label: `${formatCores(task.cpuNumber)} asked for` }] },
    { id: 'memory', title: 'Memory', kind: 'bytes', fields: [['memoryBytes', 'in use'], ['memoryPeakBytes', 'peak']],
      refs: [{ value: task.memoryLimitBytes, label: `limit ${formatBytes(task.memoryLimitBytes)}` }] },
    { id: 'network', title: 'Network', kind: 'rate', missing: 'not measured (host network)',
      fields: [['networkReceiveBytesPerSecond', 'received'], ['networkTransmitBytesPerSecond', 'sent']] },
    { id: 'disk', title: 'Disk', kind: 'rate',
      fields: [['diskReadBytesPerSecond', 'read'], ['diskWriteBytesPerSecond', 'written']] },
  ];
  if (task.gpus.length) {
    specs.push({ id: 'gpu', title: 'GPU utilisation', kind: 'percent', fields: [['gpuUtilization', 'utilisation']] },
      { id: 'gpu-memory', title: 'GPU memory', kind: 'bytes', fields: [['gpuMemoryBytes', 'in use']] });
  }
  return h('div', { class: 'charts', id: 'usage-charts', 'data-task': taskKey(task) },
    specs.map((spec) => chart(points, spec)));
}

// The section, filled in by update(job) (the job page calls it with each job detail it loads).
export function usageSection(ctx, { user, name }) {
  const element = h('div', { id: 'usage-panel' });
  const state = { attempt: null, active: false, loaded: false, profile: null, picked: null, series: null,
    appended: 0, problem: null, waiting: false };

  const pickedTask = () => (state.profile ? state.profile.tasks.find((t) => taskKey(t) === state.picked) : null);

  async function readSeries(task) {
    const key = taskKey(task); // the pick may change while this reads: the points are this task's
    const whole = !state.series || state.series.key !== key || state.appended >= REFETCH_AFTER
      || !state.series.points.length;
    const last = whole ? 0 : state.series.points[state.series.points.length - 1].time;
    const query = { attempt: String(state.attempt), ...(last ? { since: String(last) } : {}) };
    const path = paths.taskProfile(user, name, task.taskRoleName, task.taskIndex, query);
    const { data } = await request('GET', path, { signal: ctx.signal });
    if (whole) {
      state.series = { key, points: data.points };
      state.appended = 0;
    } else {
      state.series.points = state.series.points.concat(data.points.filter((p) => p.time > last));
      state.appended += data.points.length;
    }
  }

  function emptyText() {
    if (state.active) return 'No sample yet: each running task is sampled every few seconds.';
    return state.waiting ? 'Not running: its tasks are sampled once they run.' : 'No usage was sampled for this attempt.';
  }

  function draw() {
    const focused = document.activeElement;
    const focusId = focused && focused.id && element.contains(focused) ? focused.id : null;
    const profile = state.profile;
    const task = pickedTask();
    const interval = profile && profile.intervalSeconds;
    replace(element, h('section', { class: 'card', 'aria-labelledby': 'usage-title', id: 'usage' },
      h('h2', { id: 'usage-title' }, 'Usage ',
        interval ? h('span', { class: 'muted' }, `(sampled every ${interval} s${state.active ? ', live' : ''})`) : null),
      state.problem,
      !profile || !profile.tasks.length
        ? h('p', { class: 'muted', id: 'usage-empty' }, emptyText())
        : [summary(profile), taskTable(profile.tasks, state.picked, pick),
          task ? h('h3', { id: 'usage-task-title' }, `${taskKey(task)} over time`) : null,
          task && state.series && state.series.key === state.picked ? charts(task, state.series.points) : null]));
    const focus = focusId && document.getElementById(focusId);
    if (focus) focus.focus();
  }

  async function load() {
    try {
      const { data } = await request('GET', paths.profile(user, name, state.attempt), { signal: ctx.signal });
      state.profile = data;
      if (!data.tasks.some((t) => taskKey(t) === state.picked)) state.picked = data.tasks.length ? taskKey(data.tasks[0]) : null;
      const task = pickedTask();
      if (task) await readSeries(task);
      state.problem = null;
      state.loaded = true;
    } catch (err) {
      if (ctx.signal.aborted) return;
      state.problem = errorNotice(err, 'Could not read the job\u2019s usage');
    }
    draw();
  }

  // One load at a time (a request during one runs after it); while the job runs, again at the sampling
  // interval (at least MIN_POLL_S).
  const poll = refresher(async () => {
    await load();
    if (state.active) poll.kick();
  }, () => 1000 * Math.max(MIN_POLL_S, (state.profile && state.profile.intervalSeconds) || MIN_POLL_S));

  function pick(key) {
    if (key === state.picked) return;
    state.picked = key;
    draw();
    poll.now();
  }

  ctx.onCleanup(() => {
    state.active = false;
    poll.stop();
  });

  function update(job) {
    const s = job.jobStatus;
    const attempt = s.attempt ?? 0;
    const active = s.state === 'RUNNING';
    const changed = attempt !== state.attempt;
    const ended = state.active && !active;
    state.active = active;
    state.waiting = s.state === 'WAITING';
    if (changed) {
      Object.assign(state, { attempt, loaded: false, profile: null, series: null, picked: null, problem: null });
    }
    if (!active && !s.usage && !ended) {
      // Queued, or final and never sampled: nothing to read.
      state.loaded = true;
      draw();
      return;
    }
    if (changed || ended || !state.loaded) poll.now();
    else if (active) poll.kick();
  }

  return { element, update };
}
