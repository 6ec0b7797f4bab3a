// The Tarry inbox: every run, found by phase, by what it waits for or by who may decide
// its calls, and one run's page to follow and answer it.
// Plain browser JavaScript against the HTTP API (`/v1/...`), no build step. Every model
// or tool text is untrusted: it is rendered as markdown with raw HTML escaped, then
// sanitised, and the page's Content-Security-Policy forbids inline scripts besides.
"use strict";

const LIST_POLL_MS = 2000;
// An open run's state is read this often besides its event stream (`pollState` says why).
const STATE_POLL_MS = 1000;
// Within this many pixels of the run's end, the page follows its newest message.
const NEAR_END_PX = 80;
const $ = (id) => document.getElementById(id);

// --- The API ------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(`${code}: ${message}`);
    this.status = status;
    this.code = code;
  }
}

const TOKEN_KEY = "tarry-token";

function authHeaders() {
  const token = localStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

// The token stays in this browser's local storage until forgotten: on a shared machine,
// the next person at the browser could drive every run with it.
function showTokenControl() {
  $("forget-token-button").hidden = !localStorage.getItem(TOKEN_KEY);
}

async function api(method, path, body, idempotencyKey) {
  // The audit trail records what the inbox's pages do as the inbox's acts.
  const init = { method, headers: { ...authHeaders(), "X-Tarry-Door": "inbox" } };
  if (idempotencyKey) init.headers["Idempotency-Key"] = idempotencyKey;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = response.status === 204 ? null : await response.json().catch(() => null);
  if (response.status === 401) {
    askForToken(data && data.error ? data.error.message : "");
  }
  if (!response.ok) {
    const error = (data && data.error) || { code: `HTTP_${response.status}`, message: response.statusText };
    throw new ApiError(response.status, error.code, error.message);
  }
  return data;
}

// The API's 401 says where this server's tokens come from (`[api.users]`,
// `TARRY_API_TOKENS`, an identity provider): the prompt says it to the person.
function askForToken(why) {
  const dialog = $("token-dialog");
  if (why) $("token-why").textContent = why.charAt(0).toUpperCase() + why.slice(1) + ".";
  if (!dialog.open) dialog.showModal();
}

// Who the API takes this page for (`GET /v1/me`): the name its decisions are recorded under.
async function showWhoIAm() {
  try {
    const me = await api("GET", "/v1/me");
    $("signed-in").textContent = `Signed in as ${me.user}`;
  } catch {
    $("signed-in").textContent = "";
  }
}

// Server-sent events over fetch, not EventSource: EventSource cannot send the bearer token.
async function* serverEvents(path, signal) {
  const response = await fetch(path, { headers: { ...authHeaders(), Accept: "text/event-stream" }, signal });
  if (!response.ok) throw new ApiError(response.status, `HTTP_${response.status}`, "event stream refused");
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = { id: null, event: "message", data: [] };
      for (const line of block.split("\n")) {
        const colon = line.indexOf(":");
        if (colon === 0) continue; // a comment: the server's keep-alive
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") event.data.push(text);
        else if (field === "id") event.id = text;
        else if (field === "event") event.event = text;
      }
      if (event.data.length) yield { ...event, data: JSON.parse(event.data.join("\n")) };
    }
  }
}

// --- Safe text ------------------------------------------------------------------------

const markdown = () => {
  const parser = new marked.Marked({ gfm: true, breaks: true });
  parser.use({
    renderer: {
      // A model's or a tool's HTML is text to read, never markup to run.
      html: (token) => escapeHtml(token.text),
      // No request leaves the machine: an image is shown as its link.
      image: (token) => `<a href="${safeUrl(token.href)}" rel="noreferrer noopener" target="_blank">${escapeHtml(token.text || token.href)}</a>`,
    },
  });
  return parser;
};
let parser = null;

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function safeUrl(href) {
  return /^(https?:|mailto:)/i.test(href || "") ? escapeHtml(href) : "#";
}

