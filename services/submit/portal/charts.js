// Line charts drawn as inline SVG by the page itself (no library, nothing fetched; every attribute is a
// presentation attribute or a class, so the page's style-src 'self' policy holds). The scale, tick and
// path functions are pure; lineChart builds the element.
//
// A value is what a task used over a span [start, end] (means over the span; older spans are longer),
// so a series is drawn as steps: flat across each span, joined to the next span when they touch, with a
// gap where a value is null ("not measured", never zero) or where spans do not touch.

const SVG_NS = 'http://www.w3.org/2000/svg';
const KIB = 1024;
const BYTE_UNITS = [['B', 1], ['KiB', KIB], ['MiB', KIB ** 2], ['GiB', KIB ** 3], ['TiB', KIB ** 4]];
// The smallest axis top per kind of value, so an idle series is drawn as a flat line at the bottom.
const FLOOR = { cores: 1, bytes: KIB ** 2, rate: KIB, percent: 100 };

export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) el.setAttribute(key, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined && child !== false) el.append(child);
  }
  return el;
}

// --- numbers and their units ---------------------------------------------------------------------

const short = (v) => String(Number(v.toPrecision(3)));

function byteUnit(v) {
  let unit = BYTE_UNITS[0];
  for (const u of BYTE_UNITS) if (Math.abs(v) >= u[1]) unit = u;
  return unit;
}

export function formatBytes(v) {
  if (v === null || v === undefined) return null;
  const [name, size] = byteUnit(v);
  return `${short(v / size)} ${name}`;
}

export const formatRate = (v) => (v === null || v === undefined ? null : `${formatBytes(v)}/s`);
export function formatCores(v) {
  if (v === null || v === undefined) return null;
  const n = short(v);
  return `${n} core${n === '1' ? '' : 's'}`;
}
export const formatPercent = (v) => (v === null || v === undefined ? null : `${short(v)}%`);

export const FORMATS = { cores: formatCores, bytes: formatBytes, rate: formatRate, percent: formatPercent };

const pad = (n) => String(n).padStart(2, '0');

