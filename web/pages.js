// The Network, Jobs, Devices and Me pages. Each mount function builds the
// page's skeleton in `root` and returns {update(state), destroy()}; update
// re-renders the parts that change, in place.

import {h, table, emptyRow, badge, progressBar, chart, api, DASH, isNum, fmtInt, fmtNum, fmtFlops,
  fmtSi, fmtTime, fmtPct} from './util.js';

export const DEVICE_STATES = [['working', 'working'], ['idle', 'idle'], ['owner_busy', 'owner busy'],
  ['paused', 'paused'], ['offline', 'offline']];
const STATE_COLORS = {working: '#2e7d32', idle: '#1e88e5', owner_busy: '#ef6c00', paused: '#8e24aa',
  offline: '#9e9e9e'};
const HISTORY_COLUMNS = ['t', 'working', 'idle', 'owner_busy', 'paused', 'offline', 'flops_available',
  'tasks_per_s', 'queue'];
const MAX_SAMPLES = 50000;

const fixed1 = v => (isNum(v) ? v.toLocaleString('en-US', {maximumFractionDigits: 1}) : DASH);
// Credit: small amounts (a new device's first results) keep their digits.
const credit = v => (!isNum(v) ? DASH : v !== 0 && Math.abs(v) < 10
  ? v.toLocaleString('en-US', {maximumSignificantDigits: 3}) : fixed1(v));
const jobLink = id => h('a', {href: '#/jobs/' + encodeURIComponent(id)}, id);

// ---- Network ----------------------------------------------------------------

export function mountNetwork(root) {
  const counters = h('div', {class: 'counters', id: 'counters'});
  const values = {};
  const counter = (key, label, cls) => {
    values[key] = h('div', {class: 'value'}, DASH);
    counters.append(h('div', {class: `counter ${cls || ''}`, 'data-key': key}, values[key],
                      h('div', {class: 'label'}, label)));
  };
  for (const [k, label] of DEVICE_STATES) counter(k, label, 'device-count state-' + k);
  counter('flops_available', 'FLOPS available');
  counter('tasks_per_s', 'tasks / s');
  counter('queue', 'queued tasks');
  counter('jobs_running', 'jobs running');
  const asOf = h('p', {class: 'muted', id: 'network-asof'});
  const charts = h('div', {class: 'charts', id: 'charts'});
  root.append(h('h2', {}, 'Network'), counters, asOf, charts);

  const cDevices = chart(charts, {title: 'Devices by state', yMin0: true, yfmt: v => fmtNum(v),
    series: DEVICE_STATES.map(([k, label]) => ({label, color: STATE_COLORS[k]}))});
  const cFlops = chart(charts, {title: 'FLOPS available', yMin0: true, yfmt: fmtSi,
    series: [{label: 'FLOPS', color: '#1565c0', fill: 'rgba(21,101,192,0.08)', fmt: fmtFlops}]});
  const cRate = chart(charts, {title: 'Tasks per second', yMin0: true,
    series: [{label: 'tasks/s', color: '#2e7d32', fill: 'rgba(46,125,50,0.08)'}]});
  const cQueue = chart(charts, {title: 'Queued tasks', yMin0: true,
    series: [{label: 'queue', color: '#ef6c00', fill: 'rgba(239,108,0,0.08)'}]});

  let hist;
  const reset = () => { hist = Object.fromEntries(HISTORY_COLUMNS.map(c => [c, []])); };
  reset();

  function update(st) {
    const now = st.now || {};
    const dev = now.devices || {};
    for (const [k] of DEVICE_STATES) values[k].textContent = fmtInt(dev[k] ?? 0);
    values.flops_available.textContent = fmtFlops(now.flops_available);
    values.tasks_per_s.textContent = fmtNum(now.tasks_per_s, 3);
    values.queue.textContent = fmtInt(now.queue);
    values.jobs_running.textContent = fmtInt(now.jobs_running);
    asOf.textContent = `as of ${fmtTime(now.t)}` +
        (st.history_interval_s ? ` · charts: a sample every ${st.history_interval_s} s` : '');

    const cols = Array.isArray(st.history_columns) ? st.history_columns : HISTORY_COLUMNS;
    const at = Object.fromEntries(cols.map((c, i) => [c, i]));
    if (st.full_history) reset();
    let lastT = hist.t.length ? hist.t[hist.t.length - 1] * 1000 : -Infinity;
    let added = 0;
    for (const row of Array.isArray(st.history) ? st.history : []) {
      const t = row[at.t];
      if (!isNum(t) || t <= lastT) continue;  // a sample we already have
      lastT = t;
      added++;
      for (const c of HISTORY_COLUMNS) {
        const v = row[at[c]];
        hist[c].push(c === 't' ? t / 1000 : (isNum(v) ? v : null));
      }
    }
    if (hist.t.length > MAX_SAMPLES) for (const c of HISTORY_COLUMNS) hist[c].splice(0, hist.t.length - MAX_SAMPLES);
    if (!added && !st.full_history) return;
    cDevices.setData([hist.t, ...DEVICE_STATES.map(([k]) => hist[k])]);
    cFlops.setData([hist.t, hist.flops_available]);
    cRate.setData([hist.t, hist.tasks_per_s]);
    cQueue.setData([hist.t, hist.queue]);
  }
  return {update, destroy() { for (const c of [cDevices, cFlops, cRate, cQueue]) c.destroy(); }};
}

