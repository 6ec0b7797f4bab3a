"""How a transcript reads in a terminal: roles told apart, tool calls on one line.

Shared by `tarry show`, `tarry watch`, `tarry chat` and the demo, so a run looks the
same wherever a person meets it (`live` draws a run with these as it works). Colour
comes from rich, which drops it when the output is not a terminal or `NO_COLOR` is set.
"""

from __future__ import annotations

import json
import os
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.text import Text

from tarry.cli.previews import pending_preview
from tarry.contracts import (
    DECIDED_WAITS,
    Budget,
    ChatMessage,
    DecisionRecord,
    FunctionCall,
    PendingApproval,
    Phase,
    Retrying,
    RunState,
    ToolCall,
    WaitingFor,
)
from tarry.contracts.guardrails import GuardrailHit, GuardVerdict, held_line
from tarry.contracts.waits import WaitKind, wait_kind
from tarry.core.identities import local_user
from tarry.core.text import shorten

INTERRUPTED = " [interrupted]"
"""After the words of an answer a `stop` cut short."""
_ROLE_STYLE = {"user": ("you", "bold cyan"), "assistant": ("agent", "bold green")}
_DECIDED_BY = {"update": "in the CLI/API", "signal": "by signal", "rule": "without asking"}
"""How a decision came, as a person knows it: `decide` is what `tarry approve`, the chat
and `RunHandle.decide` send; an `approve` signal comes from the UI or a script; a rule's
(`by rule 2`) or a remembered one's was made by the run itself."""


def call_line(call: ToolCall) -> str:
    """`read_file(path="notes.md")`: a tool call as a person reads it."""
    try:
        arguments: Any = json.loads(call.function.arguments)
    except ValueError:
        arguments = call.function.arguments
    return f"{call.function.name}({arguments_line(arguments)})"


def arguments_line(arguments: Any) -> str:
    """`path="notes.md", limit=3`: tool arguments on one short line."""
    if isinstance(arguments, dict):
        shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in arguments.items())
    else:
        shown = str(arguments)
    return shorten(shown, 60)


def when(at: datetime) -> str:
    """A moment in local time: `12:03:04` today, with its date on any other day."""
    local = at.astimezone()
    today = datetime.now().astimezone().date()
    return local.strftime("%H:%M:%S" if local.date() == today else "%Y-%m-%d %H:%M:%S")


def pending_line(pending: PendingApproval) -> str:
    """`write_file(path="a.md") [call_1_0]`: a call waiting for a decision, and its
    deadline; a text a guardrail holds as that (`guardrail 'x' holds a tool's result`)."""
    if pending.guardrail is not None:
        line = f"{held_line(pending.tool, pending.guardrail)} [{pending.call_id}]"
    else:
        call = ToolCall(
            id=pending.call_id,
            function=FunctionCall(name=pending.tool, arguments=pending.arguments),
        )
        line = f"{call_line(call)} [{pending.call_id}]"
    if pending.deadline:
        line += f" · deadline {when(pending.deadline)}"
    if pending.rule is not None:
        line += f" · asked by rule {pending.rule}"
    return f"{line} · approvers {', '.join(pending.approvers)}" if pending.approvers else line


def decision_text(decision: DecisionRecord) -> Text:
    """Who decided on a gated call, how and when: `✓ approved in the CLI/API 12:03:04`, and
    the arguments a person edited the call to run with, on a line of their own."""
    at = when(decision.at)
    if decision.by == "deadline":
        head = (
            f"✓ approved at deadline {at} (the run's default)"
            if decision.approved
            else f"✗ expired at deadline {at}"
        )
    elif decision.by == "stop":
        head = f"✗ rejected: the run was stopped {at}"
    else:
        verdict = "✓ approved" if decision.approved else "✗ rejected"
        # A decision through another door (`tarry mcp`) says so: an assistant may have taken it.
        how = f"via {decision.source}" if decision.source else _DECIDED_BY[decision.by]
        head = f"{verdict} {how} {at}"
    if decision.user:
        head += f" by {decision.user}"
    if decision.remember:
        head += ", remembered for the run"
    if decision.reason:
        head += f": {json.dumps(decision.reason, ensure_ascii=False)}"
    text = Text("    ").append(head, style="green" if decision.approved else "red")
    if decision.arguments is not None:
        edited = f"    ✎ ran with edited arguments: {arguments_line(decision.arguments)}"
        text.append("\n").append(edited, style="magenta")
    return text


def result_line(content: str) -> Text:
    """A tool result: its data shortened, or its error code and message."""
    try:
        result = json.loads(content)
    except ValueError:
        return Text(shorten(content), style="dim")
    if result.get("ok"):
        data = result.get("data")
        shown = data if isinstance(data, str) else json.dumps(data)
        return Text(shorten(shown), style="dim")
    error = result.get("error") or {}
    return Text(f"{error.get('code')}: {shorten(str(error.get('message')))}", style="yellow")


