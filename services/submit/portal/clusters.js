// Virtual clusters: quota, the capacity it gives, what running jobs use, and jobs per state.

import { follow, paths, refresher, request } from './api.js';
import { errorNotice, h, heading, replace, row, stateBadge, table } from './dom.js';

const STATES = ['WAITING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'STOPPED'];
const count = (n) => String(n);
// Memory in the capacity's unit: GB (one decimal at most) from 10 GB on, else MB.
const memory = (mb, capacityMB) => (capacityMB >= 10240 ? `${Number((mb / 1024).toFixed(1))} GB` : `${mb} MB`);
const RESOURCES = [['CPUs', 'cpus', 'cpus', count], ['Memory', 'memory', 'memoryMB', memory], ['GPUs', 'gpus', 'gpus', count]];

function usage(used, capacity, format) {
  const pct = capacity > 0 ? Math.round((100 * used) / capacity) : 0;
  const text = `${format(used, capacity)} of ${format(capacity, capacity)}`;
  return h('span', { class: 'usage' },
    h('meter', { min: '0', max: String(Math.max(capacity, 1)), value: String(used), high: String(capacity * 0.9),
      'aria-label': `${text} used` }),
    h('span', {}, text, capacity > 0 ? h('span', { class: 'muted' }, ` (${pct}%)`) : null));
}

function card(vc) {
  const who = [...vc.users.map((u) => (u === '*' ? 'everyone' : u)), ...vc.groups.map((g) => `group ${g}`)];
  const jobs = STATES.filter((s) => vc.jobs[s]).map((s) => h('span', { class: 'count' }, stateBadge(s), ` ${vc.jobs[s]}`));
  return h('section', { class: 'card vc', 'data-vc': vc.name, 'aria-labelledby': `vc-${vc.name}` },
    h('h2', { id: `vc-${vc.name}` }, vc.name),
    table(['Resource', 'Quota', 'Used of capacity'], RESOURCES.map(([label, quotaKey, key, format]) => row([
      label,
      vc.quota[quotaKey] === undefined ? '\u2014' : `${vc.quota[quotaKey]}%`,
      usage(vc.used[key], vc.capacity[key], format),
    ], { 'data-resource': key })), { class: 'resources' }),
    h('p', { class: 'jobs-per-state' }, h('strong', {}, 'Jobs: '), jobs.length ? jobs : 'none'),
    h('p', { class: 'muted' }, 'Open to ', who.length ? who.join(', ') : 'no one (no users or groups)'));
}

export function renderClusters(view, ctx) {
  const list = h('div', { class: 'cards', id: 'clusters' }, h('p', { class: 'muted' }, 'Loading\u2026'));
  view.append(heading('Virtual clusters'),
    h('p', { class: 'hint' }, 'Capacity is the VC\u2019s quota of the nodes now registered; used counts the resources held by its jobs.'),
    list);
  const load = async () => {
    try {
      const { data } = await request('GET', paths.clusters, { signal: ctx.signal });
      const vcs = Object.values(data).sort((a, b) => (a.name === 'default' ? -1 : b.name === 'default' ? 1 : a.name.localeCompare(b.name)));
      replace(list, vcs.map(card));
    } catch (err) {
      if (!ctx.signal.aborted) replace(list, errorNotice(err, 'Could not load the virtual clusters'));
    }
  };
  const refresh = refresher(load, 500);
  ctx.onCleanup(refresh.stop);
  ctx.onCleanup(follow({}, refresh.kick, () => {}));
  refresh.now();
}
