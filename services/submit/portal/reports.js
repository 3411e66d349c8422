// Usage reports (#/usage[?from=YYYY-MM-DD&to=YYYY-MM-DD]): for each virtual cluster, a chart of the GPU-hours
// its jobs held and used per UTC day, and its users' totals over the days; the rows as CSV. Administrators
// see every VC; a user their VCs' and their own usage (GET /api/v1/usage decides). A job is counted when it
// ends, on the days it ran: running jobs are not in it yet.

import { request } from './api.js';
import { scale, svg, valueAxis } from './charts.js';
import { DASH, errorNotice, h, heading, replace, row, table } from './dom.js';

const DAY_MS = 86400000;
const WIDTH = 480;
const HEIGHT = 180;
const MARGIN = { left: 48, right: 12, top: 12, bottom: 24 };

const usagePath = (query) => `/api/v1/usage?${new URLSearchParams(Object.entries(query).filter(([, v]) => v))}`;
const hours = (v) => (v === null || v === undefined ? DASH : String(Number(v.toFixed(2))));
const percent = (used, measured) => (measured > 0 ? `${Math.round((100 * used) / measured)}%` : DASH);
const isoDay = (ms) => new Date(ms).toISOString().slice(0, 10);

// Every UTC day from `from` to `to`, both included (the report's own bounds).
function daysOf(from, to) {
  const out = [];
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= Date.parse(`${to}T00:00:00Z`); t += DAY_MS) out.push(isoDay(t));
  return out;
}

function sum(rows, key) {
  return rows.reduce((total, r) => total + (r[key] || 0), 0);
}

// A bar per day: GPU-hours held (outlined, series 0) with the hours used inside it (series 1). Drawn with the
// portal's own chart helpers (charts.js) as inline SVG, classes only (the page's style policy).
export function dayBars(id, days, byDay) {
  const max = Math.max(0, ...days.map((d) => (byDay.get(d) || {}).gpuHoursHeld || 0));
  const axis = valueAxis('cores', max);
  const step = (WIDTH - MARGIN.left - MARGIN.right) / Math.max(days.length, 1);
  const x = (i) => MARGIN.left + i * step;
  const y = scale([0, axis.max], [HEIGHT - MARGIN.bottom, MARGIN.top]);
  const every = Math.ceil(days.length / 8);
  const bars = days.map((day, i) => {
    const r = byDay.get(day);
    if (!r || !r.gpuHoursHeld) return null;
    const bar = (value, cls, inset) => svg('rect', {
      class: `chart-line ${cls}`, fill: 'none', x: (x(i) + inset).toFixed(1), width: Math.max(1, step - 2 * inset).toFixed(1),
      y: y(value).toFixed(1), height: Math.max(0.5, y(0) - y(value)).toFixed(1),
    });
    return svg('g', { 'data-day': day, 'data-held': r.gpuHoursHeld, 'data-used': r.gpuHoursUsed },
      svg('title', {}, `${day}: ${hours(r.gpuHoursHeld)} GPU-hours held, ${hours(r.gpuHoursUsed)} used`),
      bar(r.gpuHoursHeld, 'series-0', step * 0.12),
      r.gpuHoursUsed > 0 ? bar(r.gpuHoursUsed, 'series-1', step * 0.3) : null);
  });
  const labels = days.map((day, i) => (i % every ? null : svg('text', {
    x: (x(i) + step / 2).toFixed(1), y: HEIGHT - MARGIN.bottom + 16, 'text-anchor': 'middle' }, day.slice(5))));
  const grid = axis.ticks.map(({ value, label }) => svg('g', {},
    svg('line', { class: 'chart-grid', x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(value).toFixed(1), y2: y(value).toFixed(1) }),
    svg('text', { x: MARGIN.left - 6, y: y(value).toFixed(1), 'text-anchor': 'end', 'dominant-baseline': 'middle' }, label)));
  const drawn = bars.filter(Boolean).length;
  return svg('svg', {
    class: `chart chart-usage-${id}`, viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img', 'data-chart': `usage-${id}`,
    'data-points': drawn, 'data-max': max, preserveAspectRatio: 'xMidYMid meet',
  }, svg('title', {}, `GPU-hours held and used per UTC day: ${drawn} day${drawn === 1 ? '' : 's'} with usage, up to ${hours(max)}`),
  svg('g', { class: 'chart-axes' }, grid, labels,
    svg('line', { class: 'chart-axis', x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(0), y2: y(0) })),
  bars);
}

// The rows of one VC summed by user over the days.
function byUser(rows) {
  const users = new Map();
  for (const r of rows) {
    const u = users.get(r.user) || { user: r.user, gpuHoursHeld: 0, gpuHoursUsed: 0, gpuHoursMeasured: 0, cpuCoreHoursHeld: 0, jobs: 0 };
    for (const key of ['gpuHoursHeld', 'gpuHoursUsed', 'gpuHoursMeasured', 'cpuCoreHoursHeld', 'jobs']) u[key] += r[key];
    users.set(r.user, u);
  }
  return [...users.values()].sort((a, b) => b.gpuHoursHeld - a.gpuHoursHeld || a.user.localeCompare(b.user));
}

