// OpenClaw Compute dashboard: sign-in, the hash router, and one live state
// stream per page (docs/dashboard.md). No framework, no build step.

import {$, h, getToken, setToken, clearToken, authHeaders, errorMessage, Stream} from './util.js';
import {mountNetwork, mountJobs, mountDevices, mountMe} from './pages.js';
import {mountJob, buildReport} from './job.js';
import {mountLedger} from './ledger.js';

const PAGES = {network: mountNetwork, jobs: mountJobs, job: mountJob, devices: mountDevices, me: mountMe,
  ledger: mountLedger};
const TITLES = {network: 'Network', jobs: 'Jobs', job: 'Job', devices: 'Devices', me: 'Me', ledger: 'Ledger'};

// What the browser test (tests/browser) reads.
const dash = window.clawDash = {
  updates: 0, lastState: {}, page: '', user: null,
  buildReport: () => buildReport(current && current.route.id ? current.route.id : dash.page),
};

let current = null;   // {route, page, stream}
let signedIn = false;

function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 'jobs' && parts[1]) return {name: 'job', id: parts[1]};
  if (PAGES[parts[0]] && parts[0] !== 'job') return {name: parts[0]};
  return {name: 'network'};
}

function setStatus(text, cls) {
  const c = $('#conn');
  c.textContent = text;
  c.className = 'conn ' + (cls || '');
}

function stopPage() {
  if (!current) return;
  current.stream.stop();
  try { current.page.destroy(); } catch (e) { console.warn(e); }
  current = null;
}

function route() {
  if (!signedIn) return;
  stopPage();
  const r = parseRoute();
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('active', a.dataset.page === r.name || (r.name === 'job' && a.dataset.page === 'jobs'));
  }
  document.title = `${TITLES[r.name]}${r.id ? ' ' + r.id : ''} · OpenClaw Compute`;
  const root = $('#page');
  root.replaceChildren();
  root.dataset.page = r.name;
  dash.page = r.name;
  dash.lastState = {};
  const ctx = {jobId: r.id, dash, onAuth: () => signOut('Your token is no longer accepted: sign in again.')};
  const page = PAGES[r.name](root, ctx);
  const url = '/api/stream?page=' + r.name + (r.id ? '&job=' + encodeURIComponent(r.id) : '');
  const me = {route: r, page};
  me.stream = new Stream(url, {
    onState(st) {
      if (current !== me) return;
      dash.updates++;
      dash.lastState = st;
      try { page.update(st); } catch (e) { console.error('rendering the state failed', e); }
    },
    onStatus: (text, cls) => { if (current === me) setStatus(text, cls); },
    onAuth: ctx.onAuth,
    onFatal(message) {
      if (current !== me) return;
      setStatus('stopped', 'down');
      root.prepend(h('p', {class: 'error fatal'}, message));
    },
  });
  current = me;
  me.stream.start();
}

function showLogin(message) {
  signedIn = false;
  stopPage();
  $('#page').replaceChildren();
  $('#who').hidden = true;
  $('#login').hidden = false;
  $('#login-error').textContent = message || '';
  setStatus('', '');
  $('#token-input').focus();
}

function signOut(message) {
  clearToken();
  dash.user = null;
  showLogin(message);
}

// GET /api/whoami with the stored token, or without one (a coordinator run
// with --insecure-local needs none).
async function whoami() {
  const res = await fetch('/api/whoami', {headers: authHeaders(), cache: 'no-store'});
  if (res.ok) return {ok: true, who: await res.json()};
  return {ok: false, status: res.status, message: await errorMessage(res)};
}

async function start(loginMessage) {
  $('#fatal').hidden = true;
  let r;
  try { r = await whoami(); } catch (e) {
    r = {ok: false, status: 0, message: 'the coordinator cannot be reached: ' + e.message};
  }
  if (!r.ok && r.status === 401 && getToken()) {
    clearToken();
    return start(loginMessage || 'That token was refused.');
  }
  if (!r.ok && r.status === 401) return showLogin(loginMessage);
  if (!r.ok) {
    $('#fatal').textContent = r.message;
    $('#fatal').hidden = false;
    setTimeout(() => start(loginMessage), 5000);
    return;
  }
  const who = r.who || {};
  dash.user = who;
  signedIn = true;
  $('#login').hidden = true;
  $('#user').textContent = who.user || '?';
  $('#tier').textContent = (who.tier || '') + (who.admin ? ' · admin' : '');
  $('#tier').hidden = !who.tier && !who.admin;
  $('#logout').hidden = !getToken();  // nothing to log out of without a token
  $('#who').hidden = false;
  route();
}

$('#login-form').addEventListener('submit', ev => {
  ev.preventDefault();
  const t = $('#token-input').value.trim();
  if (!t) return;
  setToken(t);
  $('#token-input').value = '';
  $('#login-error').textContent = '';
  start();
});

$('#logout').addEventListener('click', ev => {
  ev.preventDefault();
  signOut('Signed out.');
});

window.addEventListener('hashchange', route);
start();
