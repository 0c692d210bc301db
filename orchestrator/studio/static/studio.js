// goondan studio: plain JavaScript, no build step. Data from /api/*, live updates from the
// server-sent events of /api/stream (the token travels as a cookie).
"use strict";

const $ = (sel) => document.querySelector(sel);
const SVG = "http://www.w3.org/2000/svg";
const state = { swarm: null, trace: null, events: [], known: new Set(), refreshing: null };
const MAX_EVENTS = 1000;

function el(tag, attrs = {}, ...children) {
  const node = tag.startsWith("svg:")
    ? document.createElementNS(SVG, tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k === "text") node.textContent = v;
    else if (k === "onclick") node.addEventListener("click", v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

async function api(path) {
  const r = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r.json();
}

// Timestamps are ISO with microseconds; milliseconds since the epoch, with the fraction.
function ms(ts) {
  if (!ts) return null;
  const whole = Date.parse(ts.slice(0, 19) + "Z");
  const frac = ts.slice(19).replace(/[^0-9]/g, "");
  return whole + (frac ? Number("0." + frac) * 1000 : 0);
}
const clock = (ts) => (ts ? ts.slice(11, 23) : "");
const fmtMs = (v) => (v == null ? "" : v >= 1000 ? (v / 1000).toFixed(2) + " s" : v.toFixed(1) + " ms");

// -- the swarm graph --------------------------------------------------------------------------

function renderGraph(view) {
  state.swarm = view;
  $("#swarm-name").textContent = `swarm ${view.swarm} · daemon pid ${view.pid}`;
  const svg = $("#graph");
  svg.replaceChildren();
  const procs = view.processes;
  const byName = new Map(procs.map((p) => [p.name, p]));
  // Columns: connectors, the entry agent, then agents by delegation depth from it.
  const depth = new Map();
  depth.set(view.entryAgent, 1);
  const queue = [view.entryAgent];
  while (queue.length) {
    const from = queue.shift();
    for (const d of view.delegations) {
      if (d.from === from && !depth.has(d.to)) {
        depth.set(d.to, depth.get(from) + 1);
        queue.push(d.to);
      }
    }
  }
  const maxDepth = Math.max(1, ...depth.values());
  for (const p of procs) {
    if (!depth.has(p.name)) depth.set(p.name, p.kind === "connector" ? 0 : Math.max(2, maxDepth));
  }
  const columns = new Map();
  for (const p of procs) {
    const d = depth.get(p.name);
    if (!columns.has(d)) columns.set(d, []);
    columns.get(d).push(p);
  }
  const width = svg.clientWidth || 600;
  const keys = [...columns.keys()].sort((a, b) => a - b);
  const colW = Math.max(230, width / Math.max(1, keys.length));
  const W = 180, H = 46;
  const pos = new Map();
  let maxRows = 1;
  keys.forEach((d, i) => {
    const col = columns.get(d);
    maxRows = Math.max(maxRows, col.length);
    col.forEach((p, j) => pos.set(p.name, { x: 10 + i * colW, y: 14 + j * (H + 24) }));
  });
  svg.setAttribute("height", Math.max(120, 28 + maxRows * (H + 24)));
  const defs = el("svg:defs", {}, el("svg:marker", {
    id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7",
    markerHeight: "7", orient: "auto-start-reverse",
  }, el("svg:path", { d: "M0,0 L10,5 L0,10 z", fill: "#9aa3b5" })));
  svg.append(defs);
  const edge = (from, to, cls, label, id) => {
    const a = pos.get(from), b = pos.get(to);
    if (!a || !b) return;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    const back = x2 <= x1;
    const d = back
      ? `M${a.x + W / 2},${a.y + H} C${a.x + W / 2},${a.y + H + 40} ${b.x + W / 2},${b.y + H + 40} ${b.x + W / 2},${b.y + H}`
      : `M${x1},${y1} C${x1 + 40},${y1} ${x2 - 40},${y2} ${x2},${y2}`;
    const group = el("svg:g", { "data-edge": id, class: "edge-group" },
      el("svg:path", { d, class: "edge " + cls, "marker-end": "url(#arrow)" }));
    if (label) {
      group.append(el("svg:text", {
        x: back ? (a.x + b.x + W) / 2 : (x1 + x2) / 2, y: back ? Math.max(a.y, b.y) + H + 34 : (y1 + y2) / 2 - 6,
        class: "edge-label", "text-anchor": "middle", text: label,
      }));
    }
    svg.append(group);
  };
  for (const [name, agent] of Object.entries(view.connectors || {})) {
    edge(name, agent, "feeds", null, `${name}->${agent}`);
  }
  for (const d of view.delegations) {
    edge(d.from, d.to, "delegation", `delegated ×${d.count}`, `${d.from}->${d.to}`);
  }
  for (const p of procs) {
    const { x, y } = pos.get(p.name);
    const cls = ["node", p.kind, p.name === view.entryAgent ? "entry" : ""].join(" ");
    const sub = `${p.status}${p.pid ? " · pid " + p.pid : ""} · ${p.restarts} restart${p.restarts === 1 ? "" : "s"}`;
    svg.append(el("svg:g", { class: cls, "data-node": p.name, "data-status": p.status,
      transform: `translate(${x},${y})` },
      el("svg:title", { text: `${p.kind} ${p.name}: ${sub}` }),
      el("svg:rect", { width: W, height: H }),
      el("svg:circle", { cx: 12, cy: 15, r: 5, class: "dot-" + p.status }),
      el("svg:text", { x: 22, y: 19, text: p.name + (p.kind === "connector" ? " (connector)" : "") }),
      el("svg:text", { x: 10, y: 37, class: "sub", text: sub })));
  }
  const agentFilter = $("#f-agent");
  const chosen = agentFilter.value;
  agentFilter.replaceChildren(el("option", { value: "", text: "all" }),
    ...procs.filter((p) => p.kind === "agent").map((p) => el("option", { text: p.name })));
  agentFilter.value = chosen;
  void byName;
}

// -- requests -----------------------------------------------------------------------------------

async function loadRequests() {
  const rows = await api("/api/requests");
  const body = $("#requests tbody");
  body.replaceChildren();
  $("#no-requests").hidden = rows.length > 0;
  for (const r of rows) {
    const fresh = !state.known.has(r.traceId) && state.known.size > 0;
    state.known.add(r.traceId);
    const tr = el("tr", {
      class: `request${fresh ? " fresh" : ""}${state.trace === r.traceId ? " selected" : ""}`,
      "data-trace": r.traceId, "data-status": r.status,
      onclick: () => openTrace(r.traceId),
    },
    el("td", { text: clock(r.startedAt) }),
    el("td", { text: `${r.agent}/${r.instanceKey}` }),
    el("td", { class: "input", title: r.input || "", text: r.input || "" }),
    el("td", { class: "status-" + r.status, text: r.status + (r.errors ? ` (${r.errors})` : "") }),
    el("td", { text: fmtMs(r.durationMs) }),
    el("td", { text: r.agents.join(", ") }),
    el("td", { text: String(r.tokens) }));
    body.append(tr);
  }
  if (state.known.size === 0) state.known.add("");
}

// -- the waterfall of a trace -------------------------------------------------------------------

async function openTrace(traceId) {
  state.trace = traceId;
  showTab("waterfall");
  for (const tr of document.querySelectorAll("tr.request")) {
    tr.classList.toggle("selected", tr.dataset.trace === traceId);
  }
  const trace = await api("/api/traces/" + encodeURIComponent(traceId));
  if (state.trace !== traceId) return; // another request was opened meanwhile
  renderWaterfall(trace);
}

async function cancelTrace(traceId, button) {
  button.disabled = true;
  const r = await fetch(`/api/traces/${traceId}/cancel`, {
    method: "POST", credentials: "same-origin", cache: "no-store",
  });
  const body = await r.json();
  button.textContent = r.ok ? `cancelled ${body.cancelled.length}` : `error: ${body.error}`;
  button.dataset.done = r.ok ? "1" : "";
}

function renderWaterfall(trace) {
  const spans = trace.spans;
  const head = $("#trace-head");
  head.replaceChildren(
    "trace ", el("code", { text: trace.traceId }),
    ` · ${trace.agents.join(" → ")} · ${trace.status} · ${fmtMs(trace.durationMs)} · ${spans.length} spans · ${trace.tokens} tokens`);
  head.className = "";
  if (trace.status === "running") {
    // Stops its turns and the delegations they wait on, as `goondan cancel --trace`.
    const stop = el("button", { id: "cancel-trace", text: "Cancel" });
    stop.addEventListener("click", () => cancelTrace(trace.traceId, stop));
    head.append(" ", stop);
  }
  const box = $("#waterfall");
  box.replaceChildren();
  box.dataset.trace = trace.traceId;
  if (!spans.length) return;
  // Times: a span's start, and its end (or start + duration, or now while it runs).
  const now = Date.now();
  for (const s of spans) {
    s.t0 = ms(s.start) ?? ms(s.end);
    s.t1 = s.end ? ms(s.end) : s.durationMs != null ? s.t0 + s.durationMs : now;
    if (s.durationMs == null && s.end) s.durationMs = s.t1 - s.t0;
  }
  const t0 = Math.min(...spans.map((s) => s.t0));
  const t1 = Math.max(...spans.map((s) => s.t1));
  const total = Math.max(t1 - t0, 0.001);
  // Tree order: children under their parent (a delegated turn under the caller's tool).
  const ids = new Set(spans.map((s) => s.spanId));
  const children = new Map();
  for (const s of spans) {
    const parent = ids.has(s.parentSpanId) ? s.parentSpanId : "";
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(s);
  }
  const ordered = [];
  const walk = (parent, level) => {
    for (const s of (children.get(parent) || []).sort((a, b) => a.t0 - b.t0)) {
      ordered.push([s, level]);
      walk(s.spanId, level + 1);
    }
  };
  walk("", 0);
  for (const [s, level] of ordered) {
    const left = ((s.t0 - t0) / total) * 100;
    const width = Math.max(((s.t1 - s.t0) / total) * 100, 0.3);
    const tokens = s.inputTokens != null ? ` · ${s.inputTokens}→${s.outputTokens} tok` : "";
    const meta = s.status === "error" ? `error: ${s.error}` : `${fmtMs(s.durationMs)}${tokens}`;
    const row = el("div", {
      class: `span-row span-${s.kind} ${s.status}`,
      "data-kind": s.kind, "data-agent": s.agent, "data-name": s.name, "data-status": s.status,
      onclick: () => showSpan(s),
    },
    el("div", { class: "span-label", style: `padding-left:${level * 14}px` },
      el("span", { class: "kind", text: s.kind }), s.name,
      el("span", { class: "agent", text: s.kind === "turn" ? s.instanceKey : s.agent })),
    el("div", { class: "span-track" },
      el("div", { class: "span-bar", style: `left:${left}%;width:${Math.min(width, 100 - left)}%` })),
    el("div", { class: "span-meta", title: meta, text: meta }));
    box.append(row);
  }
}

function showSpan(s) {
  const pre = $("#span-detail");
  const detail = { ...s };
  for (const k of ["t0", "t1"]) delete detail[k];
  if (typeof detail.arguments === "string") {
    try { detail.arguments = JSON.parse(detail.arguments); } catch { /* as it is */ }
  }
  pre.textContent = JSON.stringify(detail, null, 2);
  pre.hidden = false;
  if (s.kind === "turn") {
    state.openConversation = { key: s.instanceKey, agent: s.agent };
  }
}

// -- conversations -----------------------------------------------------------------------------

async function loadInstances() {
  const rows = await api("/api/instances");
  const sel = $("#conv-instance");
  const chosen = state.openConversation?.key ?? sel.value;
  sel.replaceChildren(...rows.map((r) => el("option", { value: r.instanceKey, text: r.instanceKey })));
  state.instances = new Map(rows.map((r) => [r.instanceKey, r.agents]));
  if (chosen && state.instances.has(chosen)) sel.value = chosen;
  fillAgents();
}

function fillAgents() {
  const sel = $("#conv-agent");
  const agents = state.instances?.get($("#conv-instance").value) || [];
  const chosen = state.openConversation?.agent ?? sel.value;
  sel.replaceChildren(...agents.map((a) => el("option", { text: a })));
  if (agents.includes(chosen)) sel.value = chosen;
  state.openConversation = null;
  loadConversation();
}

async function loadConversation() {
  const key = $("#conv-instance").value, agent = $("#conv-agent").value;
  const box = $("#conversation");
  if (!key || !agent) {
    box.replaceChildren(el("p", { class: "muted", text: "No stored conversations yet." }));
    return;
  }
  const conv = await api(`/api/instances/${encodeURIComponent(key)}/${encodeURIComponent(agent)}`);
  // Answers can come back out of order: show this one only if it is still the one chosen.
  if ($("#conv-instance").value !== key || $("#conv-agent").value !== agent) return;
  box.replaceChildren(...conv.messages.map((m) => {
    let text = typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? "");
    if (m.tool_calls?.length) {
      text += (text ? "\n" : "") + m.tool_calls.map((c) => `→ ${c.name}(${c.arguments})`).join("\n");
    }
    const who = m.role === "tool" ? `tool ${m.metadata?.toolName ?? ""}` : m.role;
    return el("div", { class: "msg " + m.role }, el("div", { class: "role", text: who }), text);
  }));
}

// -- live events -------------------------------------------------------------------------------

function wanted(e) {
  const agent = $("#f-agent").value, type = $("#f-type").value, trace = $("#f-trace").value.trim();
  const typeOk = !type || (type.startsWith(".") ? e.type.endsWith(type) : e.type.startsWith(type));
  return (!agent || e.agentName === agent) && typeOk && (!trace || e.traceId.startsWith(trace));
}

function details(e) {
  const d = e.data || {};
  const parts = [];
  for (const k of ["toolName", "stepIndex", "status", "finishReason", "source"]) {
    if (d[k] !== undefined && d[k] !== null) parts.push(String(d[k]));
  }
  if (d.duration !== undefined) parts.push(fmtMs(d.duration));
  if (d.tokenUsage) parts.push(`${d.tokenUsage.totalTokens} tok`);
  if (d.arguments) parts.push(d.arguments.replace(/\s+/g, " ").slice(0, 120));
  if (d.input) parts.push(JSON.stringify(d.input.slice(0, 120)));
  if (d.errorMessage) parts.push("error: " + d.errorMessage);
  return parts.join("  ");
}

function eventRow(e) {
  return el("tr", { class: "event", "data-type": e.type, "data-agent": e.agentName, "data-trace": e.traceId },
    el("td", { text: clock(e.timestamp) }),
    el("td", { text: `${e.agentName}/${e.instanceKey}` }),
    el("td", { class: e.type.endsWith(".failed") ? "status-error" : "", text: e.type }),
    el("td", { class: "details", title: details(e), text: details(e) }),
    el("td", {}, el("a", { href: "#", text: e.traceId.slice(0, 8), onclick: (ev) => {
      ev.preventDefault(); openTrace(e.traceId);
    } })));
}

function renderEvents() {
  const body = $("#events tbody");
  body.replaceChildren(...state.events.filter(wanted).slice(-300).map(eventRow));
  if ($("#f-follow").checked) body.parentElement.parentElement.scrollTop = 1e9;
}

function addEvent(e) {
  state.events.push(e);
  if (state.events.length > MAX_EVENTS) state.events.splice(0, state.events.length - MAX_EVENTS);
  if (wanted(e)) {
    const body = $("#events tbody");
    body.append(eventRow(e));
    while (body.children.length > 300) body.firstChild.remove();
    if ($("#f-follow").checked) body.parentElement.parentElement.scrollTop = 1e9;
  }
}

// -- live updates ------------------------------------------------------------------------------

function scheduleRefresh(traceId) {
  state.pendingTraces = state.pendingTraces || new Set();
  state.pendingTraces.add(traceId);
  if (state.refreshing) return;
  state.refreshing = setTimeout(async () => {
    const traces = state.pendingTraces;
    state.pendingTraces = new Set();
    state.refreshing = null;
    await loadRequests();
    if (state.trace && traces.has(state.trace)) await openTrace(state.trace);
  }, 250);
}

function connect() {
  const source = new EventSource("/api/stream");
  const live = $("#live");
  source.onopen = () => { live.className = "live on"; live.textContent = "live"; };
  source.onerror = () => { live.className = "live off"; live.textContent = "reconnecting…"; };
  source.addEventListener("swarm", (m) => renderGraph(JSON.parse(m.data)));
  source.addEventListener("runtime", (m) => {
    const e = JSON.parse(m.data);
    addEvent(e);
    scheduleRefresh(e.traceId);
  });
}

function showTab(name) {
  for (const b of document.querySelectorAll(".tabs button")) {
    b.classList.toggle("active", b.dataset.tab === name);
  }
  for (const t of document.querySelectorAll(".tab")) t.hidden = t.id !== "tab-" + name;
  if (name === "conversation") loadInstances();
}

async function main() {
  for (const b of document.querySelectorAll(".tabs button")) {
    b.addEventListener("click", () => showTab(b.dataset.tab));
  }
  $("#conv-instance").addEventListener("change", fillAgents);
  $("#conv-agent").addEventListener("change", loadConversation);
  for (const id of ["#f-agent", "#f-type", "#f-trace"]) {
    $(id).addEventListener("input", renderEvents);
  }
  renderGraph(await api("/api/swarm"));
  await loadRequests();
  state.events = await api("/api/events?limit=500");
  renderEvents();
  connect();
}

main().catch((err) => {
  $("#live").textContent = "error: " + err.message;
});
