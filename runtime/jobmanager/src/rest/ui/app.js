// Floe's web UI: the JobManager's REST API (Flink's shape) drawn as pages, refreshed every second.
// Plain JavaScript compiled into the JobManager binary: no build step, nothing fetched from outside.
"use strict";

const REFRESH_MS = 1000;
// What survives a refresh: toggles, the cancel confirmation, the last action's outcome.
const ui = {
  showRegions: false,
  showSlotSharing: false,
  confirmCancel: null,
  message: null,
  selectedCheckpoint: null,
  savepointTrigger: null,
};

// ---------------------------------------------------------------- formatting

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function count(n) {
  if (n === null || n === undefined) return "–";
  if (n < 10000) return String(Math.round(n));
  if (n < 10e6) return (n / 1e3).toFixed(1) + "K";
  return (n / 1e6).toFixed(2) + "M";
}

function rate(n) {
  return n === null || n === undefined ? "–" : count(n) + "/s";
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function duration(ms) {
  if (ms === null || ms === undefined || ms < 0) return "–";
  if (ms < 1000) return ms + " ms";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(1) + " s";
  const m = Math.floor(s / 60), h = Math.floor(m / 60);
  if (h > 0) return h + "h " + (m % 60) + "m";
  return m + "m " + Math.floor(s % 60) + "s";
}

function time(ms) {
  return ms && ms > 0 ? new Date(ms).toLocaleTimeString() : "–";
}

function percent(msPerSecond) {
  return msPerSecond === null || msPerSecond === undefined ? "–" : Math.round(msPerSecond / 10) + "%";
}

function usage(ratio) {
  return ratio === null || ratio === undefined ? "–" : Math.round(ratio * 100) + "%";
}

function stateBadge(state) {
  return `<span class="state ${esc(state)}">${esc(state)}</span>`;
}

// ---------------------------------------------------------------- data

class HttpError extends Error {}

async function api(path, options) {
  const response = await fetch(path, options);
  const text = await response.text();
  const body = text ? JSON.parse(text) : {};
  if (!response.ok) {
    throw new HttpError((body.errors || [response.statusText]).join("; "));
  }
  return body;
}

function isTerminal(state) {
  return ["FINISHED", "FAILED", "CANCELED"].includes(state);
}

// The state a vertex shows: any failed subtask, else any running one, else the most common.
function vertexState(vertex) {
  const states = vertex.subtasks.map(s => s.status);
  if (states.length === 0) return "CREATED";
  for (const s of ["FAILED", "RUNNING", "DEPLOYING", "CANCELING"]) if (states.includes(s)) return s;
  const counts = {};
  for (const s of states) counts[s] = (counts[s] || 0) + 1;
  return Object.entries(counts).sort((a, b) => b[1] - a[1])[0][0];
}

// Sums of the subtasks' rates; busy and backpressure the worst subtask's (as Flink colors them).
function vertexMetrics(vertex) {
  const m = { in: null, out: null, busy: null, bp: null, recordsIn: 0, recordsOut: 0, bytesIn: 0, bytesOut: 0 };
  for (const s of vertex.subtasks) {
    m.recordsIn += s["records-in"] || 0;
    m.recordsOut += s["records-out"] || 0;
    m.bytesIn += s["bytes-in"] || 0;
    m.bytesOut += s["bytes-out"] || 0;
    const r = s.metrics;
    if (!r) continue;
    m.in = (m.in || 0) + r.numRecordsInPerSecond;
    m.out = (m.out || 0) + r.numRecordsOutPerSecond;
    m.busy = Math.max(m.busy || 0, r.busyTimeMsPerSecond);
    m.bp = Math.max(m.bp || 0, r.backPressuredTimeMsPerSecond);
  }
  return m;
}

// ---------------------------------------------------------------- the dataflow graph

const NODE_W = 230, NODE_H = 84, GAP_X = 110, GAP_Y = 40, PAD = 40;

// Layers by longest path from a source; within a layer, ordered by their inputs' mean position.
function layout(nodes) {
  const byId = new Map(nodes.map(n => [n.id, n]));
  const layer = new Map();
  const layerOf = n => {
    if (layer.has(n.id)) return layer.get(n.id);
    layer.set(n.id, 0);
    const l = n.inputs.length === 0 ? 0 : 1 + Math.max(...n.inputs.map(i => layerOf(byId.get(i.id))));
    layer.set(n.id, l);
    return l;
  };
  nodes.forEach(layerOf);
  const layers = [];
  for (const n of nodes) (layers[layer.get(n.id)] ||= []).push(n);
  const index = new Map();
  const place = () => layers.forEach(l => l.forEach((n, i) => index.set(n.id, i)));
  place();
  for (let pass = 0; pass < 4; pass++) {
    for (let l = 1; l < layers.length; l++) {
      const centre = n => n.inputs.length === 0 ? index.get(n.id)
        : n.inputs.reduce((s, i) => s + index.get(i.id), 0) / n.inputs.length;
      layers[l].sort((a, b) => centre(a) - centre(b));
      place();
    }
  }
  const tallest = Math.max(...layers.map(l => l.length));
  const pos = new Map();
  layers.forEach((l, li) => {
    const offset = ((tallest - l.length) * (NODE_H + GAP_Y)) / 2;
    l.forEach((n, i) => pos.set(n.id, {
      x: PAD + li * (NODE_W + GAP_X),
      y: PAD + offset + i * (NODE_H + GAP_Y),
    }));
  });
  return {
    pos,
    width: 2 * PAD + layers.length * NODE_W + (layers.length - 1) * GAP_X,
    height: 2 * PAD + tallest * NODE_H + (tallest - 1) * GAP_Y,
  };
}

// Blue (idle) to red (busy); grey to black when backpressured more than busy, as Flink draws it.
function vertexColor(state, m) {
  if (m.busy === null) {
    return { FINISHED: "#3f7a52", FAILED: "#b33a3a", CANCELED: "#5d626b" }[state] || "#7d8899";
  }
  const busy = m.busy / 1000, bp = m.bp / 1000;
  if (bp > busy && bp > 0.05) {
    return `hsl(220, 8%, ${Math.round(55 - 40 * bp)}%)`;
  }
  return `hsl(${Math.round(215 - 215 * busy)}, 62%, 42%)`;
}

function truncate(text, n) {
  return text.length > n ? text.slice(0, n - 1) + "…" : text;
}

// Which pipelined regions each vertex's subtasks belong to (region tasks are `vertex#subtask`).
function regionsByVertex(regions) {
  const of = new Map();
  regions.forEach((r, i) => r.tasks.forEach(t => {
    const v = t.slice(0, t.lastIndexOf("#"));
    if (!of.has(v)) of.set(v, new Set());
    of.get(v).add(i + 1);
  }));
  return of;
}

function graphSvg(job) {
  const nodes = job.plan.nodes;
  const vertices = new Map(job.vertices.map(v => [v.id, v]));
  const { pos, width, height } = layout(nodes);
  const parts = [];
  parts.push(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#8792a2"/></marker></defs>`);
  if (ui.showSlotSharing) {
    const groups = new Map();
    for (const n of nodes) (groups.get(n.slot_sharing_group) || groups.set(n.slot_sharing_group, []).get(n.slot_sharing_group)).push(n);
    for (const [group, members] of groups) {
      const xs = members.map(n => pos.get(n.id).x), ys = members.map(n => pos.get(n.id).y);
      const x = Math.min(...xs) - 14, y = Math.min(...ys) - 24;
      const w = Math.max(...xs) + NODE_W + 14 - x, h = Math.max(...ys) + NODE_H + 14 - y;
      parts.push(`<g class="slot-sharing-group" data-group="${esc(group)}"><rect class="group" x="${x}" y="${y}" width="${w}" height="${h}" rx="10"/><text class="group-label" x="${x + 8}" y="${y + 14}">slot sharing group: ${esc(group)}</text></g>`);
    }
  }
  for (const n of nodes) {
    const to = pos.get(n.id);
    for (const input of n.inputs) {
      const from = pos.get(input.id);
      const x1 = from.x + NODE_W, y1 = from.y + NODE_H / 2, x2 = to.x, y2 = to.y + NODE_H / 2;
      const mx = (x1 + x2) / 2;
      const blocking = input.exchange === "blocking" || input.exchange.startsWith("hybrid");
      parts.push(`<path class="edge${blocking ? " blocking" : ""}" data-from="${esc(input.id)}" data-to="${esc(n.id)}" d="M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}" marker-end="url(#arrow)"><title>${esc(input.ship_strategy)} · ${esc(input.exchange)}</title></path>`);
      parts.push(`<text class="edge-label" x="${mx}" y="${(y1 + y2) / 2 - 6}" text-anchor="middle">${esc(input.ship_strategy)}${blocking ? " · " + esc(input.exchange) : ""}</text>`);
    }
  }
  const regions = regionsByVertex(job.regions || []);
  for (const n of nodes) {
    const p = pos.get(n.id);
    const v = vertices.get(n.id) || { subtasks: [], parallelism: n.parallelism };
    const state = vertexState(v);
    const m = vertexMetrics(v);
    const lines = [
      `parallelism ${v.parallelism} · ${state}`,
      `in ${rate(m.in)} · out ${rate(m.out)}`,
      `busy ${percent(m.busy)} · backpressured ${percent(m.bp)}`,
    ];
    parts.push(`<g class="vertex" data-vertex-id="${esc(n.id)}" data-state="${esc(state)}" transform="translate(${p.x},${p.y})">
      <title>${esc(n.description)} (${esc(n.id)})</title>
      <rect class="box" width="${NODE_W}" height="${NODE_H}" rx="6" fill="${vertexColor(state, m)}"/>
      <text class="name" x="10" y="20">${esc(truncate(n.description, 30))}</text>
      ${lines.map((l, i) => `<text x="10" y="${40 + i * 16}">${esc(l)}</text>`).join("")}
    </g>`);
    if (ui.showRegions && regions.has(n.id)) {
      const ids = [...regions.get(n.id)].sort((a, b) => a - b);
      const label = ids.length <= 4 ? ids.map(i => "R" + i).join(" ") : `R${ids[0]}…R${ids[ids.length - 1]} (${ids.length} regions)`;
      const w = 8 + label.length * 6;
      parts.push(`<g class="region-tag" data-vertex-id="${esc(n.id)}"><rect class="region-tag-bg" x="${p.x + NODE_W - w}" y="${p.y - 9}" width="${w}" height="16" rx="4"/><text class="region-tag" x="${p.x + NODE_W - w + 4}" y="${p.y + 3}">${esc(label)}</text></g>`);
    }
  }
  return `<svg id="job-graph" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">${parts.join("")}</svg>`;
}

// ---------------------------------------------------------------- pages

function jobsTable(jobs) {
  if (jobs.length === 0) return `<p class="muted">No jobs yet.</p>`;
  const rows = jobs
    .slice()
    .sort((a, b) => b["start-time"] - a["start-time"])
    .map(j => {
      const tasks = j.tasks || {};
      return `<tr class="clickable job-row" data-href="#/job/${esc(j.jid)}" data-job-id="${esc(j.jid)}">
        <td><a href="#/job/${esc(j.jid)}">${esc(j.name)}</a><div class="muted">${esc(j.jid)}</div></td>
        <td>${stateBadge(j.state)}</td>
        <td>${time(j["start-time"])}</td>
        <td class="num">${duration(j.duration)}</td>
        <td class="num">${tasks.finished || 0} / ${tasks.total || 0}</td>
      </tr>`;
    })
    .join("");
  return `<table id="jobs"><thead><tr><th>Job</th><th>State</th><th>Started</th><th class="num">Duration</th><th class="num">Tasks finished</th></tr></thead><tbody>${rows}</tbody></table>`;
}

async function overviewPage() {
  const [overview, jobs] = await Promise.all([api("overview"), api("jobs/overview")]);
  const card = (value, label, id) => `<div class="card" id="${id}"><div class="value">${esc(value)}</div><div class="label">${esc(label)}</div></div>`;
  return `<h1>Cluster overview</h1><p class="muted">${esc(overview["flink-version"])}</p>
    <div class="cards">
      ${card(overview.taskmanagers, "TaskManagers", "card-taskmanagers")}
      ${card(overview["slots-total"], "task slots", "card-slots")}
      ${card(overview["slots-available"], "slots available", "card-slots-available")}
      ${card(overview["jobs-running"], "jobs running", "card-running")}
      ${card(overview["jobs-finished"], "finished", "card-finished")}
      ${card(overview["jobs-cancelled"], "canceled", "card-canceled")}
      ${card(overview["jobs-failed"], "failed", "card-failed")}
    </div>
    <h2>Jobs</h2>${jobsTable(jobs.jobs)}`;
}

async function jobsPage() {
  const jobs = await api("jobs/overview");
  return `<h1>Jobs</h1>${jobsTable(jobs.jobs)}`;
}

async function taskmanagersPage() {
  const { taskmanagers } = await api("taskmanagers");
  const rows = taskmanagers.map(t => `<tr class="clickable" data-href="#/taskmanager/${encodeURIComponent(t.id)}">
      <td><a href="#/taskmanager/${encodeURIComponent(t.id)}">${esc(t.id)}</a></td><td>${esc(t.address)}</td>
      <td class="num">${t.slots}</td><td class="num">${t["executions-running"]}</td>
      <td class="num">${bytes(t["rss-bytes"])}</td><td class="num">${bytes(t["rss-peak-bytes"])}</td>
      <td class="num">${bytes(t["buffered-bytes"])}</td><td class="num">${duration(t["last-heartbeat-ms-ago"])} ago</td></tr>`).join("");
  return `<h1>TaskManagers</h1><table id="taskmanagers"><thead><tr><th>Id</th><th>Address</th><th class="num">Slots</th>
    <th class="num">Tasks running</th><th class="num">Memory (RSS)</th><th class="num">Peak RSS</th><th class="num">Shuffle buffered</th>
    <th class="num">Last heartbeat</th></tr></thead><tbody>${rows}</tbody></table>`;
}

async function taskmanagerPage(id) {
  const tm = await api("taskmanagers/" + encodeURIComponent(id));
  const tasks = tm.tasks.map(t => `<tr><td><a href="#/job/${esc(t.job)}">${esc(t.job)}</a></td><td>${esc(t.task)}</td><td>${stateBadge(t.status)}</td></tr>`).join("");
  return `<h1>TaskManager ${esc(tm.id)}</h1><p class="muted">${esc(tm.address)} · ${tm.slotsNumber} slots · last heartbeat ${duration(tm.timeSinceLastHeartbeat)} ago</p>
    <div class="cards">
      <div class="card"><div class="value">${bytes(tm.metrics["rss-bytes"])}</div><div class="label">memory (RSS)</div></div>
      <div class="card"><div class="value">${bytes(tm.metrics["rss-peak-bytes"])}</div><div class="label">peak RSS</div></div>
      <div class="card"><div class="value">${bytes(tm.metrics["shuffle-buffered-bytes"])}</div><div class="label">shuffle buffered</div></div>
    </div>
    <h2>Tasks</h2>${tasks ? `<table><thead><tr><th>Job</th><th>Task</th><th>State</th></tr></thead><tbody>${tasks}</tbody></table>` : `<p class="muted">No tasks running.</p>`}`;
}

function vertexTable(job) {
  const rows = job.vertices.map(v => {
    const m = vertexMetrics(v);
    const counts = {};
    v.subtasks.forEach(s => { counts[s.status] = (counts[s.status] || 0) + 1; });
    const chips = Object.entries(counts).map(([s, n]) => `<span class="chip">${esc(s)} ${n}</span>`).join("");
    return `<tr class="clickable" data-href="#/job/${esc(job.jid)}/subtasks"><td>${esc(v.name)}<div class="muted">${esc(v.id)}</div></td>
      <td>${stateBadge(vertexState(v))}</td><td class="num">${v.parallelism}</td>
      <td class="num">${count(m.recordsIn)}</td><td class="num">${count(m.recordsOut)}</td>
      <td class="num">${bytes(m.bytesIn)}</td><td class="num">${bytes(m.bytesOut)}</td>
      <td class="num">${rate(m.in)}</td><td class="num">${rate(m.out)}</td>
      <td class="num">${percent(m.busy)}</td><td class="num">${percent(m.bp)}</td><td>${chips}</td></tr>`;
  }).join("");
  return `<table id="vertices"><thead><tr><th>Vertex</th><th>State</th><th class="num">Parallelism</th><th class="num">Records in</th>
    <th class="num">Records out</th><th class="num">Bytes in</th><th class="num">Bytes out</th><th class="num">In/s</th>
    <th class="num">Out/s</th><th class="num">Busy</th><th class="num">Backpressured</th><th>Subtasks</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function graphTab(job) {
  const legend = `<div class="legend">
    <span><span class="swatch" style="background:linear-gradient(90deg,hsl(215,62%,42%),hsl(108,62%,42%),hsl(0,62%,42%))"></span>idle → busy</span>
    <span><span class="swatch" style="background:linear-gradient(90deg,hsl(220,8%,55%),hsl(220,8%,15%))"></span>backpressured</span>
    <span>dashed edge: blocking exchange</span></div>`;
  const toggles = `<div class="toggles">
    <label><input type="checkbox" data-toggle="showRegions" ${ui.showRegions ? "checked" : ""}> pipelined regions</label>
    <label><input type="checkbox" data-toggle="showSlotSharing" ${ui.showSlotSharing ? "checked" : ""}> slot sharing</label></div>`;
  let extra = "";
  if (ui.showRegions) {
    const rows = job.regions.map((r, i) => `<tr><td>R${i + 1}</td><td>${r.tasks.map(t => `<span class="chip">${esc(t)}</span>`).join("")}</td></tr>`).join("");
    extra += `<h2>Pipelined regions (${job.regions.length})</h2><table id="regions"><thead><tr><th>Region</th><th>Tasks</th></tr></thead><tbody>${rows}</tbody></table>`;
  }
  if (ui.showSlotSharing) {
    const rows = job.slots.map(s => `<tr><td>${esc(s["taskmanager-id"])}</td><td class="num">${s.slot}</td><td>${s.tasks.map(t => `<span class="chip">${esc(t)}</span>`).join("")}</td></tr>`).join("");
    extra += `<h2>Slots</h2><table id="slots"><thead><tr><th>TaskManager</th><th class="num">Slot</th><th>Tasks sharing it</th></tr></thead><tbody>${rows}</tbody></table>`;
  }
  return `${toggles}${legend}<div class="graph">${graphSvg(job)}</div>${extra}<h2>Vertices</h2>${vertexTable(job)}`;
}

function subtasksTab(job) {
  return job.vertices.map(v => {
    const rows = v.subtasks.map(s => {
      const r = s.metrics || {};
      const tm = s["taskmanager-id"];
      const prior = (s["prior-attempts"] || []).map(p => `<span class="chip">#${p.attempt} ${esc(p.status)}</span>`).join("");
      return `<tr class="subtask" data-vertex-id="${esc(v.id)}" data-subtask="${s.subtask}" data-status="${esc(s.status)}">
        <td class="num">${s.subtask}</td><td>${stateBadge(s.status)}</td><td class="num">${s.attempt}</td><td>${prior}</td>
        <td>${tm ? `<a href="#/taskmanager/${encodeURIComponent(tm)}">${esc(tm)}</a>` : "–"}</td>
        <td class="num">${count(s["records-in"])}</td><td class="num">${count(s["records-out"])}</td>
        <td class="num">${bytes(s["bytes-in"])}</td><td class="num">${bytes(s["bytes-out"])}</td>
        <td class="num">${rate(r.numRecordsInPerSecond)}</td><td class="num">${rate(r.numRecordsOutPerSecond)}</td>
        <td class="num">${percent(r.busyTimeMsPerSecond)}</td><td class="num">${percent(r.backPressuredTimeMsPerSecond)}</td>
        <td class="num">${usage(s["buffers.inPoolUsage"])}</td><td class="num">${usage(s["buffers.outPoolUsage"])}</td></tr>`;
    }).join("");
    return `<h2 id="vertex-${esc(v.id)}">${esc(v.name)} <span class="muted">(${esc(v.id)}, parallelism ${v.parallelism})</span></h2>
      <table class="subtasks"><thead><tr><th class="num">Subtask</th><th>State</th><th class="num">Attempt</th><th>Prior attempts</th>
      <th>TaskManager</th><th class="num">Records in</th><th class="num">Records out</th><th class="num">Bytes in</th>
      <th class="num">Bytes out</th><th class="num">In/s</th><th class="num">Out/s</th>
      <th class="num">Busy</th><th class="num">Backpressured</th><th class="num" title="buffers.inPoolUsage">In buffers</th>
      <th class="num" title="buffers.outPoolUsage">Out buffers</th></tr></thead><tbody>${rows}</tbody></table>`;
  }).join("");
}