// ---- Jobs -------------------------------------------------------------------

export function jobStatus(j) {
  return [j.error ? h('div', {class: 'error'}, j.error) : null,
          j.waiting ? h('div', {class: 'waiting'}, 'waiting: ' + j.waiting) : null,
          j.progress ? h('div', {class: 'job-progress'}, j.progress) : null];
}

export function mountJobs(root) {
  const t = table(['job', 'name', 'app', 'owner', 'state', 'progress', 'running', 'failed', 'created',
    'status'], 'jobs');
  t.table.id = 'jobs-table';
  const count = h('p', {class: 'muted', id: 'jobs-count'});
  root.append(h('h2', {}, 'Jobs'), count, t.el);
  emptyRow(t.tbody, 10, 'loading…');
  function update(st) {
    const jobs = Array.isArray(st.jobs) ? st.jobs : [];
    count.textContent = `${jobs.length} job${jobs.length === 1 ? '' : 's'}, newest first`;
    if (!jobs.length) return emptyRow(t.tbody, 10, 'No jobs yet: submit one with claw submit.');
    t.tbody.replaceChildren(...jobs.map(j => h('tr', {'data-job': j.job_id},
      h('td', {class: 'id'}, jobLink(j.job_id)),
      h('td', {class: 'nowrap'}, j.name || ''),
      h('td', {}, j.app || ''),
      h('td', {}, j.owner || ''),
      h('td', {}, badge(j.state)),
      h('td', {}, progressBar(j.tasks_done, j.tasks_total)),
      h('td', {class: 'num'}, fmtInt(j.tasks_running)),
      h('td', {class: 'num' + (j.tasks_failed ? ' bad' : '')}, fmtInt(j.tasks_failed)),
      h('td', {class: 'time'}, fmtTime(j.created_unix_ms)),
      h('td', {class: 'status'}, jobStatus(j)))));
  }
  return {update, destroy() {}};
}

// ---- Devices ----------------------------------------------------------------

function shortId(id) {
  return h('code', {class: 'agent', title: id || ''}, (id || '').slice(0, 8));
}

function stateCell(d) {
  // control: what the owner asked ("none", or the agent's word: "paused", "finishing", ...)
  const c = d.control;
  const text = c === 'finishing' || c === 'finish' ? 'finishing, then pausing'
    : c && c !== 'none' && c !== d.state ? `control: ${c}` : '';
  const control = text ? h('div', {class: 'muted small control'}, text) : null;
  return h('td', {class: 'state-cell'}, badge(d.state), control);
}

