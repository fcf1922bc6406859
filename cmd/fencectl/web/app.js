// fencectl serve's page: everything shown comes from the JSON API and is
// written with textContent (never as HTML), and it updates from the
// server-sent event stream (/api/stream): no polling. The only timer
// re-renders the countdowns from data already here.
"use strict";

const ID_RULE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const KILLS = new Set(["reap", "revoke", "cancel", "missing"]);
const STATES = ["available", "claimed", "done", "failed"];

// el makes an element with a class and text, never parsing markup.
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function taskLink(id) {
  if (!ID_RULE.test(id)) return el("span", "mono", id);
  const a = el("a", "mono", id);
  a.href = "/task/" + encodeURIComponent(id);
  return a;
}

function cell(row, content, cls) {
  const td = el("td", cls);
  if (content instanceof Node) td.appendChild(content);
  else td.textContent = content === undefined || content === null ? "" : String(content);
  row.appendChild(td);
  return td;
}

async function getJSON(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await r.json();
  if (!r.ok) throw new Error(body && body.message ? body.message : r.status + " " + r.statusText);
  return body;
}

// The server's clock, as the status's left_seconds tells it: deadlines
// are judged by it, not by this browser's.
let skewMs = 0;
function serverNow() { return Date.now() + skewMs; }
function learnSkew(status) {
  const l = (status.leases || [])[0];
  if (l) skewMs = Date.parse(l.deadline) - l.left_seconds * 1000 - Date.now();
}

function fmtDur(ms) {
  const neg = ms < 0;
  let s = Math.floor(Math.abs(ms) / 1000);
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  const t = h ? h + "h" + String(m).padStart(2, "0") + "m" : m ? m + "m" + String(s).padStart(2, "0") + "s" : s + "s";
  return neg ? "expired " + t + " ago" : t;
}

