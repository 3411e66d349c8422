// A task's log (GET .../tasks/{role}/{index}/log): the last lines, optionally followed as they come.
// The log goes into one text node: whatever a program printed is shown as text, never as markup.

import { stream, paths } from './api.js';
import { errorNotice, h, replace } from './dom.js';

const MAX_CHARS = 2_000_000; // what the panel keeps of a followed log (the oldest text goes first)
const TAILS = [['200', 'last 200 lines'], ['1000', 'last 1000 lines'], ['', 'all kept lines']];

let current = null; // the AbortController of the log being read

export function openLog(panel, ctx, task) {
  const { user, name, role, index, attempt } = task;
  const label = `${role}[${index}]${attempt !== null ? `, attempt ${attempt}` : ''}`;
  const tail = h('select', { id: 'log-tail' }, TAILS.map(([v, text]) => h('option', { value: v }, text)));
  const which = h('select', { id: 'log-stream' }, ['all', 'stdout', 'stderr'].map((v) => h('option', { value: v }, v)));
  const followBox = h('input', { type: 'checkbox', id: 'log-follow' });
  const state = h('span', { class: 'muted', id: 'log-state', 'aria-live': 'polite' });
  const text = document.createTextNode('');
  const pre = h('pre', { class: 'log', id: 'log-text', tabindex: '0', 'aria-label': `Log of ${label}` }, text);
  const problem = h('div');

  async function read() {
    if (current) current.abort();
    const controller = new AbortController();
    current = controller;
    ctx.signal.addEventListener('abort', () => controller.abort());
    const query = { stream: which.value };
    if (tail.value) query.tail = tail.value;
    if (followBox.checked) query.follow = 'true';
    if (attempt !== null) query.attempt = String(attempt);
    text.data = '';
    replace(problem);
    replace(state, 'loading\u2026');
    try {
      const resp = await stream(paths.log(user, name, role, index, query), { signal: controller.signal });
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      replace(state, followBox.checked ? 'following\u2026' : 'loading\u2026');
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 30;
        text.data = (text.data + decoder.decode(value, { stream: true })).slice(-MAX_CHARS);
        if (atBottom) pre.scrollTop = pre.scrollHeight;
      }
      text.data += decoder.decode();
      const lines = text.data ? text.data.split('\n').length - (text.data.endsWith('\n') ? 1 : 0) : 0;
      const count = `${lines} line${lines === 1 ? '' : 's'}`;
      replace(state, followBox.checked ? `log complete, ${count}` : count);
      if (!text.data) text.data = '(nothing was logged)';
    } catch (err) {
      if (controller.signal.aborted) return;
      replace(state);
      replace(problem, errorNotice(err, 'Could not read the log'));
    }
  }

  for (const control of [tail, which, followBox]) control.addEventListener('change', read);
  replace(panel, h('section', { class: 'card', 'aria-labelledby': 'log-title', id: 'log' },
    h('div', { class: 'title-row' },
      h('h2', { id: 'log-title', tabindex: '-1' }, `Log of ${label}`),
      h('button', { type: 'button', id: 'log-close', onclick: () => { if (current) current.abort(); replace(panel); } }, 'Close')),
    h('div', { class: 'filters' },
      h('label', { for: 'log-tail' }, 'Show'), tail,
      h('label', { for: 'log-stream' }, 'Stream'), which,
      h('label', { class: 'check' }, followBox, ' Follow'),
      h('button', { type: 'button', id: 'log-reload', onclick: read }, 'Reload'),
      state),
    problem, pre));
  panel.querySelector('h2').focus();
  panel.scrollIntoView({ block: 'start' });
  read();
}