function runningCell(d) {
  const jobs = Array.isArray(d.running_jobs) ? d.running_jobs : [];
  const links = [];
  jobs.slice(0, 5).forEach((j, i) => links.push(i ? ', ' : '', jobLink(j)));
  if (jobs.length > 5) links.push(` +${jobs.length - 5}`);
  return h('td', {class: 'running'}, h('span', {class: 'num'}, fmtInt(d.running ?? 0)),
           links.length ? h('div', {class: 'small'}, links) : null);
}

export function mountDevices(root) {
  const t = table(['device', 'agent', 'owner', 'os / arch', 'cores', 'memory', 'slots', 'GFLOPS', 'state',
    'running', 'success', 'reputation', 'credit', 'why no work'], 'devices');
  t.table.id = 'devices-table';
  const count = h('p', {class: 'muted'});
  root.append(h('h2', {}, 'Devices'), count, t.el);
  emptyRow(t.tbody, 14, 'loading…');
  function update(st) {
    const devs = Array.isArray(st.devices) ? st.devices : [];
    const by = {};
    for (const d of devs) by[d.state] = (by[d.state] || 0) + 1;
    count.textContent = `${devs.length} device${devs.length === 1 ? '' : 's'}` +
        (devs.length ? ': ' + DEVICE_STATES.filter(([k]) => by[k]).map(([k, l]) => `${by[k]} ${l}`).join(', ') : '');
    if (!devs.length) return emptyRow(t.tbody, 14, 'No devices: enroll one with claw agent enroll.');
    t.tbody.replaceChildren(...devs.map(d => h('tr', {'data-device': d.agent_id, class: 'device'},
      h('td', {class: 'nowrap', title: isNum(d.enrolled_unix_ms) ? `enrolled ${fmtTime(d.enrolled_unix_ms)}` : null},
        d.hostname || DASH),
      h('td', {}, shortId(d.agent_id)),
      h('td', {}, d.owner || ''),
      h('td', {}, `${d.os || '?'} / ${d.arch || '?'}`),
      h('td', {class: 'num'}, fmtInt(d.cores)),
      h('td', {class: 'num'}, isNum(d.memory_bytes) ? `${(d.memory_bytes / 2 ** 30).toFixed(1)} GiB` : DASH),
      h('td', {class: 'num'}, fmtInt(d.slots)),
      h('td', {class: 'num'}, isNum(d.flops) ? fmtNum(d.flops / 1e9, 3) : DASH),
      stateCell(d),
      runningCell(d),
      h('td', {class: 'num', title: `${d.valid_results ?? 0} valid, ${d.invalid_results ?? 0} invalid`},
        fmtPct(d.success_rate)),
      h('td', {}, `${fmtPct(d.error_rate)} errors`,
        d.on_probation ? h('span', {class: 'badge probation', title: 'its results are checked more'}, 'probation') : null),
      h('td', {class: 'num', title: `recent average ${credit(d.rac)} / day`}, credit(d.credit)),
      h('td', {class: 'why'}, d.why || ''))));
  }
  return {update, destroy() {}};
}

// ---- Me ---------------------------------------------------------------------