async function checkpointsTab(job) {
  const c = await api(`jobs/${job.jid}/checkpoints`);
  if (!c.enabled) return `<p class="muted">Checkpointing is not enabled for this job (execution.checkpointing.interval).</p>`;
  const latest = c.latest.completed;
  const rows = c.history.map(h => `<tr class="clickable checkpoint" data-checkpoint="${h.id}" data-status="${esc(h.status)}">
      <td class="num">${h.id}</td><td>${stateBadge(h.status)}${h.is_savepoint ? ' <span class="chip">savepoint</span>' : ""}</td>
      <td>${time(h.trigger_timestamp)}</td><td class="num">${duration(h.end_to_end_duration)}</td>
      <td class="num">${bytes(h.checkpointed_size)}</td><td class="num">${bytes(h.state_size)}</td>
      <td class="num">${h.num_acknowledged_subtasks} / ${h.num_subtasks}</td><td>${esc(h.failure_message || "")}</td></tr>`).join("");
  let details = "";
  if (ui.selectedCheckpoint !== null && c.history.some(h => h.id === ui.selectedCheckpoint)) {
    const d = await api(`jobs/${job.jid}/checkpoints/details/${ui.selectedCheckpoint}`);
    const tasks = Object.values(d.tasks).map(t => `<tr><td>${esc(t.id)}</td><td>${stateBadge(t.status)}</td>
      <td class="num">${t.num_acknowledged_subtasks} / ${t.num_subtasks}</td><td class="num">${duration(t.end_to_end_duration)}</td>
      <td class="num">${bytes(t.checkpointed_size)}</td><td class="num">${bytes(t.state_size)}</td></tr>`).join("");
    details = `<h2>Checkpoint ${d.id} by vertex</h2><table id="checkpoint-details"><thead><tr><th>Vertex</th><th>State</th>
      <th class="num">Acknowledged</th><th class="num">Latest ack after</th><th class="num">Checkpointed</th><th class="num">Full size</th></tr></thead><tbody>${tasks}</tbody></table>`;
  }
  return `<div class="cards">
      <div class="card" id="checkpoints-completed"><div class="value">${c.counts.completed}</div><div class="label">completed</div></div>
      <div class="card"><div class="value">${c.counts.failed}</div><div class="label">failed</div></div>
      <div class="card"><div class="value">${c.counts.in_progress}</div><div class="label">in progress</div></div>
      <div class="card"><div class="value">${latest ? duration(latest.end_to_end_duration) : "–"}</div><div class="label">latest duration</div></div>
      <div class="card"><div class="value">${latest ? bytes(latest.state_size) : "–"}</div><div class="label">latest full size</div></div>
      <div class="card"><div class="value">${duration(c.interval)}</div><div class="label">interval</div></div>
    </div>
    <h2>History <span class="muted">(newest ${c.history.length}; click one for its vertices)</span></h2>
    <table id="checkpoint-history"><thead><tr><th class="num">Id</th><th>State</th><th>Triggered</th><th class="num">Duration</th>
      <th class="num">Checkpointed</th><th class="num">Full size</th><th class="num">Acknowledged</th><th>Failure</th></tr></thead>
      <tbody>${rows}</tbody></table>${details}`;
}

