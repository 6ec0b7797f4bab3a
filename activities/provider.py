"""The seam between the model activity and the providers it speaks to.

`call_llm` resolves a turn's conversation and profile into one provider-neutral
`ModelCall`; a provider adapter (`openai_chat`, `anthropic_messages`) turns it into its
own request and its answer back into an `LlmResponse`. What every adapter shares lives
here: the error taxonomy (every failure leaves as an `ApplicationError` whose `type` is
an `ErrorCode`, so the workflow's retry policy can tell a provider's bad minute from a
wrong key), the HTTP call, the server-sent-event stream published to the run's
observers, and the heartbeat.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import httpx
from httpx_sse import aconnect_sse
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import traces
from activities.observers import AnswerObservers
from tarry.config.settings import ModelProfile
from tarry.contracts import ChatMessage, ErrorCode, LlmResponse, Sampling, ToolDefinition
from tarry.core.text import redact

# Status codes worth another attempt: the provider may answer differently next time.
_RETRYABLE_STATUS = frozenset({408, 409})
EVENTS_PER_TURN = 100
"""Stream events read before the worker's other work gets a turn of its loop: one read
of the response can hold a thousand tiny deltas, and reading them in one go holds every
other run on the worker (its heartbeats, its polls, the next person's answer)."""


@dataclass(frozen=True)
class ModelCall:
    """One call to a model, in no provider's dialect yet."""

    name: str
    """The profile's name, for error messages."""
    profile: ModelProfile
    system: str | None
    messages: list[ChatMessage]
    """The transcript's messages that fit the profile's context budget."""
    tools: list[ToolDefinition]
    sampling: Sampling
    """The profile's sampling settings with the run's overrides on top."""
    turn: int
    stable: int
    """How many of `messages` were there before this turn's news: the prefix a provider
    with prompt caching may read from its cache."""
    output_schema: dict[str, Any] | None = None
    """The JSON Schema a task's final answer must fit (`RunInput.output_schema`), for the
    provider's structured output where it has one."""


TOOL_CHOICE_MODES = frozenset({"auto", "required", "none"})
"""The `tool_choice` values that are no tool's name (`Sampling.tool_choice`)."""


def tool_choice(call: ModelCall) -> str:
    """The call's `tool_choice` (`auto` when unset): a mode, or the name of a tool the
    call offers. Any other name is refused here, not by the provider: no retry could
    make it right, so the run fails at once, saying which names there are."""
    choice = call.sampling.tool_choice or "auto"
    names = [t.name for t in call.tools]
    if choice not in TOOL_CHOICE_MODES and choice not in names:
        raise error(
            ErrorCode.INPUT_INVALID,
            f"tool_choice {choice!r} of model {call.name!r} is neither auto, required nor "
            f"none, nor a tool of this run ({', '.join(names) or 'it has none'})",
            retryable=False,
        )
    return choice


class StreamAssembly(Protocol):
    """A streamed answer being put back together, event by event."""

    observers: AnswerObservers | None
    events: int
    """Events received: the progress the heartbeat reports."""

    def add(self, event: str, data: str) -> bool:
        """Takes one server-sent event (its name and data); True at the stream's end."""

    def answer(self) -> LlmResponse:
        """The answer the plain call would have given."""


async def post(
    http: httpx.AsyncClient, call: ModelCall, url: str, headers: dict[str, str], body: Any
) -> httpx.Response:
    """The plain (not streamed) call, heartbeating while it runs."""
    profile = call.profile
    async with _heartbeating(), transport_errors(call.name, profile, url):
        response = await http.post(url, json=body, headers=headers, timeout=profile.request_timeout)
    traces.first_token()
    raise_for_status(call.name, response, profile)
    return response


async def stream(
    http: httpx.AsyncClient,
    call: ModelCall,
    url: str,
    headers: dict[str, str],
    body: Any,
    assembly: StreamAssembly,
    parse: Callable[[str], LlmResponse],
) -> LlmResponse:
    """Reads the answer as server-sent events, publishing its deltas to the run's
    observers; `parse` reads the body of a server that answers in one piece instead."""
    profile = call.profile
    async with (
        transport_errors(call.name, profile, url),
        _heartbeating(lambda: assembly.events),
        aconnect_sse(
            http, "POST", url, json=body, headers=headers, timeout=profile.request_timeout
        ) as source,
    ):
        response = source.response
        content_type = response.headers.get("content-type", "")
        if response.status_code >= 300 or not content_type.startswith("text/event-stream"):
            # An error, or a server that answers a streaming request in one piece.
            await response.aread()
            traces.first_token()
            raise_for_status(call.name, response, profile)
            return parse(response.text)
        async with AnswerObservers(call.turn) as observers:
            assembly.observers = observers
            async for event in source.aiter_sse():
                if not assembly.events:
                    traces.first_token()
                if assembly.add(event.event, event.data):
                    break
                if not assembly.events % EVENTS_PER_TURN:
                    await asyncio.sleep(0)
            answer = assembly.answer()
            observers.end(answer.usage, answer.finish_reason)
    return answer


@asynccontextmanager
async def transport_errors(name: str, profile: ModelProfile, url: str) -> AsyncIterator[None]:
    """httpx's failures, also those in the middle of a stream, as coded errors."""
    try:
        yield
    # `from None` throughout: httpx's chained causes carry deep stack traces that
    # can push the failure past the server's size limit, which would lose the code.
    except httpx.TimeoutException as e:
        raise error(
            ErrorCode.LLM_TIMEOUT,
            f"model {name!r} did not answer within {profile.request_timeout:g}s "
            f"({type(e).__name__}, {url})",
        ) from None
    except httpx.TransportError as e:
        raise error(
            ErrorCode.LLM_HTTP_ERROR,
            f"cannot reach model {name!r} at {url}: {type(e).__name__} {e}",
        ) from None


def raise_for_status(name: str, response: httpx.Response, profile: ModelProfile) -> None:
    status = response.status_code
    if status < 300:
        return
    traces.http_status(status)
    key = profile.api_key.get_secret_value() if profile.api_key is not None else None
    # Some providers echo the key they were sent; the message goes into history.
    body = redact(response.text, key)[:300]  # redacted whole: a cut could split the key
    detail = f"model {name!r} answered HTTP {status}: {body}"
    if status in (401, 403):
        raise error(
            ErrorCode.LLM_AUTH_FAILED,
            f"{detail}. Check the API key of model profile {name!r} on the worker.",
            retryable=False,
        )
    if status == 429:
        raise error(ErrorCode.LLM_RATE_LIMITED, detail, retry_after=_retry_after(response.headers))
    # 5xx includes Anthropic's 529 `overloaded_error`.
    retryable = status >= 500 or status in _RETRYABLE_STATUS
    raise error(ErrorCode.LLM_HTTP_ERROR, detail, retryable=retryable)


def _retry_after(headers: httpx.Headers) -> timedelta | None:
    """`Retry-After` as seconds or as an HTTP date; None when absent or unreadable."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return timedelta(seconds=max(0.0, float(value)))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    date = headers.get("date")
    now = parsedate_to_datetime(date) if date else None
    return max(timedelta(0), when - now) if now else None


def error(
    code: ErrorCode, message: str, *, retryable: bool = True, retry_after: timedelta | None = None
) -> ApplicationError:
    return ApplicationError(
        message, type=code, non_retryable=not retryable, next_retry_delay=retry_after
    )


def bad_response(message: str) -> ApplicationError:
    """An answer the model activity cannot use. Not retried by Temporal: the workflow
    gives these a small budget of their own (`RunInput.bad_response_attempts`)."""
    return error(ErrorCode.LLM_BAD_RESPONSE, message, retryable=False)


def cut_short(events: int) -> ApplicationError:
    """A stream whose body ended cleanly before its answer did: a close-delimited body
    can, and that is not an answer. Retried, like a cut connection."""
    return error(
        ErrorCode.LLM_HTTP_ERROR,
        f"the model's stream ended after {events} events, before its answer did",
    )


@asynccontextmanager
async def _heartbeating(progress: Callable[[], int] | None = None) -> AsyncIterator[None]:
    """Heartbeats while the call runs, so a dead worker is noticed within the heartbeat
    timeout and a cancelled run's cancellation reaches (and aborts) the HTTP request.

    With `progress` (a stream's events so far), a heartbeat is sent only while it grows,
    once the stream has begun: a stream stuck mid-answer is then caught by the heartbeat
    timeout, not only by the whole call's timeout much later."""
    timeout = activity.info().heartbeat_timeout
    interval = timeout.total_seconds() / 3 if timeout else 5.0

    async def beat() -> None:
        last = 0
        while True:
            now = progress() if progress else 0
            if not last or now > last:
                activity.heartbeat(now)
            last = now
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