def message_text(message: ChatMessage) -> Text:
    """One message as rich text; an assistant message with tool calls lists them, and a
    message a guardrail changed says so under it."""
    text = _message_body(message)
    for hit in message.guardrails:
        text.append("\n    ⛨ ", style="yellow").append(guardrail_text(hit), style="yellow")
    return text


def guardrail_text(hit: GuardrailHit) -> str:
    """A guardrail's hit in one line: who, what it did, why, and the kinds it found."""
    kinds = sorted({m.kind for m in hit.matches})
    found = f" ({', '.join(kinds)})" if kinds else ""
    why = f": {hit.reason}" if hit.reason else ""
    done = "redacted" if hit.verdict is GuardVerdict.REDACT else "blocked"
    return f"guardrail {hit.guardrail!r} {done}{found}{why}"


def _message_body(message: ChatMessage) -> Text:
    if message.role == "tool":
        result = Text("    ← ", style="dim") + result_line(message.content or "")
        if message.decision is None:
            return result
        # The decision came before the result: read in that order.
        return Text("\n").join([decision_text(message.decision), result])
    if message.role == "system":
        return Text(f"system: {shorten(message.content or '')}", style="dim")
    label, style = _ROLE_STYLE[message.role]
    if message.by and message.by != local_user(os.environ.get("TARRY_USER")):
        label = message.by  # someone else's reply (over the API, from the Temporal UI)
    text = Text()
    if message.content:
        text.append(f"{label}: ", style=style).append(message.content)
        if message.interrupted:
            text.append(INTERRUPTED, style="yellow")
    for call in message.tool_calls or []:
        if text:
            text.append("\n")
        text.append("    → ", style="dim").append(call_line(call), style="magenta")
    return text


def print_messages(console: Console, messages: list[ChatMessage]) -> None:
    for message in messages:
        console.print(message_text(message))


def state_text(run_id: str, state: RunState, children: list[str] | None = None) -> Text:
    """Where a run stands, as `tarry status` and the chat's `/status` show it, with the
    sub-agent runs it started (`children`), if asked for, and its remote agents' calls.
    Print it with `soft_wrap=True`: a row folded at the screen's width would split an id."""
    usage = state.usage
    error = f"{state.error.code}: {state.error.message}" if state.error else "-"
    rows = {"run": run_id, "phase": str(state.phase)}
    # A run waiting for a reply reads as ever; one waiting for anything else says so.
    approval = state.waiting_for in DECIDED_WAITS
    if state.waiting_for not in (None, WaitingFor.INPUT):
        rows["waiting for"] = " ".join(filter(None, [state.waiting_for, state.waiting_on]))
    if state.parent:
        rows["agent of"] = state.parent
    if children:
        rows["sub-agents"] = "\n".join(children)
    if state.remote_calls:
        rows["remote agents"] = "\n".join(call.line() for call in state.remote_calls)
    if state.model:
        rows["profile"] = state.model
    rows |= {
        "turn": f"{state.turn} ({state.turns_since_input} since the last reply)",
        "usage": f"{usage.total_tokens} tokens "
        f"({usage.prompt_tokens} prompt, {usage.completion_tokens} completion)"
        # Only a run on priced profiles costs anything; `$0` would read as "free".
        + (f", ${usage.cost_usd:.4f}" if usage.cost_usd else "")
        + (f", {_calls(usage.cached_calls)} from the cache" if usage.cached_calls else ""),
        "messages": str(state.message_count),
        "pending": f"{state.pending_inputs} replies",
    }
    if state.pinned:
        rows["pinned"] = "messages " + ", ".join(map(str, state.pinned))
    if approval:
        rows["approvals"] = "\n".join(pending_line(p) for p in state.pending_approvals)
    if state.auth_needed:
        rows["connect"] = "\n".join(connect_lines(run_id, state))
    if state.retrying:
        rows["retrying"] = retrying_text(state.retrying)
    rows |= {"warning": str(state.warning or "-"), "error": error}
    if state.budget:
        rows["budget"] = budget_text(state.budget) + _spent_note(state, state.budget)
    if state.stop_reason:
        rows["stopped"] = state.stop_reason
    if origin := state.forked_from:
        rows["forked from"] = f"{origin.run_id} at message {origin.at}"
    for label, by in (
        ("paused by", state.paused_by),
        ("budget by", state.budget_raised_by),
        ("stopped by", state.stopped_by),
    ):
        if by:
            rows[label] = by
    text = label_rows(rows)
    for pending in state.pending_approvals if approval else ():
        text.append("\n").append(pending.call_id, style="magenta").append(":\n")
        text.append(pending_preview(pending))
    return text