async function exceptionsTab(job) {
  const e = await api(`jobs/${job.jid}/exceptions`);
  const entries = e.exceptionHistory.entries.map(x => `<tr><td>${time(x.timestamp)}</td><td>${esc(x.taskName)}</td><td>${esc(x.location)}</td><td><pre>${esc(x.stacktrace)}</pre></td></tr>`).join("");
  return `<h2>Root exception</h2>${e["root-exception"] ? `<pre id="root-exception">${esc(e["root-exception"])}</pre>` : `<p class="muted" id="root-exception">None.</p>`}
    <h2>History</h2>${entries ? `<table><thead><tr><th>Time</th><th>Tasks</th><th>TaskManagers</th><th>Cause</th></tr></thead><tbody>${entries}</tbody></table>` : `<p class="muted">No task failed.</p>`}`;
}

async function configurationTab(job) {
  const c = await api(`jobs/${job.jid}/config`);
  const conf = Object.entries(c["execution-config"]["user-config"] || {}).map(([k, v]) => `<tr><td>${esc(k)}</td><td>${esc(v)}</td></tr>`).join("");
  const args = (c["execution-config"]["job-parameters"] || []).map(a => `<span class="chip">${esc(a)}</span>`).join(" ");
  return `<h2>Job arguments</h2><p>${args || '<span class="muted">none</span>'}</p>
    <h2>Configuration</h2><table id="configuration"><thead><tr><th>Key</th><th>Value</th></tr></thead><tbody>${conf}</tbody></table>`;
}

