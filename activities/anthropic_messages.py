"""The Anthropic provider: one Messages API call (`POST /v1/messages`), streamed or not.

The durable transcript stays in the OpenAI dialect every run already has in history;
this adapter translates it for each call and translates the answer back. The system
prompt goes in the `system` parameter; an assistant's tool calls become `tool_use`
blocks and the tool messages answering them `tool_result` blocks, all of one turn's in
one user message (the API wants roles to alternate); tools are offered with their
schema as `input_schema`.

Prompt caching: the request marks cache breakpoints (`cache_control`) at the end of
the tools, of the system prompt, and of the conversation as it stood before this
turn's news. The stored conversation only ever grows at its end, so each call reads
the previous calls' prefix from Anthropic's cache and pays full price only for what is
new (`Usage.cache_read_tokens`, `Usage.cache_write_tokens`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import ValidationError

from activities.observers import AnswerObservers
from activities.provider import (
    TOOL_CHOICE_MODES,
    ModelCall,
    bad_response,
    cut_short,
    error,
    post,
    stream,
    tool_choice,
)
from tarry.config.tables import ANTHROPIC_MAX_TOKENS
from tarry.contracts import ChatMessage, ErrorCode, LlmResponse, ToolCall, Usage

_CACHE_BREAKPOINT = {"type": "ephemeral"}
OMITTED_NOTE = "[earlier messages left out]"
"""What the model reads first when the context budget cut the conversation at an answer."""
_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    # The workflow reads "length" as a cut answer (`LLM_TRUNCATED`).
    "max_tokens": "length",
    "refusal": "content_filter",
}
"""Anthropic's `stop_reason`s as the OpenAI `finish_reason`s the workflow reads."""


async def answer(http: httpx.AsyncClient, call: ModelCall) -> LlmResponse:
    profile = call.profile
    url = profile.base_url.rstrip("/") + "/v1/messages"
    headers = {"anthropic-version": profile.anthropic_version}
    if profile.api_key is not None:
        headers["x-api-key"] = profile.api_key.get_secret_value()
    body = _request_body(call)

    def parse(text: str) -> LlmResponse:
        try:
            message = json.loads(text)
        except ValueError:
            message = None
        return _answer_of(message, call.turn, lambda: text)

    if not profile.stream:
        return parse((await post(http, call, url, headers, body)).text)
    body["stream"] = True
    return await stream(http, call, url, headers, body, _Assembly(call.turn), parse)


def _request_body(call: ModelCall) -> dict[str, Any]:
    sampling = call.sampling
    body: dict[str, Any] = {
        "model": call.profile.model,
        # Required by the Messages API, unlike OpenAI's.
        "max_tokens": sampling.max_tokens or ANTHROPIC_MAX_TOKENS,
        "messages": _messages(call.messages, call.stable),
    }
    if call.system:
        body["system"] = [{"type": "text", "text": call.system, "cache_control": _CACHE_BREAKPOINT}]
    if call.tools:
        tools = [
            {
                "name": t.name,
                "description": t.description,
                "input_schema": t.parameters or {"type": "object", "properties": {}},
            }
            for t in call.tools
        ]
        tools[-1]["cache_control"] = _CACHE_BREAKPOINT
        body |= {"tools": tools, "tool_choice": _tool_choice(call)}
    body |= sampling.model_dump(include={"temperature", "top_p"}, exclude_none=True)
    if sampling.stop:
        body["stop_sequences"] = sampling.stop
    return body | (sampling.extra_body or {})


def _tool_choice(call: ModelCall) -> dict[str, Any]:
    """`tool_choice` as the Messages API takes it: `required` is its `any`, a tool's
    name its `{"type": "tool", "name": ...}`."""
    choice = tool_choice(call)
    if choice == "required":
        return {"type": "any"}
    if choice in TOOL_CHOICE_MODES:
        return {"type": choice}
    return {"type": "tool", "name": choice}


