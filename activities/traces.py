"""The spans the activities add to a run's trace: a `chat` span per model call, an
`execute_tool` span per tool call, a `guardrail` span per check of a text against
guardrails and a `notification` span per notification, in the
OpenTelemetry GenAI semantic conventions (`gen_ai.*`), plus Tarry's own `tarry.*`.

An activity runs once per attempt, and so does its span: a retried call is one span per
attempt, each with `tarry.attempt`. Nothing here imports OpenTelemetry (a worker needs
no extra unless it traces): a worker with `TARRY_TRACING=1` hands a `Recorder` to `use`
(`workers.tracing`), and without one every function here is a no-op that costs nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

from temporalio import activity

from tarry.config.settings import ModelProfile
from tarry.contracts import ChatMessage, LlmResponse, Notification, ToolInvocation, ToolResult
from tarry.contracts.guardrails import Guarded, GuardRequest
from tarry.core.text import redact

__all__ = [
    "Recorder",
    "Span",
    "answered",
    "chat",
    "first_token",
    "guarded",
    "guardrail",
    "http_status",
    "notification",
    "notified",
    "remote_call",
    "remote_task_named",
    "tool_call",
    "tool_ended",
    "use",
]

Attributes = dict[str, str | bool | int | float | Sequence[str]]


class Span(Protocol):
    """What the activities do with a span they opened: add what they learnt."""

    def set_attributes(self, attributes: Attributes) -> None: ...

    def failed(self, error: BaseException) -> None: ...


class Recorder(Protocol):
    """Opens spans under the activity's own (the SDK's `RunActivity`)."""

    content: bool
    """Whether prompts and answers go into spans (`TARRY_TRACE_CONTENT`)."""

    def span(self, name: str, attributes: Attributes) -> AbstractContextManager[Span]: ...

    def mark_first_token(self) -> None:
        """The model's first token arrived: the current `chat` span's time to it."""

    def mark_http_status(self, status: int) -> None:
        """The model answered HTTP `status`: the current `chat` span's
        `http.response.status_code`."""


_recorder: Recorder | None = None


def use(recorder: Recorder | None) -> None:
    """Traces the activities of this process with `recorder`; None: no spans."""
    global _recorder
    _recorder = recorder


def _common(turn: int | None = None) -> Attributes:
    info = activity.info()
    common: Attributes = {"tarry.run_id": info.workflow_id or "", "tarry.attempt": info.attempt}
    if turn is not None:
        common["tarry.turn"] = turn
    return common


@contextmanager
def _opened(recorder: Recorder, name: str, attributes: Attributes) -> Iterator[Span]:
    with recorder.span(name, attributes) as span:
        try:
            yield span
        except BaseException as e:
            span.failed(e)
            raise


def chat(
    profile: ModelProfile,
    turn: int,
    messages: list[ChatMessage],
    system: str | None,
    fallback_of: str | None = None,
) -> AbstractContextManager[Span | None]:
    """The span of one model call attempt; `answered` fills in what the model said.
    `fallback_of`: the run's own profile, when this one answers in its place."""
    if _recorder is None:
        return nullcontext()
    attributes: Attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": profile.provider,
        "gen_ai.request.model": profile.model,
        **_common(turn),
    }
    if fallback_of is not None:
        attributes["tarry.fallback_of"] = fallback_of
    if _recorder.content:
        sent = [{"role": "system", "content": system}] if system else []
        sent += [_message(m) for m in messages]
        attributes["gen_ai.input.messages"] = _redacted(sent, profile)
    return _opened(_recorder, f"chat {profile.model}", attributes)


def answered(span: Span | None, profile: ModelProfile, answer: LlmResponse) -> None:
    """Adds the answer's model, tokens, finish reason and cost to `chat`'s span."""
    if span is None or _recorder is None:
        return
    usage = answer.usage
    attributes: Attributes = {
        "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": usage.completion_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
        "tarry.cost_usd": usage.cost_usd,
        "tarry.cached": answer.cached,
    }
    if answer.model:
        attributes["gen_ai.response.model"] = answer.model
    if answer.finish_reason:
        attributes["gen_ai.response.finish_reasons"] = [answer.finish_reason]
    if _recorder.content:
        attributes["gen_ai.output.messages"] = _redacted([_message(answer.message)], profile)
    span.set_attributes(attributes)


def first_token() -> None:
    """The model's answer began: its first streamed event, or its whole body."""
    if _recorder is not None:
        _recorder.mark_first_token()