function vcCard(vc, report, vcRows, userRows) {
  const own = !vcRows.length; // only the asker's own rows of a VC they may not see whole
  const daily = own ? userRows : vcRows;
  const byDay = new Map();
  for (const r of daily) {
    const d = byDay.get(r.day) || { gpuHoursHeld: 0, gpuHoursUsed: 0 };
    d.gpuHoursHeld += r.gpuHoursHeld;
    d.gpuHoursUsed += r.gpuHoursUsed;
    byDay.set(r.day, d);
  }
  const held = sum(daily, 'gpuHoursHeld');
  const used = sum(daily, 'gpuHoursUsed');
  return h('section', { class: 'card vc-usage', 'data-vc': vc, 'aria-labelledby': `usage-${vc}` },
    h('h2', { id: `usage-${vc}` }, vc, own ? h('span', { class: 'muted' }, ' (your own usage)') : null),
    h('p', { class: 'usage-total' }, `${hours(held)} GPU-hours held, ${hours(used)} used (`,
      `${percent(used, sum(daily, 'gpuHoursMeasured'))} of the measured); ${hours(sum(daily, 'cpuCoreHoursHeld'))} `,
      `core-hours held; ${sum(daily, 'jobs')} jobs ended`),
    dayBars(vc, daysOf(report.from, report.to), byDay),
    h('p', { class: 'legend' }, h('span', { class: 'legend-item series-0' }, 'GPU-hours held'), ' ',
      h('span', { class: 'legend-item series-1' }, 'used')),
    table(['User', 'GPU-hours held', 'used', 'utilisation', 'core-hours held', 'jobs'], byUser(userRows).map((u) => row([
      u.user, hours(u.gpuHoursHeld), hours(u.gpuHoursUsed), percent(u.gpuHoursUsed, u.gpuHoursMeasured),
      hours(u.cpuCoreHoursHeld), String(u.jobs)], { 'data-user': u.user })), { class: 'usage-users' }));
}

const CSV_COLUMNS = [['day', 'day'], ['vc', 'virtualCluster'], ['user', 'user'], ['gpu_hours_held', 'gpuHoursHeld'],
  ['gpu_hours_used', 'gpuHoursUsed'], ['gpu_hours_measured', 'gpuHoursMeasured'], ['gpu_utilization', 'gpuUtilization'],
  ['cpu_core_hours_held', 'cpuCoreHoursHeld'], ['cpu_core_hours_used', 'cpuCoreHoursUsed'], ['jobs', 'jobs'],
  ['attempts', 'attempts']];

// The rows as the API's CSV (format=csv) has them; names are letters, digits, '_' and '-': nothing to quote.
export function csvOf(rows) {
  const lines = [CSV_COLUMNS.map(([name]) => name).join(',')];
  for (const r of rows) lines.push(CSV_COLUMNS.map(([, key]) => (r[key] === null ? '' : String(r[key]))).join(','));
  return `${lines.join('\n')}\n`;
}

function rangeForm(ctx, from, to) {
  const first = h('input', { type: 'date', id: 'usage-from', value: from });
  const last = h('input', { type: 'date', id: 'usage-to', value: to });
  const submit = (event) => {
    event.preventDefault();
    ctx.go(`/usage?${new URLSearchParams({ from: first.value, to: last.value })}`);
  };
  return h('form', { class: 'filters', id: 'usage-range', onsubmit: submit },
    h('label', { for: 'usage-from' }, 'From '), first, ' ', h('label', { for: 'usage-to' }, 'to '), last, ' ',
    h('button', { type: 'submit' }, 'Show'), h('span', { class: 'muted' }, ' UTC days, at most 92'));
}

export function renderReports(view, ctx) {
  const from = ctx.params.get('from') || '';
  const to = ctx.params.get('to') || '';
  const body = h('div', { id: 'usage' }, h('p', { class: 'muted' }, 'Loading\u2026'));
  view.append(heading('Usage'),
    h('p', { class: 'hint' }, 'GPU-hours each virtual cluster held (GPUs x time, from each task\u2019s start to its end, '
      + 'retries and preempted attempts included) and used (held x GPU utilisation, where the profiler measured it), '
      + 'per UTC day. A job is counted when it ends, on the days it ran.'),
    rangeForm(ctx, from, to), body);
  (async () => {
    try {
      const [vcs, users] = await Promise.all([
        request('GET', usagePath({ by: 'vc', from, to }), { signal: ctx.signal }),
        request('GET', usagePath({ by: 'user', from, to }), { signal: ctx.signal })]);
      const report = users.data;
      const names = [...new Set([...vcs.data.rows, ...report.rows].map((r) => r.virtualCluster))].sort();
      const download = h('a', { class: 'button', id: 'usage-csv', download: `paiq-usage-${report.from}-${report.to}.csv`,
        href: URL.createObjectURL(new Blob([csvOf(report.rows)], { type: 'text/csv' })) }, 'Download CSV');
      ctx.onCleanup(() => URL.revokeObjectURL(download.href));
      replace(body, h('p', {}, `${report.from} to ${report.to} (UTC) `, download),
        names.length ? h('div', { class: 'cards', id: 'usage-vcs' }, names.map((vc) => vcCard(vc, report,
          vcs.data.rows.filter((r) => r.virtualCluster === vc), report.rows.filter((r) => r.virtualCluster === vc))))
          : h('p', { class: 'empty' }, 'No usage in these days: jobs are counted when they end.'));
    } catch (err) {
      if (!ctx.signal.aborted) replace(body, errorNotice(err, 'Could not load the usage report'));
    }
  })();
}
