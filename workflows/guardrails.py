"""The guardrails' stage (`tarry.contracts.guardrails`): a person's messages are checked
before the model is asked, its answer before anyone sees it, and a tool's result before
the model reads it.

Each check is an activity of the worker (`activities.guardrail_checks`), never workflow
code. A message a guardrail redacts or blocks is changed in the transcript
before the model is asked and before observers are sent it, and keeps the guardrails'
hits (`ChatMessage.guardrails`). A run without guardrails (every run before them) gives
no command here, so its history is that of code before this stage.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from tarry.contracts import (
    SUMMARY_MEMO,
    ChatMessage,
    ErrorCode,
    ErrorInfo,
    LlmResponse,
    ToolResult,
)
from tarry.contracts.events import EventKind, RunEvent
from tarry.contracts.guardrails import (
    GUARDRAILS_ACTIVITY,
    OUTPUT_RETRIES,
    WITHHELD_NOTE,
    Guarded,
    GuardPoint,
    Guardrail,
    GuardrailHit,
    GuardRequest,
    GuardVerdict,
)
from tarry.core.text import summary_of
from workflows import audit, guardrail_asks
from workflows.stage import AskModel, ModelOutcome, RunScope, RunTool, Stage, ToolStep

if TYPE_CHECKING:
    from workflows.memory import RunMemory, WorkflowInput
    from workflows.stream import RunStream

CHECK_TIMEOUT = timedelta(seconds=60)
"""A check's time, its first on a worker included (Presidio loads its recognizers)."""
CHECK_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)


class Guardrails(Stage):
    """Output and tool-result guardrails; input guardrails run where every request is
    built (`guard_replies`)."""

    async def around_model(self, run: RunScope, ask: AskModel) -> ModelOutcome:
        answer = await ask()
        rails = _on(run, GuardPoint.OUTPUT)
        while rails and isinstance(answer, LlmResponse) and answer.message.content:
            guarded = await _guard(run, answer.message.content, rails, GuardPoint.OUTPUT)
            _seen(run.memory, run.stream, guarded.hits, "an answer of the model")
            if guardrail_asks.stopped(guarded.hits):
                return None
            if (blocked := guarded.blocked) is None:
                run.memory.guards.output_blocks = 0
                _apply(answer.message, guarded)
                return answer
            if (refused := _withhold(run, blocked)) is not None:
                return refused
            answer = await ask()
        return answer

    async def around_tool(self, step: ToolStep, run_tool: RunTool) -> ToolResult:
        result = await run_tool(step)
        rails = _on(step.run, GuardPoint.TOOL_RESULT)
        if not rails or not result.ok:
            return result
        text = result.data_text()
        guarded = await _guard(step.run, text, rails, GuardPoint.TOOL_RESULT)
        what = f"the result of {step.tool.name} call {step.call.id}"
        _seen(step.run.memory, step.run.stream, guarded.hits, what)
        if (blocked := guarded.blocked) is not None:
            refusal = ToolResult.failure(ErrorCode.GUARDRAIL_BLOCKED, _withheld(blocked))
            return refusal.model_copy(update={"guardrails": guarded.hits})
        if not guarded.hits:
            return result
        return ToolResult(ok=True, data=guarded.text, blocks=result.blocks, guardrails=guarded.hits)


GUARDRAILS = Guardrails()


def guardrails_of(memory: RunMemory, input: WorkflowInput) -> list[Guardrail]:
    """The run's guardrails: the worker's (`[[guardrail]]`), which no run can turn off,
    then the run's own."""
    return [*memory.catalogue.guardrails, *input.guardrails]


def _on(run: RunScope, point: GuardPoint) -> list[Guardrail]:
    return [g for g in guardrails_of(run.memory, run.input) if g.on is point]


def _withhold(run: RunScope, blocked: GuardrailHit) -> ErrorInfo | None:
    """An answer an output guardrail blocked never enters the transcript (nor the stored
    conversation, whose reference the run does not take): the model is told why, in a
    note of the run's own, and asked again; past `OUTPUT_RETRIES` in a row, the error
    that makes the run wait for a person (`retry`, or a reply), as a failing model does."""
    guards = run.memory.guards
    guards.output_blocks += 1
    note = f"{WITHHELD_NOTE} {_why(blocked)}. Answer again without what it objects to."
    run.memory.conversation.transcript.append(
        ChatMessage(role="system", content=note, guardrails=[blocked])
    )
    if guards.output_blocks <= OUTPUT_RETRIES:
        return None
    guards.output_blocks = 0
    error = ErrorInfo(
        code=ErrorCode.GUARDRAIL_BLOCKED,
        message=f"guardrail {blocked.guardrail!r} withheld {OUTPUT_RETRIES + 1} answers in a"
        " row: retry, or reply",
    )
    run.memory.model_failure = error
    return error


