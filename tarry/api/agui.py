"""`POST /v1/agui`: the AG-UI protocol, so an AG-UI frontend (CopilotKit and others)
can talk to a durable Tarry run.

An AG-UI thread is a Tarry run (`threadId` is the run id); each AG-UI run is one
exchange: a new thread starts a run with the last user message as its prompt, a known
one gets that message as a reply, and the answer streams back as the protocol's events
until the run's next stop point.

A run that stops waiting for its sub-agent (`waiting_for: "agent"`) shows the sub-agent's
messages as a nested step (`STEP_STARTED` .. `STEP_FINISHED`, named after its run id) and
finishes with an interrupt naming it (`reason: "agent"`, `subagentRunId`): the sub-agent
is answered on its own thread, its run id.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from ag_ui.core import (
    BaseEvent,
    Interrupt,
    Message,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from tarry.api.auth import CallerOf
from tarry.api.errors import INTERNAL, INTERNAL_MESSAGE, ErrorBody
from tarry.api.feeds import Feeds
from tarry.api.models import RunId
from tarry.api.parts import FeedsOf, PolicyOf, TarryOf
from tarry.api.rights import STARTING, Need
from tarry.api.runs import existing
from tarry.client import Admission, Tarry, TarryError
from tarry.client.rights import check_run
from tarry.contracts import (
    DECIDED_WAITS,
    WORKFLOW_TYPE,
    ChatMessage,
    ErrorCode,
    Phase,
    RunInput,
    RunState,
    WaitingFor,
)
from tarry.contracts.events import EventKind, RunEvent
from tarry.contracts.guardrails import held_line

__all__ = ["AguiInput", "AguiTranslation", "agui_router"]

_log = logging.getLogger(__name__)


class AguiInput(RunAgentInput):
    """AG-UI's `RunAgentInput`, its `threadId` a run id: checked before the stream begins
    (422 `RUN_ID_INVALID`), since after that an error can only be a `RUN_ERROR`."""

    thread_id: RunId


@dataclass
class _Call:
    id: str
    arguments: str = ""


@dataclass
class AguiTranslation:
    """Turns one run's events, in order, into AG-UI events.

    Words and tool calls stream as they come; the transcript message that ends an answer
    supplies what the stream did not carry (an answer written within one batch is not
    streamed at all, a very long one only in part). A call whose id the provider did not
    stream is announced with its message, since its result must name the same id."""

    run_id: str
    _answer: int = 0
    """Counts answers and retried attempts: each gets a message id of its own."""
    _text_id: str | None = None
    _text: str = ""
    _calls: dict[int, _Call | None] = field(default_factory=dict)

    def events(self, event: RunEvent) -> list[BaseEvent]:
        match event.kind:
            case EventKind.ANSWER | EventKind.RESET:
                # A retried attempt's words come again: AG-UI cannot take back the
                # ones shown, so they close as a message of their own.
                return self._close_answer()
            case EventKind.TEXT:
                return self._text_delta(event.text or "")
            case EventKind.TOOL_CALL:
                return self._call_start(event)
            case EventKind.TOOL_ARGUMENTS:
                call = self._calls.get(event.index or 0)
                if call is None or not event.text:
                    return []
                call.arguments += event.text
                return [ToolCallArgsEvent(tool_call_id=call.id, delta=event.text)]
            case EventKind.MESSAGE if event.message is not None:
                return self._message(event.message, event.index or 0)
            case _:
                return []

    def _text_delta(self, text: str, message_id: str | None = None) -> list[BaseEvent]:
        started: list[BaseEvent] = []
        if self._text_id is None:
            self._answer += 1
            self._text_id = message_id or f"{self.run_id}-answer-{self._answer}"
            started.append(TextMessageStartEvent(message_id=self._text_id, role="assistant"))
        self._text += text
        return [*started, TextMessageContentEvent(message_id=self._text_id, delta=text)]

    def _call_start(self, event: RunEvent) -> list[BaseEvent]:
        index = event.index or 0
        if event.call_id is None:
            self._calls[index] = None
            return []
        self._calls[index] = _Call(event.call_id)
        return [
            ToolCallStartEvent(
                tool_call_id=event.call_id,
                tool_call_name=event.name or "",
                parent_message_id=self._text_id,
            )
        ]

    def _close_answer(self) -> list[BaseEvent]:
        closed: list[BaseEvent] = []
        if self._text_id is not None:
            closed.append(TextMessageEndEvent(message_id=self._text_id))
        closed += [ToolCallEndEvent(tool_call_id=c.id) for c in self._calls.values() if c]
        self._text_id, self._text, self._calls = None, "", {}
        return closed

    def _message(self, message: ChatMessage, index: int) -> list[BaseEvent]:
        if message.role == "tool":
            return [
                ToolCallResultEvent(
                    message_id=f"{self.run_id}-m{index}",
                    tool_call_id=message.tool_call_id or "",
                    content=message.content or "",
                    role="tool",
                )
            ]
        if message.role != "assistant":
            return []  # the frontend has the person's own words
        out: list[BaseEvent] = []
        content = message.content or ""
        unsent = content.removeprefix(self._text) if content.startswith(self._text) else ""
        if unsent:
            out += self._text_delta(unsent, message_id=f"{self.run_id}-m{index}")
        for position, call in enumerate(message.tool_calls or []):
            streamed = self._calls.get(position)
            if streamed is None:
                self._calls[position] = streamed = _Call(call.id)
                out.append(
                    ToolCallStartEvent(
                        tool_call_id=call.id,
                        tool_call_name=call.function.name,
                        parent_message_id=self._text_id,
                    )
                )
            rest = call.function.arguments.removeprefix(streamed.arguments)
            if rest:
                out.append(ToolCallArgsEvent(tool_call_id=streamed.id, delta=rest))
        return out + self._close_answer()


def last_user_message(messages: Sequence[Message]) -> UserMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, UserMessage)), None)


def user_text(message: UserMessage) -> str:
    """A user message's words; of a multimodal message, its text parts."""
    if isinstance(message.content, str):
        return message.content
    return "\n".join(part.text for part in message.content if isinstance(part, TextPart))


