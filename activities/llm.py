"""The `call_llm` activity: one OpenAI-compatible `chat.completions` call over httpx.

Every failure leaves here as an `ApplicationError` whose `type` is an `ErrorCode`,
so the workflow's retry policy can tell a provider's bad minute (retried) from a
wrong key (not retried), and the run's error names the cause.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from httpx_sse import aconnect_sse
from pydantic import SecretStr, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import metrics
from activities.context import ContextStore, estimate_tokens, fit_to_budget
from activities.observers import AnswerObservers
from activities.tools import ToolHost
from tarry.contracts import (
    LLM_ACTIVITY,
    CatalogueRequest,
    ChatMessage,
    ErrorCode,
    LlmRequest,
    LlmResponse,
    ToolCall,
    ToolDefinition,
    Usage,
)
from tarry.settings import ModelProfile

# Status codes worth another attempt: the provider may answer differently next time.
_RETRYABLE_STATUS = frozenset({408, 409})


class ModelClient:
    """Holds the worker's model profiles, the stored conversations and one pooled HTTP
    client for all calls."""

    def __init__(
        self,
        profiles: Mapping[str, ModelProfile],
        tools: ToolHost,
        contexts: ContextStore,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._profiles = dict(profiles)
        self._tools = tools
        self._contexts = contexts
        self._http = http or httpx.AsyncClient()

    async def aclose(self) -> None:
        await self._http.aclose()

    @activity.defn(name=LLM_ACTIVITY)
    async def call_llm(self, request: LlmRequest) -> LlmResponse:
        started = time.monotonic()
        try:
            answer = await self._answer(request)
        except BaseException as e:
            metrics.model_failed(request.profile, e)
            raise
        elapsed = timedelta(seconds=time.monotonic() - started)
        metrics.model_answered(request.profile, answer, elapsed)
        return answer

    async def _answer(self, request: LlmRequest) -> LlmResponse:
        profile = self._profiles.get(request.profile)
        if profile is None:
            raise _error(
                ErrorCode.LLM_UNKNOWN_PROFILE,
                f"no model profile {request.profile!r} on this worker; "
                f"configured: {', '.join(sorted(self._profiles))}",
                retryable=False,
            )
        context, conversation = await self._contexts.extend(
            request.context, request.messages, request.tool_definitions
        )
        tools = conversation.tools
        if tools is None:  # a run from before the catalogue: see `LlmResponse.offered_tools`
            tools = self._tools.catalogue(
                CatalogueRequest(tools=request.tools, require_approval=request.require_approval)
            )
        system = [ChatMessage(role="system", content=request.system)] if request.system else []
        budget = profile.context_budget - sum(estimate_tokens(m) for m in system)
        sent = fit_to_budget(conversation.messages, budget)
        body: dict[str, Any] = {
            "model": profile.model,
            "messages": [m.for_model() for m in system + sent],
            "tools": [_function_spec(t) for t in tools],
            "tool_choice": "auto",
        }
        if request.output_schema is not None:
            body["response_format"] = _response_format(request.output_schema)
        if profile.stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
            answer = await self._stream(request.profile, profile, body, request.turn)
        else:
            async with _heartbeating():
                response = await self._post(request.profile, profile, body)
            answer = _parse_answer(response.text, request.turn)
        if conversation.tools is None:
            answer.offered_tools = [t.name for t in tools]
            answer.gated_tools = {t.name: t.parameters for t in tools if t.needs_approval}
            answer.non_idempotent_tools = [t.name for t in tools if not t.idempotent]
        answer.context = context
        answer.sent_messages = len(sent)
        if profile.prices is not None:
            answer.usage.cost_usd = profile.prices.cost_of(answer.usage)
        return answer

    async def _post(self, name: str, profile: ModelProfile, body: dict[str, Any]) -> httpx.Response:
        url, headers = _endpoint(profile)
        async with _transport_errors(name, profile, url):
            response = await self._http.post(
                url, json=body, headers=headers, timeout=profile.request_timeout
            )
        _raise_for_status(name, response, profile.api_key)
        return response

    async def _stream(
        self, name: str, profile: ModelProfile, body: dict[str, Any], turn: int
    ) -> LlmResponse:
        """Reads the answer as server-sent events, publishing its deltas to the run's
        observers, and assembles exactly the answer the plain call would have given."""
        url, headers = _endpoint(profile)
        assembly = _Assembly()
        async with (
            _transport_errors(name, profile, url),
            _heartbeating(lambda: assembly.events),
            aconnect_sse(
                self._http, "POST", url, json=body, headers=headers, timeout=profile.request_timeout
            ) as source,
        ):
            response = source.response
            content_type = response.headers.get("content-type", "")
            if response.status_code >= 300 or not content_type.startswith("text/event-stream"):
                # An error, or a server that answers a streaming request in one piece.
                await response.aread()
                _raise_for_status(name, response, profile.api_key)
                return _parse_answer(response.text, turn)
            async with AnswerObservers(turn) as observers:
                assembly.observers = observers
                async for event in source.aiter_sse():
                    if assembly.add(event.data):
                        break
                answer = _answer_of(assembly.completion(), turn, assembly.shown())
                observers.end(answer.usage, answer.finish_reason)
        return answer


def _function_spec(tool: ToolDefinition) -> dict[str, Any]:
    """A tool as an entry of the `tools` list of an OpenAI chat completion request."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def _response_format(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's structured output: the answer's text is JSON that fits `schema`."""
    return {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }


def _endpoint(profile: ModelProfile) -> tuple[str, dict[str, str]]:
    headers = {}
    if profile.api_key is not None:
        headers["Authorization"] = f"Bearer {profile.api_key.get_secret_value()}"
    return profile.base_url.rstrip("/") + "/chat/completions", headers


@asynccontextmanager
async def _transport_errors(name: str, profile: ModelProfile, url: str) -> AsyncIterator[None]:
    """httpx's failures, also those in the middle of a stream, as coded errors."""
    try:
        yield
    # `from None` throughout: httpx's chained causes carry deep stack traces that
    # can push the failure past the server's size limit, which would lose the code.
    except httpx.TimeoutException as e:
        raise _error(
            ErrorCode.LLM_TIMEOUT,
            f"model {name!r} did not answer within {profile.request_timeout:g}s "
            f"({type(e).__name__}, {url})",
        ) from None
    except httpx.TransportError as e:
        raise _error(
            ErrorCode.LLM_HTTP_ERROR,
            f"cannot reach model {name!r} at {url}: {type(e).__name__} {e}",
        ) from None


class _Assembly:
    """A streamed answer put back together as the plain call's JSON: the text's pieces
    joined, and each tool call's id, name and argument fragments gathered by index."""

    def __init__(self) -> None:
        self.observers: AnswerObservers | None = None
        self.events = 0
        """Events received: the progress the heartbeat reports."""
        self._content: list[str] | None = None
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish_reason: str | None = None
        self._usage: Any = None
        self._model: str | None = None
        self._done = False

    def add(self, data: str) -> bool:
        """Takes one event's data; True at `[DONE]`, the end of the stream."""
        self.events += 1
        if data.strip() == "[DONE]":
            self._done = True
            return True
        try:
            chunk = json.loads(data)
            self._model = chunk.get("model") or self._model
            self._usage = chunk.get("usage") or self._usage
            for choice in chunk.get("choices") or []:
                if choice.get("index", 0) == 0:
                    self._take(choice)
        except (ValueError, AttributeError, TypeError):
            raise _bad_response(
                f"the model's stream sent a malformed event: {data[:300]!r}"
            ) from None
        return False

    def _take(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        text = _text_of(delta.get("content"))
        if text is not None:
            self._content = [*(self._content or []), text]
            if text and self.observers:
                self.observers.text(text)
        for part in delta.get("tool_calls") or []:
            index = part.get("index", 0)
            call = self._calls.setdefault(index, {"id": "", "function": {"name": ""}})
            call["id"] = part.get("id") or call["id"]
            function = part.get("function") or {}
            if name := function.get("name"):
                call["function"]["name"] = name
                if self.observers:
                    self.observers.tool_call(index, name, call["id"] or None)
            fragment = function.get("arguments")
            if fragment:
                if not isinstance(fragment, str):  # an object in one piece
                    fragment = json.dumps(fragment)
                call["function"]["arguments"] = call["function"].get("arguments", "") + fragment
                if self.observers:
                    self.observers.tool_arguments(index, fragment)
        self._finish_reason = choice.get("finish_reason") or self._finish_reason

    def completion(self) -> dict[str, Any]:
        """The answer as `chat.completions` without streaming gives it."""
        if not (self._done or self._finish_reason):
            # A close-delimited body can end cleanly mid-answer: that is not an answer.
            raise _error(
                ErrorCode.LLM_HTTP_ERROR,
                f"the model's stream ended after {self.events} events, before its answer "
                "did (no finish_reason, no [DONE])",
            )
        content = None if self._content is None else "".join(self._content)
        calls = [self._calls[i] for i in sorted(self._calls)]
        message = {"role": "assistant", "content": content, "tool_calls": calls or None}
        choice = {"index": 0, "message": message, "finish_reason": self._finish_reason}
        return {"model": self._model, "choices": [choice], "usage": self._usage}

    def shown(self) -> str:
        """The assembled answer, for an error message."""
        return json.dumps(self.completion())


def _raise_for_status(profile: str, response: httpx.Response, key: SecretStr | None) -> None:
    status = response.status_code
    if status < 300:
        return
    body = response.text[:300]
    if key is not None:
        # Some providers echo the key they were sent; the message goes into history.
        body = body.replace(key.get_secret_value(), "***")
    detail = f"model {profile!r} answered HTTP {status}: {body}"
    if status in (401, 403):
        raise _error(
            ErrorCode.LLM_AUTH_FAILED,
            f"{detail}. Check the API key of model profile {profile!r} on the worker.",
            retryable=False,
        )
    if status == 429:
        raise _error(ErrorCode.LLM_RATE_LIMITED, detail, retry_after=_retry_after(response.headers))
    retryable = status >= 500 or status in _RETRYABLE_STATUS
    raise _error(ErrorCode.LLM_HTTP_ERROR, detail, retryable=retryable)


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


def _parse_answer(text: str, turn: int) -> LlmResponse:
    """Reads a plain (not streamed) answer's body."""
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    return _answer_of(answer, turn, text)


def _answer_of(answer: Any, turn: int, shown: str) -> LlmResponse:
    """Reads `choices[0].message`, tolerating the shapes real providers send; `shown` is
    the answer's text, for the error message."""
    try:
        choice = answer["choices"][0]
        raw = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise _bad_response(
            f"the model's answer has no choices[0].message: {shown[:300]!r}"
        ) from None
    try:
        message = ChatMessage(
            role="assistant",
            content=_text_of(raw.get("content")),
            tool_calls=[_tool_call(c, turn, i) for i, c in enumerate(raw.get("tool_calls") or [])]
            or None,
        )
        usage = Usage.model_validate(answer.get("usage") or {})
    except (ValidationError, AttributeError, TypeError) as e:
        raise _bad_response(f"the model's message is malformed: {e}") from None
    if not message.content and not message.tool_calls:
        # Nothing to show the user and nothing to do: asking again usually helps.
        raise _bad_response("the model answered with neither text nor tool calls")
    return LlmResponse(
        message=message,
        usage=usage,
        finish_reason=choice.get("finish_reason"),
        model=answer.get("model"),
    )


def _text_of(content: Any) -> str | None:
    """Content may be a string, null, or a list of parts (`{"type": "text", "text": ...}`)."""
    if content is None or isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict)) or None


def _tool_call(raw: dict[str, Any], turn: int, index: int) -> ToolCall:
    function = raw.get("function") or {}
    arguments = function.get("arguments", "")
    return ToolCall.model_validate(
        {
            # Some providers omit the id; the workflow needs one to pair call and result.
            "id": raw.get("id") or f"call_{turn}_{index}",
            "function": {
                "name": function.get("name", ""),
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            },
        }
    )


def _error(
    code: ErrorCode, message: str, *, retryable: bool = True, retry_after: timedelta | None = None
) -> ApplicationError:
    return ApplicationError(
        message, type=code, non_retryable=not retryable, next_retry_delay=retry_after
    )


def _bad_response(message: str) -> ApplicationError:
    """An answer the model activity cannot use. Not retried by Temporal: the workflow
    gives these a small budget of their own (`RunInput.bad_response_attempts`)."""
    return _error(ErrorCode.LLM_BAD_RESPONSE, message, retryable=False)


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
