// The dashboard: one self-contained page that polls the HTTP API.
#pragma once

namespace claw {

inline constexpr const char* kDashboardHtml = R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>OpenClaw Compute</title>
<style>
body{font:14px system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:20px}table{border-collapse:collapse;width:100%}
td,th{padding:4px 8px;border-bottom:1px solid #ddd;text-align:left}
.bar{background:#eee;width:160px;height:10px;display:inline-block}
.bar>span{background:#3a7;height:10px;display:block}
.failed{color:#b22}.done{color:#272}#m{color:#555}
</style></head><body>
<h1>OpenClaw Compute</h1>
<p id="m"></p>
<p id="auth" hidden>API token: <input id="token" size="56" placeholder="cu-..."> <button id="save">use</button>
(kept in this browser only)</p>
<table><thead><tr><th>job</th><th>name</th><th>app</th><th>state</th><th>progress</th><th>tasks</th><th>result</th></tr></thead>
<tbody id="jobs"></tbody></table>
<script>
// API calls carry the token kept in this browser (none needed with --insecure-local).
const api = url => fetch(url, {headers: localStorage.clawToken ?
    {Authorization: 'Bearer ' + localStorage.clawToken} : {}});
document.getElementById('save').onclick = () => {
  localStorage.clawToken = document.getElementById('token').value.trim(); refresh();
};
async function refresh(){
  const m = await (await fetch('/metrics')).text();
  const g = k => (m.match(new RegExp('^'+k+' (\\S+)','m'))||[])[1]||'0';
  document.getElementById('m').textContent =
    `agents ${(+g('claw_connected_agents'))} · pending ${+g('claw_pending_tasks')} · running ${+g('claw_active_leases')} · results ${+g('claw_results_accepted_total')}`;
  const listed = await api('/api/jobs?limit=50');
  document.getElementById('auth').hidden = listed.status !== 401;
  if (listed.status === 401) { document.getElementById('jobs').replaceChildren(); return; }
  const {jobs} = await listed.json();
  const rows = await Promise.all(jobs.map(async j => {
    let res = '';
    if (j.state === 'done') {
      const r = (await (await api(`/api/jobs/${j.job_id}/results`)).json()).result || {};
      res = r.estimate !== undefined ? `${(+r.estimate).toPrecision(7)} ± ${(1.96*r.std_error).toPrecision(3)}` : JSON.stringify(r);
    } else if (j.error) res = j.error;
    const pct = j.tasks_total ? 100*j.tasks_done/j.tasks_total : 0;
    const e = document.createElement('tr');
    for (const v of [j.job_id, j.name, j.app, j.state]) { const td=document.createElement('td'); td.textContent=v; e.appendChild(td); }
    e.children[3].className = j.state;
    const p = document.createElement('td'); p.innerHTML = `<span class="bar"><span style="width:${pct}%"></span></span>`; e.appendChild(p);
    for (const v of [`${j.tasks_done}/${j.tasks_total}`, res]) { const td=document.createElement('td'); td.textContent=v; e.appendChild(td); }
    return e;
  }));
  document.getElementById('jobs').replaceChildren(...rows);
}
refresh(); setInterval(refresh, 1000);
</script></body></html>
)html";

}  // namespace claw