function renderMarkdown(element, text) {
  parser = parser || markdown();
  const html = parser.parse(text || "");
  element.innerHTML = DOMPurify.sanitize(html, { FORBID_TAGS: ["img", "style", "form", "input"] });
  for (const link of element.querySelectorAll("a")) {
    link.rel = "noreferrer noopener";
    link.target = "_blank";
  }
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function prettyJson(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

// --- The list of runs -----------------------------------------------------------------

// What the list shows: every run by default, open runs first (visibility's order).
const filters = { phase: "", waitingFor: "", mine: false };
// Bumped by every request for the list: an answer for filters no longer chosen is dropped.
let listGeneration = 0;

async function refreshList() {
  const generation = ++listGeneration;
  try {
    const runs = await listedRuns();
    if (generation !== listGeneration) return;
    showList(runs);
    $("health").textContent = "";
  } catch (error) {
    // Not signed in yet: the token prompt says so, not a raw 401 beside it.
    const shown = error.status === 401 ? "" : error.message;
    if (generation === listGeneration) $("health").textContent = shown;
  }
}

// One request at a time: a slow server is asked again only once it has answered.
async function pollList() {
  for (;;) {
    await refreshList();
    await new Promise((resolve) => setTimeout(resolve, LIST_POLL_MS));
  }
}

// What a run can wait for (`GET /v1/wait-kinds`), by kind: each one's tag and its option
// in the filter, so that a kind this page does not know by name shows as the others do.
let waitKinds = null;

async function loadWaitKinds() {
  if (waitKinds) return;
  const kinds = await api("GET", "/v1/wait-kinds");
  waitKinds = Object.fromEntries(kinds.map((kind) => [kind.kind, kind]));
  for (const kind of kinds) {
    const option = el("option", "", kind.waits_for);
    option.value = kind.kind;
    $("filter-waiting").append(option);
  }
}

async function listedRuns() {
  await loadWaitKinds();
  const query = new URLSearchParams({ limit: "100" });
  if (filters.mine) {
    query.set("decidable", "true"); // the runs with a call this page's person may decide
  } else {
    if (filters.phase) query.set("phase", filters.phase);
    if (filters.waitingFor) query.set("waiting_for", filters.waitingFor);
  }
  return (await api("GET", `/v1/runs?${query}`)).runs;
}

// "approval", "reply", "running", "completed": what a run's tag and badge say.
function tagOf(phase, waitingFor) {
  if (phase === "WaitingUser") {
    const kind = waitKinds && waitKinds[waitingFor];
    return kind ? kind.label : "reply";
  }
  return phase ? phase.toLowerCase() : "unknown";
}

// What the list last drew: it is drawn again only when that changes, so a row keeps
// the focus and the hover it has while the runs stay as they are.
let listDrawn = "";

function showList(runs) {
  const rows = runs.map((run) => {
    // The open run's page follows it live; visibility may not have caught up yet.
    const live = run.id === current.id && current.state;
    const what = live ? tagOf(live.phase, live.waiting_for) : tagOf(run.phase, run.waiting_for);
    const turns = `${run.turns} turn${run.turns === 1 ? "" : "s"}`;
    const schedule = run.schedule ? ` · from schedule ${run.schedule}` : "";
    const origin = run.parent ? ` · agent of ${run.parent}` : schedule;
    if (run.kind === "eval") {
      // An eval's page is its report.
      const href = `eval.html#${encodeURIComponent(run.id)}`;
      return { id: run.id, href, summary: run.summary || run.id, what, line: `${run.id} · eval · ${run.model}` };
    }
    const href = `#/runs/${encodeURIComponent(run.id)}`;
    return { id: run.id, href, summary: run.summary || run.id, what, line: `${run.id} · ${turns} · ${run.model}${origin}` };
  });
  const drawn = JSON.stringify([current.id, rows]);
  if (drawn !== listDrawn) {
    listDrawn = drawn;
    $("run-list").replaceChildren(...rows.map(listRow));
  }
  const waiting = runs.filter((run) => run.phase === "WaitingUser").length;
  $("waiting-count").textContent = waiting ? String(waiting) : "";
  $("run-empty").hidden = runs.length > 0;
}

function listRow(row) {
  const item = el("li", row.id === current.id ? "selected" : "");
  item.dataset.runId = row.id;
  const link = el("a");
  link.href = row.href;
  link.append(el("span", "summary", row.summary), el("span", `tag tag-${row.what}`, row.what));
  link.append(el("span", "muted small", row.line));
  item.append(link);
  return item;
}

// The open run's row takes its tag from the page, which follows the run live.
function showListTag(state) {
  const item = [...$("run-list").children].find((li) => li.dataset.runId === current.id);
  const tag = item && item.querySelector(".tag");
  if (!tag) return;
  const what = tagOf(state.phase, state.waiting_for);
  tag.className = `tag tag-${what}`;
  tag.textContent = what;
}

function readFilters() {
  filters.phase = $("filter-phase").value;
  filters.waitingFor = $("filter-waiting").value;
  filters.mine = $("filter-mine").checked;
  // "Calls I may decide" are calls waiting for a decision: the other two say nothing more.
  $("filter-phase").disabled = $("filter-waiting").disabled = filters.mine;
  refreshList();
}

// --- One run's page -------------------------------------------------------------------

// The run this page shows. Opening another replaces it, never changes it in place: an
// answer still in flight for the run left behind finds it is no longer `current` and is
// dropped, so one run's numbers never land on another's page.
let current = runPage(null);

function runPage(id) {
  return {
    id,
    abort: new AbortController(),
    state: null,
    seen: 0, // the offset in the run's event stream up to which this page knows the run
    said: "", // what the run's state last said in the notice
    messages: 0,
    live: null,
    calls: new Map(),
    children: [], // the sub-agent runs it started, as the API last listed them
    treeDrawn: "", // what its tree of sub-agents last drew
    connectDrawn: "", // the connects it waits for, as last drawn (`showConnect`)
    mayWrite: true, // whether this page's person may change the run (the API's `may_write`)
    timeline: null, // its timeline as last read, when and its rows (`drawTimeline`)
    timelineFollowed: false, // whether `followTimeline` reads it already
  };
}

async function openRun(id, message = null) {
  current.abort.abort();
  const view = (current = runPage(id));
  show("run");
  clearRunPage(id);
  try {
    const state = await api("GET", `/v1/runs/${encodeURIComponent(id)}`);
    let start = 0;
    for (;;) {
      if (view !== current) return;
      const page = await api("GET", `/v1/runs/${encodeURIComponent(id)}/transcript?start=${start}`);
      if (view !== current) return;
      page.messages.forEach((message, i) => addMessage(message, page.start + i));
      start = page.start + page.messages.length;
      if (start >= page.total || page.messages.length === 0) break;
    }
    view.seen = state.events;
    showState(state);
    if (message === null || !showFound(message)) scrollToEnd(); // opened: its newest message
    follow(view, state.events);
    pollState(view);
    followTimeline(view); // when the person keeps it open from run to run
  } catch (error) {
    if (view === current) notice(error.message);
  }
}

// Nothing of the run shown before stays while the new one loads.
function clearRunPage(id) {
  $("run-title").textContent = id;
  $("run-meta").textContent = "";
  $("run-phase").textContent = "";
  $("transcript").replaceChildren();
  $("approvals").replaceChildren();
  $("run-tree").replaceChildren();
  $("run-tree").hidden = true;
  $("timeline-rows").replaceChildren();
  $("timeline-summary").textContent = "";
  notice("");
  showRetrying(null);
  showModelFailing({});
  showBudget({});
  pinned = true;
  for (const item of $("run-list").children) item.classList.toggle("selected", item.dataset.runId === id);
}

async function follow(view, offset) {
  // The state says where the stream stood; everything after it is news.
  let after = offset - 1;
  const signal = view.abort.signal;
  while (!signal.aborted) {
    const query = after >= 0 ? `?after=${after}` : "";
    try {
      for await (const event of serverEvents(`/v1/runs/${encodeURIComponent(view.id)}/events${query}`, signal)) {
        if (view !== current) return;
        if (event.id !== null) {
          after = Number(event.id);
          view.seen = Math.max(view.seen, after + 1);
        }
        onEvent(event.data);
      }
      return; // the run ended and its last events are read
    } catch (error) {
      if (signal.aborted) return;
      await new Promise((resolve) => setTimeout(resolve, 1000)); // then resume where it broke
    }
  }
}

// A stop event's state is the run's, the same for every reader; whether this page's
// person may decide a call is the API's answer to its token (`may_decide`), so a state
// with calls only some may decide is asked for again.
async function showStopState(state) {
  const guarded = (state.pending_approvals || []).some((p) => p.approvers && p.may_decide === undefined);
  if (!guarded) {
    showState(state);
    return;
  }
  const view = current;
  try {
    const answer = await api("GET", `/v1/runs/${encodeURIComponent(view.id)}`);
    if (view === current) showState(answer); // never another run's state on this page
  } catch (error) {
    if (view === current) notice(error.message);
  }
}

function onEvent(event) {
  switch (event.kind) {
    case "answer":
    case "reset":
      showWorking();
      liveAnswer().reset(event.turn);
      break;
    case "text":
      showWorking();
      liveAnswer().addText(event.text || "");
      break;
    case "tool_call":
      showWorking();
      liveAnswer().addCall(event.index, event.name);
      break;
    case "tool_arguments":
      liveAnswer().addArguments(event.index, event.text || "");
      break;
    case "message":
      // One the page shows already may come again (a stream resumed, a message recovered
      // from the transcript): only a new one says the run is at work, and not a note of
      // the run's own (a system message), which a waiting run writes too (a switched model).
      if (event.index >= current.messages) {
        if (event.message.role !== "system") showWorking();
        dropLiveAnswer();
        addMessage(event.message, event.index);
      }
      break;
    case "stop":
      dropLiveAnswer();
      showStopState(event.state);
      refreshList();
      break;
  }
}

// Anything but a stop on the stream is the run at work: no longer waiting for anyone,
// whatever the last stop said (after Approve, say), until the next stop says otherwise.
function showWorking() {
  const state = current.state;
  if (!state || state.phase === "Running" || ended(state)) return;
  showState({ ...state, phase: "Running", waiting_for: null, pending_approvals: [] });
}

// The answer being written: its words as they come, rendered as they grow.
function liveAnswer() {
  if (current.live) return current.live;
  const item = el("li", "message assistant live");
  const body = el("div", "body");
  const calls = el("div", "calls");
  item.append(el("div", "who", "agent · writing…"), body, calls);
  $("transcript").append(item);
  let text = "";
  let pending = false;
  const render = () => {
    pending = false;
    renderMarkdown(body, text);
    followEnd();
  };
  const callArgs = new Map();
  current.live = {
    item,
    reset() {
      text = "";
      callArgs.clear();
      calls.replaceChildren();
      render();
    },
    addText(piece) {
      text += piece;
      if (!pending) {
        pending = true;
        requestAnimationFrame(render); // one render per frame however fast the words come
      }
    },
    addCall(index, name) {
      const pre = el("pre", "arguments", "");
      const box = el("div", "call");
      box.append(el("span", "call-name", `→ ${name}`), pre);
      calls.append(box);
      callArgs.set(index, pre);
    },
    addArguments(index, piece) {
      const pre = callArgs.get(index);
      if (pre) pre.textContent += piece;
    },
  };
  return current.live;
}

function dropLiveAnswer() {
  if (current.live) current.live.item.remove();
  current.live = null;
}

function addMessage(message, index) {
  if (index < current.messages) return;
  current.messages = index + 1;
  const list = $("transcript");
  if (message.role === "tool") {
    const call = current.calls.get(message.tool_call_id);
    const box = call || list;
    // Who decided a gated call is in sight; its result is folded away.
    const decision = message.decision;
    if (decision) box.append(el("div", `small decision ${decision.approved ? "approved" : "rejected"}`, decisionText(decision)));
    guardrailMarks(box, message);
    const result = el("details", "result");
    result.dataset.index = index;
    const failed = /^\{"ok":\s*false/.test(message.content || "");
    result.append(el("summary", failed ? "failed" : "", failed ? "✗ result" : "✓ result"));
    result.append(el("pre", "", prettyJson(message.content || "")));
    box.append(result);
    followEnd();
    return;
  }
  const item = el("li", `message ${message.role}`);
  item.dataset.index = index;
  const user = message.by || "you";
  item.append(el("div", "who", message.role === "user" ? user : message.role === "assistant" ? "agent" : message.role));
  const body = el("div", "body");
  if (message.role === "assistant") renderMarkdown(body, message.content || "");
  else body.textContent = message.content || "";
  item.append(body);
  if (message.content) item.append(pinButton(index)); // a tool's result is never pinned alone
  if (message.interrupted) item.append(el("div", "muted small", "interrupted"));
  guardrailMarks(item, message);
  for (const call of message.tool_calls || []) {
    const box = el("div", "call");
    const request = el("details");
    request.append(el("summary", "call-name", `→ ${call.function.name}`));
    request.append(blocksView(argumentBlocks(call.function.arguments)));
    box.append(request); // its result joins it when it comes
    item.append(box);
    current.calls.set(call.id, box);
  }
  list.append(item);
  followEnd();
}

// A message pinned stays in the model's window however long the run goes on (the API's
// `/pins`): its button says whether it is, as the run's state last said.
function pinButton(index) {
  const button = el("button", "pin small", "Pin");
  button.dataset.index = String(index);
  button.title = "Keep this message in the model's window";
  button.addEventListener("click", () => togglePin(index));
  showPin(button);
  return button;
}

function showPin(button) {
  const on = ((current.state && current.state.pinned) || []).includes(Number(button.dataset.index));
  button.textContent = on ? "📌 Pinned" : "Pin";
  button.classList.toggle("pinned", on);
  button.setAttribute("aria-pressed", String(on));
  button.hidden = !current.mayWrite || ended(current.state);
}

async function togglePin(index) {
  const view = current;
  const on = ((view.state && view.state.pinned) || []).includes(index);
  const path = `/v1/runs/${encodeURIComponent(view.id)}/pins`;
  try {
    const state = on ? await api("DELETE", `${path}?message=${index}`) : await api("POST", path, { message: index });
    if (view === current) showStatus(state);
  } catch (error) {
    if (view === current) notice(error.message); // PINS_OVER_BUDGET says what to do
  }
}

// Under a message a guardrail changed: "⛨ guardrail 'no-pii' redacted (card, email): reason".
function guardrailMarks(box, message) {
  for (const hit of message.guardrails || []) {
    const kinds = [...new Set((hit.matches || []).map((m) => m.kind))].sort();
    const found = kinds.length ? ` (${kinds.join(", ")})` : "";
    const why = hit.reason ? `: ${hit.reason}` : "";
    const done = hit.verdict === "ask" ? askedText(hit.decision) : hit.verdict === "redact" ? "redacted" : "blocked";
    box.append(el("div", "small guardrail", `⛨ guardrail '${hit.guardrail}' ${done}${found}${why}`));
  }
}

// What became of a text a guardrail asked about: "asked: edited by bob".
function askedText(decision) {
  if (!decision) return "asks a person";
  const how = !decision.allowed ? "blocked" : decision.edited ? "edited" : "allowed";
  return `asked: ${how} by ${decision.by}`;
}

// "approved by alice at …", "rejected by bob via mcp at …: not there", "rejected at its deadline".
function decisionText(decision) {
  const verdict = decision.approved ? "approved" : "rejected";
  const reason = decision.reason ? `: ${decision.reason}` : "";
  const who = decision.user ? ` by ${decision.user}` : decision.by === "deadline" ? " at its deadline" : "";
  const door = decision.source ? ` via ${decision.source}` : "";
  return `${verdict}${who}${door} at ${new Date(decision.at).toLocaleString()}${reason}`;
}

function ended(state) {
  return Boolean(state) && (state.phase === "Completed" || state.phase === "Failed");
}

// A new stop point, or an action's answer: said in full, the notice included.
function showState(state) {
  current.said = null;
  showStatus(state);
  showApprovals(state.pending_approvals || []);
  followEnd();
}

// Everything a state says but its pending calls, whose cards may hold what a person is
// typing: what the run's state, read every second, may change under their eyes.
function showStatus(state) {
  current.state = state;
  // Said by the API's view of the run, for this page's token; a stop event's state, the
  // same for every reader, leaves it as the last view said.
  if (state.may_write !== undefined) current.mayWrite = state.may_write;
  const readOnly = !current.mayWrite;
  const phase = $("run-phase");
  phase.textContent = state.waiting_for ? `waiting for ${state.waiting_for}` : tagOf(state.phase);
  phase.className = `badge ${state.phase}`;
  showListTag(state);
  const usage = state.usage || {};
  const raised = state.budget_raised_by ? ` · budget raised by ${state.budget_raised_by}` : "";
  $("run-meta").textContent = `turn ${state.turn} · ${usage.total_tokens || 0} tokens${raised}`;
  const over = ended(state);
  const problems = [];
  if (state.error) problems.push(`${state.error.code}: ${state.error.message}`);
  if (state.warning && !state.error) problems.push(`warning: ${state.warning}`);
  if (state.stopped_by) problems.push(`stopped by ${state.stopped_by}${state.stop_reason ? `: ${state.stop_reason}` : ""}`);
  else if (state.stop_reason) problems.push(`stopped: ${state.stop_reason}`);
  if (state.paused_by && !over) problems.push(`paused by ${state.paused_by}`);
  if (over) problems.push(`The run has ended (${state.phase}).`);
  if (readOnly) problems.push("You may read this run, not change it.");
  // Read every second, it is said again only when it changes: what an action just said
  // stays until then.
  const said = problems.join(" — ");
  if (said !== current.said) notice((current.said = said));
  $("pause-button").disabled = state.phase !== "Running";
  $("stop-button").disabled = over;
  $("reply-text").disabled = over;
  $("reply-button").disabled = over;
  // Offered only to those who may use them: the API would refuse anyone else (403).
  for (const id of ["pause-button", "stop-button", "reply-form"]) $(id).hidden = readOnly;
  showRetrying(state.retrying || null);
  showModelFailing(state);
  showBudget(state);
  showTree(state);
  showConnect(state);
  for (const button of $("transcript").querySelectorAll("button.pin")) showPin(button);
}

// "model unreachable, attempt 5, next in 16 s", as `tarry status` words it.
function retryingText(retrying) {
  const what = retrying.call === "model" ? "model unreachable" : `tool ${retrying.call} failing`;
  let text = `${what}, attempt ${retrying.attempt}`;
  if (retrying.next_attempt_at) {
    const wait = Math.max(0, Math.round((new Date(retrying.next_attempt_at) - Date.now()) / 1000));
    text += `, next in ${wait} s`;
  }
  if (retrying.last_error) text += ` (${retrying.last_error.code}: ${retrying.last_error.message})`;
  return text;
}

function showRetrying(retrying) {
  const line = $("run-retrying");
  line.textContent = retrying ? `↻ ${retryingText(retrying)}` : "";
  line.hidden = !retrying;
}

function showModelFailing(state) {
  const waiting = state.phase === "WaitingUser" && state.waiting_for === "model";
  $("model-form").hidden = !waiting || !current.mayWrite;
  $("model-error").textContent = waiting && state.error ? `${state.error.code}: ${state.error.message}` : "";
  for (const id of ["retry-button", "model-button", "model-profile"]) $(id).disabled = !waiting;
}

// The run's state is read every second until it ends: retries are not on its event
// stream (Temporal records them, not the run), and no event says that a run went back
// to work on a raised budget or a retry before its model answers.
async function pollState(view) {
  while (view === current && !ended(view.state)) {
    await new Promise((resolve) => setTimeout(resolve, STATE_POLL_MS));
    if (view !== current) return;
    try {
      const state = await api("GET", `/v1/runs/${encodeURIComponent(view.id)}`);
      if (view !== current) return;
      // A state read before the latest event the page has shown is older than the page;
      // one that says what the page says leaves it (and the notice a person reads) alone.
      if (state.events >= view.seen && statusOf(state) !== statusOf(view.state)) {
        view.seen = state.events;
        showStatus(state);
      } else {
        showRetrying(state.retrying || null);
      }
    } catch {
      // The event stream reports a run or server that went away.
    }
  }
}

// What `showStatus` shows of a state, but the retry line. A null is left out, as the
// event stream's states leave it out and the API's answers spell it.
function statusOf(state) {
  if (!state) return "";
  const { phase, waiting_for, turn, usage, error, warning, stop_reason, stopped_by, paused_by } = state;
  const { budget, budget_raised_by, model, parent, waiting_on, children, remote_calls } = state;
  const shown = [phase, waiting_for, turn, usage, error, warning, stop_reason, stopped_by, paused_by, budget, budget_raised_by, model];
  shown.push(parent, waiting_on, children, remote_calls);
  return JSON.stringify(shown, (key, value) => (value === null ? undefined : value));
}

async function retryModel() {
  const view = current;
  $("retry-button").disabled = true;
  showModelFailing({});
  try {
    // The answer comes at the run's next stop point; the event stream shows it first.
    await api("POST", `/v1/runs/${encodeURIComponent(view.id)}/retry`, {});
  } catch (error) {
    if (view !== current) return;
    notice(error.message);
    if (current.state) showModelFailing(current.state);
  }
}

async function switchModel() {
  const view = current;
  const profile = $("model-profile").value.trim();
  if (!profile) return;
  try {
    const state = await api("POST", `/v1/runs/${encodeURIComponent(view.id)}/model`, { profile });
    if (view !== current) return;
    $("model-profile").value = "";
    showState(state);
    notice(`The run now asks model profile ${state.model}; Retry to ask it.`);
  } catch (error) {
    if (view === current) notice(error.message);
  }
}

// --- A wait for a person to connect their account ------------------------------------

// A tool call that needs a person's own grant to an MCP server: a Connect button for each,
// which asks the API for the authorization page (it refuses anyone but that person) and
// goes there; the server's callback tells the run, and the call runs.
function showConnect(state) {
  const needs = state.phase === "WaitingUser" ? state.auth_needed || [] : [];
  const drawn = JSON.stringify(needs);
  if (drawn === current.connectDrawn) return;
  current.connectDrawn = drawn;
  const box = $("run-connect");
  box.replaceChildren(
    ...needs.map((need) => {
      const line = el("div", "connect-need", `${need.person} must connect ${need.server}. `);
      const button = el("button", "connect-button", `Connect ${need.server}`);
      button.addEventListener("click", () => connectTo(need.server, button));
      line.append(button);
      return line;
    }),
  );
  box.hidden = needs.length === 0;
}

async function connectTo(server, button) {
  button.disabled = true;
  try {
    const path = `/v1/oauth/connect/${encodeURIComponent(current.id)}/${encodeURIComponent(server)}`;
    const { url } = await api("POST", path);
    window.location.assign(url);
  } catch (error) {
    button.disabled = false;
    notice(error.message);
  }
}

// --- A tree of sub-agents -------------------------------------------------------------

// The run's place in a tree of sub-agents, each run a link to its page: the lead a
// sub-agent works for, the sub-agent the run waits on (answered there), and every
// sub-agent it started, the remote agent's question it waits on, and every call of a remote
// agent (no run here: named, with its task and state). The API's answers list a run's
// `children`, the event stream's states do not: the last list read stays.
function showTree(state) {
  if (state.children) current.children = state.children;
  const lines = [];
  if (state.parent) lines.push(["lead", "Sub-agent of ", [state.parent], ""]);
  if (state.phase === "WaitingUser" && state.waiting_for === "agent" && state.waiting_on) {
    lines.push(["waiting-on", "Waiting for its sub-agent ", [state.waiting_on], ": answer it there."]);
  }
  if (state.phase === "WaitingUser" && state.waiting_for === "remote" && state.waiting_on) {
    // A remote agent's call is no run of this API: named, not linked. The reply box answers it.
    const asks = `Its remote agent ${state.waiting_on} asks: ${state.question || "(no question given)"}`;
    lines.push(["waiting-on", asks, [], " Your reply is its answer."]);
  }
  if (current.children.length) lines.push(["children", "Sub-agents: ", current.children, ""]);
  for (const call of state.remote_calls || []) {
    const task = `task ${call.task_id || "-"}, ${call.state || "sending"}`;
    lines.push(["remote-call", `Remote agent ${call.agent}: ${call.call} (${task})`, [], ""]);
  }
  // Drawn again only when it changes, so a link keeps the pointer and the focus on it.
  const drawn = JSON.stringify(lines);
  if (drawn === current.treeDrawn) return;
  current.treeDrawn = drawn;
  const tree = $("run-tree");
  tree.replaceChildren(
    ...lines.map(([kind, before, ids, after]) => {
      const line = el("div", kind, before);
      ids.forEach((id, i) => line.append(...(i ? [", "] : []), runLink(id)));
      line.append(after);
      return line;
    }),
  );
  tree.hidden = lines.length === 0;
}

function runLink(id) {
  const link = el("a", "run-link", id);
  link.href = `#/runs/${encodeURIComponent(id)}`;
  return link;
}

// --- The run's timeline ---------------------------------------------------------------

const TIMELINE_POLL_MS = 2000; // how often an open timeline of a run going on is read again
const TIMELINE_TICK_MS = 250; // how often its open span (the current wait) is drawn longer

// Where the run's time went (`GET /v1/runs/{id}/timeline`), read while the person has the
// timeline open and the run goes on. Between two reads the open span grows on this page's
// clock from the server's `now`, so a wait for a person is seen growing as it lasts.
async function followTimeline(view) {
  if (view.timelineFollowed) return;
  view.timelineFollowed = true;
  try {
    while (view === current && $("timeline").open) {
      const timeline = await api("GET", `/v1/runs/${encodeURIComponent(view.id)}/timeline`);
      if (view !== current) return;
      drawTimeline(view, timeline);
      if (timeline.ended) return;
      for (let waited = 0; waited < TIMELINE_POLL_MS; waited += TIMELINE_TICK_MS) {
        await new Promise((resolve) => setTimeout(resolve, TIMELINE_TICK_MS));
        if (view !== current || !$("timeline").open) return;
        growTimeline(view);
      }
    }
  } catch (error) {
    if (view === current) $("timeline-summary").textContent = error.message;
  } finally {
    view.timelineFollowed = false;
  }
}

function durationText(seconds) {
  if (seconds < 1) return `${Math.round(seconds * 1000)}ms`;
  if (seconds < 60) return `${seconds.toFixed(1)}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes}m${String(Math.floor(seconds % 60)).padStart(2, "0")}s`;
  return `${Math.floor(minutes / 60)}h${String(minutes % 60).padStart(2, "0")}m`;
}

function drawTimeline(view, timeline) {
  view.timeline = { timeline, readAt: Date.now(), rows: [] };
  const rows = timeline.spans.map((span) => {
    const row = el("li", `span ${span.kind} ${span.status}`);
    let name = span.name + (span.verdict ? ` → ${span.verdict}` : "") + (span.by ? ` · by ${span.by}` : "");
    if (span.status === "failed" || span.status === "cancelled") name += ` (${span.status})`;
    if (span.attempts > 1) name += ` (${span.attempts} attempts)`;
    const nameCell = el("span", "span-name");
    if (span.run_id) {
      const link = runLink(span.run_id);
      link.textContent = name;
      nameCell.append(link);
    } else nameCell.textContent = name;
    nameCell.title = name;
    const numbers = [];
    if (span.tokens != null) numbers.push(`${span.tokens} tokens`);
    if (span.cost_usd != null) numbers.push(`$${span.cost_usd.toFixed(4)}`);
    const took = el("span", "span-took");
    const track = el("span", "span-track");
    const bar = el("span", "span-bar");
    track.append(bar);
    row.append(el("span", "span-start", `+${durationText(span.offset_s)}`), took, el("span", "span-kind", span.kind));
    row.append(nameCell, el("span", "span-numbers", numbers.join(" · ")), track);
    view.timeline.rows.push({ span, took, bar });
    return row;
  });
  $("timeline-rows").replaceChildren(...rows);
  growTimeline(view);
}

// The durations and bars as of now: open spans, and the run's own span, grown since the read.
function growTimeline(view) {
  const { timeline, readAt, rows } = view.timeline;
  const grown = timeline.ended ? 0 : (Date.now() - readAt) / 1000;
  const total = Math.max(timeline.duration_s + grown, 0.001);
  // The whole team's: the run's model calls and its sub-agents' (`RunTimeline.spent`).
  const spent = timeline.spans.filter((span) => span.kind === "model" || span.kind === "agent");
  const tokens = spent.reduce((sum, span) => sum + (span.tokens || 0), 0);
  const cost = spent.reduce((sum, span) => sum + (span.cost_usd || 0), 0);
  const state = timeline.ended ? "ended" : "open";
  $("timeline-summary").textContent =
    `${durationText(total)} · ${state} · ${tokens} tokens${cost ? ` · $${cost.toFixed(4)}` : ""}`;
  for (const { span, took, bar } of rows) {
    const open = span.status === "open";
    const seconds = span.duration_s + (open ? grown : 0);
    took.textContent = durationText(seconds) + (open ? "…" : "");
    bar.style.left = `${(span.offset_s / total) * 100}%`;
    bar.style.width = `${(seconds / total) * 100}%`;
  }
}

// --- A spent budget -------------------------------------------------------------------

// A run at its owner's daily cap (`SPEND_CAP_REACHED`) waits for budget too, but a bigger
// run budget would not let it on: only an admin's raise of the cap (the Usage page) does.
function showBudget(state) {
  const stopped = state.phase === "WaitingUser" && state.waiting_for === "budget";
  const capped = stopped && state.warning === "SPEND_CAP_REACHED";
  const waiting = stopped && !capped;
  $("cap-note").hidden = !capped;
  const form = $("budget-form");
  if (waiting) {
    const budget = state.budget || {};
    const usage = state.usage || {};
    const spent = [`${usage.total_tokens || 0} tokens of ${budget.max_total_tokens ?? "no limit"}`];
    if (budget.max_cost_usd) spent.push(`$${(usage.cost_usd || 0).toFixed(4)} of $${budget.max_cost_usd}`);
    $("budget-spent").textContent = `Spent ${spent.join(", ")}.`;
    if (form.hidden) {
      // Twice the spent limit, to start from; filled in once, so a typed one stays.
      $("budget-tokens").value = budget.max_total_tokens ? String(budget.max_total_tokens * 2) : "";
      $("budget-cost").value = budget.max_cost_usd ? String(budget.max_cost_usd * 2) : "";
    }
  }
  form.hidden = !waiting || !current.mayWrite;
  $("budget-button").disabled = !waiting;
}

async function raiseBudget() {
  const view = current;
  const limits = {};
  const tokens = $("budget-tokens").value.trim();
  const cost = $("budget-cost").value.trim();
  if (tokens) limits.max_total_tokens = Number(tokens);
  if (cost) limits.max_cost_usd = Number(cost);
  if (!tokens && !cost) {
    notice("Name a new limit: tokens, dollars or both.");
    return;
  }
  $("budget-button").disabled = true;
  try {
    // The answer comes at the run's next stop point; the event stream shows it go on.
    await api("POST", `/v1/runs/${encodeURIComponent(view.id)}/budget`, limits);
  } catch (error) {
    if (view !== current) return;
    notice(error.message);
    $("budget-button").disabled = false;
  }
}

function notice(text) {
  $("run-notice").textContent = text;
  $("run-notice").hidden = !text;
}

// --- Approvals ------------------------------------------------------------------------

function showApprovals(pending) {
  const box = $("approvals");
  box.replaceChildren(...pending.map(approvalCard));
}

function approvalCard(pending) {
  // A text a guardrail holds (`pending.guardrail`) is decided as a call is: allowed,
  // edited (`{"text": ...}`) or blocked.
  const held = pending.guardrail;
  // A memory to keep (`remember`) is edited as its text: what the owner approves is kept.
  const memory = !held && pending.tool === "remember" && typeof pending.arguments?.text === "string";
  const card = el("div", held ? "approval guardrail-ask" : "approval");
  card.dataset.callId = pending.call_id;
  if (held) card.append(el("div", "approval-title", heldLine(pending)), flaggedView(pending));
  else card.append(el("div", "approval-title", `${pending.tool} wants to run`), previewView(pending));
  const args = el("textarea", "approval-arguments");
  args.value = held || memory ? pending.arguments.text : prettyJson(pending.arguments_text);
  args.rows = Math.min(12, args.value.split("\n").length + 1);
  args.setAttribute("aria-label", held || memory ? "the text (edit to change it)" : "arguments (edit to change them)");
  const reason = el("input", "approval-reason");
  reason.placeholder = `reason (told to the agent when you ${held ? "block" : "reject"})`;
  const deadline = el("div", "muted small deadline");
  if (pending.deadline) countDown(deadline, new Date(pending.deadline));
  const approve = el("button", "approve", held ? "Allow" : "Approve");
  // Decides the like calls after it the same way: those its rule asks about, or the same arguments.
  const remember = el("button", "approve-remember", held ? "Allow and remember" : "Approve and remember");
  remember.title = held
    ? `and allow what guardrail ${pending.tool} flags for the rest of the run`
    : pending.rule
      ? `and approve what rule ${pending.rule} asks about for the rest of the run`
      : "and approve this very call again for the rest of the run";
  const reject = el("button", "danger reject", held ? "Block" : "Reject");
  approve.type = remember.type = reject.type = "button";
  const original = args.value;
  const edited = () => {
    if (args.value === original) return null;
    if (held) return JSON.stringify({ text: args.value });
    return memory ? JSON.stringify({ ...pending.arguments, text: args.value }) : args.value;
  };
  approve.addEventListener("click", () => decide(card, pending.call_id, true, reason.value, edited()));
  remember.addEventListener("click", () => decide(card, pending.call_id, true, reason.value, edited(), "run"));
  reject.addEventListener("click", () => decide(card, pending.call_id, false, reason.value, null));
  const actions = el("div", "approval-actions");
  actions.append(approve, remember, reject);
  // A call the API did not say is theirs, on a run they may not change, is not theirs.
  if (pending.may_decide === false || (!current.mayWrite && pending.may_decide !== true)) {
    // Only its approvers (or those who may change the run) may decide it: the API would
    // refuse anyone else (403).
    const whom = pending.approvers ? `Only ${pending.approvers.join(", ")} may` : "You may not";
    const who = el("div", "muted small approvers", `${whom} decide this ${held ? "text" : "call"}.`);
    card.append(deadline, who);
    return card;
  }
  // The arguments as JSON, to edit: what the call would do is the preview above.
  const edit = el("details", "approval-edit");
  const editWhat = held ? "Edit the text" : memory ? "Edit the memory" : "Edit the arguments";
  edit.append(el("summary", "muted small", editWhat), args);
  card.append(edit, reason, deadline, actions);
  return card;
}

const HELD = { input: "a person's message", output: "the model's answer", tool_result: "a tool's result" };

// "guardrail 'no-secrets' holds a person's message: why" (`tarry.contracts.guardrails.held_line`).
function heldLine(pending) {
  const hit = pending.guardrail;
  const why = hit.reason ? `: ${hit.reason}` : "";
  return `guardrail '${pending.tool}' holds ${HELD[hit.on] || "a text"}${why}`;
}

// The text a guardrail holds, each of its matches marked where the guardrail found it.
function flaggedView(pending) {
  const text = pending.arguments.text;
  const pre = el("pre", "preview-block guardrail-flagged");
  let at = 0;
  for (const match of [...pending.guardrail.matches].sort((a, b) => a.start - b.start)) {
    if (match.start < at) continue;
    pre.append(document.createTextNode(text.slice(at, match.start)));
    const mark = el("mark", "guardrail-match", text.slice(match.start, match.end));
    mark.title = match.kind;
    pre.append(mark);
    at = match.end;
  }
  pre.append(document.createTextNode(text.slice(at)));
  const box = el("div", "preview");
  box.append(pre);
  return box;
}

// What a gated call would do, as the run recorded it when the call was gated: a diff
// (removed lines red, added green), long strings as text blocks, short values on a line;
// marked stale when the file it read has changed since (the shown diff stays as recorded).
function previewView(pending) {
  const preview = pending.preview;
  const box = el("div", "preview");
  box.append(el("div", "preview-summary", preview.summary));
  if (pending.stale) {
    box.append(el("div", "preview-stale", "Stale: the file has changed since this preview was made; it shows the call as it was gated."));
  }
  box.append(blocksView(preview.blocks));
  return box;
}

// Blocks of a preview, or of a call's arguments: a short value on a line, a text or diff
// line by line.
function blocksView(blocks) {
  const box = el("div", "preview-blocks");
  for (const block of blocks) {
    if (block.kind === "value") {
      const row = el("div", "preview-value");
      row.append(el("span", "preview-label", `${block.label}: `), el("code", "", block.text));
      box.append(row);
      continue;
    }
    box.append(el("div", "preview-label", block.label));
    const pre = el("pre", `preview-block preview-${block.kind}`);
    const rows = block.text.split("\n");
    if (rows.length > 1 && rows.at(-1) === "") rows.pop(); // a file's last newline ends a line
    for (const line of rows) {
      pre.append(el("span", block.kind === "diff" ? diffLineClass(line) : "", line));
    }
    box.append(pre);
  }
  return box;
}

// A call's arguments as the API previews a call with no preview of its own
// (`tarry.core.previews.arguments_preview`): long strings, or strings of several lines,
// as text blocks, never one JSON string with `\n` escapes.
function argumentBlocks(text) {
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch {
    return [{ kind: "text", label: "arguments", text }];
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    return [{ kind: "value", label: "arguments", text: JSON.stringify(parsed, null, 2) }];
  }
  return Object.entries(parsed).map(([label, value]) => {
    if (typeof value === "string" && (value.length > 60 || value.includes("\n"))) return { kind: "text", label, text: value };
    const inline = JSON.stringify(value);
    return inline.length <= 60 ? { kind: "value", label, text: inline } : { kind: "text", label, text: JSON.stringify(value, null, 2) };
  });
}

function diffLineClass(line) {
  if (line.startsWith("+++") || line.startsWith("---")) return "diff-file";
  if (line.startsWith("@@")) return "diff-hunk";
  if (line.startsWith("-")) return "diff-removed";
  return line.startsWith("+") ? "diff-added" : "diff-context";
}

function countDown(node, deadline) {
  const tick = () => {
    if (!node.isConnected) return;
    const seconds = Math.max(0, Math.round((deadline - Date.now()) / 1000));
    const d = Math.floor(seconds / 86400), h = Math.floor((seconds % 86400) / 3600);
    const m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
    node.textContent = `decide within ${d ? `${d}d ` : ""}${h}h ${m}m ${s}s`;
    setTimeout(tick, 1000);
  };
  tick();
}

async function decide(card, callId, approved, reason, editedArguments, remember = null) {
  let argumentsObject = null;
  if (editedArguments !== null) {
    try {
      argumentsObject = JSON.parse(editedArguments);
    } catch (error) {
      notice(`The edited arguments are not JSON: ${error.message}`);
      return;
    }
  }
  for (const button of card.querySelectorAll("button")) button.disabled = true;
  try {
    await api("POST", `/v1/runs/${encodeURIComponent(current.id)}/approvals`, {
      call_id: callId,
      approved,
      reason: reason || null,
      arguments: argumentsObject,
      remember,
    });
    card.remove();
  } catch (error) {
    notice(error.message);
    for (const button of card.querySelectorAll("button")) button.disabled = false;
  }
}

// --- Replying, pausing, stopping, starting ----------------------------------------

async function sendReply() {
  const box = $("reply-text");
  const text = box.value;
  if (!text.trim() || !current.id) return;
  box.disabled = true;
  try {
    // The key makes a retried send one reply: the run dedupes by message id.
    const key = crypto.randomUUID();
    await api("POST", `/v1/runs/${encodeURIComponent(current.id)}/messages`, { text }, key);
    box.value = "";
  } catch (error) {
    notice(error.message);
  } finally {
    box.disabled = false;
    box.focus();
  }
}

// Whether the page follows the newest message: it does until the person scrolls up to
// read, and again once they scroll back down to the end of the run.
let pinned = true;

// How far the run's end (its newest message, its calls and the reply box) lies below the
// window's bottom: the run's, not the page's, since on a phone the list comes after it.
function runEndBelow() {
  return $("run").getBoundingClientRect().bottom - window.innerHeight;
}

// Opened: the run's end at the window's bottom (its top, for a short run), up or down.
// Up too: a row clicked far down a long list leaves the window scrolled past the run,
// with its calls out of sight or under the sticky bar.
function scrollToEnd() {
  window.scrollTo(0, Math.max(0, window.scrollY + runEndBelow()));
  pinned = true;
}

// Following: down only, so a person reading the list below a short run is left there.
function followEnd() {
  const below = runEndBelow();
  if (pinned && below > 0) window.scrollBy(0, below);
}

function show(section) {
  for (const id of ["run", "start", "memories", "connections", "welcome"]) $(id).hidden = id !== section;
}

function names(text) {
  const list = text.split(",").map((s) => s.trim()).filter(Boolean);
  return list.length ? list : null;
}

// --- Starting a run -------------------------------------------------------------------

// The New run form as a `RunInput`; the API checks it, and says what it refuses.
function startInput() {
  return {
    prompt: $("start-prompt").value,
    system: $("start-system").value || null,
    model: $("start-model").value || "default",
    mode: $("start-mode").value,
    tools: names($("start-tools").value),
    require_approval: names($("start-approval").value) || [],
    agents: names($("start-agents").value) || [],
    budget: budgetOf(),
    approvers: approversOf(),
    approval_rules: rulesOf(),
    on_reply_while_running: $("start-reply-policy").value,
    memory_access: $("start-memory").value,
    memory_scope: $("start-memory-scope").value.trim() || null,
  };
}

function budgetOf() {
  const tokens = $("start-budget-tokens").value.trim();
  const cost = $("start-budget-cost").value.trim();
  if (!tokens && !cost) return null;
  return { max_total_tokens: tokens ? Number(tokens) : null, max_cost_usd: cost ? Number(cost) : null };
}

// `RunInput.approvers`: each tool (or `*`) to the users and groups who may decide its calls.
function approversOf() {
  const approvers = {};
  for (const entry of $("start-approvers").querySelectorAll(".entry")) {
    const tool = entry.querySelector(".approver-tool").value.trim();
    const who = names(entry.querySelector(".approver-who").value);
    if (!tool && !who) continue; // a row left empty says nothing
    if (!tool || !who) throw new Error("Who may decide: name a tool and its users or groups, e.g. write_file and ops, alice.");
    approvers[tool] = [...(approvers[tool] || []), ...who];
  }
  return approvers;
}

// `RunInput.approval_rules`, in the form's order: the first that matches a call decides it.
function rulesOf() {
  const rules = [];
  for (const entry of $("start-rules").querySelectorAll(".entry")) {
    const value = (name) => entry.querySelector(`.${name}`).value;
    const [tool, pointer, reason] = ["rule-tool", "rule-pointer", "rule-reason"].map((name) => value(name).trim());
    const pattern = value("rule-pattern"); // as typed: a space may be part of it
    if (!tool && !pointer && !pattern.trim() && !reason) continue; // a row left empty
    const rule = { tool, decision: value("rule-decision") };
    if (reason) rule.reason = reason;
    if (pointer || pattern) rule.when = { [pointer]: value("rule-kind") === "regex" ? { regex: pattern } : pattern };
    rules.push(rule);
  }
  return rules;
}

// A row of "Who may decide" or "Approval rules", copied from its template.
function addEntry(fieldsetId, templateId) {
  const entry = $(templateId).content.firstElementChild.cloneNode(true);
  entry.querySelector(".remove").addEventListener("click", () => entry.remove());
  $(fieldsetId).querySelector(".entries").append(entry);
}

// What the form cannot start says so in the form: the API's code and message.
function startError(text) {
  $("start-error").textContent = text;
  $("start-error").hidden = !text;
}

async function startRun() {
  startError("");
  let input;
  try {
    input = startInput();
  } catch (error) {
    startError(error.message);
    return;
  }
  $("start-button").disabled = true;
  try {
    const started = await api("POST", "/v1/runs", input);
    location.hash = `#/runs/${encodeURIComponent(started.id)}`;
  } catch (error) {
    startError(error.message);
  } finally {
    $("start-button").disabled = false;
  }
}

// A message a search found: in sight and marked, the page no longer following the end.
function showFound(index) {
  const found = $("transcript").querySelector(`[data-index="${index}"]`);
  if (!found) return false;
  if (found.tagName === "DETAILS") found.open = true;
  found.classList.add("found");
  found.scrollIntoView({ block: "center" });
  pinned = false;
  return true;
}

// The search box: the messages with all its words, of the runs this person may read,
// each a link to the message in its run.
async function searchMessages() {
  const text = $("search-text").value.trim();
  $("search-results").hidden = !text;
  if (!text) return;
  const list = $("search-hits");
  try {
    const { hits } = await api("GET", `/v1/search?q=${encodeURIComponent(text)}&limit=50`);
    list.replaceChildren(...hits.map(searchHit));
    $("search-empty").hidden = hits.length > 0;
  } catch (error) {
    list.replaceChildren();
    $("search-empty").hidden = true;
    notice(error.message);
  }
}

function searchHit(hit) {
  const item = el("li", "hit");
  item.dataset.runId = hit.run_id;
  item.dataset.index = hit.index;
  const link = el("a");
  link.href = `#/runs/${encodeURIComponent(hit.run_id)}/messages/${hit.index}`;
  link.append(el("div", "small muted", `${hit.run_id} · #${hit.index} · ${hit.role}`));
  const snippet = el("div", "snippet");
  // The matched words come in [ ]: bold, as text (a snippet is never HTML).
  hit.snippet.split(/[\[\]]/).forEach((part, i) => snippet.append(i % 2 ? el("b", "", part) : document.createTextNode(part)));
  link.append(snippet);
  item.append(link);
  return item;
}

function route() {
  const match = location.hash.match(/^#\/runs\/(.+?)(?:\/messages\/(\d+))?$/);
  if (match) openRun(decodeURIComponent(match[1]), match[2] === undefined ? null : Number(match[2]));
  else if (location.hash === "#/new") show("start");
  else if (location.hash === "#/memories") showMemories(); // memories.js
  else if (location.hash === "#/connections") showConnections(); // connections.js
  else {
    current.abort.abort();
    current = runPage(null);
    show("welcome");
  }
}

function wire() {
  $("reply-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sendReply();
  });
  $("reply-text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      sendReply();
    }
  });
  $("pause-button").addEventListener("click", () =>
    api("POST", `/v1/runs/${encodeURIComponent(current.id)}/pause`, {}).catch((e) => notice(e.message)),
  );
  $("stop-button").addEventListener("click", () => {
    const reason = prompt("Stop this run? A reason, if you like:");
    if (reason === null) return;
    api("POST", `/v1/runs/${encodeURIComponent(current.id)}/stop`, { reason: reason || null }).catch((e) => notice(e.message));
  });
  $("retry-button").addEventListener("click", retryModel);
  $("timeline").addEventListener("toggle", () => {
    if ($("timeline").open && current.id) followTimeline(current);
  });
  $("budget-form").addEventListener("submit", (event) => {
    event.preventDefault();
    raiseBudget();
  });
  for (const id of ["filter-phase", "filter-waiting", "filter-mine"]) $(id).addEventListener("change", readFilters);
  window.addEventListener("scroll", () => {
    if (!$("run").hidden) pinned = runEndBelow() <= NEAR_END_PX;
  });
  $("model-form").addEventListener("submit", (event) => {
    event.preventDefault();
    switchModel();
  });
  $("new-run-button").addEventListener("click", () => (location.hash = "#/new"));
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    searchMessages();
  });
  $("search-close").addEventListener("click", () => {
    $("search-text").value = "";
    searchMessages();
  });
  $("start-form").addEventListener("submit", (event) => {
    event.preventDefault();
    startRun();
  });
  $("add-approver").addEventListener("click", () => addEntry("start-approvers", "approver-entry"));
  $("add-rule").addEventListener("click", () => addEntry("start-rules", "rule-entry"));
  addEntry("start-approvers", "approver-entry");
  addEntry("start-rules", "rule-entry");
  $("token-form").addEventListener("submit", () => {
    localStorage.setItem(TOKEN_KEY, $("token-input").value);
    showTokenControl();
    showWhoIAm();
    route();
    refreshList();
  });
  $("forget-token-button").addEventListener("click", () => {
    localStorage.removeItem(TOKEN_KEY);
    $("token-input").value = "";
    showTokenControl();
    showWhoIAm();
    refreshList();
  });
  window.addEventListener("hashchange", route);
}

document.addEventListener("DOMContentLoaded", () => {
  wire();
  showTokenControl();
  showWhoIAm();
  route();
  pollList();
});
