// Shared helpers: DOM building, formatting, the API with its token, the
// state stream (Server-Sent Events read with fetch()) and uPlot charts.

const TOKEN_KEY = 'claw.token';

export const getToken = () => sessionStorage.getItem(TOKEN_KEY) || '';
export const setToken = t => sessionStorage.setItem(TOKEN_KEY, t);
export const clearToken = () => sessionStorage.removeItem(TOKEN_KEY);

export function authHeaders() {
  const t = getToken();
  return t ? {Authorization: 'Bearer ' + t} : {};
}

// ---- DOM ------------------------------------------------------------------

function append(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.setAttribute('class', v);
    else if (k === 'text') el.textContent = v;
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

// h('td', {class: 'x', on: {click: f}}, 'text', child, [more]) -> element
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

export function s(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

export const $ = (sel, root = document) => root.querySelector(sel);

export function table(headers, cls) {
  const tbody = h('tbody');
  const t = h('table', {class: cls}, h('thead', {}, h('tr', {}, headers.map(x => h('th', {}, x)))), tbody);
  return {el: h('div', {class: 'table-wrap'}, t), table: t, tbody};
}

export function emptyRow(tbody, cols, text) {
  tbody.replaceChildren(h('tr', {class: 'empty'}, h('td', {colspan: cols}, text)));
}

export function badge(state, text) {
  return h('span', {class: 'badge state state-' + String(state || 'unknown').replace(/[^a-z_]/gi, '')},
           text ?? String(state ?? '?').replace('_', ' '));
}

export function progressBar(done, total) {
  const pct = total ? Math.min(100, 100 * done / total) : 0;
  return h('div', {class: 'progress', title: `${done} of ${total}`},
           h('div', {class: 'bar'}, h('span', {style: `width:${pct.toFixed(1)}%`})),
           h('span', {class: 'progress-text'}, `${done ?? 0}/${total ?? 0}`));
}

// ---- formatting -----------------------------------------------------------

export const DASH = '\u2014';
export const isNum = v => typeof v === 'number' && Number.isFinite(v);

export function fmtInt(v) {
  return isNum(v) ? Math.round(v).toLocaleString('en-US') : DASH;
}

// Up to `digits` significant digits, no trailing zeros, never "NaN".
export function fmtNum(v, digits = 4) {
  if (!isNum(v)) return DASH;
  if (Number.isInteger(v)) return v.toLocaleString('en-US');
  const a = Math.abs(v);
  if (a >= 1e-4 && a < 1e15) return String(Number(v.toPrecision(digits)));
  return v.toExponential(digits - 1);
}

export function fmtFlops(v) {
  if (!isNum(v)) return DASH;
  const units = ['FLOPS', 'kFLOPS', 'MFLOPS', 'GFLOPS', 'TFLOPS', 'PFLOPS', 'EFLOPS'];
  let i = 0, x = Math.abs(v);
  while (x >= 1000 && i < units.length - 1) { x /= 1000; i++; }
  return `${(Math.sign(v) * x).toPrecision(3).replace(/\.?0+$/, '')} ${units[i]}`;
}

// Short form for chart axes: "2.4 G".
export function fmtSi(v) {
  if (!isNum(v)) return '';
  const p = ['', 'k', 'M', 'G', 'T', 'P', 'E'];
  let i = 0, x = Math.abs(v);
  while (x >= 1000 && i < p.length - 1) { x /= 1000; i++; }
  return `${Number((Math.sign(v) * x).toPrecision(3))}${p[i] ? ' ' + p[i] : ''}`;
}

const pad = n => String(n).padStart(2, '0');

export function fmtTime(ms) {
  if (!isNum(ms) || ms <= 0) return DASH;
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
         `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fmtClock(ms) {
  const d = new Date(ms);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fmtDur(ms) {
  if (!isNum(ms)) return DASH;
  const sec = ms / 1000;
  if (sec < 60) return `${Number(sec.toFixed(sec < 10 ? 2 : 1))} s`;
  if (sec < 3600) return `${Math.floor(sec / 60)} m ${Math.round(sec % 60)} s`;
  if (sec < 86400) return `${Math.floor(sec / 3600)} h ${Math.round(sec % 3600 / 60)} m`;
  return `${Math.floor(sec / 86400)} d ${Math.round(sec % 86400 / 3600)} h`;
}

export function fmtPct(frac, digits = 1) {
  return isNum(frac) ? `${(frac * 100).toFixed(digits)}%` : DASH;
}

export function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], {type}));
  const a = h('a', {href: url, download: name, hidden: true});
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// ---- the API --------------------------------------------------------------

export async function errorMessage(res) {
  const text = await res.text().catch(() => '');
  try {
    const j = JSON.parse(text);
    if (j && j.error && j.error.message) return j.error.message;
  } catch (e) { /* not JSON */ }
  return `${res.status} ${res.statusText}${text ? ': ' + text.slice(0, 200) : ''}`;
}

export async function api(path, {method = 'GET', body} = {}) {
  const headers = authHeaders();
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  if (!res.ok) {
    const err = new Error(await errorMessage(res));
    err.status = res.status;
    throw err;
  }
  return res.json();
}

// ---- the stream -----------------------------------------------------------

const sleep = (ms, signal) => new Promise(resolve => {
  const t = setTimeout(resolve, ms);
  signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, {once: true});
});

// One page's state stream. handlers: onState(obj), onStatus(text, cls),
// onAuth() (401), onFatal(message) (another 4xx: no point retrying).
export class Stream {
  constructor(url, handlers) {
    this.url = url;
    this.handlers = handlers;
    this.lastId = '';
    this.stopper = new AbortController();
  }

  start() { this.run(); return this; }

  stop() {
    this.stopper.abort();
    if (this.conn) this.conn.abort();
  }

  async run() {
    const {onStatus, onAuth, onFatal} = this.handlers;
    let delay = 1000;
    while (!this.stopper.signal.aborted) {
      this.conn = new AbortController();
      let why = '';
      try {
        const headers = {...authHeaders(), Accept: 'text/event-stream'};
        if (this.lastId) headers['Last-Event-ID'] = this.lastId;
        onStatus(this.lastId ? 'reconnecting…' : 'connecting…', 'pending');
        const res = await fetch(this.url, {headers, signal: this.conn.signal, cache: 'no-store'});
        if (res.status === 401) { onAuth(); return; }
        if (res.status >= 400 && res.status < 500 && res.status !== 408 && res.status !== 429) {
          onFatal(await errorMessage(res));
          return;
        }
        if (!res.ok || !res.body) throw new Error(await errorMessage(res));
        onStatus('live', 'live');
        await this.read(res.body, () => { delay = 1000; });
        why = 'the stream ended';
      } catch (e) {
        why = e.name === 'AbortError' ? 'no data for 45 s' : e.message;
      }
      if (this.stopper.signal.aborted) return;
      onStatus(`offline (${why}); retrying in ${delay / 1000} s`, 'down');
      await sleep(delay, this.stopper.signal);
      delay = Math.min(delay * 2, 10000);
    }
  }

  async read(body, onData) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buf = '', data = [], event = '', id = null;
    let watchdog = null;
    const arm = () => {  // the server sends a keepalive every 15 s
      clearTimeout(watchdog);
      watchdog = setTimeout(() => this.conn.abort(), 45000);
    };
    arm();
    try {
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        arm();
        buf += decoder.decode(value, {stream: true});
        let m;
        while ((m = /\r\n|\r|\n/.exec(buf))) {
          if (m[0] === '\r' && m.index === buf.length - 1) break;  // maybe half a CRLF
          const line = buf.slice(0, m.index);
          buf = buf.slice(m.index + m[0].length);
          if (line === '') {  // the end of an event
            if (id !== null) this.lastId = id;
            if (data.length) {
              onData();
              this.dispatch(event || 'message', data.join('\n'));
            }
            data = []; event = ''; id = null;
            continue;
          }
          if (line[0] === ':') { onData(); continue; }  // a comment: keepalive
          const c = line.indexOf(':');
          const field = c < 0 ? line : line.slice(0, c);
          let val = c < 0 ? '' : line.slice(c + 1);
          if (val[0] === ' ') val = val.slice(1);
          if (field === 'data') data.push(val);
          else if (field === 'event') event = val;
          else if (field === 'id' && !val.includes('\0')) id = val;
        }
      }
    } finally {
      clearTimeout(watchdog);
      reader.cancel().catch(() => {});
    }
  }

  dispatch(event, data) {
    if (event !== 'state') return;
    let state;
    try { state = JSON.parse(data); } catch (e) {
      console.warn('a state event that is not JSON', e);
      return;
    }
    this.handlers.onState(state);
  }
}

// ---- charts ---------------------------------------------------------------

export const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
  '#7f7f7f', '#bcbd22', '#17becf', '#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173',
  '#3182bd', '#e6550d', '#31a354', '#756bb1', '#636363'];

// A uPlot chart in a card that follows its container's width.
// opts: {title, series: [{label, color, scale, fill, dash, fmt}], yfmt, y2fmt, time (x is
// seconds since the epoch), xLabel, bars, height}
export function chart(parent, opts) {
  const body = h('div', {class: 'chart-body'});
  const card = h('div', {class: 'chart'}, h('h3', {}, opts.title), body);
  parent.append(card);
  const height = opts.height || 180;
  const yfmt = opts.yfmt || fmtSi;
  const hasY2 = opts.series.some(x => x.scale === 'y2');
  const series = [{label: opts.time === false ? (opts.xLabel || 'x') : 'time'}];
  for (const x of opts.series) {
    const fmt = x.fmt || (x.scale === 'y2' ? (opts.y2fmt || yfmt) : yfmt);
    series.push({
      label: x.label, stroke: x.color, width: 1.5, scale: x.scale || 'y',
      fill: x.fill, dash: x.dash, spanGaps: true,
      points: opts.points === undefined ? {size: 5} : {show: opts.points, size: 5},
      value: (u, v) => (v == null ? DASH : fmt(v)),
      paths: opts.bars && typeof uPlot.paths?.bars === 'function' ? uPlot.paths.bars({size: [0.7, 40]}) : undefined,
    });
  }
  const axes = [
    opts.time === false ? {label: opts.xLabel, values: (u, v) => v.map(x => fmtNum(x)),
      ...(opts.integerX ? {incrs: [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 1e4, 1e5]} : {})} : {},
    {scale: 'y', size: 60, values: (u, v) => v.map(yfmt)},
  ];
  if (hasY2) axes.push({scale: 'y2', side: 1, size: 60, grid: {show: false}, values: (u, v) => v.map(opts.y2fmt || yfmt)});
  const scales = {x: {time: opts.time !== false}, y: {auto: true}};
  if (opts.yMin0) scales.y.range = (u, min, max) => [0, max > 0 ? max * 1.1 : 1];
  const width = () => Math.max(240, Math.floor(body.clientWidth || parent.clientWidth || 600));
  const u = new uPlot({width: width(), height, series, axes, scales, legend: {live: true},
                       cursor: {points: {size: 6}}},
                      [[], ...opts.series.map(() => [])], body);
  const ro = new ResizeObserver(() => {
    const w = width();
    if (Math.abs(w - u.width) > 2) u.setSize({width: w, height});
  });
  ro.observe(body);
  return {
    card, u,
    setData(data) { u.setData(data); },
    destroy() { ro.disconnect(); u.destroy(); card.remove(); },
  };
}