function fmtTime(iso) {
  const d = new Date(iso);
  return isNaN(d) ? "" : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function eventRow(e, fresh) {
  const tr = el("tr", (KILLS.has(e.type) && e.from === "claimed" ? "killed" : "") + (fresh ? " fresh" : ""));
  tr.dataset.seq = e.seq;
  cell(tr, e.seq, "num");
  cell(tr, fmtTime(e.time), "mono");
  cell(tr, e.type, "type");
  cell(tr, taskLink(e.task));
  cell(tr, e.from && e.from !== e.to ? e.from + " → " + e.to : e.to, "state");
  cell(tr, e.agent || "");
  cell(tr, e.token || "", "num");
  cell(tr, e.reason || "");
  return tr;
}

function setLive(on, text) {
  const l = document.getElementById("live");
  l.classList.toggle("off", !on);
  l.textContent = text;
}

// stream opens the event stream after seq and calls onEvent and onStatus;
// the browser reconnects by itself, from the last id it saw.
function stream(after, onEvent, onStatus) {
  const es = new EventSource("/api/stream?after=" + encodeURIComponent(after));
  es.onopen = () => setLive(true, "live");
  es.onerror = () => setLive(false, "reconnecting…");
  es.addEventListener("event", (m) => onEvent(JSON.parse(m.data)));
  es.addEventListener("status", (m) => onStatus(JSON.parse(m.data)));
  return es;
}

// ---- the tree's page ----

const leases = { rows: [] }; // {task, agent, token, claimedAt, deadline, ttlMs}

function renderCounts(counts) {
  const box = document.getElementById("counts");
  box.replaceChildren();
  for (const s of STATES) {
    const c = el("div", "count " + s);
    c.id = "count-" + s;
    c.dataset.n = counts[s] || 0;
    c.appendChild(el("span", "n", counts[s] || 0));
    c.appendChild(el("span", "label", s));
    box.appendChild(c);
  }
}

function renderLeases() {
  const body = document.querySelector("#leases tbody");
  body.replaceChildren();
  const now = serverNow();
  for (const l of leases.rows) {
    const left = l.deadline - now;
    const soon = left <= 0 ? "expired" : left < Math.max(60000, l.ttlMs * 0.2) ? "soon" : "";
    const tr = el("tr", soon);
    tr.dataset.task = l.task;
    cell(tr, taskLink(l.task));
    cell(tr, l.agent);
    cell(tr, l.token, "num");
    cell(tr, l.claimedAt ? fmtDur(now - l.claimedAt) : "", "num");
    cell(tr, fmtDur(left), "num countdown");
    body.appendChild(tr);
  }
  document.getElementById("no-leases").hidden = leases.rows.length > 0;
}

async function loadLeases(status) {
  // status lists every lease; the claimed tasks' records add when each
  // was claimed (the token's age).
  const claimed = await getJSON("/api/tasks?state=claimed&limit=0");
  const since = new Map(claimed.filter((t) => t.lease).map((t) => [t.task, t.lease]));
  leases.rows = (status.leases || []).map((l) => {
    const full = since.get(l.task);
    const claimedAt = full && full.token === l.token ? Date.parse(full.claimed_at) : null;
    const deadline = Date.parse(l.deadline);
    return { task: l.task, agent: l.agent, token: l.token, claimedAt, deadline, ttlMs: claimedAt ? deadline - claimedAt : 0 };
  });
  const n = document.getElementById("lease-note");
  n.textContent = "countdowns by the server's clock; highlighted under a minute (or a fifth of the lease)";
  renderLeases();
}

async function loadFailed() {
  const failed = await getJSON("/api/tasks?state=failed&limit=100");
  const body = document.querySelector("#failed tbody");
  body.replaceChildren();
  for (const t of failed) {
    const tr = el("tr");
    cell(tr, taskLink(t.task));
    cell(tr, t.attempts + "/" + t.max_attempts, "num");
    cell(tr, t.last_lease ? t.last_lease.ended_by : "");
    cell(tr, t.last_lease ? t.last_lease.reason : "");
    body.appendChild(tr);
  }
  document.getElementById("no-failed").hidden = failed.length > 0;
}

async function treePage() {
  const status = await getJSON("/api/status");
  document.getElementById("root").textContent = status.root + " · " + status.journal.backend;
  learnSkew(status);
  renderCounts(status.counts);
  await Promise.all([loadLeases(status), loadFailed()]);
  const r = await fetch("/api/events?limit=50");
  const evs = await r.json();
  const body = document.querySelector("#events tbody");
  for (const e of evs.slice().reverse()) body.appendChild(eventRow(e, false));
  let refreshFailed = false;
  stream(r.headers.get("Fence-Last-Seq") || "0", (e) => {
    body.insertBefore(eventRow(e, true), body.firstChild);
    while (body.children.length > 200) body.lastChild.remove();
    if (e.to === "failed" || e.from === "failed") refreshFailed = true;
  }, async (st) => {
    learnSkew(st);
    renderCounts(st.counts);
    await loadLeases(st);
    if (refreshFailed) { refreshFailed = false; await loadFailed(); }
  });
  setInterval(renderLeases, 1000); // countdowns only: no request
}

// ---- one task's page ----

function recordRows(dl, t) {
  dl.replaceChildren();
  const add = (k, v) => { dl.appendChild(el("dt", "", k)); dl.appendChild(el("dd", "", v)); };
  add("task", t.task);
  add("state", t.state);
  add("path", t.path);
  add("priority", t.priority);
  add("attempts", t.attempts + " of " + t.max_attempts);
  add("created", fmtTime(t.created));
  add("updated", fmtTime(t.updated));
  if (t.lease) {
    add("holder", t.lease.agent);
    add("token", t.lease.token);
    add("claimed", fmtTime(t.lease.claimed_at));
    add("deadline", fmtTime(t.lease.deadline));
  }
  if (t.last_lease) {
    add("last lease", "token " + t.last_lease.token + " of " + t.last_lease.agent + ", ended by " + t.last_lease.ended_by + " at " + fmtTime(t.last_lease.ended_at));
    if (t.last_lease.reason) add("last reason", t.last_lease.reason);
  }
  add("journal", t.journal.backend + ": " + t.journal.where);
}

async function loadTask(id) {
  const t = await getJSON("/api/tasks/" + encodeURIComponent(id));
  recordRows(document.getElementById("record"), t);
  const body = document.querySelector("#events tbody");
  body.replaceChildren();
  for (const e of t.events.slice().reverse()) body.appendChild(eventRow(e, false));
  const outs = await getJSON("/api/tasks/" + encodeURIComponent(id) + "/outputs");
  const ob = document.querySelector("#outputs tbody");
  ob.replaceChildren();
  for (const o of outs) {
    const tr = el("tr");
    const a = el("a", "mono", o.name);
    a.href = "/api/tasks/" + encodeURIComponent(id) + "/outputs/" + encodeURIComponent(o.name);
    a.setAttribute("download", o.name);
    cell(tr, a);
    cell(tr, o.size + " B", "num");
    cell(tr, fmtTime(o.modified), "mono");
    ob.appendChild(tr);
  }
  document.getElementById("no-outputs").hidden = outs.length > 0;
  return t;
}

async function taskPage() {
  const id = decodeURIComponent(location.pathname.slice("/task/".length));
  document.getElementById("task-title").textContent = id;
  document.title = id + " · fencectl";
  if (!ID_RULE.test(id)) throw new Error("not a task id: " + id);
  await loadTask(id);
  const r = await fetch("/api/events?limit=1");
  stream(r.headers.get("Fence-Last-Seq") || "0", (e) => {
    if (e.task === id) loadTask(id).catch(showError);
  }, () => {});
}

function showError(err) {
  const p = document.getElementById("error");
  if (p) { p.hidden = false; p.textContent = String(err.message || err); }
  setLive(false, "error");
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page === "task" ? taskPage : treePage;
  page().catch(showError);
});
