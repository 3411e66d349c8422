// Log in: POST /api/v1/token, then back to where the user was going.

import { ApiError, login, saveSession } from './api.js';
import { errorNotice, h, heading, notice, replace } from './dom.js';

export function renderLogin(view, ctx) {
  const status = h('div', { class: 'form-status', 'aria-live': 'polite' });
  const user = h('input', { id: 'login-user', name: 'username', autocomplete: 'username', required: true,
    autocapitalize: 'none', spellcheck: 'false' });
  const password = h('input', { id: 'login-password', name: 'password', type: 'password',
    autocomplete: 'current-password', required: true });
  const button = h('button', { type: 'submit', class: 'primary', id: 'login-submit' }, 'Log in');

  async function submit(event) {
    event.preventDefault();
    button.disabled = true;
    replace(status, 'Logging in\u2026');
    try {
      saveSession(await login(user.value.trim(), password.value));
      ctx.afterLogin();
    } catch (err) {
      if (ctx.signal.aborted) return;
      replace(status, err instanceof ApiError && err.status === 401
        ? notice('error', 'Wrong user name or password.')
        : errorNotice(err, 'Could not log in'));
      password.select();
    } finally {
      button.disabled = false;
    }
  }

  view.append(h('section', { class: 'login card' },
    heading('Log in to paiq'),
    h('form', { onsubmit: submit, id: 'login-form' },
      h('label', { for: 'login-user' }, 'User name'), user,
      h('label', { for: 'login-password' }, 'Password'), password,
      h('div', { class: 'actions' }, button),
      status),
    h('p', { class: 'hint' }, 'Your token stays in this browser tab only; closing the tab logs you out.')));
  user.focus();
}
