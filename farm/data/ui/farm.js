// The farm page: reads this gateway's JSON (ui/api/...) and redraws in place. No library, nothing from
// outside: the page must load on a machine with no internet.
"use strict";

// the gateway computes each view once per interval for every open page (farm.app.gateway.farm_view)
// (one request every 8 s while open: the live view brings the latest pool sample; the hour of them is asked
// for whole at load and every 10 min)
const LIVE_MS = 8000, POOLS_MS = 600000, COST_MS = 60000;
const SERIES = [["running", "#2f6fde"], ["starting", "#f0a020"], ["pending", "#9b59b6"],
                ["target", "#1d232b"], ["busy", "#2ca25f"], ["queued", "#d7301f"]];
const SVG = "http://www.w3.org/2000/svg";
let tenantNames = {};
let pools = null;  // {sample_s, window_s, samples}: those from the history (`backfilled`) drawn as the live ones

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function secs(s) {
  if (s === null || s === undefined) return "-";
  const a = Math.abs(s);
  return a >= 3600 ? (s / 3600).toFixed(1) + " h" : a >= 60 ? (s / 60).toFixed(1) + " min" : s.toFixed(1) + " s";
}

function relative(t, now) {
  const d = t - now;
  return d >= 0 ? "in " + secs(d) : secs(-d) + " ago";
}