async def guard_replies(run: RunScope) -> bool:
    """Checks, in place, the people's messages that came since the last check, against
    the run's input guardrails; True when a stop ended a wait for a person's decision on
    one (the run ends). Called before each request is built (`model_calls.ask`), not
    around the call as a stage: a reply that interrupts a call (`ReplyPolicy.INTERRUPT`)
    is delivered inside it, and must not reach the model unchecked."""
    memory, stream = run.memory, run.stream
    rails = _on(run, GuardPoint.INPUT)
    if not rails:
        return False
    conversation, guards = memory.conversation, memory.guards
    start = max(guards.input_checked, conversation.paged)
    for index in range(start, conversation.message_count):
        message = conversation.message(index)
        if message.role == "user" and message.content:
            guarded = await _guard(run, message.content, rails, GuardPoint.INPUT)
            _apply(message, guarded)
            _seen(memory, stream, guarded.hits, f"{_by(message)} message {index}")
            if guardrail_asks.stopped(guarded.hits):
                return True
            if message.guardrails and guards.input_checked == 0 and index == start:
                # The run's summary (`tarry list`, the inbox) was its first message as sent.
                workflow.upsert_memo({SUMMARY_MEMO: summary_of(message.content)})
    guards.input_checked = conversation.message_count
    return False


def _seen(memory: RunMemory, stream: RunStream, hits: list[GuardrailHit], text: str) -> None:
    """Each hit on `text` (`a reply`, `an answer`, ...): one event on the run's stream
    (`EventKind.GUARDRAIL`) and one record in its audit trail."""
    for hit in hits:
        stream.publish(RunEvent(kind=EventKind.GUARDRAIL, guardrail=hit))
        audit.guarded(memory, hit, text)


def _by(message: ChatMessage) -> str:
    return f"{message.by}'s" if message.by else "a person's"


def _apply(message: ChatMessage, guarded: Guarded) -> None:
    if not guarded.hits:
        return
    blocked = guarded.blocked
    message.content = guarded.text if blocked is None else _withheld(blocked)
    message.guardrails = guarded.hits


def _withheld(hit: GuardrailHit) -> str:
    """What the model reads in place of a blocked text."""
    return f"[withheld by guardrail {_why(hit)}]"


def _why(hit: GuardrailHit) -> str:
    """The guardrail's name and reason, as the model reads why it withheld a text: a
    person who blocked it gave theirs, or the guardrail's stands."""
    reason = (hit.decision.reason if hit.decision else None) or hit.reason
    return f"{hit.guardrail!r}: {reason}" if reason else repr(hit.guardrail)


async def _guard(run: RunScope, text: str, rails: list[Guardrail], on: GuardPoint) -> Guarded:
    """The text as `rails` and the people they asked let it through. The check stops at
    a hit that asks (`Guarded.asking`), on the text as the guardrails before it left it:
    a person decides on that, and the guardrails after it check the text as decided.
    Without a hit that asks, this is one check, as before `ask`."""
    hits: list[GuardrailHit] = []
    while True:
        asks = any(g.verdict is GuardVerdict.ASK for g in rails)
        guarded = await _check(text, rails, guardrail_asks.next_id(run) if asks else None)
        if (asking := guarded.asking) is None:
            return Guarded(text=guarded.text, hits=[*hits, *guarded.hits])
        at = next(i for i, g in enumerate(rails) if g.name == asking.guardrail)
        text, decided = await guardrail_asks.decided(run, guarded.text, asking, rails[at], on)
        hits += [*guarded.hits[:-1], decided]
        rails = rails[at + 1 :]
        if decided.blocks or not rails:
            return Guarded(text=text, hits=hits)


async def _check(text: str, rails: list[Guardrail], asks_as: str | None = None) -> Guarded:
    """The text as `rails` let it through; a check that fails past its retries blocks,
    or lets the text through for a `fail_open` guardrail. `asks_as`: the id a person's
    decision gets if the one of `rails` that asks does (`GuardRequest.asks_as`)."""
    try:
        # An activity, not a local one: a local activity keeps the workflow task open while
        # it runs, and a legacy query answered then can leave the cached run ahead of the
        # server (`workers.legacy_query`, `docs/sdk-legacy-query-eviction.md`): once here,
        # under load, a history that no longer replayed (TMPRL1100).
        guarded: Guarded = await workflow.execute_activity(
            GUARDRAILS_ACTIVITY,
            GuardRequest(text=text, guardrails=rails, asks_as=asks_as),
            result_type=Guarded,
            start_to_close_timeout=CHECK_TIMEOUT,
            retry_policy=CHECK_RETRY,
            summary="guardrails",
        )
        return guarded
    except ActivityError as e:
        closed = [g for g in rails if not g.fail_open]
        if not closed:
            return Guarded(text=text)
        failed = GuardrailHit(
            guardrail=closed[0].name,
            verdict=GuardVerdict.BLOCK,
            reason=closed[0].reason or "its check failed",
            failed=str(e.cause or e),
        )
        return Guarded(text=text, hits=[failed])
