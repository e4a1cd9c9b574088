// The sluice status page: polls api/status, draws the configured graph with
// live numbers, and shows a node's counters and history when clicked.
// Plain JavaScript, no dependencies: everything is served by the agent.
"use strict";

const $ = (id) => document.getElementById(id);
const graph = $("graph");
const cards = new Map(); // node id -> element
const lanes = new Map(); // sink id -> its lane through the sink group column
const members = new Map(); // group id -> the ids of its sinks
let snap = null;         // the last snapshot
let selected = null;     // id of the node shown in the detail panel
let history = null;      // its history
let pollMs = 1000;

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function rate(v) {
  if (v == null) return "–";
  if (v >= 1e6) return (v / 1e6).toFixed(2) + "M";
  if (v >= 1e4) return (v / 1e3).toFixed(1) + "k";
  if (v >= 100) return v.toFixed(0);
  return v.toFixed(v >= 10 ? 1 : 2);
}

function dur(ns) {
  if (!ns) return "–";
  if (ns < 1e3) return ns + "ns";
  if (ns < 1e6) return (ns / 1e3).toFixed(ns < 1e4 ? 1 : 0) + "µs";
  if (ns < 1e9) return (ns / 1e6).toFixed(ns < 1e7 ? 2 : 1) + "ms";
  return (ns / 1e9).toFixed(2) + "s";
}