def stop_event(thread_id: str, run_id: str, state: RunState) -> BaseEvent:
    """RUN_FINISHED at a stop point, RUN_ERROR for a run that failed; a run waiting on
    approvals finishes with an interrupt per gated call."""
    if state.phase is Phase.FAILED:
        error = state.error
        return RunErrorEvent(
            message=error.message if error else "the run failed",
            code=error.code if error else None,
        )
    outcome = None
    if state.waiting_for is WaitingFor.AGENT and state.waiting_on:
        child = state.waiting_on
        outcome = RunFinishedInterruptOutcome(
            interrupts=[
                Interrupt(
                    id=child,
                    reason="agent",
                    message=f"the sub-agent {child} waits for a person: answer thread {child}",
                    subagent_run_id=child,
                )
            ]
        )
    elif state.waiting_for in DECIDED_WAITS and state.pending_approvals:
        # A text a guardrail holds is decided as a call is, but is no tool call.
        outcome = RunFinishedInterruptOutcome(
            interrupts=[
                Interrupt(
                    id=p.call_id,
                    reason="guardrail" if p.guardrail else "approval",
                    message=held_line(p.tool, p.guardrail)
                    if p.guardrail
                    else f"{p.tool}({p.arguments})",
                    tool_call_id=None if p.guardrail else p.call_id,
                    expires_at=p.deadline.isoformat() if p.deadline else None,
                )
                for p in state.pending_approvals
            ]
        )
    return RunFinishedEvent(
        thread_id=thread_id, run_id=run_id, result=state.last_assistant_text, outcome=outcome
    )


async def agent_step(tarry: Tarry, child: str) -> list[BaseEvent]:
    """A sub-agent's conversation so far as a nested step: its answers, tool calls and
    results, with message ids of its own run."""
    translation = AguiTranslation(child)
    step: list[BaseEvent] = [StepStartedEvent(step_name=child)]
    for index, message in enumerate(await tarry.get(child).transcript()):
        event = RunEvent(kind=EventKind.MESSAGE, message=message, index=index)
        step += translation.events(event)
    return [*step, StepFinishedEvent(step_name=child)]


