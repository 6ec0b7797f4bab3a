// An eval's report page: agreement per tool as bars with their Wilson intervals, cost
// and latency beside the original runs', and every disagreement with both proposals and
// the person's decision. Read from `GET /v1/evals/{id}`, again every few seconds until
// the eval is done. Every proposal is untrusted text: it is set as text, never as HTML.
"use strict";

const POLL_MS = 2000;
const TOKEN_KEY = "tarry-token"; // the inbox's: a token given there works here
const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

async function report(id) {
  const token = localStorage.getItem(TOKEN_KEY);
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const response = await fetch(`/v1/evals/${encodeURIComponent(id)}`, { headers });
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const error = (data && data.error) || { code: `HTTP_${response.status}`, message: response.statusText };
    throw new Error(`${error.code}: ${error.message}`);
  }
  return data;
}

const pct = (x) => `${Math.round(x * 100)}%`;
const rate = (r) => `${r.agreement.toFixed(2)} [${r.low.toFixed(2)}, ${r.high.toFixed(2)}] · ${r.agreed}/${r.points}`;
const call = (c) => `${c.function.name} ${c.function.arguments}`;

function bar(tool, r) {
  const item = el("li", "eval-bar");
  item.dataset.tool = tool;
  const track = el("div", "eval-track");
  const band = el("div", "eval-band");
  band.style.left = pct(r.low); // CSSOM, which the page's style-src allows
  band.style.width = pct(r.high - r.low);
  const fill = el("div", "eval-fill");
  fill.style.width = pct(r.agreement);
  track.append(band, fill);
  item.append(el("span", "eval-tool", tool), track, el("span", "eval-rate small", rate(r)));
  return item;
}

function decisionOf(d) {
  let text = d.verdict + (d.label.by ? ` by ${d.label.by}` : "");
  if (d.label.reason) text += ` (${d.label.reason})`;
  if (d.label.arguments) text += ` to ${JSON.stringify(d.label.arguments)}`;
  return text;
}

function miss(d) {
  const item = el("li", "eval-miss");
  item.dataset.point = d.id;
  item.append(el("div", "eval-miss-head", `${d.id} · ${d.tool}`));
  const pairs = [
    ["decision", decisionOf(d)],
    ["original", d.original ? call(d.original) : d.original_answer || ""],
    ["candidate", d.candidate_calls.map(call).join("; ") || d.candidate_answer || "(nothing)"],
  ];
  const list = el("dl");
  for (const [name, value] of pairs) list.append(el("dt", "muted small", name), el("dd", `eval-${name}`, value));
  item.append(list);
  return item;
}

function spendRow(name, candidate, original) {
  const row = el("tr");
  row.append(el("th", "", name), el("td", "", candidate), el("td", "", original));
  return row;
}

function show(r) {
  $("eval-title").textContent = `Eval of ${r.dataset} on ${r.model}`;
  const progress = r.stopped ? `stopped on its ${r.stopped}` : r.done ? "done" : "running";
  $("eval-meta").textContent = `${r.eval_id} · ${progress} · ${r.scored}/${r.total} scored · ${r.errors} failed`;
  let overall = `Agreement ${rate(r.overall)}`;
  if (r.min_agreement !== null && r.min_agreement !== undefined) {
    overall += r.overall.agreement >= r.min_agreement ? ` · passes ${r.min_agreement}` : ` · below ${r.min_agreement}`;
  }
  $("eval-overall").textContent = overall;
  $("eval-bars").replaceChildren(...Object.entries(r.per_tool).map(([tool, x]) => bar(tool, x)));
  const s = r.spend;
  const ms = (x) => (x === null ? "-" : `${Math.round(x)} ms`);
  const head = el("tr");
  head.append(el("th"), el("th", "", "candidate"), el("th", "", "original"));
  $("eval-spend").replaceChildren(
    head,
    spendRow("tokens", String(s.candidate_usage.total_tokens), String(s.original_usage.total_tokens)),
    spendRow("cost (USD)", (s.candidate_usage.cost_usd || 0).toFixed(4), (s.original_usage.cost_usd || 0).toFixed(4)),
    spendRow("mean latency", ms(s.candidate_latency_ms), ms(s.original_latency_ms)),
  );
  $("eval-misses").replaceChildren(...r.disagreements.map(miss));
  $("eval-no-misses").hidden = r.disagreements.length > 0 || !r.done;
}

async function follow() {
  const id = decodeURIComponent(location.hash.slice(1));
  if (!id) {
    $("health").textContent = "No eval named: open eval.html#EVAL_ID.";
    return;
  }
  for (;;) {
    try {
      const r = await report(id);
      show(r);
      $("health").textContent = "";
      if (r.done) return;
    } catch (error) {
      $("health").textContent = error.message;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

document.addEventListener("DOMContentLoaded", follow);
window.addEventListener("hashchange", () => location.reload());