def label_rows(rows: dict[str, str]) -> Text:
    """`rows` as aligned `label  value` lines; a value of several lines stays in its column."""
    width = max(map(len, rows)) + 2
    return Text("\n").join(
        Text.assemble((label.ljust(width), "bold"), value.replace("\n", "\n" + " " * width))
        for label, value in rows.items()
    )


def retrying_text(retrying: Retrying, now: datetime | None = None) -> str:
    """`model unreachable, attempt 5, next in 16 s (LLM_HTTP_ERROR: ...)`."""
    what = "model unreachable" if retrying.call == "model" else f"tool {retrying.call} failing"
    text = f"{what}, attempt {retrying.attempt}"
    if retrying.next_attempt_at is not None:
        wait = (retrying.next_attempt_at - (now or datetime.now(UTC))).total_seconds()
        text += f", next in {max(0, round(wait))} s"
    if retrying.last_error is not None:
        error = retrying.last_error
        text += f" ({error.code}: {shorten(error.message, 120)})"
    return text


def _spent_note(state: RunState, budget: Budget) -> str:
    """A budget already spent by a run that has not paused on it yet (it waits for an
    approval, or a tool runs): its warning comes at the next model call, not now, so
    `usage` over `budget` beside `warning -` would read as a budget that does not hold."""
    tokens, cost = budget.max_total_tokens, budget.max_cost_usd
    spent = (tokens is not None and state.usage.total_tokens >= tokens) or (
        cost is not None and state.usage.cost_usd >= cost
    )
    if not spent or state.waiting_for is WaitingFor.BUDGET or state.phase.ended:
        return ""
    return " (spent: the run waits for a raise before its next model call)"


def budget_text(budget: Budget) -> str:
    """`10000 tokens, $2.50`: the limits a budget sets."""
    limits = []
    if budget.max_total_tokens is not None:
        limits.append(f"{budget.max_total_tokens} tokens")
    if budget.max_cost_usd is not None:
        limits.append(f"${budget.max_cost_usd:.2f}")
    return ", ".join(limits)


def print_stop_line(
    console: Console,
    state: RunState,
    *,
    approvals: bool = True,
    run_id: str | None = None,
    reply: bool = False,
) -> None:
    """What a person should know at a stop point besides the messages: the run ended,
    failed, waits for a decision on tool calls (unless `approvals` is False, for a
    caller that asks about them itself), waits because of a warning (too many turns, a
    loop), or waits for something else, with the command that ends it (`WaitKind.hint`; a
    `quiet` kind's, a reply's, only if `reply`: a chat's prompt and a reply sent say it)."""
    if state.phase is Phase.COMPLETED:
        console.print(Text("run completed", style="bold green"))
    elif state.phase is Phase.FAILED:
        error = state.error
        detail = f": {error.code}: {error.message}" if error else ""
        console.print(Text(f"run failed{detail}", style="bold red"))
    else:
        if approvals and state.waiting_for in DECIDED_WAITS:
            for pending in state.pending_approvals:
                line = f"waiting for {state.waiting_for}: {pending_line(pending)}"
                # Never folded: the call id stays whole, for `tarry approve` and for grep.
                console.print(Text(line, style="yellow"), soft_wrap=True)
                console.print(pending_preview(pending), soft_wrap=True)
        if state.warning:
            console.print(Text(f"warning: {state.warning}", style="yellow"))
        kind = wait_kind(state.waiting_for) if state.waiting_for else None
        # A decision's calls are listed above, or asked about by the caller.
        if kind and kind.kind not in DECIDED_WAITS and (reply or not kind.quiet):
            console.print(Text(_stop_hint(kind, state, run_id), style="yellow"), soft_wrap=True)
        for line in connect_lines(run_id or "RUN", state):
            console.print(Text(f"connect: {line}", style="yellow"), soft_wrap=True)


def connect_lines(run_id: str, state: RunState) -> list[str]:
    """Who must connect which server, and the API path of their connect link."""
    return [
        f"{need.person or 'someone'} to {need.server}: {need.connect_path(run_id)}"
        for need in state.auth_needed
    ]


def _stop_hint(kind: WaitKind, state: RunState, run_id: str | None = None) -> str:
    """What ends `kind`'s wait (`WaitKind.hint`), filled in from the state `state` of
    the run `run_id` (`RUN` when not given)."""
    error = state.error
    return kind.hint.format(
        run=run_id or "RUN",
        waiting_on=state.waiting_on or "-",
        paused_by=state.paused_by or "someone",
        error=f"{error.code}: {error.message}" if error else "no error recorded",
    )


def thinking(console: Console) -> AbstractContextManager[object]:
    """A "thinking…" spinner while a run works; only on a terminal that can erase it."""
    if console.is_terminal and not console.is_dumb_terminal:
        return console.status("thinking…")
    return nullcontext()


def _calls(n: int) -> str:
    return f"{n} call" if n == 1 else f"{n} calls"
