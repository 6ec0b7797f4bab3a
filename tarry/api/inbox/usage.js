// The usage page: what the runs spent per person, model and day (`GET /v1/usage?by=`),
// each as a bar chart in plain SVG, drawn here: no chart library, nothing downloaded.
// Names are untrusted text: they are set as text, never as markup.
"use strict";

const TOKEN_KEY = "tarry-token"; // the inbox's: a token given there works here
const SVG = "http://www.w3.org/2000/svg";
const BAR = 22; // a row's height, in px
const LABEL = 170; // the width of the names' column
const WIDTH = 760;
const $ = (id) => document.getElementById(id);
const usd = (x) => `$${x.toFixed(4)}`;

function svg(tag, attributes, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

async function report(by, days) {
  const token = localStorage.getItem(TOKEN_KEY);
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const since = new Date(Date.now() - days * 86400000).toISOString();
  const query = new URLSearchParams({ by, since });
  const response = await fetch(`/v1/usage?${query}`, { headers });
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const error = (data && data.error) || { code: `HTTP_${response.status}`, message: response.statusText };
    throw new Error(`${error.code}: ${error.message}`);
  }
  return data;
}

// One horizontal bar per row, longest for the most expensive, its cost and runs beside it.
function chart(rows) {
  const most = Math.max(...rows.map((r) => r.cost_usd), 1e-9);
  const span = WIDTH - LABEL - 190;
  const height = Math.max(rows.length, 1) * (BAR + 6) + 6;
  const root = svg("svg", { width: WIDTH, height, viewBox: `0 0 ${WIDTH} ${height}`, role: "img" });
  rows.forEach((row, n) => {
    const y = 6 + n * (BAR + 6);
    const group = svg("g", { class: "usage-row", "data-key": row.key });
    const width = Math.max(1, (row.cost_usd / most) * span);
    group.append(
      svg("text", { x: LABEL - 8, y: y + BAR * 0.7, "text-anchor": "end", class: "usage-key" }, row.key),
      svg("rect", { x: LABEL, y, width, height: BAR, rx: 3, class: "usage-bar" }),
      svg("text", { x: LABEL + width + 8, y: y + BAR * 0.7, class: "usage-value" },
        `${usd(row.cost_usd)} · ${row.runs} run${row.runs === 1 ? "" : "s"}`),
    );
    root.append(group);
  });
  if (!rows.length) root.append(svg("text", { x: 0, y: BAR * 0.7, class: "usage-value" }, "Nothing spent."));
  return root;
}

async function show() {
  const days = Number($("usage-since").value);
  try {
    const charts = [...document.querySelectorAll(".usage-chart")];
    const reports = await Promise.all(charts.map((c) => report(c.dataset.by, days)));
    charts.forEach((c, n) => c.replaceChildren(chart(reports[n].rows)));
    const total = reports[0].total;
    const whose = reports[0].users ? ` of ${reports[0].users.join(", ")}` : "";
    $("usage-total").textContent = `${usd(total.cost_usd)} in ${total.runs} runs${whose}, ${total.turns} turns`;
    $("health").textContent = "";
  } catch (error) {
    $("health").textContent = error.message;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("usage-since").addEventListener("change", show);
  show();
});