def http_status(status: int) -> None:
    """The model answered an error with HTTP `status`: what a span says of it beside its
    `error.type` even when content is not traced (its body is content)."""
    if _recorder is not None:
        _recorder.mark_http_status(status)


@contextmanager
def tool_call(name: str, invocation: ToolInvocation) -> Iterator[Span | None]:
    """The span of one tool call attempt, with who approved it when a person or a rule
    had to; `ended` adds its outcome."""
    if _recorder is None:
        yield None
        return
    attributes: Attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": invocation.call_id,
        **_common(),
    }
    if (decision := invocation.decision) is not None:
        attributes["tarry.approval.outcome"] = "edited" if decision.arguments else "approved"
        attributes["tarry.approval.decided_by"] = decision.user or decision.by
    if _recorder.content:
        attributes["gen_ai.tool.call.arguments"] = invocation.arguments
    with _opened(_recorder, f"execute_tool {name}", attributes) as span:
        yield span


def tool_ended(span: Span | None, result: ToolResult) -> None:
    if span is None or _recorder is None:
        return
    attributes: Attributes = {"tarry.tool.ok": result.ok}
    if result.acting_for is not None:
        attributes["tarry.tool.acting_for"] = result.acting_for
    if result.error is not None:
        attributes["error.type"] = result.error.code
    if _recorder.content:
        attributes["gen_ai.tool.call.result"] = result.to_content()
    span.set_attributes(attributes)


def remote_call(
    agent: str, operation: str, task_id: str | None, message_id: str | None = None
) -> AbstractContextManager[Span | None]:
    """The span of one request to a remote A2A agent (`send`, `get`, `cancel`), with the
    remote task's id (none yet for a task's first message)."""
    if _recorder is None:
        return nullcontext()
    attributes: Attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "tarry.a2a.operation": operation,
        **_common(),
    }
    if task_id is not None:
        attributes["tarry.a2a.task_id"] = task_id
    if message_id is not None:
        attributes["tarry.a2a.message_id"] = message_id
    return _opened(_recorder, f"invoke_agent {agent} {operation}", attributes)


def remote_task_named(span: Span | None, task_id: str) -> None:
    """The remote task's id on a `remote_call` span opened before the remote named it
    (a task's first message): every request's span carries the id it is about."""
    if span is not None:
        span.set_attributes({"tarry.a2a.task_id": task_id})


def guardrail(request: GuardRequest) -> AbstractContextManager[Span | None]:
    """The span of one check of a text against guardrails: where they look and their
    names; `guarded` adds what they did. Never the text, even with content traced: a
    guardrail checks it because it may hold what must not be kept."""
    if _recorder is None:
        return nullcontext()
    attributes: Attributes = {
        "tarry.guardrail.on": request.point,
        "tarry.guardrail.names": [g.name for g in request.guardrails],
        **_common(),
    }
    return _opened(_recorder, f"guardrail {request.point}", attributes)


def guarded(span: Span | None, result: Guarded) -> None:
    """Adds what the guardrails did to `guardrail`'s span: the verdict (`allow`, or the
    last hit's), and the guardrails that hit, by name."""
    if span is not None:
        hits = [h.guardrail for h in result.hits]
        span.set_attributes(
            {"tarry.guardrail.verdict": result.verdict, "tarry.guardrail.hits": hits}
        )


def notification(note: Notification) -> AbstractContextManager[Span | None]:
    """The span of one attempt to tell the receivers of a stop point."""
    if _recorder is None:
        return nullcontext()
    attributes: Attributes = {
        "tarry.notification.event": note.event,
        "tarry.phase": note.phase,
        **_common(),
    }
    if note.waiting_for is not None:
        attributes["tarry.waiting_for"] = note.waiting_for
    return _opened(_recorder, f"notification {note.event}", attributes)


def notified(span: Span | None, receivers: int, failed: int) -> None:
    if span is not None:
        span.set_attributes(
            {"tarry.notification.receivers": receivers, "tarry.notification.failed": failed}
        )


def _message(message: ChatMessage) -> dict[str, Any]:
    """What the model read or wrote of a message, without Tarry's own bookkeeping."""
    return message.model_dump(mode="json", include=_SAID, exclude_none=True)


_SAID = {"role", "content", "tool_calls", "tool_call_id"}


def _redacted(value: Any, profile: ModelProfile) -> str:
    """`value` as JSON, with the profile's key taken out as the provider's errors are."""
    key = profile.api_key.get_secret_value() if profile.api_key is not None else None
    return redact(json.dumps(value, ensure_ascii=False), key)