const TABS = [
  ["overview", "Overview"],
  ["subtasks", "Subtasks"],
  ["checkpoints", "Checkpoints"],
  ["exceptions", "Exceptions"],
  ["configuration", "Configuration"],
];

async function jobPage(id, tab) {
  const job = await api("jobs/" + id);
  const ended = isTerminal(job.state);
  // A job an earlier JobManager ran: only what the operation log recorded.
  const fromLog = job["restored-from-operation-log"] === true;
  let actions = "";
  if (!ended && !fromLog) {
    actions = ui.confirmCancel === id
      ? `<span>Cancel this job?</span><button class="danger confirm" data-action="cancel-confirm" id="cancel-confirm">Yes, cancel it</button><button data-action="cancel-abort">No</button>`
      : `<button data-action="savepoint" id="savepoint-button">Trigger savepoint</button><button class="danger" data-action="cancel" id="cancel-button">Cancel job</button>`;
  }
  const message = ui.message && ui.message.job === id
    ? `<div class="message${ui.message.error ? " error" : ""}" id="action-message">${esc(ui.message.text)}</div>` : "";
  const failure = job["failure-cause"] ? `<div class="message error">Cause: ${esc(job["failure-cause"])}</div>` : "";
  const tabs = TABS.map(([t, label]) => `<a href="#/job/${esc(id)}/${t}" class="${t === tab ? "active" : ""}" data-tab="${t}">${label}</a>`).join("");
  let body;
  if (fromLog) {
    body = `<p class="muted">This job ended under an earlier JobManager; its operation log keeps only how it ended.</p>`;
  } else if (tab === "subtasks") {
    body = subtasksTab(job);
  } else if (tab === "checkpoints") {
    body = await checkpointsTab(job);
  } else if (tab === "exceptions") {
    body = await exceptionsTab(job);
  } else if (tab === "configuration") {
    body = await configurationTab(job);
  } else {
    body = graphTab(job);
  }
  const tasks = job.tasks || { total: 0, finished: 0 };
  return `<div class="jobhead"><h1 id="job-name">${esc(job.name)}</h1><span id="job-state" data-state="${esc(job.state)}">${stateBadge(job.state)}</span>
      <span class="facts">${esc(id)} · started ${time(job["start-time"])} · ${duration(job.duration)} · ${tasks.finished}/${tasks.total} tasks finished · ${job.restarts || 0} restarts</span>
      <span class="actions">${actions}</span></div>${message}${failure}<div class="tabs">${tabs}</div><div id="tab">${body}</div>`;
}

