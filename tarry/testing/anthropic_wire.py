"""The scripted model's Anthropic dialect (`POST /v1/messages`): a step as a Messages API
message, as its stream of events, or as an Anthropic error; and a prompt cache that
reports what a real one would, so caching shows in the usage without a key.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from tarry.testing.script import PIECE, ScriptStep, framed, pieces

TOKENS_PER_BLOCK = 10
"""What each content block (a tool, the system prompt, a message's text, tool use or
tool result) counts as, in input tokens: the offline model's whole tokenizer."""

_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
"""A step's OpenAI `finish_reason` as Anthropic's `stop_reason`."""


class PromptCache:
    """Prefixes of requests marked with `cache_control`, as Anthropic's cache keeps them.

    A request reads the longest prefix an earlier request marked (a real cache looks
    back from each breakpoint to the ones before it), writes the rest up to its last
    breakpoint, and pays full price for what follows."""

    def __init__(self) -> None:
        self._prefixes: set[str] = set()

    def usage(self, body: dict[str, Any], output_tokens: int) -> dict[str, int]:
        blocks = _cached_order(body)
        digest = hashlib.sha256()
        prefixes: list[str] = []
        for block in blocks:
            # The mark itself is not part of the prefix: a prefix marked last time and
            # unmarked now is still read from the cache.
            unmarked = {k: v for k, v in block.items() if k != "cache_control"}
            digest.update(json.dumps(unmarked, sort_keys=True).encode())
            prefixes.append(digest.copy().hexdigest())
        marked = [i for i, block in enumerate(blocks) if "cache_control" in block]
        end = marked[-1] + 1 if marked else 0
        read = max((i + 1 for i in range(end) if prefixes[i] in self._prefixes), default=0)
        self._prefixes.update(prefixes[i] for i in marked)
        return {
            "input_tokens": (len(blocks) - end) * TOKENS_PER_BLOCK,
            "cache_creation_input_tokens": (end - read) * TOKENS_PER_BLOCK,
            "cache_read_input_tokens": read * TOKENS_PER_BLOCK,
            "output_tokens": output_tokens,
        }


def _cached_order(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's blocks in the order Anthropic caches them: tools, system, messages."""
    system = body.get("system") or []
    blocks = [*(body.get("tools") or []), *_content(system)]
    for message in body["messages"]:
        blocks += _content(message.get("content") if isinstance(message, dict) else None)
    return [b for b in blocks if isinstance(b, dict)]


def _content(content: Any) -> list[Any]:
    """A `system` or message `content`: a string is one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def message(n: int, step: ScriptStep, body: dict[str, Any], cache: PromptCache) -> dict[str, Any]:
    """The non-streaming answer for request number `n`: the step's text and tool calls
    as content blocks, and its usage (the prompt cache's count unless it sets one)."""
    content: list[dict[str, Any]] = []
    if step.content:
        content.append({"type": "text", "text": step.content})
    for i, tc in enumerate(step.tool_calls or []):
        arguments = tc.arguments
        if isinstance(arguments, str):
            # Text that is not JSON is sent as it is: a model that writes broken input.
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        tool_id = tc.id or f"toolu_{n}_{i}"
        content.append({"type": "tool_use", "id": tool_id, "name": tc.name, "input": arguments})
    finish = step.finish_reason or ("tool_calls" if step.tool_calls else "stop")
    if step.usage is None:
        usage = cache.usage(body, output_tokens=5)
    else:
        cached = step.usage.cache_read_tokens + step.usage.cache_write_tokens
        usage = {
            "input_tokens": step.usage.prompt_tokens - cached,
            "cache_creation_input_tokens": step.usage.cache_write_tokens,
            "cache_read_input_tokens": step.usage.cache_read_tokens,
            "output_tokens": step.usage.completion_tokens,
        }
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": content,
        "stop_reason": _STOP_REASONS.get(finish, finish),
        "stop_sequence": None,
        "usage": usage,
    }


def stream_events(answer: dict[str, Any], size: int, limit: int | None) -> Iterator[str]:
    """The server-sent events Anthropic streams for `answer`: `message_start` (with the
    input usage), per block a start, its text or input JSON in `size`-character deltas
    (at most `limit` of them) and a stop, then `message_delta` (stop reason, output
    usage) and `message_stop`. Made as they are sent: a long answer's events all at once
    would hold the server's loop for seconds."""

    def frame(event: dict[str, Any]) -> str:
        return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"

    usage = answer["usage"]
    start = answer | {"content": [], "stop_reason": None, "usage": usage | {"output_tokens": 1}}
    yield frame({"type": "message_start", "message": start})
    yield frame({"type": "ping"})
    for index, block in enumerate(answer["content"]):
        if block["type"] == "text":
            opening, kind, key, text = (
                {"type": "text", "text": ""},
                "text_delta",
                "text",
                block["text"],
            )
        else:
            opening = {k: block[k] for k in ("type", "id", "name")} | {"input": {}}
            kind, key = "input_json_delta", "partial_json"
            text = block["input"] if isinstance(block["input"], str) else json.dumps(block["input"])
        yield frame({"type": "content_block_start", "index": index, "content_block": opening})
        piece = {"type": "content_block_delta", "index": index, "delta": {"type": kind, key: PIECE}}
        yield from framed(frame(piece), pieces(text, size, limit))
        yield frame({"type": "content_block_stop", "index": index})
    delta = {"stop_reason": answer["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": usage["output_tokens"]}
    yield frame({"type": "message_delta", "delta": delta, "usage": usage})
    yield frame({"type": "message_stop"})


def error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    """An error as Anthropic sends it: `{"type": "error", "error": {"type", "message"}}`."""
    kind = (
        "rate_limit_error" if status == 429
        else "authentication_error" if status == 401
        else "permission_error" if status == 403
        else "overloaded_error" if status == 529
        else "api_error" if status >= 500
        else "invalid_request_error"
    )  # fmt: skip
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.json_response(body, status=status, headers=headers)
