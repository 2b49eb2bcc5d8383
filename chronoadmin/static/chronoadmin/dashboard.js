/* The live dashboard: polls the JSON endpoint every data-refresh-ms while the tab is visible
   (paused while it is hidden), and redraws the cards, charts and tables in place. */
"use strict";

(function () {
  const root = document.getElementById("chrono-dashboard");
  const url = root.dataset.url;
  const refreshMs = Number(root.dataset.refreshMs);
  const tenantInput = document.getElementById("tenant-filter");
  const statusLine = document.getElementById("dash-status");
  let timer = null;
  let charts = null;
  // A worker's state as the workers table colours it (a stopped one is not an alarm).
  const WORKER_STATE_CLASS = {up: "health-ok", stopped: "", lost: "health-bad"};

  function text(value, unit) {
    if (value === null || value === undefined) return "–";
    return unit ? `${value} ${unit}` : String(value);
  }

  function fillList(id, pairs) {
    const list = document.getElementById(id);
    list.replaceChildren();
    for (const [label, value] of pairs) {
      const dt = document.createElement("dt");
      dt.textContent = label;
      const dd = document.createElement("dd");
      dd.textContent = text(value);
      dd.dataset.key = label;
      list.append(dt, dd);
    }
  }

  function fillTable(id, rows, cells, empty) {
    const body = document.querySelector(`#${id} tbody`);
    body.replaceChildren();
    if (!rows.length) {
      const tr = body.insertRow();
      const td = tr.insertCell();
      td.colSpan = document.querySelectorAll(`#${id} thead th`).length;
      td.textContent = empty || "nothing in the last hour";
      return;
    }
    for (const row of rows) {
      const tr = body.insertRow();
      if (row.queue !== undefined) tr.dataset.queue = row.queue;
      for (const [value, className] of cells(row)) {
        const td = tr.insertCell();
        td.textContent = text(value);
        if (className) td.className = className;
      }
    }
  }

  function makeCharts() {
    const common = { animation: false, maintainAspectRatio: false, interaction: { mode: "index", intersect: false },
                     scales: { x: { ticks: { maxTicksLimit: 12 } }, y: { beginAtZero: true } } };
    return {
      rates: new Chart(document.getElementById("chart-rates"), {
        type: "line", options: common,
        data: { labels: [], datasets: [
          { label: "dispatched", data: [], borderColor: "#417690", pointRadius: 0 },
          { label: "succeeded", data: [], borderColor: "#2a9d5c", pointRadius: 0 },
          { label: "failed", data: [], borderColor: "#ba2121", pointRadius: 0 } ] },
      }),
      lateness: new Chart(document.getElementById("chart-lateness"), {
        type: "line", options: common,
        data: { labels: [], datasets: [
          { label: "start p50", data: [], borderColor: "#79aec8", pointRadius: 2, spanGaps: true },
          { label: "start p99", data: [], borderColor: "#205067", pointRadius: 2, spanGaps: true },
          { label: "dispatch p99", data: [], borderColor: "#e0a030", pointRadius: 2, spanGaps: true } ] },
      }),
    };
  }

  function drawCharts(series) {
    charts = charts || makeCharts();
    const labels = series.map((p) => p.minute.slice(11, 16));
    const fields = { rates: ["dispatched", "succeeded", "failed"],
                     lateness: ["start_p50_ms", "start_p99_ms", "dispatch_p99_ms"] };
    for (const [name, keys] of Object.entries(fields)) {
      const chart = charts[name];
      chart.data.labels = labels;
      keys.forEach((key, i) => { chart.data.datasets[i].data = series.map((p) => p[key]); });
      chart.update();
    }
  }

  // The queues' panel: platform view only (a queue's depth counts every tenant's messages).
  // RabbitMQ's figures may be stale or unknown (it was slow or down): the panel says why.
  function drawQueues(panel) {
    const box = document.getElementById("queues-panel");
    box.hidden = !panel;
    if (!panel) return;
    const state = document.getElementById("queues-state");
    box.dataset.state = panel.state;
    state.textContent = panel.state === "ok" ? "" :
      `${panel.state}${panel.age_s !== null ? ` (${panel.age_s} s old)` : ""}: ${panel.reason}`;
    state.classList.toggle("stale", panel.state !== "ok");
    document.getElementById("queues-waiting-after").textContent = panel.waiting_after_s;
    const unknown = (value) => (value === null ? "unknown" : value);
    fillTable("queues", panel.queues, (q) => [[q.queue],
      [q.exists === false ? "no such queue" : unknown(q.messages), "num"],
      [unknown(q.consumers), q.consumers === 0 && (q.messages || q.waiting) ? "num health-bad" : "num"],
      [q.waiting, q.waiting ? "num health-bad" : "num"], [q.flagged, q.flagged ? "num health-bad" : "num"]],
      "no queue");
  }

  // Where the figures come from and how old they are: the platform's or the tenant's snapshot
  // (computed by a reaper every few seconds), or computed by a web process on demand (kept a second for
  // every page polling the same view); the all-tenants view computed live says why (no
  // snapshot, or one too old: the reaper may be down).
  function drawSource(data) {
    const source = document.getElementById("dash-source");
    source.dataset.source = data.source;
    const asOf = new Date(data.as_of).toLocaleTimeString();
    source.textContent = data.source === "snapshot"
      ? `figures of ${asOf}, ${data.age_s} s old (${data.tenant ? "tenant" : "platform"} snapshot)`
      : `figures of ${asOf}, ${data.age_s} s old (computed live` +
        `${data.live_reason ? `: ${data.live_reason}` : ""})`;
    source.classList.toggle("stale", Boolean(data.live_reason));
  }

  function draw(data) {
    const sum = (key) => data.series.reduce((total, p) => total + p[key], 0);
    fillList("jobs-by-status", Object.entries(data.jobs_by_status).sort());
    fillList("hour-totals", [["dispatched", sum("dispatched")], ["started", sum("started")],
                             ["succeeded", sum("succeeded")], ["failed", sum("failed")]]);
    // Counted up to a limit (the query stops there): "1000+" rather than a made-up total.
    const capped = (n) => (n >= data.stuck.counted_up_to ? `${n}+` : n);
    fillList("stuck", [["lease expired", capped(data.stuck.lease_expired)],
                       ["retries overdue", capped(data.stuck.retry_overdue)]]);
    // A worker that stopped cleanly (a deploy, a scale-down) is neither up nor a problem:
    // only lost ones (no final heartbeat) are counted against the fleet.
    const inState = (state) => data.workers.filter((w) => w.state === state).length;
    fillList("platform", [["timers pending", data.timers_pending],
                          ["workers up", data.tenant ? null : inState("up")],
                          ["workers lost (hour)", data.tenant ? null : inState("lost")]]);
    drawCharts(data.series);
    fillTable("tasks", data.tasks, (t) => [[t.task], [t.succeeded + t.failed, "num"], [t.failed, "num"],
      [`${(100 * t.failure_rate).toFixed(1)} %`, "num"], [text(t.duration_p50_ms, "ms"), "num"],
      [text(t.duration_p95_ms, "ms"), "num"], [text(t.duration_mean_ms, "ms"), "num"]]);
    fillTable("top-failing", data.top_failing, (t) => [[t.task], [t.failed, "num"],
      [`${(100 * t.failure_rate).toFixed(1)} %`, "num"]]);
    drawQueues(data.queues);
    // Workers, timers and queues serve every tenant: shown in the all-tenants view only.
    document.getElementById("platform-card").hidden = Boolean(data.tenant);
    document.getElementById("workers-panel").hidden = Boolean(data.tenant);
    fillTable("workers", data.workers, (w) => [[w.worker_id], [w.queues], [text(w.heartbeat_age_s, "s"), "num"],
      [w.running, "num"], [w.state, WORKER_STATE_CLASS[w.state]]]);
    // When the page last redrew; the figures' own time and age are drawSource's.
    statusLine.textContent = `updated ${new Date().toLocaleTimeString()}` +
      (data.tenant ? ` · tenant ${data.tenant}` : " · all tenants");
    statusLine.classList.remove("stale");
    drawSource(data);
    root.dataset.generatedAt = data.generated_at;
  }

  async function refresh() {
    timer = null;
    const tenant = tenantInput.value.trim();
    try {
      const response = await fetch(tenant ? `${url}?tenant=${encodeURIComponent(tenant)}` : url,
                                   { headers: { Accept: "application/json" }, credentials: "same-origin" });
      const data = await response.json();
      if (!response.ok) throw new Error(data.detail || response.statusText);
      draw(data);
    } catch (error) {
      statusLine.textContent = `not updated: ${error.message}`;
      statusLine.classList.add("stale");
    }
    schedule();
  }

  function schedule() {
    if (timer === null && !document.hidden) timer = setTimeout(refresh, refreshMs);
  }

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) {
      clearTimeout(timer);
      timer = null;
      statusLine.textContent += " · paused while hidden";
    } else {
      refresh();
    }
  });
  tenantInput.addEventListener("change", () => { clearTimeout(timer); refresh(); });
  refresh();
})();