// ---------------------------------------------------------------- routing and refresh

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  return { page: parts[0] || "overview", id: parts[1], tab: parts[2] || "overview" };
}

async function render() {
  const r = route();
  document.querySelectorAll("nav a").forEach(a => a.classList.toggle("active", a.dataset.nav === r.page || (r.page === "job" && a.dataset.nav === "jobs")));
  let html;
  try {
    if (r.page === "job" && r.id) html = await jobPage(r.id, r.tab);
    else if (r.page === "jobs") html = await jobsPage();
    else if (r.page === "taskmanagers") html = await taskmanagersPage();
    else if (r.page === "taskmanager" && r.id) html = await taskmanagerPage(r.id);
    else html = await overviewPage();
    document.getElementById("refresh").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    const what = e instanceof HttpError ? e.message : "the JobManager does not answer (" + e.message + ")";
    html = `<div class="message error" id="page-error">${esc(what)}</div>`;
  }
  // Unchanged pages are left alone, so text selections and focus survive a refresh.
  const app = document.getElementById("app");
  if (app.dataset.html !== html) {
    app.innerHTML = html;
    app.dataset.html = html;
  }
}

let timer = null;
let rendering = false;
async function refresh() {
  clearTimeout(timer);
  if (!rendering) {
    rendering = true;
    try {
      await render();
    } finally {
      rendering = false;
    }
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

async function act(job, action) {
  try {
    if (action === "cancel-confirm") {
      ui.confirmCancel = null;
      await api(`jobs/${job}?mode=cancel`, { method: "PATCH" });
      ui.message = { job, text: "Cancellation requested." };
    } else if (action === "savepoint") {
      const r = await api(`jobs/${job}/savepoints`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ "cancel-job": false }),
      });
      ui.message = { job, text: `Savepoint triggered (request ${r["request-id"]}).` };
      ui.savepointTrigger = { job, id: r["request-id"] };
      pollSavepoint();
    }
  } catch (e) {
    ui.message = { job, text: e.message, error: true };
  }
  refresh();
}

