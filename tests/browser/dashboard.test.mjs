// Drives the web dashboard (web/, docs/dashboard.md) in headless Chromium.
//
//   node dashboard.test.mjs fixture.json
//
// The fixture (written by the C++ integration test that starts the coordinator):
//   {"url": "https://127.0.0.1:PORT", "insecure": true, "screenshots": "/dir",
//    "users": {"alice": {"token": "...", "jobs": ["j-..."], "devices": ["agent id"]},
//              "bob":   {"token": "...", "jobs": [...], "devices": [...]}},
//    "sweep_job": "j-...", "ledger_size": N,
//    "live_job_spec": {...}   (optional: the job submitted to see the Jobs page update)}
// jobs/devices are those each user owns; alice's first device must be connected.
// Prints "ok <check> (<ms> ms)" or "FAIL <check>: <why> (<ms> ms)" per check, then
// "N passed, M failed"; exits 1 if any failed.
// Environment: CHROMIUM (default /usr/bin/chromium), DASHBOARD_TEST_TIMEOUT_S (default 300).

import fs from 'node:fs';
import path from 'node:path';
import http from 'node:http';
import https from 'node:https';
import puppeteer from 'puppeteer-core';

if (!process.argv[2]) {
  console.error('usage: node dashboard.test.mjs fixture.json');
  process.exit(2);
}
const fx = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const base = fx.url.replace(/\/+$/, '');
const alice = fx.users.alice, bob = fx.users.bob;
const liveSpec = fx.live_job_spec || {name: 'live-update', app: 'noop', params: {tasks: 3}};
const shots = fx.screenshots || '';
const WAIT = 15000;

let passed = 0, failed = 0;
const t0 = Date.now();
const limit = Number(process.env.DASHBOARD_TEST_TIMEOUT_S || 300);
const watchdog = setTimeout(() => {
  console.log(`FAIL timeout: the browser test did not finish in ${limit} s`);
  process.exit(1);
}, limit * 1000);

async function check(name, fn) {
  const start = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok ${name} (${Date.now() - start} ms)`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${String(e && e.message || e).split('\n')[0]} (${Date.now() - start} ms)`);
  }
}

function assert(cond, why) {
  if (!cond) throw new Error(why);
}

// An API call from node (not the browser), with a user's token.
function request(method, p, token, body) {
  const u = new URL(base + p);
  const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  const mod = u.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.request(u, {method, rejectUnauthorized: !fx.insecure, timeout: WAIT, headers: {
      ...(token ? {Authorization: 'Bearer ' + token} : {}),
      ...(data ? {'Content-Type': 'application/json', 'Content-Length': data.length} : {})}}, res => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', c => { text += c; });
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(text); } catch (e) { /* not JSON */ }
        resolve({status: res.statusCode, text, json});
      });
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${p}: no answer in ${WAIT} ms`)));
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  acceptInsecureCerts: !!fx.insecure,
  args: ['--no-sandbox', '--ignore-certificate-errors', '--disable-dev-shm-usage', '--disable-gpu',
    '--no-first-run', '--no-default-browser-check'],
  defaultViewport: {width: 1280, height: 800},
});
const page = await browser.newPage();
page.setDefaultTimeout(WAIT);
const scriptErrors = [];
let loads = 0;
page.on('pageerror', e => scriptErrors.push('uncaught: ' + String(e.message || e).split('\n')[0]));
page.on('console', m => {
  if (/Content Security Policy|Refused to/i.test(m.text())) scriptErrors.push('CSP: ' + m.text().slice(0, 200));
});
page.on('load', () => { loads++; });

const poll = {polling: 100};
const dash = () => page.evaluate(() => ({page: window.clawDash?.page, updates: window.clawDash?.updates ?? 0}));

// Goes to a page by its hash and waits for its first state event.
async function visit(hash, name) {
  const already = await page.evaluate(hh => location.hash === hh, hash);
  const before = already ? 0 : (await dash()).updates;
  await page.evaluate(hh => { location.hash = hh; }, hash);
  await page.waitForFunction((n, b) => window.clawDash && window.clawDash.page === n && window.clawDash.updates > b,
    {...poll, timeout: WAIT}, name, before);
}

async function screenshot(name) {
  if (!shots) return;
  fs.mkdirSync(shots, {recursive: true});
  await page.evaluate(() => new Promise(r => requestAnimationFrame(() => r())));
  await page.screenshot({path: path.join(shots, `${name}.png`), fullPage: true});
}

async function signIn(user, token) {
  await page.waitForSelector('#token-input', {visible: true});
  await page.type('#token-input', token);
  await page.click('#login-button');
  await page.waitForFunction(u => {
    const who = document.querySelector('#who');
    return who && !who.hidden && document.querySelector('#user').textContent.trim() === u;
  }, {...poll, timeout: WAIT}, user);
  const header = await page.$eval('#top', e => e.textContent);
  assert(header.includes(user), `the header does not show ${user}`);
  assert(/log out/i.test(header), 'the header has no "log out"');
}

// Waits until every id in `want` has a row in `table` and says which of
// `unwanted` show anywhere on the page.
async function listed(table, attr, want, unwanted) {
  await page.waitForFunction((t, a, ids) => ids.every(id => document.querySelector(`${t} tr[${a}="${CSS.escape(id)}"]`)),
    {...poll, timeout: WAIT}, table, attr, want).catch(async () => {
    const have = await page.$$eval(`${table} tr[${attr}]`, (rows, a) => rows.map(r => r.getAttribute(a)), attr);
    throw new Error(`missing ${want.filter(x => !have.includes(x)).join(', ')} (listed: ${have.join(', ') || 'none'})`);
  });
  const found = await page.evaluate((t, a, ids) => ids.filter(id =>
    document.querySelector(`${t} tr[${a}="${CSS.escape(id)}"]`) || document.querySelector('#page').textContent.includes(id)),
  table, attr, unwanted);
  assert(!found.length, `shows another user's ${found.join(', ')}`);
}

