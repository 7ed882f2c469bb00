// The Job page: progress, the per-task timeline, a sweep's experiment table
// (sortable, CSV), training curves, the raw result, and "Save report".

import {h, s, table, emptyRow, badge, progressBar, chart, download, PALETTE, DASH, isNum, fmtInt, fmtNum,
  fmtTime, fmtClock, fmtDur, api} from './util.js';
import {jobStatus} from './pages.js';

const OUTCOME_COLORS = {valid: '#43a047', done: '#43a047', invalid: '#e53935', failed: '#fb8c00',
  returned: '#9e9e9e', expired: '#9e9e9e', cancelled: '#bdbdbd', running: '#1e88e5'};
const MAX_SPAN_ROWS = 200;
const MAX_CURVES = 20;
const MAX_JSON = 100 * 1024;
const METRICS = ['loss', 'test_loss', 'test_accuracy'];

const esc = t => String(t).replace(/[&<>"]/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c]));
const num = v => (isNum(v) ? v : null);
const missing = v => v == null || v === '' || (typeof v === 'number' && !Number.isFinite(v));

export function mountJob(root, ctx) {
  const id = ctx.jobId;
  const saveBtn = h('button', {type: 'button', id: 'save-report'}, 'Save report');
  saveBtn.addEventListener('click', () => download(`${id}-report.html`, buildReport(id), 'text/html'));
  const head = h('div', {id: 'job-header', class: 'job-header'}, h('p', {class: 'muted'}, 'loading…'));
  const timeline = h('div', {id: 'timeline', class: 'timeline'});
  const timelineNote = h('p', {class: 'muted small'});
  const legend = h('div', {class: 'legend small'}, Object.entries({running: 'running', valid: 'valid / done',
    invalid: 'invalid', failed: 'failed', returned: 'returned / expired', cancelled: 'cancelled'})
    .map(([k, label]) => h('span', {}, h('i', {style: `background:${OUTCOME_COLORS[k]}`}), label)));
  const exp = h('section', {id: 'experiments', hidden: true});
  const curves = h('section', {id: 'curves', hidden: true});
  const spans = table(['task', 'attempt', 'device', 'start', 'duration', 'outcome', 'detail'], 'spans');
  spans.table.id = 'spans-table';
  const spansNote = h('p', {class: 'muted small', id: 'spans-note'});
  const jsonPre = h('pre', {class: 'json'});
  const details = h('details', {id: 'result-json'}, h('summary', {}, 'Result JSON'), jsonPre);
  root.append(
    h('div', {class: 'title-row'}, h('h2', {id: 'job-title'}, 'Job ', h('span', {class: 'job-id'}, id)),
      h('span', {class: 'toolbar'}, saveBtn)),
    head,
    h('h3', {}, 'Timeline'), legend, timeline, timelineNote,
    exp, curves,
    h('h3', {}, 'Task attempts'), spans.el, spansNote,
    h('h3', {}, 'Result'), details);
  emptyRow(spans.tbody, 7, 'loading…');

  let last = null, lastResult = undefined, lastRounds = undefined, lastSpans = '', tlWidth = 0;
  // A result too large for the stream (result_omitted) is fetched once.
  let bigResult = null, fetchingResult = false, lastState = null;
  const expTable = experimentTable(exp, id);
  const curveCharts = curvesSection(curves);
  ctx.dash.experimentCsv = () => expTable.csv();
  const ro = new ResizeObserver(() => {
    if (last && Math.abs(timeline.clientWidth - tlWidth) > 2) {
      tlWidth = timeline.clientWidth;
      renderTimeline(timeline, last.timeline || [], Date.now());
    }
  });
  ro.observe(timeline);

  function update(st) {
    lastState = st;
    if (st.result_omitted && st.job) {
      if (bigResult === null && !fetchingResult) {
        fetchingResult = true;
        api(`/api/jobs/${encodeURIComponent(st.job.job_id)}/results`)
          .then(r => { bigResult = r.result; if (lastState) update(lastState); })
          .catch(() => { fetchingResult = false; });
      }
      st = {...st, result: bigResult};
    }
    last = st;
    const j = st.job || {};
    head.replaceChildren(
      h('div', {class: 'job-meta'}, badge(j.state), ' ', h('strong', {}, j.name || '(no name)'),
        ` · app ${j.app || '?'}`, j.owner ? ` · owner ${j.owner}` : ''),
      h('div', {class: 'job-progress-row'}, progressBar(j.tasks_done, j.tasks_total),
        h('span', {}, `${fmtInt(j.tasks_running)} running, ${fmtInt(j.tasks_failed)} failed`)),
      h('div', {class: 'muted small'}, `created ${fmtTime(j.created_unix_ms)}`,
        j.finished_unix_ms ? ` · finished ${fmtTime(j.finished_unix_ms)} (${fmtDur(j.finished_unix_ms - j.created_unix_ms)})` : '',
        isNum(j.task_seconds) ? ` · ${fmtDur(j.task_seconds * 1000)} of task time` : ''),
      h('div', {class: 'job-status'}, jobStatus(j)));
    const spansList = Array.isArray(st.timeline) ? st.timeline : [];
    const now = Date.now();
    const spansText = JSON.stringify(spansList);
    // Bars of running tasks grow with the clock; others only change with the timeline.
    if (spansText !== lastSpans || timeline.clientWidth !== tlWidth || spansList.some(x => x.end_ms == null)) {
      tlWidth = timeline.clientWidth;
      renderTimeline(timeline, spansList, now);
      lastSpans = spansText;
    }
    timelineNote.textContent = st.timeline_truncated
      ? `The timeline is truncated: ${fmtInt(st.timeline_not_shown || 0)} of this job's leases are not shown` +
        ' (the coordinator keeps the first 5,000 of a job and sends the latest 1,000 of those).'
      : '';
    renderSpans(spans.tbody, spansNote, spansList, now);

    const resultText = st.result == null ? '' : JSON.stringify(st.result, null, 2);
    const roundsText = JSON.stringify(st.rounds || []);
    if (resultText !== lastResult || roundsText !== lastRounds) {
      const r = st.result && typeof st.result === 'object' ? st.result : null;
      expTable.set(r);
      curveCharts.set(r, Array.isArray(st.rounds) ? st.rounds : []);
      if (resultText !== lastResult) {
        jsonPre.textContent = !resultText ? 'no result yet'
          : resultText.length <= MAX_JSON ? resultText
          : resultText.slice(0, MAX_JSON) + `\n… truncated: ${Math.round(resultText.length / 1024)} KB in all` +
            ' (claw results gives all of it)';
      }
      lastResult = resultText;
      lastRounds = roundsText;
    }
  }
  return {update, destroy() { ro.disconnect(); curveCharts.destroy(); delete ctx.dash.experimentCsv; }};
}

// ---- the timeline -----------------------------------------------------------

function niceStep(ms) {
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400];
  for (const st of steps) if (ms / (st * 1000) <= 8) return st * 1000;
  return Math.ceil(ms / 8 / 86400000) * 86400000;
}

function renderTimeline(box, spans, now) {
  if (!spans.length) {
    box.replaceChildren(h('p', {class: 'muted'}, 'No task attempt recorded yet.'));
    return;
  }
  const rows = new Map();
  let t0 = Infinity, t1 = -Infinity;
  for (const sp of spans) {
    const key = sp.agent || sp.hostname || '?';
    if (!rows.has(key)) rows.set(key, {label: sp.hostname || (sp.agent || '?').slice(0, 12), agent: sp.agent, spans: []});
    rows.get(key).spans.push(sp);
    const a = num(sp.start_ms) ?? now, b = num(sp.end_ms) ?? now;
    t0 = Math.min(t0, a);
    t1 = Math.max(t1, b, a);
  }
  if (!(t1 > t0)) t1 = t0 + 1000;
  const LANE = 12, MAX_LANES = 16, LABEL = 150, TOP = 22, W = Math.max(420, box.clientWidth || 900);
  let y = TOP;
  for (const row of rows.values()) {  // tasks running at once on one device go in lanes
    row.spans.sort((p, q) => (p.start_ms ?? 0) - (q.start_ms ?? 0));
    const ends = [];
    for (const sp of row.spans) {
      const a = num(sp.start_ms) ?? now;
      let lane = ends.findIndex(e => e <= a);
      if (lane < 0 && ends.length < MAX_LANES) { lane = ends.length; ends.push(0); }
      if (lane < 0) lane = ends.indexOf(Math.min(...ends));
      ends[lane] = num(sp.end_ms) ?? now;
      sp.lane = lane;
    }
    row.y = y;
    row.height = ends.length * LANE + 6;
    y += row.height;
  }
  const H = y + 4;
  const x = t => LABEL + (t - t0) / (t1 - t0) * (W - LABEL - 12);
  const svg = s('svg', {width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: 'gantt',
    xmlns: 'http://www.w3.org/2000/svg', role: 'img', 'aria-label': 'task timeline'});
  const step = niceStep(t1 - t0);
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    svg.append(s('line', {x1: x(t), x2: x(t), y1: TOP - 4, y2: H, class: 'tick', stroke: '#e0e0e0'}),
               s('text', {x: x(t), y: 12, 'text-anchor': 'middle', class: 'tick-label', 'font-size': 10,
                 fill: '#666'}, fmtClock(t)));
  }
  let i = 0;
  for (const row of rows.values()) {
    if (i++ % 2) svg.append(s('rect', {x: 0, y: row.y, width: W, height: row.height, fill: '#f5f7fa', class: 'row-bg'}));
    const label = row.label.length > 20 ? row.label.slice(0, 19) + '…' : row.label;
    svg.append(s('text', {x: 4, y: row.y + Math.min(row.height / 2, 12) + 4, 'font-size': 11, fill: '#333',
      class: 'row-label'}, label, s('title', {}, `${row.label} (${row.agent || '?'})`)));
    for (const sp of row.spans) {
      const a = num(sp.start_ms) ?? now, b = num(sp.end_ms) ?? now;
      const outcome = sp.outcome || (sp.end_ms == null ? 'running' : 'done');
      const tip = `task ${sp.task}, attempt ${sp.attempt}, lease ${sp.lease ?? '?'}: ${outcome}` +
        ` on ${row.label}\n${fmtTime(a)}, ${fmtDur(b - a)}${sp.end_ms == null ? ' so far' : ''}` +
        (sp.detail ? `\n${sp.detail}` : '');
      svg.append(s('rect', {x: x(a), y: row.y + 3 + sp.lane * LANE, width: Math.max(2, x(b) - x(a)),
        height: LANE - 2, rx: 2, fill: OUTCOME_COLORS[outcome] || '#607d8b',
        class: `span outcome-${outcome.replace(/[^a-z]/g, '')}`, 'data-task': sp.task}, s('title', {}, tip)));
    }
  }
  box.replaceChildren(svg);
}

