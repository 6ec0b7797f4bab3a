"""What the Temporal UI shows of a run: activity summaries and the current details
(and what an operator counts runs by: search attributes, the phase metric).

An operator with fifty runs open reads these instead of base64 payloads, so they say
what a step is (`turn 3 · default`, `read_file notes.md`) and where a run stands.
Pure functions of workflow state: deterministic, safe to call on every change.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate

from tarry.contracts import (
    COST_ATTRIBUTE,
    MODEL_ATTRIBUTE,
    OWNER_ATTRIBUTE,
    PHASE_ATTRIBUTE,
    SUMMARY_MEMO,
    TURNS_ATTRIBUTE,
    WAITING_FOR_ATTRIBUTE,
    LlmResponse,
    RunInput,
)
from tarry.contracts.compatibility import TITLE_FROM_FIRST_MESSAGE
from tarry.core.text import NO_SUMMARY, shorten, summary_of
from workflows import waits
from workflows.memory import RunMemory

_SUMMARY_LIMIT = 80
_VALUE_LIMIT = 40


def search_attributes(
    memory: RunMemory, input: RunInput, *, cost: bool
) -> list[SearchAttributeUpdate[Any]]:
    """What operators list runs by, as of now; `TarryCostUsd` only with `cost` (runs
    recorded before it upsert without it)."""
    m = memory
    waiting_for = waits.recorded(m)
    attributes: list[SearchAttributeUpdate[Any]] = [
        PHASE_ATTRIBUTE.value_set(m.phase.value),
        TURNS_ATTRIBUTE.value_set(m.conversation.turn),
        MODEL_ATTRIBUTE.value_set(input.model),
        WAITING_FOR_ATTRIBUTE.value_set(waiting_for.value)
        if waiting_for
        else WAITING_FOR_ATTRIBUTE.value_unset(),
    ]
    if cost:
        attributes.append(COST_ATTRIBUTE.value_set(float(m.conversation.usage.cost_usd)))
    return attributes


def count_phase(memory: RunMemory) -> None:
    """`tarry_run_phases_total{phase, waiting_for}`: phases entered, on the worker's
    metrics endpoint. The SDK records nothing while a run replays: each counts once."""
    waiting_for = waits.recorded(memory)
    workflow.metric_meter().create_counter("tarry_run_phases", "Phases runs entered").add(
        1, {"phase": memory.phase.value, "waiting_for": waiting_for.value if waiting_for else ""}
    )


def count_usage(profile: str, answer: LlmResponse) -> None:
    """`tarry_user_tokens_total{user, model, kind}` and `tarry_user_cost_usd{user, model}`
    (a histogram: counters take whole numbers, and its `_sum` is the cost): what each
    person's runs spent on each profile, whether or not caps are configured. `user` is the
    run's owner (empty for a run without one); a cached answer adds nothing. Recorded by
    the workflow, which knows its owner; the SDK records nothing while a run replays."""
    if answer.cached:
        return
    owner = workflow.info().typed_search_attributes.get(OWNER_ATTRIBUTE) or ""
    meter = workflow.metric_meter().with_additional_attributes({"user": owner, "model": profile})
    tokens = meter.create_counter("tarry_user_tokens", "Tokens of model calls, by person")
    tokens.add(answer.usage.prompt_tokens, {"kind": "prompt"})
    tokens.add(answer.usage.completion_tokens, {"kind": "completion"})
    meter.create_histogram_float(
        "tarry_user_cost_usd", "Estimated cost of model calls, by person", "usd"
    ).record(answer.usage.cost_usd)


def llm_summary(turn: int, profile: str, fallback_of: str | None = None) -> str:
    """`turn 3 · default`; a fallback's call `turn 3 · local (fallback of default)`."""
    fallback = f" (fallback of {fallback_of})" if fallback_of else ""
    return f"turn {turn} · {profile}{fallback}"


def tool_summary(name: str, arguments: str) -> str:
    """`read_file notes.md`: the tool and its argument values, each shortened."""
    try:
        parsed: Any = json.loads(arguments)
    except ValueError:
        parsed = arguments
    if isinstance(parsed, dict):
        values = [v if isinstance(v, str) else json.dumps(v) for v in parsed.values()]
    else:
        values = [str(parsed)]
    shown = " ".join(shorten(v, _VALUE_LIMIT) for v in values)
    return shorten(f"{name} {shown}".strip(), _SUMMARY_LIMIT)


def current_details(memory: RunMemory, input: RunInput) -> str:
    """Markdown for the UI's "current details": phase, turn, tokens, the question, who
    may decide it, who paused, stopped or raised the budget, trouble."""
    m, c = memory, memory.conversation
    cost = f" · ${c.usage.cost_usd:.4f}" if c.usage.cost_usd else ""
    lines = [
        f"**{m.phase}** · turn {c.turn} · {c.usage.total_tokens} tokens{cost}"
        f" · model `{input.model}`"
    ]
    if origin := m.forked_from:
        lines.append(f"**Forked from** `{origin.run_id}` at message {origin.at}")
    if c.last_assistant_text:
        label = "Result" if c.output is not None else "Agent said"
        text = c.output if c.output is not None else c.last_assistant_text
        lines.append(f"**{label}:** {shorten(text, 300)}")
    for pending in m.undecided():
        deadline = f", default at {pending.deadline:%Y-%m-%d %H:%M} UTC" if pending.deadline else ""
        approvers = f", approvers: {', '.join(pending.approvers)}" if pending.approvers else ""
        rule = f", asked by rule {pending.rule}" if pending.rule is not None else ""
        lines.append(
            f"**Waiting for approval:** `{tool_summary(pending.tool, pending.arguments)}` "
            f"(call `{pending.call_id}`{deadline}{approvers}{rule})"
        )
    if m.agents.parent:
        lines.append(f"**Sub-agent of** `{m.agents.parent}`")
    for child, waiting_for in m.agents.waiting.items():
        lines.append(f"**Waiting for agent:** `{child}` (waits for {waiting_for})")
    if m.inbox.queued:
        lines.append(f"**Replies queued:** {len(m.inbox.queued)}")
    if m.requests.paused_by:
        lines.append(f"**Paused by:** {m.requests.paused_by}")
    if m.budget.raised_by:
        lines.append(f"**Budget raised by:** {m.budget.raised_by}")
    if m.requests.stopped_by:
        reason = f": {shorten(m.requests.stop_reason, 200)}" if m.requests.stop_reason else ""
        lines.append(f"**Stopped by:** {m.requests.stopped_by}{reason}")
    if m.warning:
        lines.append(f"**Warning:** `{m.warning}`")
    if m.error:
        lines.append(f"**Error:** `{m.error.code}`: {shorten(m.error.message, 300)}")
    return "\n\n".join(lines)


def title_from(text: str) -> None:
    """A run started without a prompt (by get-or-create, or `tarry start` with none)
    takes its summary, which the run lists read from its memo, from the first message
    delivered to it: else it stays `NO_SUMMARY` for good."""
    if workflow.memo_value(SUMMARY_MEMO, None, type_hint=str) != NO_SUMMARY:
        return
    if workflow.patched(TITLE_FROM_FIRST_MESSAGE.id):
        workflow.upsert_memo({SUMMARY_MEMO: summary_of(text)})
