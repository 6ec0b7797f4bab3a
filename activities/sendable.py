"""What a provider is sent of a transcript: always a conversation it accepts.

The transcript keeps every message as the model wrote it, for people and for audit.
But a model's own mistakes, sent back to it verbatim, can make every later request
fail: llama.cpp answers HTTP 500 to a conversation holding a tool call whose arguments
are not JSON, Anthropic refuses a `tool_use` whose input is not an object, and both
refuse empty names and repeated call ids. Retrying such a request can never help, so
the run would loop on its own history. `sendable` rewrites only those shapes, the same
way on every call (so a provider's prompt cache still matches the prefix), and both
provider adapters send its result.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence

from tarry.contracts import ChatMessage, FunctionCall, ToolCall

__all__ = ["INVALID_ARGUMENTS_KEYS", "provider_name", "sendable"]

_PROVIDER_NAME = re.compile(r"[a-zA-Z0-9_-]")
_MAX_NAME = 64
"""`^[a-zA-Z0-9_-]{1,64}$`: a tool name every provider takes."""
_MAX_ID = 40
"""OpenAI refuses longer call ids; Anthropic's pattern is the names' one."""
_HASH = 8
_UNNAMED = "unnamed_tool"
INVALID_ARGUMENTS_KEYS = ("unparsed_arguments", "parse_error")
"""The object sent in place of arguments that are not a JSON object: the text the model
wrote and why it is not valid, so the model can see its mistake."""


def provider_name(text: str, limit: int = _MAX_NAME) -> str:
    """`text` as a name every provider takes (`^[a-zA-Z0-9_-]{1,limit}$`). A name that
    does not fit as it is gets its other characters as `_`, is cut short and ends in `_`
    and 8 hex digits of its SHA-256: the same name every time, and two names that only
    differ past the cut stay two. Empty text stays empty."""
    safe = "".join(c if _PROVIDER_NAME.fullmatch(c) else "_" for c in text)
    if safe == text and len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:_HASH]
    return f"{safe[: limit - _HASH - 1]}_{digest}"


def sendable(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """`messages` as a provider accepts them, one for one: tool calls with arguments
    that are a JSON object, a valid name and an id unique in the request, and tool
    results naming their call's new id. Messages that need nothing are the same objects."""
    used: set[str] = set()
    renamed: dict[str, list[str]] = {}
    """A call id as the transcript has it -> the ids sent for its calls not yet answered."""
    sent: list[ChatMessage] = []
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            renamed = {}
            calls = [_call(c, used, renamed) for c in message.tool_calls]
            if calls != message.tool_calls:
                message = message.model_copy(update={"tool_calls": calls})
        elif message.role == "tool" and message.tool_call_id is not None:
            queue = renamed.get(message.tool_call_id)
            new_id = queue.pop(0) if queue else provider_name(message.tool_call_id, _MAX_ID)
            if new_id != message.tool_call_id:
                message = message.model_copy(update={"tool_call_id": new_id})
        sent.append(message)
    return sent


def _call(call: ToolCall, used: set[str], renamed: dict[str, list[str]]) -> ToolCall:
    """One call as sent; its new id is remembered for the tool message that answers it."""
    new_id = provider_name(call.id, _MAX_ID) or "call"
    if new_id in used:
        n = 2
        while f"{new_id[: _MAX_ID - 4]}_{n}" in used:
            n += 1
        new_id = f"{new_id[: _MAX_ID - 4]}_{n}"
    used.add(new_id)
    renamed.setdefault(call.id, []).append(new_id)
    name = provider_name(call.function.name) or _UNNAMED
    arguments = _arguments(call.function.arguments)
    if (new_id, name, arguments) == (call.id, call.function.name, call.function.arguments):
        return call
    return call.model_copy(
        update={"id": new_id, "function": FunctionCall(name=name, arguments=arguments)}
    )


def _arguments(text: str) -> str:
    """The arguments as written when they are a JSON object; else a JSON object holding
    the text and what is wrong with it."""
    try:
        parsed = json.loads(text)
    except ValueError as e:
        problem = f"not valid JSON: {e}"
    else:
        if isinstance(parsed, dict):
            return text
        problem = "not a JSON object"
    unparsed, error = INVALID_ARGUMENTS_KEYS
    return json.dumps({unparsed: text, error: problem})
