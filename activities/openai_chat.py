"""The OpenAI-compatible provider: one `chat.completions` call, streamed or not.

The durable transcript is already in this dialect, so the request is the transcript as
it is; the adapter's work is reading the answers real providers send, in one piece or
as a stream of deltas.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import ValidationError

from activities.observers import AnswerObservers
from activities.provider import (
    TOOL_CHOICE_MODES,
    ModelCall,
    bad_response,
    cut_short,
    post,
    stream,
    tool_choice,
)
from tarry.contracts import ChatMessage, LlmResponse, ToolCall, ToolDefinition, Usage


async def answer(http: httpx.AsyncClient, call: ModelCall) -> LlmResponse:
    profile = call.profile
    url = profile.base_url.rstrip("/") + "/chat/completions"
    headers = {}
    if profile.api_key is not None:
        headers["Authorization"] = f"Bearer {profile.api_key.get_secret_value()}"
    system = [ChatMessage(role="system", content=call.system)] if call.system else []
    body: dict[str, Any] = {
        "model": profile.model,
        "messages": [m.for_model() for m in system + call.messages],
    }
    choice = _tool_choice(call)
    if call.tools:  # OpenAI refuses an empty list ("[] is too short - 'tools'")
        body |= {"tools": [_function_spec(t) for t in call.tools], "tool_choice": choice}
    sampling = call.sampling
    body |= sampling.model_dump(exclude={"extra_body", "tool_choice"}, exclude_none=True)
    body |= sampling.extra_body or {}
    if call.output_schema is not None:
        # OpenAI's structured output: the answer's text is JSON that fits the schema.
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": call.output_schema, "strict": True},
        }

    def parse(text: str) -> LlmResponse:
        return _parse_answer(text, call.turn)

    if not profile.stream:
        return parse((await post(http, call, url, headers, body)).text)
    body |= {"stream": True, "stream_options": {"include_usage": True}}
    return await stream(http, call, url, headers, body, _Assembly(call.turn), parse)


def _tool_choice(call: ModelCall) -> str | dict[str, Any]:
    """`tool_choice` as `chat.completions` takes it: a mode, or the one function."""
    choice = tool_choice(call)
    if choice in TOOL_CHOICE_MODES:
        return choice
    return {"type": "function", "function": {"name": choice}}


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


class _Assembly:
    """A streamed answer put back together as the plain call's JSON: the text's pieces
    joined, and each tool call's id, name and argument fragments gathered by index."""

    def __init__(self, turn: int) -> None:
        self.observers: AnswerObservers | None = None
        self.events = 0
        self._turn = turn
        self._content: list[str] | None = None
        """The text's pieces, joined once at the end: a copy per delta is quadratic."""
        self._calls: dict[int, _CallPieces] = {}
        self._finish_reason: str | None = None
        self._usage: Any = None
        self._model: str | None = None
        self._done = False

    def add(self, event: str, data: str) -> bool:
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
            raise bad_response(
                f"the model's stream sent a malformed event: {data[:300]!r}"
            ) from None
        return False

    def _take(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        text = _text_of(delta.get("content"))
        if text is not None:
            if self._content is None:
                self._content = []
            self._content.append(text)
            if text and self.observers:
                self.observers.text(text)
        for part in delta.get("tool_calls") or []:
            index = part.get("index", 0)
            call = self._calls.setdefault(index, _CallPieces())
            call.id = part.get("id") or call.id
            function = part.get("function") or {}
            if name := function.get("name"):
                call.name = name
                if self.observers:
                    self.observers.tool_call(index, name, call.id or None)
            fragment = function.get("arguments")
            if fragment:
                if not isinstance(fragment, str):  # an object in one piece
                    fragment = json.dumps(fragment)
                call.arguments.append(fragment)
                if self.observers:
                    self.observers.tool_arguments(index, fragment)
        self._finish_reason = choice.get("finish_reason") or self._finish_reason

    def answer(self) -> LlmResponse:
        completion = self._completion()
        return _answer_of(completion, self._turn, lambda: json.dumps(completion))

    def _completion(self) -> dict[str, Any]:
        """The answer as `chat.completions` without streaming gives it."""
        if not (self._done or self._finish_reason):
            raise cut_short(self.events)
        content = None if self._content is None else "".join(self._content)
        calls = [self._calls[i].joined() for i in sorted(self._calls)]
        message = {"role": "assistant", "content": content, "tool_calls": calls or None}
        choice = {"index": 0, "message": message, "finish_reason": self._finish_reason}
        return {"model": self._model, "choices": [choice], "usage": self._usage}


@dataclass
class _CallPieces:
    """One streamed tool call: its id and name, and its argument fragments as they came."""

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    """Joined once at the end: growing a string per fragment is quadratic."""

    def joined(self) -> dict[str, Any]:
        """The call as the plain answer's `tool_calls` entry."""
        function = {"name": self.name}
        if self.arguments:
            function["arguments"] = "".join(self.arguments)
        return {"id": self.id, "function": function}


def _parse_answer(text: str, turn: int) -> LlmResponse:
    """Reads a plain (not streamed) answer's body."""
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    return _answer_of(answer, turn, lambda: text)


def _answer_of(answer: Any, turn: int, shown: Callable[[], str]) -> LlmResponse:
    """Reads `choices[0].message`, tolerating the shapes real providers send; `shown`
    gives the answer's text for the error message, only when there is one (encoding a
    megabyte answer to show 300 characters of it would hold the worker's loop)."""
    try:
        choice = answer["choices"][0]
        raw = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise bad_response(
            f"the model's answer has no choices[0].message: {shown()[:300]!r}"
        ) from None
    try:
        message = ChatMessage(
            role="assistant",
            content=_text_of(raw.get("content")),
            tool_calls=[_tool_call(c, turn, i) for i, c in enumerate(raw.get("tool_calls") or [])]
            or None,
        )
        usage = _usage_of(answer.get("usage") or {})
    except (ValidationError, AttributeError, TypeError) as e:
        raise bad_response(f"the model's message is malformed: {e}") from None
    if not message.content and not message.tool_calls:
        # Nothing to show the user and nothing to do: asking again usually helps.
        raise bad_response("the model answered with neither text nor tool calls")
    return LlmResponse(
        message=message,
        usage=usage,
        finish_reason=choice.get("finish_reason"),
        model=answer.get("model"),
    )


def _usage_of(raw: dict[str, Any]) -> Usage:
    """OpenAI's usage; the prompt tokens its automatic prompt cache served, when it says."""
    usage = Usage.model_validate(raw)
    details = raw.get("prompt_tokens_details") or {}
    usage.cache_read_tokens = int(details.get("cached_tokens") or 0)
    return usage


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
