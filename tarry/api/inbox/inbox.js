// The Tarry inbox: the runs waiting for a person, and one run's page to answer it.
// Plain browser JavaScript against the HTTP API (`/v1/...`), no build step. Every model
// or tool text is untrusted: it is rendered as markdown with raw HTML escaped, then
// sanitised, and the page's Content-Security-Policy forbids inline scripts besides.
"use strict";

const WAITING_POLL_MS = 2000;
// A failing call's retries are not on the run's event stream (Temporal records them, not
// the run): while the run works, its state is read this often to show them.
const RETRY_POLL_MS = 1000;
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
  const init = { method, headers: { ...authHeaders() } };
  if (idempotencyKey) init.headers["Idempotency-Key"] = idempotencyKey;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    askForToken();
  }
  const data = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok) {
    const error = (data && data.error) || { code: `HTTP_${response.status}`, message: response.statusText };
    throw new ApiError(response.status, error.code, error.message);
  }
  return data;
}

function askForToken() {
  const dialog = $("token-dialog");
  if (!dialog.open) dialog.showModal();
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

// --- The list of waiting runs -------------------------------------------------------

async function refreshWaiting() {
  try {
    const page = await api("GET", "/v1/runs?phase=WaitingUser&limit=100");
    showWaiting(page.runs);
    $("health").textContent = "";
  } catch (error) {
    $("health").textContent = error.message;
  }
}

function showWaiting(runs) {
  const list = $("waiting-list");
  list.replaceChildren(
    ...runs.map((run) => {
      const item = el("li", run.id === current.id ? "selected" : "");
      const link = el("a");
      link.href = `#/runs/${encodeURIComponent(run.id)}`;
      link.append(el("span", "summary", run.summary || run.id));
      const what = { approval: "approval", budget: "budget", model: "model", agent: "agent" }[run.waiting_for] || "reply";
      link.append(el("span", `tag tag-${what}`, what));
      const turns = `${run.turns} turn${run.turns === 1 ? "" : "s"}`;
      const schedule = run.schedule ? ` · from schedule ${run.schedule}` : "";
      const origin = run.parent ? ` · agent of ${run.parent}` : schedule;
      link.append(el("span", "muted small", `${run.id} · ${turns} · ${run.model}${origin}`));
      item.append(link);
      return item;
    }),
  );
  $("waiting-count").textContent = runs.length ? String(runs.length) : "";
  $("waiting-empty").hidden = runs.length > 0;
}

// --- One run's page -------------------------------------------------------------------

const current = { id: null, abort: null, state: null, messages: 0, live: null, calls: new Map() };

async function openRun(id) {
  if (current.abort) current.abort.abort();
  const fresh = { id, abort: new AbortController(), state: null, messages: 0, live: null, calls: new Map() };
  Object.assign(current, fresh);
  show("run");
  $("run-title").textContent = id;
  $("transcript").replaceChildren();
  $("approvals").replaceChildren();
  try {
    const state = await api("GET", `/v1/runs/${encodeURIComponent(id)}`);
    let start = 0;
    for (;;) {
      const page = await api("GET", `/v1/runs/${encodeURIComponent(id)}/transcript?start=${start}`);
      page.messages.forEach((message, i) => addMessage(message, page.start + i));
      start = page.start + page.messages.length;
      if (start >= page.total || page.messages.length === 0) break;
    }
    showState(state);
    follow(id, state.events, current.abort.signal);
    pollRetrying(id, current.abort.signal);
  } catch (error) {
    notice(error.message);
  }
}

async function follow(id, offset, signal) {
  // The state says where the stream stood; everything after it is news.
  let after = offset - 1;
  while (!signal.aborted) {
    const query = after >= 0 ? `?after=${after}` : "";
    try {
      for await (const event of serverEvents(`/v1/runs/${encodeURIComponent(id)}/events${query}`, signal)) {
        if (event.id !== null) after = Number(event.id);
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
  const id = current.id;
  try {
    const view = await api("GET", `/v1/runs/${encodeURIComponent(id)}`);
    if (id === current.id) showState(view); // never another run's state on this page
  } catch (error) {
    notice(error.message);
  }
}

function onEvent(event) {
  switch (event.kind) {
    case "answer":
    case "reset":
      liveAnswer().reset(event.turn);
      break;
    case "text":
      liveAnswer().addText(event.text || "");
      break;
    case "tool_call":
      liveAnswer().addCall(event.index, event.name);
      break;
    case "tool_arguments":
      liveAnswer().addArguments(event.index, event.text || "");
      break;
    case "message":
      if (event.index >= current.messages) {
        dropLiveAnswer();
        addMessage(event.message, event.index);
      }
      break;
    case "stop":
      dropLiveAnswer();
      showStopState(event.state);
      refreshWaiting();
      break;
  }
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
    scrollToEnd();
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
    const result = el("details", "result");
    const failed = /^\{"ok":\s*false/.test(message.content || "");
    result.append(el("summary", failed ? "failed" : "", failed ? "✗ result" : "✓ result"));
    result.append(el("pre", "", prettyJson(message.content || "")));
    if (message.decision) result.append(el("div", "muted small", decisionText(message.decision)));
    (call || list).append(result);
    return;
  }
  const item = el("li", `message ${message.role}`);
  const user = message.by || "you";
  item.append(el("div", "who", message.role === "user" ? user : message.role === "assistant" ? "agent" : message.role));
  const body = el("div", "body");
  if (message.role === "assistant") renderMarkdown(body, message.content || "");
  else body.textContent = message.content || "";
  item.append(body);
  if (message.interrupted) item.append(el("div", "muted small", "interrupted by a stop"));
  for (const call of message.tool_calls || []) {
    const box = el("div", "call");
    const request = el("details");
    request.append(el("summary", "call-name", `→ ${call.function.name}`));
    request.append(el("pre", "arguments", prettyJson(call.function.arguments)));
    box.append(request); // its result joins it when it comes
    item.append(box);
    current.calls.set(call.id, box);
  }
  list.append(item);
  scrollToEnd();
}

function decisionText(decision) {
  const verdict = decision.approved ? "approved" : "rejected";
  const reason = decision.reason ? `: ${decision.reason}` : "";
  const who = decision.user ? (decision.by === "rule" ? decision.user : `${decision.user} (${decision.by})`) : decision.by;
  return `${verdict} by ${who} at ${new Date(decision.at).toLocaleString()}${reason}`;
}

function ended(state) {
  return Boolean(state) && (state.phase === "Completed" || state.phase === "Failed");
}

function showState(state) {
  current.state = state;
  const phase = $("run-phase");
  phase.textContent = state.waiting_for ? `waiting for ${state.waiting_for}` : state.phase;
  phase.className = `badge ${state.phase}`;
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
  notice(problems.join(" — "));
  $("pause-button").disabled = state.phase !== "Running";
  $("stop-button").disabled = over;
  $("reply-text").disabled = over;
  $("reply-button").disabled = over;
  showApprovals(state.pending_approvals || []);
  showRetrying(state.retrying || null);
  showModelFailing(state);
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
  $("model-form").hidden = !waiting;
  $("model-error").textContent = waiting && state.error ? `${state.error.code}: ${state.error.message}` : "";
  for (const id of ["retry-button", "model-button", "model-profile"]) $(id).disabled = !waiting;
}

// The run's state is polled for retries until it ends: no event says it went back to work
// (a reply is a message, and a model that cannot be reached starts no answer).
async function pollRetrying(id, signal) {
  while (!signal.aborted && !ended(current.state)) {
    await new Promise((resolve) => setTimeout(resolve, RETRY_POLL_MS));
    if (signal.aborted) return;
    try {
      const state = await api("GET", `/v1/runs/${encodeURIComponent(id)}`);
      if (!signal.aborted) showRetrying(state.retrying || null);
    } catch {
      // The event stream reports a run or server that went away.
    }
  }
}

async function retryModel() {
  $("retry-button").disabled = true;
  showModelFailing({});
  try {
    // The answer comes at the run's next stop point; the event stream shows it first.
    await api("POST", `/v1/runs/${encodeURIComponent(current.id)}/retry`, {});
  } catch (error) {
    notice(error.message);
    if (current.state) showModelFailing(current.state);
  }
}

async function switchModel() {
  const profile = $("model-profile").value.trim();
  if (!profile) return;
  try {
    const state = await api("POST", `/v1/runs/${encodeURIComponent(current.id)}/model`, { profile });
    $("model-profile").value = "";
    showState(state);
    notice(`The run now asks model profile ${state.model}; Retry to ask it.`);
  } catch (error) {
    notice(error.message);
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
  const card = el("div", "approval");
  card.dataset.callId = pending.call_id;
  card.append(el("div", "approval-title", `${pending.tool} wants to run`));
  const args = el("textarea", "approval-arguments");
  args.value = prettyJson(pending.arguments_text);
  args.rows = Math.min(12, args.value.split("\n").length + 1);
  args.setAttribute("aria-label", "arguments (edit to change them)");
  const reason = el("input", "approval-reason");
  reason.placeholder = "reason (told to the agent when you reject)";
  const deadline = el("div", "muted small deadline");
  if (pending.deadline) countDown(deadline, new Date(pending.deadline));
  const approve = el("button", "approve", "Approve");
  // Decides the like calls after it the same way: those its rule asks about, or the same arguments.
  const remember = el("button", "approve-remember", "Approve and remember");
  remember.title = pending.rule ? `and approve what rule ${pending.rule} asks about for the rest of the run` : "and approve this very call again for the rest of the run";
  const reject = el("button", "danger reject", "Reject");
  approve.type = remember.type = reject.type = "button";
  const original = args.value;
  const edited = () => (args.value !== original ? args.value : null);
  approve.addEventListener("click", () => decide(card, pending.call_id, true, reason.value, edited()));
  remember.addEventListener("click", () => decide(card, pending.call_id, true, reason.value, edited(), "run"));
  reject.addEventListener("click", () => decide(card, pending.call_id, false, reason.value, null));
  const actions = el("div", "approval-actions");
  actions.append(approve, remember, reject);
  if (pending.may_decide === false) {
    // Only its approvers may decide it: the run would refuse anyone else (403).
    args.readOnly = true;
    const who = el("div", "muted small approvers", `Only ${pending.approvers.join(", ")} may decide this call.`);
    card.append(args, deadline, who);
    return card;
  }
  card.append(args, reason, deadline, actions);
  return card;
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

function scrollToEnd() {
  const list = $("transcript");
  list.lastElementChild?.scrollIntoView({ block: "end" });
}

function show(section) {
  for (const id of ["run", "start", "welcome"]) $(id).hidden = id !== section;
}

function names(text) {
  const list = text.split(",").map((s) => s.trim()).filter(Boolean);
  return list.length ? list : null;
}

function route() {
  const match = location.hash.match(/^#\/runs\/(.+)$/);
  if (match) openRun(decodeURIComponent(match[1]));
  else if (location.hash === "#/new") show("start");
  else {
    if (current.abort) current.abort.abort();
    current.id = null;
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
  $("model-form").addEventListener("submit", (event) => {
    event.preventDefault();
    switchModel();
  });
  $("new-run-button").addEventListener("click", () => (location.hash = "#/new"));
  $("start-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const input = {
      prompt: $("start-prompt").value,
      system: $("start-system").value || null,
      model: $("start-model").value || "default",
      mode: $("start-mode").value,
      tools: names($("start-tools").value),
      require_approval: names($("start-approval").value) || [],
    };
    try {
      const started = await api("POST", "/v1/runs", input);
      location.hash = `#/runs/${encodeURIComponent(started.id)}`;
    } catch (error) {
      alert(error.message);
    }
  });
  $("token-form").addEventListener("submit", () => {
    localStorage.setItem(TOKEN_KEY, $("token-input").value);
    showTokenControl();
    route();
    refreshWaiting();
  });
  $("forget-token-button").addEventListener("click", () => {
    localStorage.removeItem(TOKEN_KEY);
    $("token-input").value = "";
    showTokenControl();
    refreshWaiting();
  });
  window.addEventListener("hashchange", route);
}

document.addEventListener("DOMContentLoaded", () => {
  wire();
  showTokenControl();
  route();
  refreshWaiting();
  setInterval(refreshWaiting, WAITING_POLL_MS);
});