async function pollSavepoint() {
  const t = ui.savepointTrigger;
  if (!t) return;
  try {
    const s = await api(`jobs/${t.job}/savepoints/${t.id}`);
    if (s.status.id === "COMPLETED") {
      const op = s.operation || {};
      ui.message = op["failure-cause"]
        ? { job: t.job, text: "Savepoint failed: " + (op["failure-cause"]["stack-trace"] || JSON.stringify(op["failure-cause"])), error: true }
        : { job: t.job, text: "Savepoint written: " + op.location };
      ui.savepointTrigger = null;
      refresh();
      return;
    }
  } catch (e) {
    ui.message = { job: t.job, text: e.message, error: true };
    ui.savepointTrigger = null;
    return;
  }
  setTimeout(pollSavepoint, 500);
}

document.addEventListener("click", ev => {
  const target = ev.target.closest("[data-action], [data-href], .vertex, tr.checkpoint");
  if (!target || ev.target.closest("a")) return;
  const r = route();
  if (target.dataset.action) {
    const action = target.dataset.action;
    if (action === "cancel") { ui.confirmCancel = r.id; refresh(); }
    else if (action === "cancel-abort") { ui.confirmCancel = null; refresh(); }
    else act(r.id, action);
  } else if (target.classList.contains("vertex")) {
    location.hash = `#/job/${r.id}/subtasks`;
  } else if (target.classList.contains("checkpoint")) {
    ui.selectedCheckpoint = Number(target.dataset.checkpoint);
    refresh();
  } else if (target.dataset.href) {
    location.hash = target.dataset.href;
  }
});

document.addEventListener("change", ev => {
  const toggle = ev.target.dataset.toggle;
  if (toggle) {
    ui[toggle] = ev.target.checked;
    refresh();
  }
});

window.addEventListener("hashchange", () => {
  ui.confirmCancel = null;
  refresh();
});

refresh();
