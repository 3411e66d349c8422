// The REST API and the event feed, as the portal uses them. The session (user, admin, token) lives in
// sessionStorage: it ends with the tab.

const SESSION_KEY = 'paiq.session';

export function getSession() {
  try {
    const s = JSON.parse(sessionStorage.getItem(SESSION_KEY));
    return s && typeof s.token === 'string' && typeof s.user === 'string' ? s : null;
  } catch {
    return null;
  }
}

export function saveSession(session) {
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(session));
}

export function clearSession() {
  sessionStorage.removeItem(SESSION_KEY);
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let onUnauthorized = () => {};

// Called when a request made with the session's token answers 401 (the token expired).
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

const enc = encodeURIComponent;

export const paths = {
  token: '/api/v1/token',
  whoami: '/api/v1/whoami',
  // A page of the job list, newest first; the answer's X-Next-Cursor continues it.
  jobs: (user, { state = '', limit = 100, cursor = '' } = {}) => `/api/v1/jobs?${new URLSearchParams(
    Object.entries({ username: user || '', state, limit: String(limit), cursor }).filter(([, v]) => v))}`,
  userJobs: (user) => `/api/v1/user/${enc(user)}/jobs`,
  job: (user, name) => `/api/v1/user/${enc(user)}/jobs/${enc(name)}`,
  config: (user, name) => `/api/v1/user/${enc(user)}/jobs/${enc(name)}/config`,
  // Protocol v2: submit YAML (or JSON) as the token's user; any job's config as a v2 document.
  submitV2: '/api/v2/jobs',
  configV2: (user, name) => `/api/v2/jobs/${enc(user)}~${enc(name)}/config`,
  executionType: (user, name) => `/api/v1/user/${enc(user)}/jobs/${enc(name)}/executionType`,
  log: (user, name, role, index, query) =>
    `/api/v1/user/${enc(user)}/jobs/${enc(name)}/tasks/${enc(role)}/${enc(index)}/log?${new URLSearchParams(query)}`,
  // Usage (paiq's profiling extension): the attempt's summary, and one task's series.
  profile: (user, name, attempt) => `/api/v1/user/${enc(user)}/jobs/${enc(name)}/profile?attempt=${attempt}`,
  taskProfile: (user, name, role, index, query) =>
    `/api/v1/user/${enc(user)}/jobs/${enc(name)}/tasks/${enc(role)}/${enc(index)}/profile?${new URLSearchParams(query)}`,
  clusters: '/api/v1/virtual-clusters',
};

async function send(method, path, { body, token, signal, contentType = 'application/json' } = {}) {
  const headers = { Accept: 'application/json' };
  // token: undefined means the session's, null none.
  const session = token === undefined ? getSession() : null;
  const bearer = token === undefined ? session && session.token : token;
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers['Content-Type'] = contentType;
  try {
    return await fetch(path, { method, headers, body, signal, cache: 'no-store' });
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    throw new ApiError(0, 'NetworkError', `cannot reach the paiq API (${err.message})`);
  }
}

async function failure(resp, usedSession) {
  let data = null;
  try {
    data = await resp.json();
  } catch {
    data = null;
  }
  const err = new ApiError(resp.status, (data && data.code) || `HTTP ${resp.status}`,
    (data && data.message) || resp.statusText || 'request failed');
  if (resp.status === 401 && usedSession) onUnauthorized(err);
  return err;
}

// A JSON request: {data, status, headers}, or an ApiError carrying OpenPAI's {code, message}.
export async function request(method, path, options = {}) {
  const resp = await send(method, path, options);
  if (!resp.ok) throw await failure(resp, options.token === undefined);
  const text = await resp.text();
  return { data: text ? JSON.parse(text) : null, status: resp.status, headers: resp.headers };
}

// A streaming request (task logs): the Response, whose body the caller reads.
export async function stream(path, { signal } = {}) {
  const resp = await send('GET', path, { signal });
  if (!resp.ok) throw await failure(resp, true);
  return resp;
}

export async function login(username, password) {
  const { data } = await request('POST', paths.token, { body: JSON.stringify({ username, password }), token: null });
  return { user: data.user, admin: data.admin, token: data.token };
}

export async function whoami(token) {
  const { data } = await request('GET', paths.whoami, { token });
  return { user: data.user, admin: data.admin, token };
}

// Every job and task event type the feed sends (it names them with `event:` lines).
const EVENT_TYPES = ['job.submitted', 'job.scheduled', 'job.waiting', 'job.completed', 'job.retrying',
  'job.requeued', 'job.stop_requested', 'task.started', 'task.exited', 'task.progress'];
const POLL_MS = 15000;

// Calls `refresh` when an event arrives, when the feed (re)connects (events may have been missed), and
// every POLL_MS while it is down. `onState` gets 'live' or 'offline'. Returns the function that stops it.
export function follow(query, refresh, onState) {
  const source = new EventSource(`/api/v1/events?${new URLSearchParams(query)}`);
  let poll = null;
  const setLive = (live) => {
    onState(live ? 'live' : 'offline');
    if (live && poll) {
      clearInterval(poll);
      poll = null;
    } else if (!live && !poll) {
      poll = setInterval(refresh, POLL_MS);
    }
  };
  source.onopen = () => {
    setLive(true);
    refresh();
  };
  source.onerror = () => setLive(source.readyState === EventSource.OPEN);
  for (const type of EVENT_TYPES) source.addEventListener(type, () => refresh());
  return () => {
    source.close();
    if (poll) clearInterval(poll);
  };
}

// Coalesces refreshes: at most one load runs at a time, and a request during a load runs once after it.
// delayMs: a number, or a function asked at each kick (a poll whose period the answers set).
export function refresher(load, delayMs = 200) {
  let timer = null;
  let running = false;
  let again = false;
  let stopped = false;
  const run = async () => {
    timer = null;
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      await load();
    } finally {
      running = false;
      if (again && !stopped) {
        again = false;
        kick();
      }
    }
  };
  const kick = () => {
    if (!timer && !stopped) timer = setTimeout(run, typeof delayMs === 'function' ? delayMs() : delayMs);
  };
  const cancel = () => {
    if (timer) clearTimeout(timer);
    timer = null;
  };
  return { kick, now: () => { cancel(); return run(); }, stop: () => { stopped = true; cancel(); } };
}
