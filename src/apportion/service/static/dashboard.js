// apportion dashboard: polls /v1/dashboard/state every 2 s and redraws; no libraries.
"use strict";

const POLL_MS = 2000;
const USAGE_MS = 60000;
const WHY_MS = 10000;

const $ = (sel) => document.querySelector(sel);
const expanded = new Map(); // workload id -> {lines, at}
let usage = null;
let last = null;
let me = null; // the token's user (/v1/dashboard/controls): their own work is always listed

// Control and format characters (ESC, BEL, newlines; the bidirectional overrides and
// isolates, zero-width marks) shown as the CLI writes them (apportion/text.py): a user's
// text cannot hide in boxes, break a line or read reversed.
const PY_ESCAPES = { "\n": "\\n", "\t": "\\t", "\r": "\\r" };

function escapeControls(s) {
  return s.replace(/[\p{Cc}\p{Cf}]/gu, (c) => {
    if (PY_ESCAPES[c]) return PY_ESCAPES[c];
    const n = c.codePointAt(0);
    const [p, w] = n < 0x100 ? ["x", 2] : n < 0x10000 ? ["u", 4] : ["U", 8];
    return "\\" + p + n.toString(16).padStart(w, "0");
  });
}

function esc(v) {
  return escapeControls(String(v ?? "")).replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// A time as apportion writes every time it shows (apportion/times.py), in the browser's
// zone: 2026-12-06 21:50:05+05:30, the date and time of day, then the offset from UTC.
const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone;
const two = (n) => String(n).padStart(2, "0");
function clockTime(t) {
  const d = new Date(t * 1000);
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ` +
    `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}${utcOffset(d)}`;
}

// The browser's offset from UTC at d (+05:30), which names a zone to the server as well.
function utcOffset(d) {
  const off = -d.getTimezoneOffset(); // minutes east of UTC
  return `${off < 0 ? "-" : "+"}${two(Math.floor(Math.abs(off) / 60))}:${two(Math.abs(off) % 60)}`;
}

function num(v, digits = 1) {
  if (v === null || v === undefined || !isFinite(v)) return "-";
  return Number(v).toLocaleString(undefined, { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

// one decimal; a small non-zero figure with two significant digits, not 0.0% (weights run
// down to 0.000001: a share can be 0.013%)
function pct(v) {
  if (v === null || v === undefined) return "-";
  const p = 100 * v;
  return (p !== 0 && Math.abs(p) < 0.05 ? String(Number(p.toPrecision(2))) : p.toFixed(1)) + "%";
}

function ratioCell(r) {
  if (r === null || r === undefined) return '<span class="muted">-</span>';
  const cls = r < 0.9 ? "under" : r > 1.1 ? "over" : "even";
  const w = Math.min(100, (r / 2) * 100); // the middle mark is ratio 1
  return `<span class="ratio"><span class="bar"><span class="${cls}-bg" style="width:${w}%"></span><i></i></span>` +
    `<span class="${cls}">${r.toFixed(3)}</span></span>`;
}

function spark(values, fair, width = 180, height = 26) {
  if (!values || !values.length) return "";
  const top = Math.max(1e-9, ...values, ...(fair || []));
  const x = (i) => (values.length === 1 ? width : (i / (values.length - 1)) * width);
  const y = (v) => height - 2 - (v / top) * (height - 4);
  const pts = values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  const area = `0,${height} ${pts} ${width},${height}`;
  const fairLine = fair ? `<polyline class="fair" points="${fair.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ")}"/>` : "";
  const peak = Math.max(...values);
  return `<svg class="spark" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">` +
    `<title>peak ${peak.toFixed(1)} GPUs</title><polygon class="area" points="${area}"/>${fairLine}` +
    `<polyline class="use" points="${pts}"/></svg>`;
}

function setRows(section, html, cols, emptyText) {
  const tbody = $(`#${section} tbody`);
  tbody.innerHTML = html || `<tr><td colspan="${cols}" class="empty">${esc(emptyText)}</td></tr>`;
}

