// apportion simulator-run viewer: reads summary.json (and cluster_hours-*.csv) picked by the
// user with FileReader and renders the headline figures per policy. Nothing leaves the browser.
"use strict";

const $ = (sel) => document.querySelector(sel);

function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function get(obj, path) {
  return path.split(".").reduce((o, k) => (o && typeof o === "object" ? o[k] : undefined), obj);
}
const pct = (v) => (v === null || v === undefined ? "-" : (100 * v).toFixed(1) + "%");
const n0 = (v) => (v === null || v === undefined ? "-" : Number(v).toLocaleString());
const n1 = (v) => (v === null || v === undefined ? "-" : Number(v).toLocaleString(undefined, { maximumFractionDigits: 1 }));

// [label, path in one policy's summary, format, which way is better (+1 higher, -1 lower, 0 none)]
const ROWS = [
  // under a day as a duration: a quarter of an hour's replay is not "0" days
  ["Simulated days", "sim_days", (v) => (typeof v === "number" && v < 1 ? dur(v * 86400) : n1(v)), 0],
  ["Cluster", null, (s) => `${n0(s.hosts)} hosts, ${n0(s.gpus)} GPUs`, 0],
  ["Workloads", "workloads", n0, 0],
  ["Completed", "completed", n0, 1],
  ["Attainment, overall", "attainment.overall", pct, 1],
  ["Attainment, worst team", "attainment.min", pct, 1],
  ["Worst team", "attainment.min_budget", esc, 0],
  ["Teams at 95% or more", null, (s) => `${n0(get(s, "attainment.teams_ge_95"))} of ${n0(get(s, "attainment.teams"))}`, 0],
  ["Occupancy", "occupancy", pct, 1],
  ["Unallocated fraction", "unallocated_fraction", pct, 0],
  ["Availability", "availability", pct, 1],
  ["Wait p50", "wait_s.all.p50", dur, -1],
  ["Wait p90", "wait_s.all.p90", dur, -1],
  ["Wait p99", "wait_s.all.p99", dur, -1],
  ["Debug wait p50", "wait_s.debug.p50", dur, -1],
  ["Debug wait p90", "wait_s.debug.p90", dur, -1],
  ["Preemptions", "preemptions.total", n0, 0], // by design: no better direction
  ["  unallocated displaced", "preemptions.unallocated", n0, 0],
  ["  rebalance", "preemptions.rebalance", n0, 0],
  ["  drain", "preemptions.drain", n0, 0],
  ["  host failure", "preemptions.host_failure", n0, 0],
  ["GPU-hours of work lost", "lost_gpu_hours", n1, -1],
  ["Drains finished", null, (s) => `${n0(get(s, "drains.finished"))} of ${n0(get(s, "drains.count"))}`, 0],
  ["Drains automated (no human kill)", "drains.automated_fraction", pct, 1],
  ["Time to drain p90", "drains.p90_time_to_drain_s", dur, -1],
  ["Workloads at high/urgent priority", "priority_inflation.high_or_urgent_share", pct, 0],
  ["Wall time of the run", "wall_s", dur, 0],
];

function parseCSV(text) {
  const rows = [];
  let row = [], cell = "", quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { cell += '"'; i++; }
      else if (c === '"') quoted = false;
      else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ",") { row.push(cell); cell = ""; }
    else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      row.push(cell); rows.push(row); row = []; cell = "";
    } else cell += c;
  }
  if (cell !== "" || row.length) { row.push(cell); rows.push(row); }
  const head = rows.shift() || [];
  return rows.filter((r) => r.length === head.length).map((r) => Object.fromEntries(head.map((h, i) => [h, r[i]])));
}

function spark(values, width = 520, height = 34) {
  if (!values.length) return "";
  const x = (i) => (values.length === 1 ? width : (i / (values.length - 1)) * width);
  const y = (v) => height - 2 - Math.min(1, Math.max(0, v)) * (height - 4);
  const pts = values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  return `<svg class="spark" width="${width}" height="${height}"><polygon class="area" points="0,${height} ${pts} ${width},${height}"/>` +
    `<polyline class="fair" points="0,${y(1)} ${width},${y(1)}"/><polyline class="use" points="${pts}"/></svg>`;
}

