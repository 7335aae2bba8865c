// The tidewater dashboard: two pages over /api/v1, refreshed every 2 s.
//   #/          every job of the store
//   #/jobs/ID   one job: progress, charts over time, checkpoints, runs,
//               the interval estimate, its error
// Text from the API only ever goes in through textContent: a job name is
// never markup. Charts are uPlot (vendored).
"use strict";

const POLL_MS = 2000;
const API = "/api/v1";
const TOKEN_KEY = "tidewater-token";

// ---- formatting ------------------------------------------------------------

function fmtInt(n) {
  return n == null ? "–" : Math.round(n).toLocaleString("en-US");
}

function fmtRate(r) {
  if (r == null) return "–";
  if (r >= 1e6) return (r / 1e6).toFixed(2) + "M/s";
  if (r >= 1e3) return (r / 1e3).toFixed(1) + "k/s";
  return r.toFixed(0) + "/s";
}

function fmtDuration(seconds) {
  if (seconds == null || !isFinite(seconds)) return "–";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return s + "s";
  const part = (n, unit) => (n ? " " + n + unit : "");
  if (s < 3600) return Math.floor(s / 60) + "m" + part(s % 60, "s");
  return Math.floor(s / 3600) + "h" + part(Math.floor((s % 3600) / 60), "m");
}

function fmtBytes(b) {
  if (b == null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i === 0 ? b.toFixed(0) : b.toFixed(1)) + " " + units[i];
}

function ageOf(rfc3339) {
  if (!rfc3339) return null;
  return (Date.now() - Date.parse(rfc3339)) / 1000;
}

function percent(done, total) {
  if (!total) return null;
  return Math.min(100, (100 * done) / total);
}

// ---- DOM -------------------------------------------------------------------

// el("td", {class: "num", "data-label": "Rows"}, "12") -> <td ...>12</td>
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children.flat()) {
    if (child == null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function replace(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c != null));
}

function progressBar(progress) {
  const p = percent(progress.done, progress.total);
  const label = progress.total
    ? `${fmtInt(progress.done)} / ${fmtInt(progress.total)} (${p.toFixed(1)}%)`
    : `${fmtInt(progress.done)} rows (total unknown)`;
  const fill = el("span");
  if (p != null) fill.style.width = p + "%";
  return el(
    "div",
    { class: p == null ? "bar unknown" : "bar", role: "progressbar", "aria-valuemin": 0,
      "aria-valuemax": 100, "aria-valuenow": p == null ? null : p.toFixed(1), "aria-label": label },
    fill,
    el("em", {}, label),
  );
}

function badge(state) {
  return el("span", { class: "badge " + state, "data-state": state }, state);
}

function figure(label, value, testid) {
  return el("div", { class: "figure", "data-figure": testid || null },
    el("div", { class: "label" }, label), el("div", { class: "value" }, value));
}

// ---- API -------------------------------------------------------------------

const connection = () => document.getElementById("connection");

async function getJson(path) {
  const response = await fetch(API + path, { headers: { Accept: "application/json" } });
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    try { message = (await response.json()).message || message; } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  return response.json();
}

// Whether this server needs its token for changes (asked once).
let server = null;
async function needsToken() {
  if (server == null) server = await getJson("/server");
  return server.changes_need_token;
}

// The server's token, asked for when it needs one and none is kept (or
// the kept one was refused); kept for this tab only.
function askToken(why) {
  const given = window.prompt(why);
  if (!given) return null;
  sessionStorage.setItem(TOKEN_KEY, given.trim());
  return given.trim();
}

// Cancel, confirmed, with the token when the server needs one.
async function cancelJob(job) {
  const ok = window.confirm(
    `Cancel job "${job.name}"?\n\nIts worker takes a savepoint and the job ends CANCELLED; ` +
      "`tidewater resume` continues it later.",
  );
  if (!ok) return null;
  let token = sessionStorage.getItem(TOKEN_KEY);
  if (!token && (await needsToken())) {
    token = askToken("This server needs its token (--http-token) to cancel a job:");
    if (!token) return "Not cancelled: no token given.";
  }
  for (let attempt = 0; attempt < 2; attempt++) {
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    const response = await fetch(`${API}/jobs/${job.id}/cancel`, { method: "POST", headers });
    if (response.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      token = attempt === 0 ? askToken("The server refused that token; its token (--http-token):") : null;
      if (!token) return "Not cancelled: the server needs its token.";
      continue;
    }
    if (!response.ok) {
      let message = response.statusText;
      try { message = (await response.json()).message; } catch (_) { /* not JSON */ }
      return "Not cancelled: " + message;
    }
    return "Cancel requested: the job stops at its next heartbeat.";
  }
  return null;
}