function renderCards(s) {
  const c = s.cluster;
  $("#c-healthy").innerHTML = `${c.healthy_gpus} <small>of ${c.gpus}</small>`;
  $("#c-used").innerHTML = `${c.used_gpus} <small>of ${c.gpus}</small>`;
  $("#c-pending").innerHTML = c.held ? `${c.pending} <small>+ ${c.held} held</small>` : String(c.pending);
  $("#c-running").textContent = c.running;
  const down = s.hosts.filter((h) => h.state !== "healthy").length;
  $("#c-hosts").innerHTML = `${c.hosts} <small>${down ? down + " not healthy" : "all healthy"}</small>`;
}

function renderBudgets(s) {
  const rows = s.budgets.map((b) => {
    const pad = 14 * (b.depth - 1);
    const u = usage && usage.usage[b.path];
    const f = usage && usage.fair[b.path];
    const editing = editor && editor.path === b.path ? ' class="editing"' : "";
    return `<tr data-path="${esc(b.path)}"${editing}>` +
      `<td><span class="tree-name" style="padding-left:${pad}px"><span class="${b.leaf ? "leaf" : "inner"}"></span>` +
      `<span title="${esc(b.path)}">${esc(b.name)}</span></span></td>` +
      `<td class="num">${weightCell(b)}</td>` +
      `<td class="num">${pct(b.share)}</td>` +
      `<td>${ratioCell(b.usage_ratio)}</td>` +
      `<td class="num">${num(b.delivered_gpus, 0)} / ${num(b.owed_gpus, 1)}</td>` +
      `<td class="num">${num(b.owed_gpu_hours)}</td>` +
      `<td class="num">${num(b.delivered_gpu_hours)}</td>` +
      `<td class="num">${b.pending || ""}</td>` +
      `<td>${spark(u, f)}</td></tr>`;
  }).join("");
  setRows("budgets", rows, 9, "No budgets yet.");
  const edited = editor && s.budgets.find((b) => b.path === editor.path);
  if (edited) $("#we-now").textContent = `now ${weightNum(edited.weight)}, share ${pct(edited.share)}`;
  const days = (s.lookback_s / 86400).toFixed(s.lookback_s % 86400 ? 1 : 0);
  // what the columns mean (docs/dashboard.md, "Budgets"): a name alone does not say it
  let note = "GPUs now: delivered, the GPUs its allocated running work holds; owed, the " +
    "lesser of its share of the healthy GPUs and the GPUs its allocated pending and running " +
    `work asks for. Owed and delivered GPU-hours: the same two over the lookback window (${days} d), ` +
    "owed from each hour's averages, as apportion report usage counts it";
  if (s.owed_since !== null && s.owed_since > s.now - s.lookback_s) {
    note += `, counted since the server started ${dur(s.now - s.owed_since)} ago`;
  }
  $("#owed-note").textContent = note + ".";
}

function reasonBadge(r) {
  if (!r) return '<span class="muted">not reached yet</span>';
  return `<span class="badge ${esc(r)}">${esc(r.replace(/_/g, " "))}</span>`;
}

// The state lists at most max_listed rows of each table (the cards count them all), then
// this page's user's own pending work beyond them: say so, and where it is cut.
function listedNote(id, shown, total) {
  const note = $(id);
  note.hidden = !(shown < total); // also when a count is missing (an older server)
  note.textContent = note.hidden ? "" : `showing ${shown} of ${total} (apportion queue lists all)`;
}

