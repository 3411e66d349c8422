// Submit: paste or load an OpenPAI v1 job JSON, or a protocol v2 job (YAML, or JSON with protocolVersion 2),
// and POST it as yourself. A refusal lists every "path: rule" on its own line; an acceptance shows the
// warnings and links to the job.

import { ApiError, paths, request } from './api.js';
import { errorNotice, h, heading, jobHref, notice, replace } from './dom.js';

const DRAFT_KEY = 'paiq.draft';
const EXAMPLE = {
  jobName: 'hello-world',
  image: 'local/busybox:latest',
  taskRoles: [{ name: 'main', taskNumber: 1, cpuNumber: 1, memoryMB: 256, command: 'echo "hello from $PAI_JOB_NAME"' }],
};

// "a: rule; b: rule" -> ["a: rule", "b: rule"]. A rule may itself hold "; " (e.g. "must be unique among task
// roles; 'x' is also taskRoles[1]"), so a new item starts only where a JSON path and ": " follow.
export function splitProblems(message) {
  return message.split(/; (?=(?:\(body\)|[A-Za-z_$][^\s:;'"]*): )/).filter(Boolean);
}

function problemItem(text) {
  const at = text.indexOf(': ');
  if (at < 0) return h('li', {}, text);
  return h('li', {}, h('code', { class: 'path' }, text.slice(0, at)), ': ', text.slice(at + 2));
}

function refusal(err) {
  if (err instanceof ApiError && (err.code === 'InvalidParametersError' || err.code === 'InvalidProtocolError')) {
    const problems = splitProblems(err.message);
    return notice('error',
      h('h2', {}, 'The job was refused: fix ', problems.length === 1 ? 'this field' : `these ${problems.length} fields`),
      h('ul', { class: 'problems', id: 'problems' }, problems.map(problemItem)));
  }
  if (err instanceof ApiError && err.code === 'ConflictJobError') {
    return notice('error', h('strong', {}, 'Name taken (ConflictJobError): '), err.message,
      '. Change the job\u2019s name (jobName, or name in v2): a user\u2019s job names are unique.');
  }
  return errorNotice(err, 'The job was not submitted');
}

function acceptance(me, fallbackName, answer) {
  const location = answer.headers.get('Location') || '';
  const name = decodeURIComponent(location.split('/').pop() || '') || fallbackName;
  const warnings = (answer.data && answer.data.warnings) || [];
  return notice('ok',
    h('h2', {}, 'Job accepted'),
    h('p', {}, answer.data && answer.data.message, '. ', name ? h('a', { href: jobHref(me, name), id: 'submitted-link' }, `Open ${name}`) : null),
    warnings.length ? h('div', { class: 'warnings' }, h('h3', {}, 'Warnings'),
      h('ul', { id: 'warnings' }, warnings.map((w) => h('li', {}, w)))) : null);
}

function jobNameOf(text) {
  try {
    const parsed = JSON.parse(text);
    return parsed && typeof parsed.jobName === 'string' ? parsed.jobName : '';
  } catch {
    return '';
  }
}

// v1 is JSON without protocolVersion 2; anything else (YAML, or JSON saying protocolVersion 2) is v2.
export function isV2(text) {
  try {
    const parsed = JSON.parse(text);
    return Boolean(parsed) && (parsed.protocolVersion === 2 || parsed.protocolVersion === '2');
  } catch {
    return true;
  }
}

// A clone keeps the config and takes a new name: "train" -> "train-2", "train-2" -> "train-3".
function nextName(name) {
  const m = /^(.*)-(\d+)$/.exec(name);
  return m ? `${m[1]}-${Number(m[2]) + 1}` : `${name}-2`;
}

async function loadClone(ctx, from, editor, result) {
  const [user, name] = from.split('/').map(decodeURIComponent);
  try {
    const { data } = await request('GET', paths.config(user, name), { signal: ctx.signal });
    const v2 = isV2(JSON.stringify(data));
    const field = v2 ? 'name' : 'jobName';
    data[field] = nextName(String(data[field] || name));
    editor.value = JSON.stringify(data, null, 2);
    sessionStorage.setItem(DRAFT_KEY, editor.value);
    const masked = v2 && data.secrets === '******' ? ' Its secrets are masked: give them again.' : '';
    replace(result, notice('info', `Config of ${name} (${user}) loaded as ${data[field]}; change what you need and submit.${masked}`));
  } catch (err) {
    if (!ctx.signal.aborted) replace(result, errorNotice(err, `Could not load the config of ${name}`));
  }
}

export function renderSubmit(view, ctx) {
  const me = ctx.session.user;
  const editor = h('textarea', { id: 'job-config', rows: '18', spellcheck: 'false', autocomplete: 'off',
    'aria-describedby': 'config-hint', placeholder: JSON.stringify(EXAMPLE, null, 2) });
  editor.value = sessionStorage.getItem(DRAFT_KEY) || '';
  editor.addEventListener('input', () => sessionStorage.setItem(DRAFT_KEY, editor.value));
  const file = h('input', { type: 'file', id: 'job-file', accept: '.json,.yaml,.yml,application/json,text/yaml' });
  const button = h('button', { type: 'submit', class: 'primary', id: 'submit-job' }, `Submit as ${me}`);
  const result = h('div', { id: 'submit-result', 'aria-live': 'polite' });

  file.addEventListener('change', async () => {
    const chosen = file.files && file.files[0];
    if (!chosen) return;
    editor.value = await chosen.text();
    sessionStorage.setItem(DRAFT_KEY, editor.value);
    replace(result, notice('info', `Loaded ${chosen.name} (${chosen.size} bytes).`));
    file.value = '';
  });

  async function submit(event) {
    event.preventDefault();
    button.disabled = true;
    replace(result, h('p', { class: 'muted' }, 'Submitting\u2026'));
    try {
      const answer = isV2(editor.value)
        ? await request('POST', paths.submitV2, { body: editor.value, contentType: 'text/yaml', signal: ctx.signal })
        : await request('POST', paths.userJobs(me), { body: editor.value, signal: ctx.signal });
      replace(result, acceptance(me, jobNameOf(editor.value), answer));
      sessionStorage.removeItem(DRAFT_KEY);
    } catch (err) {
      if (!ctx.signal.aborted) replace(result, refusal(err));
    } finally {
      button.disabled = false;
    }
  }

  view.append(
    heading('Submit a job'),
    h('form', { id: 'submit-form', onsubmit: submit },
      h('label', { for: 'job-config' }, 'Job config (OpenPAI v1 JSON, or protocol v2 YAML)'),
      h('p', { class: 'hint', id: 'config-hint' }, 'Paste the JSON or YAML, or load a file. It is submitted as ', h('strong', {}, me),
        '; its name must be new among your jobs.'),
      editor,
      h('div', { class: 'actions' },
        button,
        h('span', { class: 'file' }, h('label', { for: 'job-file' }, 'Load a file:'), ' ', file),
        h('button', { type: 'button', onclick: () => { editor.value = JSON.stringify(EXAMPLE, null, 2); editor.focus(); } },
          'Insert an example'))),
    result);
  const from = ctx.params.get('from');
  if (from) loadClone(ctx, from, editor, result);
}