function tenantName(label) {
  if (label === "-") return "(direct)";
  return tenantNames[label] ? tenantNames[label].name : label;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function progress(b) {
  const bar = el("span", {class: "bar"}), arrived = el("b"), done = el("i");
  arrived.style.width = (100 * b.arrived / b.size).toFixed(1) + "%";
  done.style.width = (100 * b.done / b.size).toFixed(1) + "%";
  bar.append(arrived, done);
  return el("td", {"data-field": "progress"}, `${b.done} / ${b.arrived} / ${b.size}`, bar);
}

// a tenant's fair share as `farm status` shows it: its weight (1 without an entry), and whether it is reserved
function shareText(s) {
  return s ? `${s.share}` + (s.reserve ? " reserved" : "") : "1";
}

// the workers busy on a tenant's requests now per resource kind, against its caps
function busyText(s) {
  if (!s) return "-";
  const kinds = [...new Set([...Object.keys(s.busy), ...Object.keys(s.max_workers)])].sort();
  return kinds.map(k => `${k} ${s.busy[k] || 0}` + (k in s.max_workers ? ` of ${s.max_workers[k]}` : "")).join(", ") || "-";
}

function drawLive(r) {
  tenantNames = r.tenant_info || tenantNames;
  document.getElementById("knobline").textContent =
    `D = ${r.delay_s} s · scheduler ${r.scheduler} · policy ${r.policy} · tick ${r.knobs.tick_s} s`;
  document.getElementById("batch-count").textContent =
    `(${r.batch_count}${r.batch_count > r.batches.length ? ", the latest " + r.batches.length + " shown" : ""})`;
  fill(document.querySelector("#batches tbody"), r.batches.map(b => {
    const heard = b.silent_s === null ? "-" :
      secs(b.silent_s) + " ago / " + (b.abandon_after_s === null ? "never" : secs(b.abandon_after_s));
    return el("tr", {class: b.late ? "late" : "", "data-batch": b.batch},
      el("td", {class: "text", "data-field": "batch"}, b.batch),
      el("td", {class: "text", "data-field": "tenant"}, tenantName(b.tenant)),
      el("td", {class: "text"}, b.task),
      progress(b),
      el("td", {"data-field": "estimated"}, relative(b.estimated_at, r.now)),
      el("td", {class: "extra", "data-field": "extra"}, secs(b.extra_delay_s) + " / " + secs(r.delay_s)),
      el("td", {class: "text", "data-field": "waiting_on"}, b.waiting_on || "-"),
      el("td", {class: b.silent ? "silent" : "", "data-field": "heard"}, heard + (b.silent ? " SILENT" : "")));
  }));
  const shares = r.fair_shares || {};
  fill(document.querySelector("#tenants tbody"), Object.entries(r.tenants).map(([t, u]) =>
    el("tr", {"data-tenant": t}, el("td", {}, tenantName(t)),
      ...["batches", "outstanding", "queued", "running", "silent"].map(k => el("td", {"data-field": k}, u[k])),
      el("td", {"data-field": "share"}, shareText(shares[t])),
      el("td", {class: "text", "data-field": "busy"}, busyText(shares[t])))));
  const knobs = [["D (tolerated extra delay)", r.delay_s + " s"], ["tick", r.knobs.tick_s + " s"],
    ["scheduler", r.scheduler], ["policy", r.policy],
    ["abandon after", r.abandon_after_s === null ? "never" : r.abandon_after_s + " s"],
    ...Object.entries(r.knobs.stages || {}).map(([q, k]) => [q, JSON.stringify(k)])];
  fill(document.querySelector("#knobs tbody"), knobs.map(([k, v]) =>
    el("tr", {}, el("td", {}, k), el("td", {class: "text", "data-knob": k}, v))));
  fill(document.querySelector("#limits tbody"), Object.entries(tenantNames).map(([t, m]) =>
    el("tr", {}, el("td", {}, m.name + (m.operator ? " (operator)" : "")),
      el("td", {}, m.limits.open_batches), el("td", {}, m.limits.queued_requests), el("td", {}, m.limits.payload_bytes))));
  document.getElementById("updated").textContent = "updated " + new Date(r.now * 1000).toLocaleTimeString();
  drawn("live");
  const sample = r.pool_sample;
  if (pools && sample && (!pools.samples.length || sample.at > pools.samples[pools.samples.length - 1].at)) {
    pools.samples.push(sample);
    pools.samples = pools.samples.filter(s => s.at >= sample.at - pools.window_s);
    drawPools(pools);
  }
}

// when each part was first drawn, in ms since the navigation began (what a test of the page's speed reads)
function drawn(part) {
  const key = part + "At";
  if (!document.documentElement.dataset[key]) document.documentElement.dataset[key] = performance.now().toFixed(1);
}

function chart(stage, samples, now, windowS) {
  const W = 300, H = 90, top = Math.max(1, ...samples.flatMap(s => {
    const p = s.stages[stage] || {};
    return SERIES.map(([k]) => p[k] || 0);
  }));
  const box = svg("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "pool-chart", "data-stage": stage});
  box.append(svg("rect", {x: 0, y: 0, width: W, height: H, fill: "#fbfcfd", stroke: "#e3e6ea"}));
  const x = t => W * (1 - (now - t) / windowS), y = v => H - 4 - (H - 8) * v / top;
  for (const [key, color] of SERIES) {
    const pts = samples.filter(s => s.stages[stage] && s.stages[stage][key] !== null && s.stages[stage][key] !== undefined)
      .map(s => `${x(s.at).toFixed(1)},${y(s.stages[stage][key]).toFixed(1)}`);
    if (!pts.length) continue;
    if (pts.length === 1) pts.unshift(`${W - 12},${pts[0].split(",")[1]}`);  // one sample: a short stroke
    box.append(svg("polyline", {points: pts.join(" "), fill: "none", stroke: color, "stroke-width": 1.6,
      "stroke-dasharray": key === "target" ? "4 3" : "none", "data-series": key}));
  }
  const label = svg("text", {x: 4, y: 11, "font-size": 10, fill: "#8a94a3"});
  label.textContent = "max " + top;
  box.append(label);
  return box;
}

function drawPools(p) {
  pools = p;
  const now = Date.now() / 1000, last = p.samples[p.samples.length - 1];
  if (!last) return;
  const stages = Object.keys(last.stages).sort();
  document.getElementById("pools").replaceChildren(...stages.map(q => {
    const s = last.stages[q];
    return el("div", {class: "pool", "data-stage": q}, el("h3", {}, q),
      chart(q, p.samples, now, p.window_s),
      el("div", {class: "now"}, `running ${s.running} · starting ${s.starting} · pending ${s.pending} · target ` +
        `${s.target === null ? "-" : s.target} · busy ${s.busy} · queued ${s.queued}`));
  }));
  drawn("pools");
}

function drawCost(c) {
  const rows = [];
  for (const [t, kinds] of Object.entries(c.tenants)) {
    for (const [kind, v] of Object.entries(kinds)) {
      rows.push(el("tr", {"data-tenant": t, "data-resource": kind}, el("td", {}, tenantName(t)),
        el("td", {class: "text"}, kind), el("td", {"data-field": "allocated"}, v.allocated_s.toFixed(1)),
        el("td", {"data-field": "zero_queue"}, v.zero_queue_s.toFixed(1)),
        el("td", {"data-field": "ratio"}, v.zero_queue_s > 0 ? (v.allocated_s / v.zero_queue_s).toFixed(2) + "x" : "-"),
        el("td", {"data-field": "busy"}, v.busy_s.toFixed(1))));
    }
  }
  fill(document.querySelector("#cost tbody"), rows.length ? rows :
    [el("tr", {}, el("td", {colspan: 6, class: "muted"}, c.store ? "nothing ran in the last hour" : "no history store"))]);
}

function every(path, ms, draw) {
  async function tick() {
    if (!document.hidden) {
      try {
        const reply = await fetch(path, {cache: "no-store", credentials: "same-origin"});
        if (reply.ok) draw(await reply.json());
        else document.getElementById("updated").textContent = `${path}: HTTP ${reply.status}`;
      } catch (e) {
        document.getElementById("updated").textContent = `${path}: ${e}`;
      }
    }
    setTimeout(tick, ms);
  }
  return tick();
}

every("ui/api/live", LIVE_MS, drawLive).then(() => {
  every("ui/api/pools", POOLS_MS, drawPools);
  every("ui/api/cost", COST_MS, drawCost);
});
