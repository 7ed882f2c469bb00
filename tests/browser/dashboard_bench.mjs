// The browser side of bench/dashboard_bench.cc (run by it, not by hand):
//   node dashboard_bench.mjs <coordinator url> <cpu file>
// The cpu file holds "<cpu seconds of the coordinator's process> <tasks
// finished>", rewritten every 100 ms by the bench.
// Prints what it measured, and one line of JSON at the end.
import fs from 'node:fs';
import puppeteer from 'puppeteer-core';

const [base, cpuFile] = process.argv.slice(2);
const median = xs => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(s.length * p))]; };
const sleep = ms => new Promise(r => setTimeout(r, ms));
const readCpu = () => fs.readFileSync(cpuFile, 'utf8').trim().split(' ').map(Number);

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  dumpio: !!process.env.DASHBOARD_BENCH_DUMPIO,
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', '--no-first-run'],
  defaultViewport: {width: 1280, height: 800},
});

// What "painted" means per page: its data on screen.
const ready = {
  network: () => document.querySelectorAll('#counters .counter.device-count .value').length === 5 &&
    document.querySelector('#charts canvas') !== null,
  jobs: () => document.querySelectorAll('#jobs-table tr[data-job]').length > 0,
  devices: () => document.querySelectorAll('#devices-table tr[data-device]').length > 0,
  me: () => document.querySelector('#me-cards .credit-total .value') !== null,
};

async function cpuOver(seconds) {
  const [c0, f0] = readCpu();
  const t0 = Date.now();
  await sleep(seconds * 1000);
  const [c1, f1] = readCpu();
  const wall = (Date.now() - t0) / 1000;
  return {cpu_share: (c1 - c0) / wall, tasks_per_s: (f1 - f0) / wall};
}

const out = {};
// 1. The coordinator's CPU with no dashboard open (the churn alone).
out.idle = await cpuOver(20);
console.log(`no dashboards:  coordinator CPU ${(100 * out.idle.cpu_share).toFixed(1)}% of a core, ${out.idle.tasks_per_s.toFixed(1)} tasks/s`);

// 2. First paint: a fresh page per load, navigation start -> data on screen.
out.first_paint_ms = {};
for (const name of Object.keys(ready)) {
  const times = [];
  const page = await browser.newPage();
  for (let i = 0; i < 5; i++) {
    await page.goto('about:blank');
    const t0 = Date.now();
    await page.goto(`${base}/#/${name}`);
    await page.waitForFunction(ready[name], {polling: 'raf', timeout: 60000});
    times.push(Date.now() - t0);
  }
  await page.close();
  out.first_paint_ms[name] = {median: median(times), max: Math.max(...times)};
  console.log(`first paint ${name.padEnd(8)} median ${median(times)} ms, max ${Math.max(...times)} ms (5 loads)`);
}

// 3. Live update: a job submitted through the API -> its row on the open
// Jobs page (the page's stream, no reload).
{
  const page = await browser.newPage();
  await page.goto(`${base}/#/jobs`);
  await page.waitForFunction(ready.jobs, {timeout: 60000});
  const lat = [];
  for (let i = 0; i < 15; i++) {
    const t0 = Date.now();
    const r = await fetch(`${base}/api/jobs`, {method: 'POST', body: JSON.stringify({app: 'noop', tasks: 1, name: `live-${i}`})});
    const id = (await r.json()).job_id;
    await page.waitForFunction(id => document.querySelector(`#jobs-table tr[data-job="${id}"]`) !== null,
      {polling: 'raf', timeout: 30000}, id);
    lat.push(Date.now() - t0);
    await sleep(300 + Math.random() * 700);
  }
  out.live_update_ms = {median: median(lat), p90: pct(lat, 0.9), max: Math.max(...lat)};
  console.log(`live update (submit -> row on screen): median ${median(lat)} ms, p90 ${pct(lat, 0.9)} ms, max ${Math.max(...lat)} ms (15 jobs; pages update once a second)`);
  await page.close();
}

// 4. Twenty dashboards open (five of each page), then the CPU again.
{
  const pages = [];
  const names = Object.keys(ready);
  // Twenty people: a browser context each (one browser holds at most six
  // HTTP/1.1 connections to a host, and each open page keeps one).
  for (let i = 0; i < 20; i++) {
    const context = await browser.createBrowserContext();
    const page = await context.newPage();
    await page.goto(`${base}/#/${names[i % names.length]}`);
    pages.push(page);
  }
  for (let i = 0; i < pages.length; i++) {
    await pages[i].waitForFunction(ready[names[i % names.length]], {timeout: 60000});
  }
  const before = await Promise.all(pages.map(p => p.evaluate(() => window.clawDash.updates)));
  out.twenty = await cpuOver(20);
  const after = await Promise.all(pages.map(p => p.evaluate(() => window.clawDash.updates)));
  out.twenty.updates_per_page_per_s = after.reduce((s, a, i) => s + a - before[i], 0) / pages.length / 20;
  console.log(`20 dashboards:  coordinator CPU ${(100 * out.twenty.cpu_share).toFixed(1)}% of a core, ${out.twenty.tasks_per_s.toFixed(1)} tasks/s, ${out.twenty.updates_per_page_per_s.toFixed(2)} updates per page per second`);
  console.log(`the dashboards' cost: ${(100 * (out.twenty.cpu_share - out.idle.cpu_share)).toFixed(1)}% of a core (${(out.twenty.cpu_share / Math.max(out.idle.cpu_share, 1e-9)).toFixed(2)}x the coordinator's CPU without them)`);
}
console.log(JSON.stringify(out));
await browser.close();
