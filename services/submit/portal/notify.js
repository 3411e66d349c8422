// Notifications (#/notify): where e-mail goes, your subscriptions (e-mail, webhooks), adding and removing them,
// and your recent deliveries with their state and last error. A new webhook's signing key is shown once.

import { request } from './api.js';
import { DASH, errorNotice, formatTime, h, heading, notice, replace, row, table } from './dom.js';

const BASE = '/api/v1/notifications';
const KINDS = ['running', 'succeeded', 'failed', 'stopped', 'retried'];

function emailForm(current, ctx, reload) {
  const status = h('div', { class: 'form-status', 'aria-live': 'polite' });
  const input = h('input', { id: 'notify-email', name: 'email', type: 'email', value: current || '',
    autocomplete: 'email', placeholder: 'you@example.com' });
  async function submit(event) {
    event.preventDefault();
    try {
      const { data } = await request('PUT', `${BASE}/email`, { body: JSON.stringify({ email: input.value.trim() }),
        signal: ctx.signal });
      replace(status, notice('ok', data.message));
      reload();
    } catch (err) {
      if (!ctx.signal.aborted) replace(status, errorNotice(err, 'Could not set the address'));
    }
  }
  return h('form', { onsubmit: submit, id: 'notify-email-form', class: 'card' },
    h('h2', {}, 'E-mail address'),
    h('label', { for: 'notify-email' }, 'E-mail notifications go to'), input,
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Save')), status);
}

function addForm(ctx, reload) {
  const status = h('div', { class: 'form-status', 'aria-live': 'polite' });
  const channel = h('select', { id: 'notify-channel', name: 'channel' },
    h('option', { value: 'email' }, 'E-mail (to your address)'), h('option', { value: 'webhook' }, 'Webhook'));
  const url = h('input', { id: 'notify-url', name: 'url', type: 'url', placeholder: 'the webhook\u2019s http or https URL' });
  const format = h('select', { id: 'notify-format', name: 'format' },
    h('option', { value: 'cloudevents' }, 'CloudEvent (JSON)'), h('option', { value: 'chat' }, 'Chat ({"text": ...})'));
  const job = h('input', { id: 'notify-job', name: 'job', placeholder: 'all your jobs' });
  const boxes = KINDS.map((kind) => h('input', { type: 'checkbox', id: `notify-kind-${kind}`, value: kind,
    checked: kind !== 'running' && kind !== 'retried' }));
  async function submit(event) {
    event.preventDefault();
    const body = { channel: channel.value, kinds: boxes.filter((b) => b.checked).map((b) => b.value) };
    if (channel.value === 'webhook') Object.assign(body, { url: url.value.trim(), format: format.value });
    if (job.value.trim()) body.job = job.value.trim();
    try {
      const { data } = await request('POST', `${BASE}/subscriptions`, { body: JSON.stringify(body), signal: ctx.signal });
      replace(status, data.secret
        ? notice('ok', 'Subscribed. The webhook\u2019s signing key, shown this once (X-Paiq-Signature is sha256=HMAC of the body): ',
          h('code', { id: 'notify-secret' }, data.secret))
        : notice('ok', 'Subscribed.'));
      reload();
    } catch (err) {
      if (!ctx.signal.aborted) replace(status, errorNotice(err, 'Could not subscribe'));
    }
  }
  return h('form', { onsubmit: submit, id: 'notify-add-form', class: 'card' },
    h('h2', {}, 'Subscribe'),
    h('label', { for: 'notify-channel' }, 'Channel'), channel,
    h('label', { for: 'notify-url' }, 'Webhook URL'), url,
    h('label', { for: 'notify-format' }, 'Webhook body'), format,
    h('label', { for: 'notify-job' }, 'Only the job named'), job,
    h('fieldset', {}, h('legend', {}, 'Tell me when a job'),
      boxes.map((box) => h('label', { for: box.id, class: 'inline' }, box, ` ${box.value}`))),
    h('p', { class: 'hint' }, 'A job\u2019s extras.jobStatusChangeNotification chooses the kinds for that job.'),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Subscribe')), status);
}

function subscriptionsTable(subs, ctx, reload, status) {
  if (!subs.length) return h('p', { class: 'muted' }, 'No subscriptions yet.');
  return table(['Channel', 'Kinds', 'Job', 'Target', ''], subs.map((s) => row([
    s.channel, s.kinds.join(', '), s.job || 'all', s.url ? `${s.url} (${s.format})` : 'your address',
    h('button', { type: 'button', class: 'link-button', onclick: async () => {
      try {
        await request('DELETE', `${BASE}/subscriptions/${encodeURIComponent(s.id)}`, { signal: ctx.signal });
        reload();
      } catch (err) {
        if (!ctx.signal.aborted) replace(status, errorNotice(err, 'Could not unsubscribe'));
      }
    } }, 'Remove'),
  ], { 'data-subscription': s.id })), { id: 'notify-subscriptions' });
}

function deliveriesTable(deliveries) {
  if (!deliveries.length) return h('p', { class: 'muted' }, 'Nothing sent yet.');
  return table(['When', 'State', 'Tries', 'Kind', 'Job', 'Channel', 'Target', 'Last error'], deliveries.map((d) => row([
    formatTime(d.createdTime), d.state, String(d.tries), d.kind, d.jobName || DASH, d.channel, d.target,
    d.lastError || '',
  ], { 'data-delivery': d.id, 'data-state': d.state })), { id: 'notify-deliveries' });
}

export function renderNotify(view, ctx) {
  const subs = h('section', { class: 'card', 'aria-labelledby': 'notify-subs' }, h('h2', { id: 'notify-subs' }, 'Subscriptions'));
  const sent = h('section', { class: 'card', 'aria-labelledby': 'notify-sent' }, h('h2', { id: 'notify-sent' }, 'Recent notifications'));
  const email = h('div');
  const load = async () => {
    try {
      const [{ data: s }, { data: d }] = await Promise.all([
        request('GET', `${BASE}/subscriptions`, { signal: ctx.signal }),
        request('GET', `${BASE}/deliveries?limit=50`, { signal: ctx.signal })]);
      replace(email, emailForm(s.email, ctx, load));
      const status = h('div', { class: 'form-status', 'aria-live': 'polite' });
      replace(subs, h('h2', { id: 'notify-subs' }, 'Subscriptions'), subscriptionsTable(s.subscriptions, ctx, load, status),
        status);
      replace(sent, h('h2', { id: 'notify-sent' }, 'Recent notifications'), deliveriesTable(d.deliveries));
    } catch (err) {
      if (!ctx.signal.aborted) replace(subs, errorNotice(err, 'Could not load your notifications'));
    }
  };
  view.append(heading('Notifications'),
    h('p', { class: 'hint' }, 'Be told when your jobs start, end or are retried, by e-mail or webhook.'),
    email, subs, addForm(ctx, load), sent);
  load();
}
