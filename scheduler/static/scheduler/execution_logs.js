/* Follows a running execution's log on its admin page: asks the page's logs/ endpoint for the
   lines after the last one shown every 1.5 s (at once while a page comes back full), appends
   them, and stops once the execution is final and nothing more came. Paused while the tab is
   hidden. No inline script and no library: a script-src 'self' policy lets it run. */
"use strict";

(function () {
  const box = document.getElementById("execution-logs");
  if (!box || box.dataset.live !== "true") return;
  const lines = document.getElementById("execution-log-lines");
  const statusLine = document.getElementById("execution-log-status");
  const count = document.getElementById("execution-log-count");
  const INTERVAL_MS = 1500, RETRY_MS = 5000;
  let cursor = box.dataset.cursor || "";
  let timer = null, stopped = false, asking = false;

  function cell(row, text) {
    row.insertCell().textContent = text === null || text === undefined ? "" : String(text);
  }

  function append(line) {
    const row = document.createElement("tr");
    row.className = `log-line log-${line.level}`;
    for (const value of [line.timestamp, line.attempt, line.level, line.logger]) cell(row, value);
    const pre = document.createElement("pre");
    pre.className = "log-message";
    const trace = line.error && line.error.stack_trace;
    pre.textContent = trace ? `${line.message}\n${trace}` : line.message;
    row.insertCell().append(pre);
    lines.append(row);
  }

  function later(ms) {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(() => { timer = null; if (!document.hidden) poll(); }, ms);
  }

  async function poll() {
    if (asking) return;
    asking = true;
    try {
      await ask();
    } finally {
      asking = false;
    }
  }

  async function ask() {
    const url = new URL(box.dataset.followUrl, window.location.href);
    if (cursor) url.searchParams.set("log_cursor", cursor);
    let data;
    try {
      const response = await fetch(url, { credentials: "same-origin",
                                          headers: { Accept: "application/json" } });
      data = await response.json();
      if (!response.ok) throw new Error(data.error || response.statusText);
    } catch (error) {
      statusLine.textContent = `not updated: ${error.message}`;
      later(RETRY_MS);
      return;
    }
    if (data.lines.length) {
      const empty = document.getElementById("execution-log-empty");
      if (empty) empty.remove();
      data.lines.forEach(append);
    }
    if (data.follow) cursor = data.follow;
    if (data.total) count.textContent = `(${data.total} line${data.total === 1 ? "" : "s"})`;
    box.dataset.cursor = cursor;
    if (data.live || data.lines.length) {
      statusLine.textContent = `${data.status} · live`;
      later(data.more ? 0 : INTERVAL_MS);
    } else {
      stopped = true;
      statusLine.textContent = data.status;
      box.dataset.live = "false";
    }
  }

  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && !stopped && timer === null) poll();
  });
  later(INTERVAL_MS);
})();