function renderQueue(s) {
  const total = s.cluster.pending + s.cluster.held;
  const unlisted = total - s.pending.length;
  // several pools: each pool's pass has its own order, numbered under a heading row
  let pool = null;
  const rows = s.pending.map((p, i) => {
    let html = i === s.max_listed && unlisted > 0
      ? `<tr class="gap"><td colspan="9">${unlisted} more not listed; yours follow</td></tr>` : "";
    if (p.pool && p.pool !== pool) {
      pool = p.pool;
      html += `<tr class="pool" data-pool="${esc(pool)}"><th colspan="9">${esc(pool)}</th></tr>`;
    }
    html += `<tr class="clickable" data-id="${esc(p.id)}">` +
      `<td class="num">${p.position ?? "-"}</td><td class="mono">${esc(p.id)}</td>` +
      `<td>${esc(p.budget)}</td><td>${esc(p.user)}</td><td class="num">${p.gpus}</td>` +
      `<td class="num">${p.min_runtime ? dur(p.min_runtime) : "0"}</td>` +
      `<td><span class="badge ${esc(p.class)}">${esc(p.class)}</span></td>` +
      `<td class="num">${dur(s.now - p.queued_at)}</td><td>${reasonBadge(p.wait_reason)}</td></tr>`;
    const why = expanded.get(p.id);
    if (why) {
      const body = why.lines ? why.lines.map((l) => `<li>${esc(l)}</li>`).join("") : "<li>loading...</li>";
      html += `<tr class="why" data-why="${esc(p.id)}"><td colspan="9"><ul class="why-lines">${body}</ul></td></tr>`;
    }
    return html;
  }).join("");
  setRows("queue", rows, 9, "Nothing is waiting.");
  listedNote("#queue-note", s.pending.length, total);
}

function protection(r, now) {
  if (r.stopping) return `<span class="badge stopping">stopping</span> <span class="muted">${esc(r.stop_reason || "")}</span>`;
  if (!r.allocated) return '<span class="muted">unallocated: preemptible</span>';
  if (r.protected_until > now) return `<span class="badge protected">protected</span> ${dur(r.protected_until - now)} left`;
  // the protection ended, not the workload: it still runs, and may now be preempted
  return '<span class="muted">preemptible: protection ended ' + dur(now - r.protected_until) + " ago</span>";
}

function renderRunning(s) {
  const rows = s.running.map((r) => {
    const hosts = (r.placement || []).map((p) => `${p[0]}:${p[1]}`).join(", ");
    return `<tr data-id="${esc(r.id)}"><td class="mono">${esc(r.id)}</td><td>${esc(r.budget)}</td>` +
      `<td class="num">${r.gpus}</td><td class="mono">${esc(hosts)}</td>` +
      `<td class="num">${dur(s.now - r.started_at)}</td><td class="wrap">${protection(r, s.now)}</td></tr>`;
  }).join("");
  setRows("running", rows, 6, "Nothing is running.");
  listedNote("#running-note", s.running.length, s.cluster.running);
}

// A draining host's progress. Its last protection end is now once none is left (the
// server's max(now, ...)): then what is left is stopping, or is stopped on the next pass.
function drainProgress(h, now) {
  const n = h.workloads.length;
  if (n === 0) return "empty: going to repair";
  const left = `${n} workload${n > 1 ? "s" : ""} left`;
  if (h.last_protection_end > now) {
    return left + (h.stopping ? `, ${h.stopping} stopping` : "") +
      `; last protection ends in ${dur(h.last_protection_end - now)}`;
  }
  const next = n - h.stopping;
  return left + "; protection ended" + (h.stopping ? `; ${h.stopping} stopping (grace)` : "") +
    (next ? `; ${next} stopped on the next pass` : "");
}

function renderHosts(s) {
  // several pools: a heading row per pool (the hosts come grouped by pool)
  const pools = new Set(s.hosts.map((h) => h.pool));
  let pool = null;
  const rows = s.hosts.map((h) => {
    let head = "";
    if (pools.size > 1 && h.pool !== pool) {
      pool = h.pool;
      const mine = s.hosts.filter((x) => x.pool === pool);
      const gpus = mine.reduce((a, x) => a + x.gpus, 0);
      const used = mine.reduce((a, x) => a + x.used, 0);
      head = `<tr class="pool" data-pool="${esc(pool)}"><th colspan="5">${esc(pool)} ` +
        `<span class="muted">${mine.length} host${mine.length > 1 ? "s" : ""}, ${used} / ${gpus} GPUs used</span></th></tr>`;
    }
    const w = h.gpus ? (100 * h.used) / h.gpus : 0;
    const drain = h.state === "draining" ? drainProgress(h, s.now) : '<span class="muted">-</span>';
    return head + `<tr data-host="${esc(h.name)}" data-pool="${esc(h.pool)}"><td class="mono">${esc(h.name)}</td>` +
      `<td><span class="badge ${esc(h.state)}">${esc(h.state)}</span></td>` +
      `<td><span class="gpubar"><span style="width:${w}%"></span></span>${h.used} / ${h.gpus}</td>` +
      `<td class="wrap">${drain}</td><td class="muted wrap">${esc(h.reason)}</td></tr>`;
  }).join("");
  setRows("hosts", rows, 5, "No hosts.");
}

