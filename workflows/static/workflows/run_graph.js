/* Draws a workflow run's graph and step table from the admin's JSON, again every 2 s while the
   run has not finished (and the tab is visible). */
"use strict";

(function () {
  const box = document.getElementById("run-graph");
  if (!box) return;
  const statusLine = document.getElementById("run-graph-status");
  const W = 170, H = 46, GAP_X = 60, GAP_Y = 18, SVG = "http://www.w3.org/2000/svg";

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function label(node) {
    if (node.kind === "map" && node.instances) return `${node.instances_done}/${node.instances} done`;
    if (node.child_run_id) return `${node.status} · run ${node.child_run_id.slice(0, 8)}`;
    if (node.duration_ms !== null && node.duration_ms !== undefined) return `${node.status} · ${node.duration_ms} ms`;
    return node.status;
  }

  function childLink(node) {
    return node.kind === "sub_workflow" && node.child_url;
  }

  function draw(data) {
    const at = {};
    let width = 0, height = 0;
    for (const n of data.nodes) {
      at[n.key] = { x: 10 + n.depth * (W + GAP_X), y: 10 + n.row * (H + GAP_Y) };
      width = Math.max(width, at[n.key].x + W + 10);
      height = Math.max(height, at[n.key].y + H + 10);
    }
    const svg = el("svg", { viewBox: `0 0 ${width} ${height}`, height: String(height) });
    const defs = el("defs", {});
    const marker = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5",
                                  markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" });
    marker.append(el("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#999" }));
    defs.append(marker);
    svg.append(defs);
    for (const [from, to] of data.edges) {
      const a = at[from], b = at[to];
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
      svg.append(el("path", { class: "edge", d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}` }));
    }
    for (const n of data.nodes) {
      const g = el("g", { class: "node", "data-key": n.key, "data-status": n.status });
      const title = el("title", {}, n.waiting ? n.waiting.text : (n.reason ? n.reason.text : n.status));
      g.append(title);
      g.append(el("rect", { x: at[n.key].x, y: at[n.key].y, width: W, height: H, class: `st-${n.status}` }));
      g.append(el("text", { x: at[n.key].x + 8, y: at[n.key].y + 18, "font-weight": "bold" }, n.key));
      g.append(el("text", { x: at[n.key].x + 8, y: at[n.key].y + 36 }, label(n)));
      if (childLink(n)) {
        const a = el("a", { href: n.child_url, class: "child-run" });
        a.append(g);
        svg.append(a);
      } else {
        svg.append(g);
      }
    }
    box.replaceChildren(svg);
    const body = document.querySelector("#run-steps tbody");
    body.replaceChildren();
    for (const n of data.nodes) {
      const tr = body.insertRow();
      tr.dataset.key = n.key;
      const why = n.waiting ? n.waiting.text : (n.reason ? n.reason.text : JSON.stringify(n.result));
      for (const value of [n.key, n.status, n.attempt, n.duration_ms === null ? "" : `${n.duration_ms} ms`,
                           n.worker_id || "", why === "null" ? "" : why]) {
        tr.insertCell().textContent = value;
      }
      if (childLink(n)) {
        const link = document.createElement("a");
        link.href = n.child_url;
        link.className = "child-run";
        link.textContent = ` child run ${n.child_run_id}`;
        tr.cells[0].append(link);
      }
    }
    statusLine.textContent = `${data.status}${data.finished ? "" : " · live"}`;
    box.dataset.status = data.status;
  }

  async function refresh() {
    try {
      const response = await fetch(box.dataset.url, { credentials: "same-origin" });
      const data = await response.json();
      draw(data);
      if (!data.finished) setTimeout(() => { if (!document.hidden) refresh(); }, 2000);
    } catch (error) {
      statusLine.textContent = `not updated: ${error.message}`;
      setTimeout(refresh, 5000);
    }
  }
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
  refresh();
})();
