// Building the page. Every element is made with createElement and every piece of data goes in as a
// text node or an attribute value: job names, reasons and logs are user data, and the portal never
// hands a string to the browser's HTML parser (a test keeps the HTML-parsing sinks out of these files).

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    else if (key === 'value' || key === 'checked') el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

export const DASH = '\u2014';

const pad = (n) => String(n).padStart(2, '0');

// Times are ms since the epoch; shown in the browser's time zone.
export function formatTime(ms) {
  if (ms === null || ms === undefined) return DASH;
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function formatDuration(ms) {
  if (ms === null || ms === undefined || ms < 0) return DASH;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours}h ${m % 60}m`;
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

export function ago(ms) {
  if (ms === null || ms === undefined) return '';
  const delta = Date.now() - ms;
  return delta < 5000 ? 'just now' : `${formatDuration(delta)} ago`;
}

export function time(ms) {
  if (ms === null || ms === undefined) return DASH;
  return h('time', { datetime: new Date(ms).toISOString(), title: ago(ms) }, formatTime(ms));
}

export function stateBadge(state) {
  const known = ['WAITING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'STOPPED'].includes(state);
  return h('span', { class: `state state-${known ? state.toLowerCase() : 'unknown'}` }, state || 'UNKNOWN');
}

export function exitCode(code) {
  if (code === null || code === undefined) return DASH;
  return h('span', { class: code === 0 ? 'exit exit-ok' : 'exit exit-bad' }, String(code));
}

export function orDash(value) {
  return value === null || value === undefined || value === '' ? DASH : String(value);
}

// A table with a header row; rows are arrays of cells (strings or nodes).
export function table(headers, rows, attrs = {}) {
  return h('div', { class: 'table-wrap' },
    h('table', attrs,
      h('thead', {}, h('tr', {}, headers.map((text) => h('th', { scope: 'col' }, text)))),
      h('tbody', {}, rows)));
}

export function row(cells, attrs = {}) {
  return h('tr', attrs, cells.map((cell) => (cell instanceof Node && cell.nodeName === 'TD' ? cell : h('td', {}, cell))));
}

// A description list from [term, value] pairs (pairs with a null value are left out).
export function facts(pairs) {
  return h('dl', { class: 'facts' },
    pairs.filter(([, value]) => value !== null && value !== undefined)
      .map(([term, value]) => h('div', {}, h('dt', {}, term), h('dd', {}, value))));
}

export function notice(kind, ...children) {
  return h('div', { class: `notice notice-${kind}`, role: kind === 'error' ? 'alert' : 'status' }, children);
}

export function errorNotice(err, what) {
  const code = err && err.code ? ` (${err.code})` : '';
  return notice('error', h('strong', {}, `${what}${code}: `), err && err.message ? err.message : String(err));
}

export function jobHref(user, name) {
  return `#/job/${encodeURIComponent(user)}/${encodeURIComponent(name)}`;
}

export function heading(text, ...extra) {
  return h('h1', { tabindex: '-1' }, text, extra);
}