function compact(v) {
  if (v === null || v === undefined) return "";
  const t = typeof v === "string" ? v : JSON.stringify(v);
  return t.length > 70 ? t.slice(0, 67) + "..." : t;
}

function renderAudit(s) {
  const rows = s.audit.map((a) => {
    const change = [compact(a.old), compact(a.new)].filter((x) => x).join(" \u2192 ");
    // when, in the browser's zone with its offset (as the CLI's audit writes it), and how long ago
    return `<tr><td class="muted">${clockTime(a.at)} (${dur(s.now - a.at)} ago)</td>` +
      `<td>${esc(a.actor)}</td>` +
      `<td class="mono">${esc(a.action)}</td><td class="mono">${esc(a.target)}</td>` +
      `<td class="mono muted">${esc(change)}</td></tr>`;
  }).join("");
  setRows("audit", rows, 5, "No changes recorded yet.");
}

// kind: live, wait (the server answers but has nothing to show yet), down
function setStatus(kind, text) {
  $("#status").className = "pill " + kind;
  $("#status-text").textContent = text;
}

// What the figures below cannot show: the scheduler decides but cannot act (the executor
// does not answer), or its time stands still (the wall clock was set back).
function renderAlerts(s) {
  const alerts = [];
  // loose tests: a server that has not restarted since an upgrade serves this page with
  // a state that lacks these fields (undefined): no alert then, not a false one
  if (s.executor_down_since != null) {
    alerts.push(`The executor (${esc(s.executor)}) has not answered for ` +
      `${dur(s.now - s.executor_down_since)}: ${esc(s.executor_problem)}. Nothing starts, ` +
      "stops or ends until it does; waiting work keeps its place.");
  }
  if (s.clock_behind_s != null && s.clock_behind_s > 0) {
    alerts.push(`The server's wall clock is ${dur(s.clock_behind_s)} behind the latest time ` +
      "it recorded (it was set back): the scheduler's time stands still until the clock " +
      "catches up.");
  }
  $("#alerts").innerHTML = alerts.map((a) => `<p class="alert">${a}</p>`).join("");
}

function render(s) {
  renderAlerts(s);
  renderCards(s);
  renderBudgets(s);
  renderQueue(s);
  renderRunning(s);
  renderHosts(s);
  renderAudit(s);
  const ago = s.last_pass_at === null ? "no pass yet" : `last pass ${dur(s.now - s.last_pass_at)} ago`;
  setStatus("live", `live \u00b7 ${ago}`);
  // a link cannot carry the page's token: /metrics is linked only where it needs none
  $("#metrics-link").hidden = !s.public_read;
  $("#footer").textContent = `apportion \u00b7 executor ${s.executor} \u00b7 ${s.passes} passes` +
    (s.errors ? ` \u00b7 ${s.errors} failed` : "") +
    (s.public_read ? "" : " \u00b7 /metrics is read with a token (Prometheus: a scrape token)");
}

// A token given once as /#token=<token> is kept in this browser and sent with every
// request: the server's data needs one unless it runs with [server] public_read = true.
const TOKEN_KEY = "apportion.token";
if (location.hash.startsWith("#token=")) {
  localStorage.setItem(TOKEN_KEY, decodeURIComponent(location.hash.slice(7)));
  history.replaceState(null, "", location.pathname + location.search);
}