// A time of day in the browser's zone: HH:MM, or HH:MM:SS.
export function formatClock(ms, seconds) {
  const d = new Date(ms);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}${seconds ? `:${pad(d.getSeconds())}` : ''}`;
}

// --- scales and ticks ----------------------------------------------------------------------------

// A function mapping [d0, d1] onto [r0, r1] (a flat domain maps to the middle of the range).
export function scale([d0, d1], [r0, r1]) {
  if (d1 === d0) return () => (r0 + r1) / 2;
  return (v) => r0 + ((v - d0) / (d1 - d0)) * (r1 - r0);
}

// The round step (1, 2 or 5 times a power of ten) that cuts `span` into about `count` parts.
export function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || 10 * power;
}

// A value axis from 0: its top (a round number at or above `max`) and its labelled ticks. Bytes are cut
// in the binary unit the top is shown in (0, 50, 100, 150 MiB), so each label is round.
export function valueAxis(kind, max, count = 4) {
  const top = Math.max(max, FLOOR[kind] || 1);
  if (kind === 'percent') {
    return { max: 100, ticks: [0, 25, 50, 75, 100].map((v) => ({ value: v, label: `${v}%` })) };
  }
  const size = kind === 'bytes' || kind === 'rate' ? byteUnit(top)[1] : 1;
  const step = niceStep(top / size, count) * size;
  const ticks = [];
  for (let i = 0; i * step < top * (1 + 1e-9) || ticks.length < 2; i += 1) ticks.push(i * step);
  if (ticks[ticks.length - 1] < top) ticks.push(ticks.length * step);
  const label = kind === 'cores' ? short : FORMATS[kind];
  return { max: ticks[ticks.length - 1], ticks: ticks.map((v) => ({ value: v, label: label(v) })) };
}

// Round time steps, in ms, and whether their labels need seconds.
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400]
  .map((s) => s * 1000);

// Ticks at round times of day (local) within [t0, t1], about `count` of them.
export function timeTicks(t0, t1, count = 5) {
  const raw = (t1 - t0) / Math.max(1, count);
  const step = TIME_STEPS.find((s) => s >= raw) || Math.ceil(raw / 86400000) * 86400000;
  const offset = new Date(t0).getTimezoneOffset() * 60000; // local midnight, not UTC's, is round
  const ticks = [];
  for (let t = Math.ceil((t0 - offset) / step) * step + offset; t <= t1; t += step) {
    ticks.push({ value: t, label: formatClock(t, step < 60000) });
  }
  return ticks;
}

// --- the path ------------------------------------------------------------------------------------

// An SVG path through spans [{start, end, value}] (oldest first): a step per span, a gap at a null value
// or where a span starts well after the previous one ends. The second value: how many spans were drawn.
export function stepPath(spans, x, y) {
  const parts = [];
  let drawn = 0;
  let prevEnd = null;
  for (const { start, end, value } of spans) {
    if (value === null || value === undefined) {
      prevEnd = null;
      continue;
    }
    const touches = prevEnd !== null && start - prevEnd <= 0.5 * Math.max(end - start, 1);
    const [x0, x1, yv] = [x(start), x(end), y(value)].map((n) => n.toFixed(1));
    parts.push(`${touches ? 'L' : 'M'}${x0} ${yv}L${x1} ${yv}`);
    prevEnd = end;
    drawn += 1;
  }
  return [parts.join(''), drawn];
}

// --- the chart -----------------------------------------------------------------------------------

const WIDTH = 480;
const HEIGHT = 180;
const MARGIN = { left: 62, right: 12, top: 12, bottom: 24 };

function seriesMax(series) {
  let max = null;
  for (const s of series) {
    for (const { value } of s.spans) if (value !== null && value !== undefined && (max === null || value > max)) max = value;
  }
  return max;
}

function grid(axis, timeAxis, x, y) {
  const [left, right] = [MARGIN.left, WIDTH - MARGIN.right];
  const [top, bottom] = [MARGIN.top, HEIGHT - MARGIN.bottom];
  return svg('g', { class: 'chart-axes' },
    axis.ticks.map(({ value, label }) => svg('g', {},
      svg('line', { class: 'chart-grid', x1: left, x2: right, y1: y(value).toFixed(1), y2: y(value).toFixed(1) }),
      svg('text', { x: left - 6, y: y(value).toFixed(1), 'text-anchor': 'end', 'dominant-baseline': 'middle' }, label))),
    timeAxis.map(({ value, label }) => svg('g', {},
      svg('line', { class: 'chart-tick', x1: x(value).toFixed(1), x2: x(value).toFixed(1), y1: bottom, y2: bottom + 4 }),
      svg('text', { x: x(value).toFixed(1), y: bottom + 16, 'text-anchor': 'middle' }, label))),
    svg('line', { class: 'chart-axis', x1: left, x2: right, y1: bottom, y2: bottom }),
    svg('line', { class: 'chart-axis', x1: left, x2: left, y1: top, y2: bottom }));
}

// spec: {id, title, kind: cores | bytes | rate | percent, series: [{name, spans: [{start, end, value}]}],
// refs: [{value, label}]} (dashed lines: what the task asked for, its limit). An <svg class="chart"> with
// data-chart (the id), data-points (how many spans were drawn, the most of any series) and data-max (the
// largest value drawn, in the kind's base unit: cores, bytes, bytes/s, percent), titled for screen readers.
export function lineChart(spec) {
  const { id, title, kind, series, refs = [] } = spec;
  const spans = series.flatMap((s) => s.spans);
  const t0 = Math.min(...spans.map((s) => s.start));
  const t1 = Math.max(...spans.map((s) => s.end));
  const max = seriesMax(series);
  const axis = valueAxis(kind, Math.max(max ?? 0, ...refs.map((r) => r.value * 1.05)));
  const x = scale([t0, t1], [MARGIN.left, WIDTH - MARGIN.right]);
  const y = scale([0, axis.max], [HEIGHT - MARGIN.bottom, MARGIN.top]);
  let points = 0;
  const paths = series.map((s, i) => {
    const [d, drawn] = stepPath(s.spans, x, y);
    points = Math.max(points, drawn);
    return svg('path', { class: `chart-line series-${i}`, d, fill: 'none' }, svg('title', {}, s.name));
  }).reverse(); // the first series is drawn last: on top
  const fmt = FORMATS[kind];
  const lines = refs.map((r) => svg('g', { class: 'chart-ref' },
    svg('line', { x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(r.value).toFixed(1), y2: y(r.value).toFixed(1),
      'stroke-dasharray': '5 4' }),
    svg('text', { x: WIDTH - MARGIN.right - 4, y: (y(r.value) - 4).toFixed(1), 'text-anchor': 'end' }, r.label)));
  const described = `${title}: ${points} point${points === 1 ? '' : 's'} from ${formatClock(t0, true)} to `
    + `${formatClock(t1, true)}${max === null ? '' : `, up to ${fmt(max)}`}`
    + `${refs.length ? `; ${refs.map((r) => r.label).join('; ')}` : ''}`;
  return svg('svg', {
    class: `chart chart-${id}`, viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img', 'data-chart': id,
    'data-points': points, 'data-max': max ?? '', preserveAspectRatio: 'xMidYMid meet',
  }, svg('title', {}, described), grid(axis, timeTicks(t0, t1), x, y), lines, paths);
}