function renderSpans(tbody, note, spans, now) {
  if (!spans.length) {
    emptyRow(tbody, 7, 'No task attempts yet.');
    note.textContent = '';
    return;
  }
  tbody.replaceChildren(...spans.slice(0, MAX_SPAN_ROWS).map(sp => {
    const outcome = sp.outcome || '';
    const end = num(sp.end_ms) ?? now;
    return h('tr', {},
      h('td', {class: 'num'}, String(sp.task ?? '')),
      h('td', {class: 'num'}, String(sp.attempt ?? '')),
      h('td', {title: sp.agent || ''}, sp.hostname || (sp.agent || '').slice(0, 12)),
      h('td', {class: 'time'}, fmtTime(sp.start_ms)),
      h('td', {class: 'num'}, isNum(sp.start_ms) ? fmtDur(end - sp.start_ms) + (sp.end_ms == null ? ' …' : '') : DASH),
      h('td', {}, h('span', {class: `badge outcome outcome-${outcome.replace(/[^a-z]/g, '')}`}, outcome)),
      h('td', {class: 'detail'}, sp.detail || ''));
  }));
  note.textContent = spans.length > MAX_SPAN_ROWS ? `Showing the first ${MAX_SPAN_ROWS} of ${spans.length} attempts.` : '';
}