def _messages(transcript: list[ChatMessage], stable: int) -> list[dict[str, Any]]:
    """The transcript as alternating user and assistant messages of content blocks, the
    last block of its first `stable` messages marked as a cache breakpoint."""
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(transcript):
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if i == stable - 1:
            blocks[-1]["cache_control"] = _CACHE_BREAKPOINT
        if turns and turns[-1]["role"] == role:
            # Tool results, then a reply sent meanwhile: one user message, results first.
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if turns and turns[0]["role"] == "assistant":
        # Cut to the context budget at an answer: the API refuses a conversation that
        # does not begin with the user.
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": OMITTED_NOTE}]})
    return turns


def _blocks(message: ChatMessage) -> tuple[str, list[dict[str, Any]]]:
    """One transcript message as a role and the content blocks it adds."""
    text = message.for_model().get("content")  # an interrupted answer says so here
    if message.role == "tool":
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id or "",
            "content": text or "",
        }
        if _failed(text):
            result["is_error"] = True
        return "user", [result]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    if message.role != "assistant":
        # The Messages API has no system role in its messages.
        return "user", blocks
    blocks += [
        {
            "type": "tool_use",
            "id": c.id,
            "name": c.function.name,
            "input": _input_of(c.function.arguments),
        }
        for c in message.tool_calls or []
    ]
    return "assistant", blocks