export function mountMe(root, ctx) {
  const cards = h('div', {class: 'cards', id: 'me-cards'});
  const charts = h('div', {class: 'charts one'});
  const t = table(['device', 'agent', 'state', 'why no work', 'running', 'credit', 'control'], 'devices mine');
  t.table.id = 'my-devices';
  root.append(h('h2', {}, 'Me'), cards, charts, h('h3', {}, 'My devices'), t.el);
  emptyRow(t.tbody, 7, 'loading…');
  const cCredit = chart(charts, {title: 'Credit per day', bars: true, points: false, yMin0: true,
    series: [{label: 'credit', color: '#2e7d32', fill: 'rgba(46,125,50,0.5)'}], yfmt: v => fmtNum(v, 3)});

  const errors = new Map();   // agent id -> the last control call's error
  const notes = new Map();    // agent id -> "pause sent", until the next state
  const busy = new Set();     // agent ids with a control call under way
  let last = null;

  const card = (label, value, extra, cls) =>
    h('div', {class: 'card ' + (cls || '')}, h('div', {class: 'label'}, label),
      h('div', {class: 'value'}, value), extra ? h('div', {class: 'extra'}, extra) : null);

  function renderCards(st) {
    const c = st.credit || {};
    const u = st.usage || {};
    const quota = isNum(u.quota_node_hours) ? fixed1(u.quota_node_hours) : 'unlimited';
    const returned = isNum(c.returned) ? c.returned : c.results;
    cards.replaceChildren(
      card('total credit', credit(c.total), 'cobblestones', 'credit-total'),
      card('recent average credit', credit(c.rac), 'per day'),
      card('rank', isNum(c.rank) ? `${c.rank} of ${c.users ?? '?'}` : DASH, 'by total credit'),
      card('percentile', isNum(c.percentile) ? fixed1(c.percentile) : DASH, 'share of users you are ahead of'),
      card('results', `${fmtInt(returned)} returned`, `${fmtInt(c.validated)} validated`),
      card(`usage ${u.month || 'this month'}`,
        st.usage ? `${fixed1(u.used_node_hours)} / ${quota}` : DASH, u.held
          ? h('span', {class: 'error'}, 'held: over the quota, new work waits for next month')
          : 'node-hours', u.held ? 'warn' : ''));
  }

  function renderDevices() {
    const devs = last && Array.isArray(last.devices) ? last.devices : [];
    if (!devs.length) return emptyRow(t.tbody, 7, 'You have no devices: enroll one with claw agent enroll.');
    t.tbody.replaceChildren(...devs.map(d => {
      const id = d.agent_id;
      const button = (action, label) => h('button', {type: 'button', 'data-action': action, 'data-device': id,
        disabled: busy.has(id)}, label);
      return h('tr', {'data-device': id, class: 'device'},
        h('td', {class: 'nowrap'}, d.hostname || DASH),
        h('td', {}, shortId(id)),
        stateCell(d),
        h('td', {class: 'why'}, d.why || ''),
        runningCell(d),
        h('td', {class: 'num'}, credit(d.credit)),
        h('td', {class: 'actions'}, button('pause', 'Pause'), button('finish', 'Finish then pause'),
          button('resume', 'Resume'),
          notes.has(id) ? h('div', {class: 'muted small note'}, notes.get(id)) : null,
          errors.has(id) ? h('div', {class: 'error'}, errors.get(id)) : null));
    }));
  }

  async function control(id, action) {
    errors.delete(id);
    notes.delete(id);
    busy.add(id);
    renderDevices();
    try {
      await api(`/api/devices/${encodeURIComponent(id)}/control`, {method: 'POST', body: {action}});
      notes.set(id, `${action} sent`);
    } catch (e) {
      if (e.status === 401) return ctx.onAuth();
      errors.set(id, e.message);
    } finally {
      busy.delete(id);
    }
    renderDevices();
  }

  t.tbody.addEventListener('click', ev => {
    const b = ev.target.closest('button[data-action]');
    if (b && !b.disabled) control(b.dataset.device, b.dataset.action);
  });

  function update(st) {
    last = st;
    notes.clear();
    renderCards(st);
    renderDevices();
    const days = Array.isArray(st.credit_days) ? st.credit_days : [];
    cCredit.setData([days.map(d => d[0] / 1000), days.map(d => (isNum(d[1]) ? d[1] : null))]);
  }
  return {update, destroy() { cCredit.destroy(); }};
}