function cancelButton(job, onDone) {
  const live = job.state === "RUNNING" || job.state === "QUEUED";
  return el("button", {
    class: "danger", "data-action": "cancel", disabled: !live,
    title: live ? "Stop the job at a savepoint" : "The job is not running",
    onclick: async (event) => {
      event.preventDefault();
      event.stopPropagation();
      const button = event.currentTarget;
      button.disabled = true;
      const said = await cancelJob(job);
      if (said) onDone(said);
      tick();
    },
  }, job.state === "CANCELLING" ? "Cancelling…" : "Cancel");
}

// ---- the jobs page ---------------------------------------------------------

function jobsPage(root) {
  const notice = el("div", { role: "status" });
  const body = el("tbody");
  const table = el("table", { class: "jobs" },
    el("thead", {}, el("tr", {},
      ["Job", "State", "Progress", "Rows/s", "ETA", "Last checkpoint", "Lease", ""].map((h, i) =>
        el("th", { class: i === 3 || i === 4 ? "num" : null }, h)))),
    body);
  replace(root, el("h1", {}, "Jobs"), notice, el("div", { class: "card scroll" }, table));
  const say = (text) => replace(notice, el("p", { class: "notice" }, text));
  return async () => {
    const { jobs } = await getJson("/jobs");
    if (jobs.length === 0) {
      replace(body, el("tr", {}, el("td", { colspan: 8, class: "muted" },
        "No jobs in this store yet: `tidewater run SPEC` or POST /api/v1/jobs adds one.")));
      return;
    }
    replace(body, jobs.map((job) => {
      const age = ageOf(job.last_checkpoint && job.last_checkpoint.at);
      return el("tr", { "data-job": job.id },
        el("td", { "data-label": "Job" }, el("a", { href: `#/jobs/${job.id}` }, job.name)),
        el("td", { "data-label": "State" }, badge(job.state)),
        el("td", { "data-label": "Progress" }, progressBar(job.progress)),
        el("td", { class: "num", "data-label": "Rows/s" }, fmtRate(job.rows_per_second)),
        el("td", { class: "num", "data-label": "ETA" }, fmtDuration(job.eta_seconds)),
        el("td", { "data-label": "Last checkpoint" },
          job.last_checkpoint ? `#${job.last_checkpoint.id}, ${fmtDuration(age)} ago` : "none yet"),
        el("td", { "data-label": "Lease" }, job.lease ? job.lease.owner : "–"),
        el("td", { "data-label": "" }, cancelButton(job, say)),
      );
    }));
  };
}

// ---- charts ----------------------------------------------------------------

const COLORS = {
  rate: "#1f6feb", exposure: "#8250df", lag: "#bf3989", throttled: "#9a6700",
  dead: "#cf222e", bytes: "#57606a",
  phases: { align: "#0969da", snapshot: "#1a7f37", upload: "#bf8700", manifest: "#8250df", commit: "#57606a" },
};

// A uPlot chart that follows its container's width.
class Chart {
  constructor(container, opts) {
    this.container = container;
    this.opts = opts;
    this.plot = null;
  }
  size() {
    return { width: Math.max(280, this.container.clientWidth), height: 200 };
  }
  set(data) {
    if (!this.plot) {
      this.plot = new uPlot({ ...this.opts, ...this.size() }, data, this.container);
    } else {
      this.plot.setData(data);
    }
  }
  resize() {
    if (this.plot) this.plot.setSize(this.size());
  }
  destroy() {
    if (this.plot) this.plot.destroy();
  }
}

// One sample (a run that ended at once) gets a minute-wide axis, not the
// years uPlot widens a single point's time axis to.
const timeRange = (u, min, max) => {
  const xs = u.data[0];
  return xs && xs.length === 1 ? [xs[0] - 30, xs[0] + 30] : [min, max];
};