// ---- the experiment table -----------------------------------------------------

function trialRows(r) {
  const trials = r.trials;
  const rankOf = new Map();
  (Array.isArray(r.ranking) ? r.ranking : []).forEach((t, k) => rankOf.set(t, k + 1));
  const names = [];
  for (const t of trials) for (const k of Object.keys((t && t.values) || {})) if (!names.includes(k)) names.push(k);
  const best = r.best && typeof r.best === 'object' ? r.best.trial : r.best;
  const rows = trials.map((t, i) => {
    t = t && typeof t === 'object' ? t : {};
    const epochs = Array.isArray(t.epochs) ? t.epochs : [];
    const fin = t.final && typeof t.final === 'object' ? t.final : (epochs[epochs.length - 1] || {});
    const row = {index: i, best: i === best, rank: rankOf.get(i) ?? null, trial: isNum(t.trial) ? t.trial : i,
      epochs: num(fin.epoch) ?? (epochs.length || null),
      seconds: epochs.length ? Math.round(epochs.reduce((a, e) => a + (num(e && e.seconds) ?? 0), 0) * 1000) / 1000 : null};
    for (const m of METRICS) row[m] = num(fin[m]);
    for (const n of names) {
      const v = t.values ? t.values[n] : undefined;
      row['v:' + n] = v === undefined || v === null ? null : typeof v === 'object' ? JSON.stringify(v) : v;
    }
    const diverged = t.diverged || fin.diverged;
    row.note = t.why ? String(t.why)
      : [diverged ? 'diverged' : '', isNum(t.rung) ? `stopped at rung ${t.rung}` : ''].filter(Boolean).join('; ');
    return row;
  });
  const cols = [{key: 'rank', label: 'rank'}, {key: 'trial', label: 'trial'},
    ...names.map(n => ({key: 'v:' + n, label: n, value: true})),
    {key: 'epochs', label: 'epochs'}, {key: 'loss', label: 'loss'}, {key: 'test_loss', label: 'test_loss'},
    {key: 'test_accuracy', label: 'test_accuracy'}, {key: 'seconds', label: 'seconds'}, {key: 'note', label: 'note'}];
  return {cols, rows};
}