let liveJob = null;
function CSS_escape(id) { return String(id).replace(/["\\]/g, '\\$&'); }

try {
  await check('login', async () => {
    await page.goto(base + '/#/network', {waitUntil: 'domcontentloaded'});
    await signIn('alice', alice.token);
    const stored = await page.evaluate(() => sessionStorage.getItem('claw.token'));
    assert(stored === alice.token, 'the token is not in sessionStorage claw.token');
  });

  await check('network page', async () => {
    await page.waitForFunction(() => window.clawDash && window.clawDash.page === 'network' && window.clawDash.updates > 0,
      {...poll, timeout: WAIT});
    const values = await page.$$eval('#counters .counter.device-count .value', els => els.map(e => e.textContent.trim()));
    assert(values.length === 5, `${values.length} device counters, not 5`);
    const bad = values.filter(v => !/^\d+$/.test(v.replace(/,/g, '')));
    assert(!bad.length, `counters that are not integers: ${bad.join(' ')}`);
    const flops = await page.$eval('#counters .counter[data-key="flops_available"] .value', e => e.textContent);
    assert(/FLOPS/.test(flops), `FLOPS available reads "${flops}"`);
    const canvases = await page.$$eval('#charts canvas', c => c.length);
    assert(canvases >= 1, 'no chart canvas');
    await screenshot('network');
  });

  await check('jobs page lists only alice\'s jobs', async () => {
    await visit('#/jobs', 'jobs');
    await listed('#jobs-table', 'data-job', alice.jobs, bob.jobs);
    await screenshot('jobs');
  });

  await check('jobs page updates live', async () => {
    await page.evaluate(() => { window.__marker = 1; });
    const loadsBefore = loads;
    const before = await page.evaluate(() => ({updates: window.clawDash.updates,
      nav: performance.getEntriesByType('navigation').length}));
    const r = await request('POST', '/api/jobs', alice.token, liveSpec);
    assert(r.status === 200 || r.status === 201, `POST /api/jobs: ${r.status} ${r.text.slice(0, 200)}`);
    liveJob = r.json && r.json.job_id;
    assert(liveJob, `POST /api/jobs gave no job_id: ${r.text.slice(0, 200)}`);
    await page.waitForFunction(id => document.querySelector(`#jobs-table tr[data-job="${CSS.escape(id)}"]`),
      {...poll, timeout: WAIT}, liveJob).catch(() => { throw new Error(`${liveJob} did not appear in 15 s`); });
    const after = await page.evaluate(() => ({marker: window.__marker, updates: window.clawDash.updates,
      nav: performance.getEntriesByType('navigation').length}));
    assert(after.marker === 1, 'the page was reloaded (window.__marker is gone)');
    assert(loads === loadsBefore && after.nav === before.nav, 'a navigation happened');
    assert(after.updates > before.updates, 'clawDash.updates did not grow');
  });

  await check('job page of the sweep', async () => {
    assert(fx.sweep_job, 'the fixture names no sweep_job');
    await visit('#/jobs/' + encodeURIComponent(fx.sweep_job), 'job');
    await page.waitForSelector('#experiment-table tbody tr', {timeout: WAIT}).catch(() => {
      throw new Error('no experiment table rows in 15 s');
    });
    const cells = await page.$$eval('#experiment-table td, #experiment-table th', els => els.map(e => e.textContent));
    const bad = cells.filter(c => /(^|[^a-z])(nan|undefined|null)([^a-z]|$)/i.test(c));
    assert(!bad.length, `cells read ${bad.slice(0, 3).map(x => JSON.stringify(x)).join(', ')}`);
    const column = () => page.$$eval('#experiment-table tbody td[data-col="test_accuracy"]', els => els.map(e => e.textContent.trim()));
    const sortedBy = async dir => {
      const texts = await column();
      const firstMissing = texts.findIndex(t => t === '\u2014');
      if (firstMissing >= 0) {
        assert(texts.slice(firstMissing).every(t => t === '\u2014'), `missing values are not last: ${texts.join(' ')}`);
      }
      const nums = texts.filter(t => t !== '\u2014').map(Number);
      assert(nums.every(Number.isFinite), `test_accuracy cells that are not numbers: ${texts.join(' ')}`);
      for (let i = 1; i < nums.length; i++) {
        assert(dir > 0 ? nums[i - 1] <= nums[i] : nums[i - 1] >= nums[i], `not sorted ${dir > 0 ? 'up' : 'down'}: ${texts.join(' ')}`);
      }
    };
    await page.click('#experiment-table th[data-col="test_accuracy"]');
    await page.waitForSelector('#experiment-table th.sorted-asc[data-col="test_accuracy"]');
    await sortedBy(1);
    await page.click('#experiment-table th[data-col="test_accuracy"]');
    await page.waitForSelector('#experiment-table th.sorted-desc[data-col="test_accuracy"]');
    await sortedBy(-1);
    await page.waitForSelector('#timeline rect.span', {timeout: WAIT}).catch(() => {
      throw new Error('the timeline has no bar');
    });
    await screenshot('job');
    const canvases = await page.$$eval('#page canvas', c => c.length);
    const html = await page.evaluate(() => window.clawDash.buildReport());
    assert(typeof html === 'string' && html.length > 1000, 'buildReport() gave no HTML');
    if (shots) fs.writeFileSync(path.join(shots, 'job-report.html'), html);
    assert(!/<script/i.test(html), 'the report has a <script>');
    const ext = /(?:src|href)\s*=\s*["']?\s*(?:\/|https?:)/i.exec(html);
    assert(!ext, `the report refers outside itself: ${ext && html.slice(ext.index, ext.index + 60)}`);
    assert(!/<link\b/i.test(html), 'the report has a <link>');
    assert(html.includes(fx.sweep_job), 'the report does not name the job');
    assert(/<table[^>]*id="experiment-table"/.test(html) && /<table[^>]*id="spans-table"/.test(html), 'the report lacks the tables');
    assert(/<svg/.test(html), 'the report lacks the timeline');
    assert(!canvases || /src="data:image\/png;base64,/.test(html), 'the report\'s charts are not images');
    assert(!/<button/i.test(html), 'the report has buttons');
  });

  await check('devices page lists only alice\'s devices', async () => {
    await visit('#/devices', 'devices');
    await listed('#devices-table', 'data-device', alice.devices, bob.devices);
    const badges = await page.$$eval('#devices-table tbody tr[data-device]', rows =>
      rows.map(r => (r.querySelector('.badge.state') || {}).textContent || ''));
    assert(badges.length && badges.every(b => b.trim()), 'a device row without a state badge');
    await screenshot('devices');
  });

  await check('me page: pause and resume a device', async () => {
    await visit('#/me', 'me');
    await page.evaluate(() => { window.__marker = 2; });
    const dev = alice.devices[0];
    const row = `#my-devices tr[data-device="${CSS_escape(dev)}"]`;
    await page.waitForSelector(row, {timeout: WAIT});
    const credit = await page.$eval('#me-cards .credit-total .value', e => e.textContent);
    assert(/\d/.test(credit), `total credit reads "${credit}"`);
    const cards = await page.$eval('#me-cards', e => e.textContent);
    assert(/ of \d/.test(cards), 'no rank "N of M"');
    await screenshot('me');
    // Waits until the device's state is (or is not) `state`, or an error shows.
    const waitState = async (state, want) => {
      await page.waitForFunction((r, s, w) => {
        const tr = document.querySelector(r);
        if (!tr) return false;
        if (tr.querySelector('.error')) return true;
        const b = tr.querySelector('.badge.state');
        return b && (b.textContent.trim() === s) === w;
      }, {...poll, timeout: 20000}, row, state, want).catch(() => {
        throw new Error(`the device did ${want ? 'not become' : 'not leave'} ${state} in 20 s`);
      });
      const error = await page.$eval(row, tr => (tr.querySelector('.error') || {}).textContent || '');
      assert(!error, `the control call failed: ${error}`);
    };
    const initial = await page.$eval(row, tr => tr.querySelector('.badge.state').textContent.trim());
    assert(initial !== 'offline', `alice's first device ${dev} is offline`);
    if (initial === 'paused') {  // left paused by an earlier run: resume first
      await page.click(`button[data-action="resume"][data-device="${CSS_escape(dev)}"]`);
      await waitState('paused', false);
    }
    await page.click(`button[data-action="pause"][data-device="${CSS_escape(dev)}"]`);
    await waitState('paused', true);
    await page.click(`button[data-action="resume"][data-device="${CSS_escape(dev)}"]`);
    await waitState('paused', false);
    assert(await page.evaluate(() => window.__marker === 2), 'the page was reloaded');
  });

  await check('another user\'s device cannot be controlled', async () => {
    assert(bob.devices && bob.devices.length, 'the fixture gives bob no device');
    const r = await request('POST', `/api/devices/${encodeURIComponent(bob.devices[0])}/control`, alice.token, {action: 'pause'});
    assert(r.status === 403, `alice pausing bob's device: ${r.status} ${r.text.slice(0, 200)}, not 403`);
  });

  await check('ledger inclusion proof', async () => {
    await visit('#/ledger', 'ledger');
    const size = await page.$eval('#ledger-size', e => Number(e.textContent.replace(/,/g, '')));
    assert(size >= (fx.ledger_size || 1), `the ledger shows ${size} entries, expected at least ${fx.ledger_size || 1}`);
    const cp = await page.$eval('#checkpoint', e => e.textContent);
    assert(cp.includes('\n\n\u2014 '), 'the checkpoint shown is not a signed note');
    await page.$eval('#entry-index', e => { e.value = ''; });
    await page.type('#entry-index', '0');
    await page.click('#check-inclusion');
    await page.waitForFunction(() => /^(verified|FAILED)/.test(document.querySelector('#proof-result').textContent),
      {...poll, timeout: WAIT});
    const result = await page.$eval('#proof-result', e => e.textContent);
    assert(result.startsWith('verified'), result);
    assert(/signed by/.test(result), `the signature was not checked: ${result}`);
    const entry = await page.$eval('#entry-json', e => e.textContent);
    assert(entry.trim().startsWith('{'), 'the entry\'s JSON is not shown');
    await screenshot('ledger');
  });

  await check('log out, log in as bob', async () => {
    await page.click('#logout');
    await page.waitForSelector('#token-input', {visible: true});
    assert(!(await page.evaluate(() => sessionStorage.getItem('claw.token'))), 'the token is still stored');
    await signIn('bob', bob.token);
    await visit('#/jobs', 'jobs');
    await listed('#jobs-table', 'data-job', bob.jobs, [...alice.jobs, ...(liveJob ? [liveJob] : [])]);
  });

  await check('no script errors', async () => {
    assert(!scriptErrors.length, scriptErrors.slice(0, 3).join('; '));
  });
} finally {
  await browser.close().catch(() => {});
}
clearTimeout(watchdog);
console.log(`${passed} passed, ${failed} failed (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
process.exit(failed ? 1 : 0);
