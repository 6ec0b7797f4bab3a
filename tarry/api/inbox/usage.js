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

// The API's answer to `method path` with the inbox's token; its error's code and message thrown.
async function api(method, path, body) {
  const token = localStorage.getItem(TOKEN_KEY);
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const error = (data && data.error) || { code: `HTTP_${response.status}`, message: response.statusText };
    throw new Error(`${error.code}: ${error.message}`);
  }
  return data;
}

function report(by, days) {
  const since = new Date(Date.now() - days * 86400000).toISOString();
  return api("GET", `/v1/usage?${new URLSearchParams({ by, since })}`);
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
    const people = reports[charts.findIndex((c) => c.dataset.by === "user")].rows;
    $("cap-people").replaceChildren(...people.map((row) => new Option(row.key)));
    const total = reports[0].total;
    const whose = reports[0].users ? ` of ${reports[0].users.join(", ")}` : "";
    $("usage-total").textContent = `${usd(total.cost_usd)} in ${total.runs} runs${whose}, ${total.turns} turns`;
    $("health").textContent = "";
  } catch (error) {
    $("health").textContent = error.message;
  }
}

// --- An admin raises a person's daily cap ----------------------------------------------
// Only an admin (`GET /v1/me`) sees the form; the route refuses anyone else 403 anyway.

async function showCapForm() {
  const me = await api("GET", "/v1/me").catch(() => null);
  $("cap-form").hidden = !(me && me.admin);
}

function nameCapButton() {
  const user = $("cap-user").value.trim();
  $("cap-button").textContent = user ? `Raise ${user}'s cap for today` : "Raise the cap for today";
}

async function raiseCap(event) {
  event.preventDefault();
  const user = $("cap-user").value.trim();
  const tokens = $("cap-tokens").value.trim();
  const cost = $("cap-cost").value.trim();
  const raised = {};
  if (tokens) raised.max_tokens = Number(tokens);
  if (cost) raised.max_cost_usd = Number(cost);
  if (!user || (!tokens && !cost)) {
    $("cap-result").textContent = "Name the person and a new cap: tokens, dollars or both.";
    return;
  }
  $("cap-button").disabled = true;
  try {
    const ledger = await api("POST", `/v1/limits/${encodeURIComponent(user)}/raise`, raised);
    const caps = [];
    if (ledger.raised.max_tokens) caps.push(`${ledger.raised.max_tokens} tokens`);
    if (ledger.raised.max_cost_usd) caps.push(`$${ledger.raised.max_cost_usd}`);
    $("cap-result").textContent = `${user}'s cap for ${ledger.day} is now ${caps.join(" and ")}: their waiting runs go on.`;
  } catch (error) {
    $("cap-result").textContent = error.message;
  } finally {
    $("cap-button").disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("usage-since").addEventListener("change", show);
  $("cap-user").addEventListener("input", nameCapButton);
  $("cap-form").addEventListener("submit", raiseCap);
  show();
  showCapForm();
});