function cellText(col, v) {
  if (missing(v)) return col.key === 'note' ? '' : DASH;
  if (col.value) return String(v);
  if (col.key === 'seconds') return v.toFixed(1);
  return typeof v === 'number' ? fmtNum(v) : String(v);
}

function csvField(v) {
  const t = missing(v) ? '' : String(v);
  return /[",\n\r]/.test(t) ? `"${t.replace(/"/g, '""')}"` : t;
}

function experimentTable(section, jobId) {
  let data = null, sort = {key: 'rank', dir: 1};
  const csvBtn = h('button', {type: 'button', id: 'csv-button'}, 'CSV');
  const summary = h('p', {class: 'muted small'});
  const t = h('table', {class: 'experiments', id: 'experiment-table'});
  section.append(h('div', {class: 'title-row'}, h('h3', {}, 'Experiments'), h('span', {class: 'toolbar'}, csvBtn)),
                 summary, h('div', {class: 'table-wrap'}, t));
  csvBtn.addEventListener('click', () => download(`${jobId}-trials.csv`, csv(), 'text/csv'));

  function sorted() {
    const {key, dir} = sort;
    return data.rows.slice().sort((a, b) => {
      const x = a[key], y = b[key];
      if (missing(x) || missing(y)) return missing(x) - missing(y) || a.index - b.index;  // missing last
      const c = typeof x === 'number' && typeof y === 'number' ? x - y
        : String(x).localeCompare(String(y), undefined, {numeric: true});
      return c * dir || a.index - b.index;
    });
  }

  function render() {
    const th = data.cols.map(c => h('th', {'data-col': c.key, class: 'sortable' +
      (sort.key === c.key ? (sort.dir > 0 ? ' sorted-asc' : ' sorted-desc') : ''),
      'aria-sort': sort.key === c.key ? (sort.dir > 0 ? 'ascending' : 'descending') : null,
      title: 'sort by ' + c.label}, c.label));
    t.replaceChildren(h('thead', {}, h('tr', {}, th)),
      h('tbody', {}, sorted().map(r => h('tr', {class: r.best ? 'best' : null, 'data-trial': r.index},
        data.cols.map(c => h('td', {class: c.key === 'note' ? 'note' : 'num', 'data-col': c.key}, cellText(c, r[c.key])))))));
  }

  t.addEventListener('click', ev => {
    const th = ev.target.closest('th[data-col]');
    if (!th || !data) return;
    sort = sort.key === th.dataset.col ? {key: sort.key, dir: -sort.dir} : {key: th.dataset.col, dir: 1};
    render();
  });

  function csv() {
    if (!data) return '';
    const lines = [data.cols.map(c => csvField(c.label)).join(',')];
    for (const r of sorted()) lines.push(data.cols.map(c => csvField(r[c.key])).join(','));
    return lines.join('\n') + '\n';
  }

  return {
    csv,
    set(r) {
      const has = r && Array.isArray(r.trials) && r.trials.length > 0;
      section.hidden = !has;
      if (!has) { data = null; return; }
      data = trialRows(r);
      const best = data.rows.find(x => x.best);
      summary.textContent = `${data.rows.length} trial${data.rows.length === 1 ? '' : 's'}` +
        (r.metric ? `, ranked by ${r.metric}${r.mode ? ` (${r.mode})` : ''}` : '') +
        (best ? `; best: trial ${best.trial}` : '') + '. Click a column to sort.';
      render();
    },
  };
}

// ---- training curves ------------------------------------------------------------

function curvesSection(section) {
  const box = h('div', {class: 'charts'});
  section.append(h('h3', {}, 'Training curves'), box);
  let charts = [], key = '';
  const clear = () => { for (const c of charts) c.destroy(); charts = []; };

  function set(r, rounds) {
    const trials = r && Array.isArray(r.trials) ? r.trials : [];
    const order = [...new Set([...(Array.isArray(r && r.ranking) ? r.ranking : []), ...trials.keys()])]
      .filter(i => trials[i] && Array.isArray(trials[i].epochs) && trials[i].epochs.length).slice(0, MAX_CURVES);
    let points = rounds.filter(x => x && x.eval && typeof x.eval === 'object')
      .map(x => ({round: num(x.eval.of_round) ?? x.round, accuracy: num(x.eval.accuracy), loss: num(x.eval.loss)}));
    if (!points.length && r && Array.isArray(r.curve)) {
      points = r.curve.map(c => ({round: c.round, accuracy: num(c.accuracy), loss: num(c.loss)}));
    }
    points = points.filter(p => isNum(p.round)).sort((a, b) => a.round - b.round);
    const newKey = order.join(',') + '|' + (points.length ? 'rounds' : '');
    section.hidden = !order.length && !points.length;
    if (newKey !== key) {
      clear();
      key = newKey;
      if (order.length) {
        const series = order.map((i, k) => ({label: `trial ${isNum(trials[i].trial) ? trials[i].trial : i}`,
          color: PALETTE[k % PALETTE.length]}));
        charts.push(chart(box, {title: 'Test accuracy per epoch', time: false, integerX: true, xLabel: 'epoch', series,
          yfmt: v => fmtNum(v, 3)}));
        charts.push(chart(box, {title: 'Training loss per epoch', time: false, integerX: true, xLabel: 'epoch', series,
          yfmt: v => fmtNum(v, 3)}));
      }
      if (points.length) {
        charts.push(chart(box, {title: 'Accuracy and loss per round', time: false, integerX: true, xLabel: 'round',
          series: [{label: 'accuracy', color: PALETTE[2]}, {label: 'loss', color: PALETTE[3], scale: 'y2'}],
          yfmt: v => fmtNum(v, 3)}));
      }
    }
    let c = 0;
    if (order.length) {
      const xs = [...new Set(order.flatMap(i => trials[i].epochs.map(e => e && e.epoch).filter(isNum)))].sort((a, b) => a - b);
      const col = m => order.map(i => {
        const by = new Map(trials[i].epochs.filter(e => e && isNum(e.epoch)).map(e => [e.epoch, num(e[m])]));
        return xs.map(x => by.get(x) ?? null);
      });
      charts[c++].setData([xs, ...col('test_accuracy')]);
      charts[c++].setData([xs, ...col('loss')]);
    }
    if (points.length) charts[c].setData([points.map(p => p.round), points.map(p => p.accuracy), points.map(p => p.loss)]);
  }
  return {set, destroy: clear};
}

// ---- the report -------------------------------------------------------------------

function styleText() {
  const out = [];
  for (const sheet of document.styleSheets) {
    try {
      for (const rule of sheet.cssRules) out.push(rule.cssText);
    } catch (e) { /* a sheet we may not read */ }
  }
  return out.join('\n').replace(/<\/style/gi, '<\\/style');
}

// The page as one self-contained HTML file: the style sheets inlined, each
// chart's canvas as a PNG data URL, the SVG as it is, no script, no buttons.
export function buildReport(name) {
  const page = document.getElementById('page');
  const clone = page.cloneNode(true);
  const canvases = page.querySelectorAll('canvas');
  clone.querySelectorAll('canvas').forEach((c, i) => {
    const o = canvases[i];
    let url = '';
    try { url = o.toDataURL('image/png'); } catch (e) { /* tainted: leave it blank */ }
    const img = document.createElement('img');
    if (url.startsWith('data:')) img.setAttribute('src', url);
    img.setAttribute('alt', 'chart');
    img.setAttribute('style', `width:${o.style.width || o.width + 'px'};height:${o.style.height || o.height + 'px'}`);
    c.replaceWith(img);
  });
  clone.querySelectorAll('script, button, input, select, textarea, .no-report').forEach(e => e.remove());
  for (const e of clone.querySelectorAll('[src], [href]')) {  // nothing may load from the coordinator
    for (const a of ['src', 'href']) {
      const v = e.getAttribute(a);
      if (v != null && !v.startsWith('data:') && !v.startsWith('#')) e.removeAttribute(a);
    }
  }
  clone.querySelectorAll('details').forEach(d => d.setAttribute('open', ''));
  const title = `OpenClaw Compute: ${name || 'report'}`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)}</title>
<style>
${styleText()}
</style></head>
<body class="report">
<header class="report-head"><h1>${esc(title)}</h1>
<p class="muted">Saved from ${esc(location.host)} on ${esc(fmtTime(Date.now()))}.</p></header>
<main>${clone.innerHTML}</main>
</body></html>
`;
}