function timeChart(container, series, axes) {
  return new Chart(container, {
    scales: { x: { time: true, range: timeRange } },
    series: [{}, ...series],
    axes: [{}, ...axes],
    legend: { live: true },
  });
}

// Phases stacked: each series is drawn as the sum of its phase and those
// after it, its legend shows its own value.
const PHASES = ["align", "snapshot", "upload", "manifest", "commit"];

function checkpointChart(container) {
  const bars = uPlot.paths.bars({ size: [0.7, 40] });
  let own = [];
  const series = PHASES.map((phase, i) => ({
    label: phase + " ms",
    fill: COLORS.phases[phase],
    stroke: COLORS.phases[phase],
    paths: bars,
    points: { show: false },
    value: (u, v, si, idx) => (idx == null || own[i] == null ? "–" : own[i][idx] + " ms"),
  }));
  series.push({
    label: "bytes", scale: "bytes", stroke: COLORS.bytes, width: 2,
    value: (u, v) => fmtBytes(v),
  });
  const chart = new Chart(container, {
    scales: { x: { time: false } },
    series: [{ label: "checkpoint", value: (u, v) => (v == null ? "–" : "#" + v) }, ...series],
    axes: [
      { label: "checkpoint", values: (u, ticks) => ticks.map((t) => (Number.isInteger(t) ? "#" + t : "")) },
      { label: "ms" },
      { side: 1, scale: "bytes", grid: { show: false }, size: 80, values: (u, ticks) => ticks.map(fmtBytes) },
    ],
  });
  return {
    set(checkpoints) {
      own = PHASES.map((p) => checkpoints.map((c) => c[p + "_ms"]));
      const stacked = PHASES.map((_, i) =>
        checkpoints.map((c) => PHASES.slice(i).reduce((sum, p) => sum + c[p + "_ms"], 0)));
      chart.set([checkpoints.map((c) => c.id), ...stacked, checkpoints.map((c) => c.bytes)]);
    },
    resize: () => chart.resize(),
    destroy: () => chart.destroy(),
  };
}

// ---- the job page ----------------------------------------------------------