function bytes(n) {
  if (n == null) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

const stageName = { source: "source", channel: "in channel", sink: "sink", end_to_end: "end to end" };

function cardHTML(n) {
  let h = `<div class="title">${esc(n.name)} <span class="type">${esc(n.type || "")}</span></div>`;
  if (n.kind === "selector" && n.detail) h += `<div class="muted">${esc(n.detail)}</div>`;
  if (n.kind === "group") h += `<div class="muted">sink group</div>`;
  if (n.state && n.state !== "running") h += `<div><span class="badge ${esc(n.state)}">${esc(n.state)}</span></div>`;
  if (n.reason) h += `<div class="reason">${esc(n.reason)}</div>`;
  if (n.note) h += `<div class="note">${esc(n.note)}</div>`;
  // A generator (seq, stress) receives nothing: what it puts out is its rate.
  if (n.generator && n.out != null) h += `<div class="rates">generates <b class="out">${rate(n.out)}</b>/s</div>`;
  else if (n.in != null) h += `<div class="rates">in <b class="in">${rate(n.in)}</b>/s · out <b class="out">${rate(n.out)}</b>/s</div>`;
  if (n.fill) {
    const f = n.fill;
    const pct = f.capacity > 0 ? f.percent : 0;
    h += `<div class="fill${pct > 80 ? " high" : ""}" title="${pct.toFixed(1)}% full"><div style="width:${Math.min(100, pct)}%"></div></div>`;
    h += `<div class="muted">${f.events}${f.capacity > 0 ? " / " + f.capacity + " events (" + pct.toFixed(1) + "%)" : " events"}`;
    if (f.bytes != null) h += `<br>${bytes(f.bytes)}${f.byteCapacity ? " / " + bytes(f.byteCapacity) : ""}`;
    h += `</div>`;
  }
  for (const l of n.latency || []) {
    if (l.count > 0) h += `<div class="lat muted">${stageName[l.stage] || l.stage}: p50 ${dur(l.p50)} · p99 ${dur(l.p99)}</div>`;
  }
  if (n.errors > 0) h += `<div class="errors">errors ${n.errors}${n.errorRate > 0 ? " (+" + rate(n.errorRate) + "/s)" : ""}</div>`;
  if (n.interceptors && n.interceptors.length) {
    h += `<div class="chips">` + n.interceptors.map((i) => `<span class="chip" title="interceptor">${esc(i.name)}: ${esc(i.type)}</span>`).join("") + `</div>`;
  }
  return h;
}

function render(s) {
  snap = s;
  $("agent").textContent = s.agent;
  const st = $("state");
  st.textContent = s.healthy ? "healthy" : s.state === "running" ? "unhealthy" : s.state;
  st.className = "badge " + (s.healthy ? "ok" : "bad");
  $("updated").textContent = "updated " + new Date(s.time).toLocaleTimeString();
  $("problems").innerHTML = s.problems.map((p) => `<li>${esc(p)}</li>`).join("");
  $("notes").innerHTML = (s.notes || []).map((p) => `<li>${esc(p)}</li>`).join("");
  document.title = (s.healthy ? "" : "⚠ ") + s.agent + " · sluice";
  const groups = s.nodes.some((n) => n.kind === "group");
  graph.classList.toggle("nogroups", !groups);

  const seen = new Set();
  for (const n of s.nodes) {
    seen.add(n.id);
    let el = cards.get(n.id);
    if (!el) {
      el = document.createElement("div");
      el.dataset.id = n.id;
      el.addEventListener("click", () => select(n.id));
      cards.set(n.id, el);
    }
    // (again): cards follow the snapshot's order; groups are placed below
    if (n.kind !== "group") graph.querySelector(`.col[data-kind="${n.kind}"]`).appendChild(el);
    el.className = `node ${n.kind} ${n.state || ""}${n.reason ? " unhealthy" : ""}${n.id === selected ? " selected" : ""}`;
    el.dataset.in = n.in == null ? "" : n.in;
    el.dataset.out = n.out == null ? "" : n.out;
    el.innerHTML = cardHTML(n);
  }
  for (const [id, el] of cards) {
    if (!seen.has(id)) { el.remove(); cards.delete(id); }
  }
  placeGroups(s, groups);
  drawEdges();
  if (selected) showDetail();
}

// placeGroups fills the sink group column in the order of the sinks: each
// group where its first sink is, and for a sink in no group an empty lane
// that its arrow passes through, so that an arrow from a channel to such a
// sink never crosses a group's box (which would read channel -> group ->
// sink).
function placeGroups(s, groups) {
  const col = graph.querySelector(`.col[data-kind="group"]`);
  const groupOf = new Map();
  members.clear();
  for (const e of s.edges) {
    if (!e.from.startsWith("group/")) continue;
    groupOf.set(e.to, e.from);
    members.set(e.from, [...(members.get(e.from) || []), e.to]);
  }
  const placed = new Set(), wanted = new Set();
  for (const n of s.nodes) {
    if (n.kind !== "sink") continue;
    const g = groupOf.get(n.id);
    if (g) {
      if (!placed.has(g) && cards.has(g)) { placed.add(g); col.appendChild(cards.get(g)); }
      continue;
    }
    if (!groups) continue; // no group column: arrows go straight to the sinks
    wanted.add(n.id);
    let lane = lanes.get(n.id);
    if (!lane) {
      lane = document.createElement("div");
      lane.className = "lane";
      lane.dataset.sink = n.id;
      lanes.set(n.id, lane);
    }
    col.appendChild(lane);
  }
  for (const n of s.nodes) { // groups none of whose sinks exists
    if (n.kind === "group" && !placed.has(n.id)) col.appendChild(cards.get(n.id));
  }
  for (const [id, lane] of lanes) {
    if (!wanted.has(id)) { lane.remove(); lanes.delete(id); }
  }
}

// alignGroups moves each group and lane of the sink group column down (never
// up: the column keeps its order) to the middle of its sinks, so that the
// arrows to the sinks run level where they can.
function alignGroups(vertical) {
  const col = graph.querySelector(`.col[data-kind="group"]`);
  const items = Array.from(col.children).filter((e) => e.matches(".lane, .node"));
  for (const el of items) el.style.marginTop = "";
  if (vertical) return;
  for (const el of items) {
    const ids = el.classList.contains("lane") ? [el.dataset.sink] : members.get(el.dataset.id) || [];
    const rs = ids.map((id) => cards.get(id)).filter(Boolean).map((c) => c.getBoundingClientRect());
    if (!rs.length) continue;
    const target = (Math.min(...rs.map((r) => r.top)) + Math.max(...rs.map((r) => r.bottom))) / 2;
    const r = el.getBoundingClientRect();
    const shift = target - (r.top + r.bottom) / 2;
    if (shift > 0) el.style.marginTop = shift + "px";
  }
}

function drawEdges() {
  const svg = $("edges");
  const vertical = getComputedStyle(graph).gridTemplateColumns.split(" ").length === 1;
  alignGroups(vertical);
  const box = graph.getBoundingClientRect();
  // A curve from the out side of box a to the in side of box b.
  const curve = (ra, rb) => {
    if (vertical) {
      const x1 = ra.left + ra.width / 2 - box.left, y1 = ra.bottom - box.top;
      const x2 = rb.left + rb.width / 2 - box.left, y2 = rb.top - box.top;
      const m = (y1 + y2) / 2;
      return { x1, y1, x2, y2, d: `M${x1},${y1} C${x1},${m} ${x2},${m} ${x2},${y2}` };
    }
    const x1 = ra.right - box.left, y1 = ra.top + ra.height / 2 - box.top;
    const x2 = rb.left - box.left, y2 = rb.top + rb.height / 2 - box.top;
    const m = (x1 + x2) / 2;
    return { x1, y1, x2, y2, d: `M${x1},${y1} C${m},${y1} ${m},${y2} ${x2},${y2}` };
  };
  let out = "", labels = "";
  const byId = new Map((snap ? snap.nodes : []).map((n) => [n.id, n]));
  for (const e of snap ? snap.edges : []) {
    const a = cards.get(e.from), b = cards.get(e.to);
    if (!a || !b) continue;
    const ra = a.getBoundingClientRect(), rb = b.getBoundingClientRect();
    let { x1, y1, x2, y2, d } = curve(ra, rb);
    const lane = lanes.get(e.to);
    if (lane && lane.isConnected && e.from.startsWith("channel/")) {
      // Through the sink's lane: to it, across it, on to the sink.
      const rl = lane.getBoundingClientRect();
      const c1 = curve(ra, rl), c2 = curve(rl, rb);
      d = `${c1.d} L${c2.x1},${c2.y1} ${c2.d.slice(1 + c2.d.indexOf(" "))}`;
      ({ x1, y1 } = c1);
    }
    const from = byId.get(e.from);
    const active = from && from.out > 0 || (from && from.kind === "selector" && byId.get(e.to) && byId.get(e.to).in > 0);
    out += `<path d="${d}" data-from="${esc(e.from)}" data-to="${esc(e.to)}" class="${e.optional ? "optional " : ""}${active ? "active" : ""}"/>`;
    const label = [e.label, e.optional ? "optional" : ""].filter(Boolean).join(", ");
    if (label) labels += `<text x="${(x1 + x2) / 2}" y="${(y1 + y2) / 2 - 4}" text-anchor="middle">${esc(label)}</text>`;
  }
  svg.innerHTML = out;
  $("labels").innerHTML = labels;
}

function select(id) {
  selected = id;
  history = null;
  for (const [nid, el] of cards) el.classList.toggle("selected", nid === id);
  $("detail").hidden = false;
  showDetail();
  loadHistory();
  drawEdges();
}

$("close").addEventListener("click", () => {
  selected = null;
  $("detail").hidden = true;
  for (const el of cards.values()) el.classList.remove("selected");
  drawEdges();
});

function showDetail() {
  const n = snap && snap.nodes.find((x) => x.id === selected);
  if (!n) { $("detail").hidden = true; selected = null; return; }
  $("d-title").textContent = `${n.kind} ${n.name} (${n.type || "?"})`;
  $("d-state").innerHTML = (n.state ? `<span class="badge ${esc(n.state)}">${esc(n.state)}</span> ` : "") +
    (n.reason ? `<span class="problem">${esc(n.reason)}</span>` : "");
  const rows = Object.keys(n.counters || {}).sort().map((k) => `<tr><td>${esc(k)}</td><td>${esc(n.counters[k])}</td></tr>`);
  if (n.kind === "group" || n.kind === "selector") rows.push(`<tr><td colspan="2" class="muted">see the member ${n.kind === "group" ? "sinks" : "source"} for counters</td></tr>`);
  $("d-counters").innerHTML = rows.join("");
  drawCharts();
}

async function loadHistory() {
  if (!selected) return;
  const id = selected;
  try {
    const r = await fetch("api/history?id=" + encodeURIComponent(id), { cache: "no-store" });
    if (r.ok && id === selected) { history = await r.json(); drawCharts(); }
  } catch (e) { /* the next poll tries again */ }
}

const colors = ["#2563eb", "#d0342c", "#1f9d55", "#c98a00"];

function chart(series, fmt) {
  const W = 400, H = 120, pad = 4;
  const pts = series.flatMap((s) => s.values);
  if (!history || history.points.length < 2 || !pts.length) return `<p class="muted">collecting… (a point every ${history ? history.step : 5} s)</p>`;
  const t0 = history.points[0].t, t1 = history.points[history.points.length - 1].t;
  const ymax = Math.max(...pts, 1);
  const x = (t) => pad + (W - 2 * pad) * (t - t0) / Math.max(1, t1 - t0);
  const y = (v) => H - pad - (H - 2 * pad) * v / ymax;
  let svg = `<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none">`;
  series.forEach((s, i) => {
    const p = s.values.map((v, j) => `${x(history.points[j].t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    svg += `<polyline points="${p}" stroke="${colors[i % colors.length]}"/>`;
  });
  svg += `</svg>`;
  const mins = ((t1 - t0) / 60000).toFixed(1);
  const legend = series.map((s, i) => `<span style="color:${colors[i % colors.length]}">■</span> ${esc(s.name)} ${fmt(s.values[s.values.length - 1])}`).join(" · ");
  return svg + `<div class="legend">last ${mins} min, max ${fmt(ymax)} · now: ${legend}</div>`;
}

function drawCharts() {
  if (!history) { $("d-latency").innerHTML = `<p class="muted">loading…</p>`; $("d-rate").innerHTML = ""; return; }
  const lat = [];
  history.stages.forEach((st, i) => {
    lat.push({ name: (stageName[st] || st) + " p50", values: history.points.map((p) => p.p50[i] || 0) });
    lat.push({ name: (stageName[st] || st) + " p99", values: history.points.map((p) => p.p99[i] || 0) });
  });
  $("d-latency").innerHTML = lat.length ? chart(lat, dur) : `<p class="muted">no latency for this node</p>`;
  const n = snap && snap.nodes.find((x) => x.id === selected);
  if (n && n.out != null) {
    const rs = [{ name: n.generator ? "generated" : "out", values: history.points.map((p) => p.out) }];
    if (!n.generator) rs.unshift({ name: "in", values: history.points.map((p) => p.in) });
    if (n.kind === "channel") rs.push({ name: "size", values: history.points.map((p) => p.size) });
    $("d-rate").innerHTML = chart(rs, rate);
  } else {
    $("d-rate").innerHTML = `<p class="muted">no rates for this node</p>`;
  }
}

let ticks = 0;
async function poll() {
  try {
    const r = await fetch("api/status", { cache: "no-store" });
    if (!r.ok) throw new Error("api/status: HTTP " + r.status);
    const s = await r.json();
    pollMs = Math.max(500, (s.interval || 1) * 1000);
    $("error").hidden = true;
    render(s);
    if (selected && ++ticks % 5 === 0) loadHistory();
  } catch (e) {
    $("error").textContent = "cannot reach the agent: " + e.message + " (retrying)";
    $("error").hidden = false;
  }
  setTimeout(poll, pollMs);
}

window.addEventListener("resize", drawEdges);
poll();