function renderHeadline(summaries) {
  const sec = $("#headline");
  const pols = summaries.map((s) => s.policy || "?");
  sec.querySelector("thead").innerHTML = "<tr><th>Figure</th>" + pols.map((p) => `<th class="num">${esc(p)}</th>`).join("") + "</tr>";
  sec.querySelector("tbody").innerHTML = ROWS.map(([label, path, fmt, better]) => {
    const vals = summaries.map((s) => (path ? get(s, path) : undefined));
    let best = -1;
    if (better && summaries.length > 1 && vals.every((v) => typeof v === "number")) {
      const target = better > 0 ? Math.max(...vals) : Math.min(...vals);
      // the better one only where it reads better as shown: 13.2% against 13.2% is a tie
      if (vals.filter((v) => fmt(v) === fmt(target)).length === 1) best = vals.indexOf(target);
    }
    const cells = summaries.map((s, i) => {
      const text = path ? fmt(vals[i]) : fmt(s);
      return `<td class="num"${i === best ? ' style="font-weight:650"' : ""}>${text}</td>`;
    }).join("");
    return `<tr><td${label.startsWith("  ") ? ' class="muted" style="padding-left:28px"' : ""}>${esc(label.trim())}</td>${cells}</tr>`;
  }).join("");
  const first = summaries[0];
  $("#run-hint").textContent = `scenario ${first.scenario ?? "?"}, seed ${first.seed ?? "?"}; bold: the better policy`;
  sec.hidden = false;
}

function renderAttainment(summaries) {
  const sec = $("#attainment");
  const paths = new Set();
  for (const s of summaries) for (const p of Object.keys(get(s, "attainment.per_budget") || {})) paths.add(p);
  if (!paths.size) { sec.hidden = true; return; }
  const sorted = [...paths].sort();
  sec.querySelector("thead").innerHTML = "<tr><th>Budget</th>" + summaries.map((s) => `<th>${esc(s.policy)}</th>`).join("") + "</tr>";
  sec.querySelector("tbody").innerHTML = sorted.map((p) => {
    const depth = p.split("/").length - 1;
    const cells = summaries.map((s) => {
      const v = (get(s, "attainment.per_budget") || {})[p];
      if (v === null || v === undefined) return '<td class="muted">-</td>';
      const cls = v >= 0.95 ? "under" : v >= 0.9 ? "even" : "over";
      return `<td><span class="ratio"><span class="bar"><span class="${cls}-bg" style="width:${Math.min(100, 100 * v)}%"></span></span>` +
        `<span class="${cls}">${pct(v)}</span></span></td>`;
    }).join("");
    return `<tr><td style="padding-left:${12 + 14 * depth}px">${esc(p.split("/").pop())}</td>${cells}</tr>`;
  }).join("");
  sec.hidden = false;
}

function renderOccupancy(tables) {
  const sec = $("#occupancy");
  const names = Object.keys(tables).sort();
  if (!names.length) { sec.hidden = true; return; }
  sec.querySelector("tbody").innerHTML = names.map((pol) => {
    const rows = tables[pol];
    const occ = rows.map((r) => (Number(r.healthy_gpus) > 0 ? Number(r.assigned) / Number(r.healthy_gpus) : 0));
    // the run's occupancy, as summary.json's: GPU-hours assigned / healthy GPU-hours (each
    // hour weighed by its healthy GPUs and its length), not a mean of the hourly ratios
    const gpuHours = (col) => rows.reduce((a, r) => a + Number(r[col]) * Number(r.span_h), 0);
    const healthy = gpuHours("healthy_gpus");
    const mean = healthy > 0 ? gpuHours("assigned") / healthy : null;
    return `<tr><td>${esc(pol)}</td><td>${spark(occ)}</td><td class="num">${pct(mean)}</td></tr>`;
  }).join("");
  sec.hidden = false;
}

function readText(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(new Error(`${file.name}: cannot be read`));
    r.readAsText(file);
  });
}

$("#files").addEventListener("change", async (ev) => {
  const files = [...ev.target.files];
  $("#error").textContent = "";
  $("#picked").textContent = files.map((f) => f.name).join(", ");
  try {
    const summaryFile = files.find((f) => f.name.endsWith(".json"));
    if (!summaryFile) throw new Error("pick the run's summary.json (with the CSV tables if you like)");
    let summaries;
    try { summaries = JSON.parse(await readText(summaryFile)); } catch (e) {
      throw new Error(`${summaryFile.name}: not valid JSON (${e.message})`);
    }
    if (!Array.isArray(summaries)) summaries = [summaries];
    if (!summaries.length || typeof summaries[0] !== "object") throw new Error(`${summaryFile.name}: no policy summaries in it`);
    renderHeadline(summaries);
    renderAttainment(summaries);
    const tables = {};
    for (const f of files) {
      const m = f.name.match(/^cluster_hours-(.+)\.csv$/);
      if (m) tables[m[1]] = parseCSV(await readText(f));
    }
    renderOccupancy(tables);
  } catch (e) {
    $("#error").textContent = e.message;
  }
});