def _input_of(arguments: str) -> dict[str, Any]:
    """A call's argument text as the object `tool_use.input` must be. The API refuses
    anything else, so text that is not a JSON object (which the tool already answered
    with `TOOL_INVALID_ARGUMENTS`) is sent as an empty object."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _failed(content: str | None) -> bool:
    """Whether a tool message holds a failed `ToolResult`."""
    try:
        result = json.loads(content or "")
    except ValueError:
        return False
    return isinstance(result, dict) and result.get("ok") is False


class _Assembly:
    """A streamed answer put back together as the plain call's message: its content
    blocks by index, text and tool inputs joined from their deltas, its usage from
    `message_start` and `message_delta`."""

    def __init__(self, turn: int) -> None:
        self.observers: AnswerObservers | None = None
        self.events = 0
        self._turn = turn
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._pieces: dict[int, list[str]] = {}
        """Block index -> its text's or its input JSON's pieces, joined once at the end:
        growing a string per delta is quadratic."""
        self._calls: dict[int, int] = {}
        """Block index -> the call's position among the answer's tool calls."""
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self._done = False

    def add(self, event: str, data: str) -> bool:
        """Takes one event; True at `message_stop`, the end of the answer."""
        self.events += 1
        try:
            payload = json.loads(data)
            kind = payload["type"]
            if kind == "message_start":
                self._message = payload["message"]
                self._usage |= self._message.get("usage") or {}
            elif kind == "content_block_start":
                self._start(payload["index"], dict(payload["content_block"]))
            elif kind == "content_block_delta":
                self._delta(payload["index"], payload["delta"])
            elif kind == "message_delta":
                self._stop_reason = payload["delta"].get("stop_reason") or self._stop_reason
                self._usage |= payload.get("usage") or {}
            elif kind == "message_stop":
                self._done = True
            elif kind == "error":
                raise _stream_error(payload.get("error") or {})
            # `ping`, `content_block_stop` and event types added later carry nothing to keep.
        except (ValueError, KeyError, AttributeError, TypeError):
            raise bad_response(
                f"the model's stream sent a malformed event: {data[:300]!r}"
            ) from None
        return self._done

    def _start(self, index: int, block: dict[str, Any]) -> None:
        self._blocks[index] = block
        self._pieces[index] = []
        if block["type"] == "text":
            self._pieces[index].append(block.get("text") or "")
            if block.get("text") and self.observers:
                self.observers.text(block["text"])
        if block["type"] == "tool_use":
            self._calls[index] = len(self._calls)
            # Its JSON text arrives in `input_json_delta`s.
            if self.observers:
                self.observers.tool_call(self._calls[index], block["name"], block.get("id"))

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        pieces = self._pieces[index]
        if delta["type"] == "text_delta":
            pieces.append(delta["text"])
            if delta["text"] and self.observers:
                self.observers.text(delta["text"])
        elif delta["type"] == "input_json_delta":
            pieces.append(delta["partial_json"])
            if delta["partial_json"] and self.observers:
                self.observers.tool_arguments(self._calls[index], delta["partial_json"])

    def answer(self) -> LlmResponse:
        if not (self._done or self._stop_reason):
            raise cut_short(self.events)
        content = [self._block(i) for i in sorted(self._blocks)]
        message = self._message | {
            "content": content,
            "stop_reason": self._stop_reason,
            "usage": self._usage,
        }
        return _answer_of(message, self._turn, lambda: json.dumps(message))

    def _block(self, index: int) -> dict[str, Any]:
        """A content block as the plain answer has it, its text or input JSON joined."""
        block = self._blocks[index]
        joined = "".join(self._pieces[index])
        if block["type"] == "text":
            return block | {"text": joined}
        if block["type"] == "tool_use":
            return block | {"input": joined or "{}"}
        return block


def _stream_error(raw: dict[str, Any]) -> Exception:
    """An `error` event in the middle of a stream, e.g. `overloaded_error`: retried."""
    code = (
        ErrorCode.LLM_RATE_LIMITED
        if raw.get("type") == "rate_limit_error"
        else ErrorCode.LLM_HTTP_ERROR
    )
    return error(code, f"the model's stream failed: {raw.get('type')}: {raw.get('message')}")


def _answer_of(message: Any, turn: int, shown: Callable[[], str]) -> LlmResponse:
    """Reads a Messages API message; `shown` gives its text for the error message, only
    when there is one (encoding a megabyte answer to show 300 characters of it would
    hold the worker's loop). A tool call's `input` is an object, or (from a stream) its
    JSON text as it came."""
    try:
        blocks = [b for b in message["content"] if isinstance(b, dict)]
        text = "".join(b["text"] for b in blocks if b.get("type") == "text")
        uses = [b for b in blocks if b.get("type") == "tool_use"]
        chat = ChatMessage(
            role="assistant",
            content=text or None,
            tool_calls=[_tool_call(b, turn, i) for i, b in enumerate(uses)] or None,
        )
        usage = _usage_of(message.get("usage") or {})
    except (KeyError, TypeError, AttributeError, ValidationError) as e:
        raise bad_response(
            f"the model's answer is not a message ({type(e).__name__} {e}): {shown()[:300]!r}"
        ) from None
    if not chat.content and not chat.tool_calls:
        # Nothing to show the user and nothing to do: asking again usually helps.
        raise bad_response("the model answered with neither text nor tool calls")
    stop = message.get("stop_reason")
    return LlmResponse(
        message=chat,
        usage=usage,
        finish_reason=_FINISH_REASONS.get(stop, stop),
        model=message.get("model"),
    )


def _tool_call(block: dict[str, Any], turn: int, index: int) -> ToolCall:
    arguments = block.get("input", {})
    return ToolCall.model_validate(
        {
            # The workflow needs an id to pair call and result.
            "id": block.get("id") or f"call_{turn}_{index}",
            "function": {
                "name": block["name"],
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            },
        }
    )


def _usage_of(raw: dict[str, Any]) -> Usage:
    """Anthropic counts input apart from the cache's reads and writes; `Usage` counts
    all input as `prompt_tokens`, as OpenAI does, and the cache's share beside it."""
    read = int(raw.get("cache_read_input_tokens") or 0)
    write = int(raw.get("cache_creation_input_tokens") or 0)
    prompt = int(raw.get("input_tokens") or 0) + read + write
    completion = int(raw.get("output_tokens") or 0)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        cache_read_tokens=read,
        cache_write_tokens=write,
    )