function jobPage(root, id) {
  const head = el("div");
  const notice = el("div", { role: "status" });
  const figures = el("div", { class: "grid" });
  const error = el("div");
  const panel = (title, hint, testid) => {
    const chart = el("div", { class: "chart" });
    return {
      node: el("div", { class: "card", "data-panel": testid }, el("h2", {}, title), chart,
        hint ? el("p", { class: "hint" }, hint) : null),
      chart,
    };
  };
  const throughput = panel("Throughput", "This run's recent rate, rows read per second.", "throughput");
  const exposure = panel("Exposure",
    "Rows and seconds since the last completed checkpoint: what a crash now would redo.", "exposure");
  const lag = panel("Throttle and replica lag",
    "The replica's lag where a source throttles on it; the bar marks samples where a throttle held the sources.",
    "throttle");
  const timeline = panel("Checkpoint timeline",
    "Each checkpoint's time by phase (stacked), and the bytes of state it wrote.", "checkpoints");
  const checkpointTable = el("div", { class: "scroll" });
  const runs = el("div", { class: "card scroll", "data-panel": "runs" });
  const intervals = el("div", { class: "card scroll", "data-panel": "intervals" });
  replace(root, head, notice, error, figures,
    el("div", { class: "charts" }, throughput.node, exposure.node, lag.node, timeline.node),
    el("div", { class: "card" }, el("h2", {}, "Last checkpoints"), checkpointTable),
    runs, intervals);

  const charts = {
    throughput: timeChart(throughput.chart,
      [{ label: "rows/s", stroke: COLORS.rate, width: 2, value: (u, v) => fmtRate(v) }],
      [{ values: (u, ticks) => ticks.map(fmtRate), size: 70 }]),
    exposure: timeChart(exposure.chart, [
      { label: "rows", stroke: COLORS.exposure, width: 2, value: (u, v) => fmtInt(v) },
      { label: "seconds", scale: "s", stroke: COLORS.throttled, width: 1, dash: [4, 4],
        value: (u, v) => (v == null ? "–" : v.toFixed(1) + "s") },
    ], [{ values: (u, ticks) => ticks.map(fmtInt), size: 70 },
      { side: 1, scale: "s", grid: { show: false }, values: (u, ticks) => ticks.map((t) => t + "s") }]),
    lag: timeChart(lag.chart, [
      { label: "replica lag", stroke: COLORS.lag, width: 2,
        value: (u, v) => (v == null ? "–" : v.toFixed(2) + "s") },
      { label: "throttled", scale: "held", stroke: COLORS.throttled, fill: "rgba(154,103,0,.15)",
        paths: uPlot.paths.stepped({ align: 1 }), value: (u, v) => (v ? "yes" : "no") },
    ], [{ values: (u, ticks) => ticks.map((t) => t + "s") },
      { side: 1, scale: "held", show: false }]),
    timeline: checkpointChart(timeline.chart),
  };
  const onResize = () => Object.values(charts).forEach((c) => c.resize());
  window.addEventListener("resize", onResize);
  const say = (text) => replace(notice, el("p", { class: "notice" }, text));

  const refresh = async () => {
    const [job, history, cps, estimate] = await Promise.all([
      getJson(`/jobs/${id}`),
      getJson(`/jobs/${id}/history`),
      getJson(`/jobs/${id}/checkpoints?limit=200`),
      getJson(`/jobs/${id}/intervals`),
    ]);
    replace(crumbs(), el("span", {}, " / ", job.name));
    document.title = `${job.name}: ${job.state} · tidewater`;
    replace(head,
      el("h1", {}, job.name, badge(job.state), el("span", { class: "muted" }, `job ${job.id}, epoch ${job.epoch}`),
        cancelButton(job, say)),
      progressBar(job.progress));
    const samples = history.samples;
    const last = samples[samples.length - 1];
    const cpAge = ageOf(job.last_checkpoint && job.last_checkpoint.at);
    replace(figures,
      figure("Rows/s (recent)", fmtRate(job.rows_per_second), "rate"),
      figure("ETA", fmtDuration(job.eta_seconds), "eta"),
      figure("Last checkpoint", job.last_checkpoint
        ? `#${job.last_checkpoint.id}, ${fmtDuration(cpAge)} ago` : "none yet", "last-checkpoint"),
      figure("Exposure", `${fmtInt(job.exposure.rows)} rows, ${fmtDuration(job.exposure.seconds)}`, "exposure"),
      figure("Throttle", job.throttle || "not throttled", "throttle"),
      figure("Replica lag", last && last.replica_lag_seconds != null
        ? last.replica_lag_seconds.toFixed(2) + "s" : "not watched", "lag"),
      figure("Dead letters (this run)", fmtInt(last ? last.rows_dead_lettered : 0), "dead-letters"),
      figure("Lease", job.lease ? `${job.lease.owner}, epoch ${job.lease.epoch}` : "none", "lease"));
    replace(error, job.error ? el("div", { class: "card error", "data-panel": "error" },
      el("h2", {}, "Failed: ", job.error.code),
      el("p", {}, job.error.retryable
        ? "Running it again may succeed as it is: `tidewater resume` continues from the last checkpoint."
        : "Running it again will fail the same way: fix what the message names first."),
      el("pre", {}, job.error.message)) : null);

    const xs = samples.map((s) => s.at_ms / 1000);
    charts.throughput.set([xs, samples.map((s) => s.rows_per_second)]);
    charts.exposure.set([xs, samples.map((s) => s.exposure_rows), samples.map((s) => s.exposure_seconds)]);
    charts.lag.set([xs, samples.map((s) => s.replica_lag_seconds), samples.map((s) => (s.throttle ? 1 : 0))]);
    charts.timeline.set(cps.checkpoints);

    const recent = cps.checkpoints.slice(-10).reverse();
    replace(checkpointTable, recent.length === 0
      ? el("p", { class: "muted" }, "No checkpoint completed yet.")
      : el("table", { "data-table": "checkpoints" },
        el("thead", {}, el("tr", {}, ["#", "Kind", "Triggered", "Duration", "Bytes", ...PHASES].map((h, i) =>
          el("th", { class: i >= 3 ? "num" : null }, h)))),
        el("tbody", {}, recent.map((c) => el("tr", { "data-checkpoint": c.id },
          el("td", {}, "#" + c.id), el("td", {}, c.kind),
          el("td", {}, new Date(c.triggered_at).toLocaleTimeString()),
          el("td", { class: "num" }, c.duration_ms + " ms"), el("td", { class: "num" }, fmtBytes(c.bytes)),
          PHASES.map((p) => el("td", { class: "num" }, c[p + "_ms"])))))));

    replace(runs, el("h2", {}, "Runs and restores"), history.runs.length === 0
      ? el("p", { class: "muted" }, "No run has reported yet.")
      : el("table", {},
        el("thead", {}, el("tr", {}, ["Epoch", "Started", "Last seen", "Restored from", "Fallbacks", "Rows at start", "Rows at end", "Dead letters"]
          .map((h, i) => el("th", { class: i >= 4 ? "num" : null }, h)))),
        el("tbody", {}, history.runs.slice().reverse().map((r) => el("tr", {},
          el("td", {}, r.epoch), el("td", {}, new Date(r.started_at).toLocaleString()),
          el("td", {}, new Date(r.last_seen_at).toLocaleTimeString()),
          el("td", {}, r.restored_from == null ? "fresh start" : "checkpoint #" + r.restored_from),
          el("td", { class: "num" }, r.fallbacks), el("td", { class: "num" }, fmtInt(r.rows_at_start)),
          el("td", { class: "num" }, fmtInt(r.rows_at_end)), el("td", { class: "num" }, fmtInt(r.rows_dead_lettered)))))));

    replace(intervals, el("h2", {}, "Checkpoint interval: cost against rework"),
      el("p", { class: "hint" },
        `At this job's recent ${fmtRate(estimate.rows_per_second)} and its checkpoints' median pause of ` +
          `${estimate.pause_ms == null ? "–" : estimate.pause_ms.toFixed(0) + " ms"} (align + snapshot): ` +
          "the share of time checkpoints would hold the tasks, and what a crash would redo. " +
          "An estimate from live figures; `tidewater-bench interval` measures it."),
      el("table", { "data-table": "intervals" },
        el("thead", {}, el("tr", {}, ["Interval", "Overhead", "Rework (mean)", "Rework (worst)", "Seconds redone"]
          .map((h, i) => el("th", { class: i > 0 ? "num" : null }, h)))),
        el("tbody", {}, estimate.options.map((o) => el("tr", { class: o.current ? "current" : null },
          el("td", {}, fmtDuration(o.interval_seconds), o.current ? " (now)" : ""),
          el("td", { class: "num" }, o.overhead_percent == null ? "–" : o.overhead_percent.toFixed(2) + "%"),
          el("td", { class: "num" }, o.rework_rows_mean == null ? "–" : fmtInt(o.rework_rows_mean) + " rows"),
          el("td", { class: "num" }, o.rework_rows_worst == null ? "–" : fmtInt(o.rework_rows_worst) + " rows"),
          el("td", { class: "num" }, fmtDuration(o.rework_seconds_mean)))))));
  };
  refresh.leave = () => {
    window.removeEventListener("resize", onResize);
    Object.values(charts).forEach((c) => c.destroy());
  };
  return refresh;
}

// ---- routing and polling ---------------------------------------------------

const crumbs = () => document.getElementById("crumbs");
let current = null;
let timer = null;
let ticks = 0;

function route() {
  if (current && current.leave) current.leave();
  const root = document.getElementById("app");
  const match = /^#\/jobs\/(\d+)$/.exec(location.hash);
  replace(crumbs());
  current = match ? jobPage(root, match[1]) : jobsPage(root);
  tick();
}

async function tick() {
  clearTimeout(timer);
  // One chain of polls: a tick started meanwhile (a cancel) takes over.
  const mine = ++ticks;
  try {
    await current();
    replace(connection(), "updated " + new Date().toLocaleTimeString());
  } catch (e) {
    replace(connection(), "cannot update: " + e.message);
  }
  if (mine === ticks) timer = setTimeout(tick, POLL_MS);
}

window.addEventListener("hashchange", route);
route();