// An error answer of the API, with its status and the server's own words (`detail`).
class ApiError extends Error {
  constructor(status, detail) {
    super(`${status} ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

async function api(method, url, body, signal) {
  const token = localStorage.getItem(TOKEN_KEY);
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const init = { method, cache: "no-store", headers, signal };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(url, init);
  if (r.status === 401 && !token) {
    throw new ApiError(401, "this server needs a token: open /#token=<your token> once");
  }
  if (!r.ok) {
    let detail = r.statusText;
    try { detail = (await r.json()).detail || detail; } catch (e) { /* not JSON */ }
    // the stored token is refused ("invalid token"): revoked, or mistyped when given
    if (r.status === 401) detail += ": it may have been revoked; open /#token=<a new token>";
    throw new ApiError(r.status, detail);
  }
  return r.json();
}

function getJSON(url) { return api("GET", url); }

// Whom the page acts as (the stored token's user, once the server said so), and a way to
// forget the token: on a shared screen, or to give another one.
function renderWho() {
  $("#who").hidden = !localStorage.getItem(TOKEN_KEY);
  $("#who-name").textContent = me ? `signed in as ${me}` : "";
}

$("#sign-out").addEventListener("click", () => {
  localStorage.removeItem(TOKEN_KEY);
  location.reload();
});

async function refreshWhy(id) {
  try {
    // its sentences' times in the browser's zone, as clockTime writes the page's own; where
    // the server's zone database lacks the zone's name (422 on tz), at its offset now
    const why = (tz) => getJSON(`/v1/dashboard/why/${encodeURIComponent(id)}?tz=${encodeURIComponent(tz)}`);
    const e = await why(ZONE).catch((err) => {
      if (err instanceof ApiError && err.status === 422) return why(utcOffset(new Date()));
      throw err;
    });
    expanded.set(id, { lines: e.text, at: Date.now() });
  } catch (err) {
    expanded.set(id, { lines: [String(err.message)], at: Date.now() });
  }
  if (last) renderQueue(last);
}

async function refresh() {
  try {
    last = await getJSON("/v1/dashboard/state" + (me ? `?user=${encodeURIComponent(me)}` : ""));
    const listed = new Set(last.pending.map((p) => p.id));
    for (const id of [...expanded.keys()]) if (!listed.has(id)) expanded.delete(id);
    render(last);
    for (const [id, w] of expanded) if (Date.now() - w.at > WHY_MS) refreshWhy(id);
  } catch (err) {
    if (!(err instanceof ApiError)) {
      setStatus("down", "disconnected: " + err.message);
    } else if (err.status === 503) {
      // reachable, not ready: no budget yet, the scheduler's first pass to come (its words)
      setStatus("wait", err.detail);
      if (!last) setRows("budgets", "", 9, "No budgets shown yet.");
    } else {
      setStatus("down", err.message); // refused: a token, a failure; the server's words
    }
  }
}

async function poll() {
  await refresh();
  setTimeout(poll, POLL_MS);
}

async function pollUsage() {
  try {
    usage = await getJSON("/v1/dashboard/usage?hours=168");
    if (last) renderBudgets(last);
  } catch (err) { /* the state poll reports connection problems */ }
  setTimeout(pollUsage, USAGE_MS);
}

$("#queue tbody").addEventListener("click", (ev) => {
  const tr = ev.target.closest("tr[data-id]");
  if (!tr) return;
  const id = tr.dataset.id;
  if (expanded.has(id)) {
    expanded.delete(id);
    if (last) renderQueue(last);
  } else {
    expanded.set(id, { lines: null, at: Date.now() });
    if (last) renderQueue(last);
    refreshWhy(id);
  }
});

// ---- changing a weight, with a preview ------------------------------------------------
// The server says which weights this token's user may set (/v1/dashboard/controls, the
// rule PATCH /v1/budgets/{path} and POST /v1/whatif apply); only those rows get a control.
// "Preview" replays the cluster's own history with the proposed weight (POST /v1/whatif,
// seconds to minutes: the server runs it off its event loop), "Apply" sets it (PATCH).
let controls = new Set();
let editor = null; // {path, weight, abort, timer}
let previewSeq = 0; // answers of an older preview are dropped

// weights run from 1e-6 to 1e6: significant digits, so that 0.0004 is not shown as 0
function weightNum(w) {
  return w === null || w === undefined ? "-" : Number(w).toLocaleString(undefined, { maximumSignificantDigits: 6 });
}

function weightCell(b) {
  const change = controls.has(b.path)
    ? ` <button type="button" class="linkbtn" data-edit="${esc(b.path)}">change</button>` : "";
  return weightNum(b.weight) + change;
}

async function loadControls() {
  let paths = [];
  try {
    const c = await getJSON("/v1/dashboard/controls");
    paths = c.set_weight;
    me = c.user;
  } catch (err) { /* no token, or a refused one (the state poll says so): no controls */
    me = null;
  }
  renderWho();
  const before = [...controls].join("\n");
  controls = new Set(paths);
  if (editor && !controls.has(editor.path)) closeEditor();
  if (last && before !== paths.join("\n")) renderBudgets(last);
}

function budgetRow(path) { return last && last.budgets.find((b) => b.path === path); }

function proposedWeight() {
  const raw = $("#we-weight").value.trim();
  const w = Number(raw);
  return raw === "" || !isFinite(w) ? null : w;
}

function editorMessage(status, error) {
  $("#we-status").textContent = status || "";
  $("#we-error").textContent = error || "";
}

function stopRunning() {
  if (!editor) return;
  if (editor.abort) editor.abort.abort();
  if (editor.timer) clearInterval(editor.timer);
  editor.abort = null;
  editor.timer = null;
  $("#we-preview").disabled = false;
  $("#weight-editor").classList.remove("running");
}

function labelApply() {
  const w = proposedWeight();
  $("#we-apply").textContent = w === null ? "Apply" : `Apply weight ${weightNum(w)}`;
}

function openEditor(path) {
  stopRunning();
  const b = budgetRow(path);
  editor = { path, weight: b ? b.weight : null, abort: null, timer: null };
  $("#we-path").textContent = path;
  $("#we-weight").value = b ? b.weight : "";
  $("#we-result").hidden = true;
  editorMessage("", "");
  labelApply();
  $("#weight-editor").hidden = false;
  if (last) renderBudgets(last);
  $("#weight-editor").scrollIntoView({ block: "nearest" });
  $("#we-weight").focus();
}

function closeEditor() {
  stopRunning();
  editor = null;
  $("#weight-editor").hidden = true;
  if (last) renderBudgets(last);
}

// Figures that read the same as shown are neither better nor worse (1.84 and 1.76 GPU-h
// both show 1.8).
// higherIsBetter null: not marked either way (attainment: see renderPreview).
function cmpClass(cur, prop, higherIsBetter, fmt) {
  if (cur === null || prop === null || cur === undefined || prop === undefined) return "";
  if (higherIsBetter === null) return "";
  if (fmt(cur) === fmt(prop)) return "";
  return (prop > cur) === higherIsBetter ? "better" : "worse";
}

function pair(cur, prop, fmt, higherIsBetter) {
  return `<td class="num">${fmt(cur)}</td>` +
    `<td class="num proposed ${cmpClass(cur, prop, higherIsBetter, fmt)}">${fmt(prop)}</td>`;
}

// One pool of a several-pool preview (POST /v1/whatif's "pools"): the budget nodes with work
// there, then the whole pool's figures; the heading has its occupancy.
function renderPreviewPool(pool, setWeight) {
  const hours = (v) => num(v, 1);
  const figures = (c, q) => pair(c.attainment, q.attainment, pct, null) +
    pair(c.delivered_gpu_hours, q.delivered_gpu_hours, hours, true) +
    pair(c.wait_p50_s, q.wait_p50_s, dur, false) +
    pair(c.preemptions, q.preemptions, String, false);
  const rows = pool.budgets.map((b) => {
    const changed = b.budget in setWeight;
    const pad = 14 * (b.budget.split("/").length - 1);
    return `<tr data-path="${esc(b.budget)}"${changed ? ' class="changed"' : ""}>` +
      `<td><span style="padding-left:${pad}px">${esc(b.budget)}</span></td>` +
      figures(b.current, b.proposed) + "</tr>";
  }).join("") || '<tr><td colspan="9" class="empty">No budget of yours has work in this pool.</td></tr>';
  const c = pool.current, q = pool.proposed;
  const group = (name) => `<th colspan="2" class="grp">${name}</th>`;
  const sides = '<th class="num">current</th><th class="num">proposed</th>'.repeat(4);
  return `<h3 class="we-pool">Pool ${esc(pool.pool)} <span class="hint">${pool.gpus.toLocaleString()} GPUs; ` +
    `replay occupancy ${pct(c.occupancy)} \u2192 ${pct(q.occupancy)}; attainment is a team's, in this pool</span></h3>` +
    `<div class="scroll"><table class="we-pool-table" data-pool="${esc(pool.pool)}"><thead>` +
    `<tr><th rowspan="2">Budget</th>${group("Attainment")}${group("Delivered GPU-h")}${group("Wait p50")}` +
    `${group("Preemptions")}</tr><tr>${sides}</tr></thead><tbody>${rows}</tbody>` +
    `<tfoot><tr class="overall"><td>whole pool</td>${figures(c, q)}</tr></tfoot></table></div>`;
}

// as apportion whatif says it (cli/whatif.py's OCCUPANCY_NOTE)
const OCCUPANCY_NOTE = "Replay occupancy: assigned GPUs over healthy GPUs, as the simulator counts them; " +
  "work still running on draining hosts counts as assigned while the host is not healthy: this can " +
  "exceed 100%; apportion report usage leaves it out of both.";

function renderPreview(res, path) {
  const p = res.period;
  const change = Object.entries(res.set_weight).map(([k, w]) => `${k} = ${weightNum(w)}`).join(", ");
  let note = `Proposed: ${change}. Replayed ${dur(p.end - p.first_submission)} of this cluster's history, ` +
    `from its first submission at ${clockTime(p.first_submission)} to now: ${p.workloads} workloads, ` +
    "with the current weights and with the proposed one. Attainment is each run's delivered " +
    "GPU-hours over what that run's own weights owe, so a raised weight, which raises what its " +
    "budget is owed, can lower it while the budget gets more: it is not marked better or " +
    "worse; delivered GPU-hours, waits and preemptions are.";
  if (p.running_at_end) note += ` ${p.running_at_end} still running at the end are replayed with their run so far (the last hours read low).`;
  if (p.waiting_at_end) note += ` ${p.waiting_at_end} still waiting at the end are replayed with an estimated run.`;
  const former = Object.entries(p.in_former_leaves);
  if (former.length) {
    const left = former.reduce((n, [, k]) => n + k, 0);
    note += ` ${left} submitted to ${former.map(([b]) => b).join(", ")}, which ha${former.length === 1 ? "s" : "ve"} ` +
      "children now, are left out (the replay uses today's tree).";
  }
  $("#we-period").textContent = note;
  const hours = (v) => num(v, 1);
  const rows = res.budgets.map((b) => {
    const changed = b.weight_current !== b.weight_proposed;
    const pad = 14 * (b.budget.split("/").length - 1);
    const weight = changed ? `${weightNum(b.weight_current)} \u2192 <b>${weightNum(b.weight_proposed)}</b>`
      : weightNum(b.weight_current);
    const c = b.current, q = b.proposed;
    return `<tr data-path="${esc(b.budget)}"${changed ? ' class="changed"' : ""}>` +
      `<td><span style="padding-left:${pad}px">${esc(b.budget)}</span></td><td class="num">${weight}</td>` +
      pair(c.attainment, q.attainment, pct, null) +
      pair(c.delivered_gpu_hours, q.delivered_gpu_hours, hours, true) +
      pair(c.wait_p50_s, q.wait_p50_s, dur, false) +
      pair(c.wait_p90_s, q.wait_p90_s, dur, false) +
      pair(c.preemptions, q.preemptions, String, false) + "</tr>";
  }).join("");
  $("#we-table tbody").innerHTML = rows ||
    '<tr><td colspan="12" class="empty">No budget of yours in the replay.</td></tr>';
  // the whole cluster's attainment per team and per researcher (summary.json's overall_teams
  // and overall): they differ when a team's share goes unevenly to its researchers
  const o = res.overall, oc = o.current, op = o.proposed;
  $("#we-table tfoot").innerHTML = `<tr class="overall"><td>overall (whole cluster), attainment per team</td><td></td>` +
    pair(oc.attainment_teams, op.attainment_teams, pct, null) + '<td></td><td></td><td></td><td></td>' +
    pair(oc.wait_p90_s, op.wait_p90_s, dur, false) +
    pair(oc.preemptions, op.preemptions, String, false) + "</tr>" +
    `<tr class="overall"><td>attainment per researcher</td><td></td>` +
    pair(oc.attainment, op.attainment, pct, null) + '<td></td>'.repeat(8) + "</tr>";
  const pools = res.pools || [];
  // the replay's occupancy is the simulator's, not the live report's (docs/simulator.md)
  const occupancyNote = pools.length && p.host_events ? `<p class="we-period">${esc(OCCUPANCY_NOTE)}</p>` : "";
  $("#we-pools").innerHTML = pools.map((pool) => renderPreviewPool(pool, res.set_weight)).join("") + occupancyNote;
  $("#we-result").hidden = false;
  $("#we-result").dataset.previewed = `${path}=${Object.values(res.set_weight)[0]}`;
}

async function runPreview() {
  if (!editor) return;
  const w = proposedWeight();
  if (w === null) {
    editorMessage("", "weight: enter a number greater than 0");
    return;
  }
  stopRunning();
  const path = editor.path;
  const days = Number($("#we-days").value);
  const seq = ++previewSeq;
  const abort = new AbortController();
  const started = Date.now();
  const tick = () => editorMessage(
    `Running: replaying the last ${days} day${days > 1 ? "s" : ""} twice, with the current weights and with ` +
    `${path} = ${weightNum(w)}... ${Math.round((Date.now() - started) / 1000)} s`, "");
  editor.abort = abort;
  editor.timer = setInterval(tick, 1000);
  tick();
  $("#we-preview").disabled = true;
  $("#weight-editor").classList.add("running");
  $("#we-result").hidden = true;
  try {
    const res = await api("POST", "/v1/whatif", { since: `${days}d`, set_weight: { [path]: w } }, abort.signal);
    if (!editor || previewSeq !== seq) return;
    stopRunning();
    renderPreview(res, path);
    editorMessage(`Preview done in ${Math.round((Date.now() - started) / 1000)} s. Nothing is changed until you press Apply.`, "");
  } catch (err) {
    if (!editor || previewSeq !== seq || err.name === "AbortError") return;
    stopRunning();
    editorMessage("", `Preview failed: ${err.detail || err.message}`);
  }
}

async function applyWeight() {
  if (!editor) return;
  const w = proposedWeight();
  if (w === null) {
    editorMessage("", "weight: enter a number greater than 0");
    return;
  }
  const path = editor.path;
  const url = "/v1/budgets/" + path.split("/").map(encodeURIComponent).join("/");
  $("#we-apply").disabled = true;
  try {
    const b = await api("PATCH", url, { weight: w });
    if (!editor || editor.path !== path) return;
    editorMessage(`Applied: the weight of ${path} is ${weightNum(b.weight)} (was ${weightNum(editor.weight)}); ` +
      "the scheduler uses it from its next pass.", "");
    editor.weight = b.weight;
    refresh();
  } catch (err) {
    editorMessage("", `Apply failed: ${err.detail || err.message}`);
  } finally {
    $("#we-apply").disabled = false;
  }
}

$("#budgets tbody").addEventListener("click", (ev) => {
  const btn = ev.target.closest("button[data-edit]");
  if (btn) openEditor(btn.dataset.edit);
});
$("#we-form").addEventListener("submit", (ev) => { ev.preventDefault(); runPreview(); });
$("#we-apply").addEventListener("click", applyWeight);
$("#we-close").addEventListener("click", closeEditor);
$("#we-weight").addEventListener("input", labelApply);

loadControls();
setInterval(loadControls, USAGE_MS);
pollUsage();
poll();