def agui_router() -> APIRouter:
    router = APIRouter(tags=["ag-ui"])

    @router.post(
        "/v1/agui",
        response_class=StreamingResponse,
        dependencies=STARTING,
        responses={
            200: {"content": {"text/event-stream": {}}},
            **{status: {"model": ErrorBody} for status in (401, 403, 404, 413, 415, 422, 429, 503)},
        },
    )
    async def agui(
        body: AguiInput, caller: CallerOf, tarry: TarryOf, feeds: FeedsOf, policy: PolicyOf
    ) -> StreamingResponse:
        """Run one AG-UI exchange: `threadId` is the run id. A new thread starts a run
        with the last user message as its prompt; a known one gets that message as a
        reply (its id is the reply's id, so a retried request enters it once). Answers
        with AG-UI events until the run's next stop point. A thread whose run the caller
        may not read is 404 `RUN_NOT_FOUND` (as is an eval's id), one they may not reply
        to 403 `NOT_ALLOWED`, before the stream begins."""
        await check_run(
            tarry, policy, caller, body.thread_id, Need.WRITE, absent=True, workflow=WORKFLOW_TYPE
        )

        async def admit() -> None:
            await check_run(tarry, policy, caller, body.thread_id, Need.WRITE)

        encoder = EventEncoder()
        exchange = _exchange(tarry.acting_as(caller), feeds, body, admit)
        return StreamingResponse(
            (encoder.encode(e) async for e in exchange),
            media_type=encoder.get_content_type(),
            headers={"Cache-Control": "no-cache"},
        )

    return router


async def _exchange(
    tarry: Tarry, feeds: Feeds, body: AguiInput, admit: Admission
) -> AsyncIterator[BaseEvent]:
    thread, run_id = body.thread_id, body.run_id
    yield RunStartedEvent(thread_id=thread, run_id=run_id)
    try:
        start = await _deliver(tarry, thread, last_user_message(body.messages), admit)
        translation = AguiTranslation(thread)
        events = feeds.events(thread, start)
        async with contextlib.aclosing(events):
            async for event in events:
                for translated in translation.events(event):
                    yield translated
                if event.kind is EventKind.STOP and event.state is not None:
                    if event.state.waiting_for is WaitingFor.AGENT and event.state.waiting_on:
                        for nested in await agent_step(tarry, event.state.waiting_on):
                            yield nested
                    yield stop_event(thread, run_id, event.state)
                    return
        raise TarryError(ErrorCode.RUN_ENDED, f"run {thread!r} ended without a stop point")
    except TarryError as e:
        yield RunErrorEvent(message=e.message, code=e.code)
    except Exception:  # the stream has begun: it ends with a RUN_ERROR, whatever failed
        _log.exception("AG-UI exchange on thread %r failed", thread)
        yield RunErrorEvent(message=INTERNAL_MESSAGE, code=INTERNAL)


async def _deliver(tarry: Tarry, thread: str, message: UserMessage | None, admit: Admission) -> int:
    """Starts the thread's run, or replies to it once `admit` lets the caller change the
    run there is; the offset its answer's events begin at. The door checked the caller's
    right before the stream began, but a thread with no run then may have one now (a
    retry's, or another person's that took the id meanwhile): checked again on it."""
    text = user_text(message) if message else ""
    run = await existing(tarry, thread)
    if message is None:  # a new thread would start a run that waits for it, and stream on
        raise TarryError(ErrorCode.INPUT_EMPTY, "no user message to send to the run")
    if run is None:
        try:
            await tarry.start(RunInput(prompt=text), run_id=thread)
            return 0
        except TarryError as e:
            if e.code is not ErrorCode.RUN_EXISTS:
                raise
            run = tarry.get(thread)
    await admit()
    state = await run.state()
    await run.reply(text, id=message.id)
    return state.events
