"""The steps a scripted model answers with, whichever provider's dialect it speaks:
text, tool calls, HTTP errors, delays, and streams that go wrong on cue."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from tarry.contracts import Usage

MAX_STREAM_PIECES = 2000
"""The most events one streamed text (or one call's arguments) is cut into: a real model
sends a token or so per event, but never writes a megabyte in one answer, which the
offline model does when it echoes one. At 4 characters an event, a 3 MB echo would be
750,000 events, slower to parse than any attempt's timeout."""


StreamFault = Literal["cut", "malformed", "no_end", "stall"]
"""`cut` drops the connection mid-body; `malformed` sends an event that is not JSON;
`no_end` ends the body cleanly before the answer's end (OpenAI: no `finish_reason`, no
`[DONE]`; Anthropic: no `message_delta`, no `message_stop`); `stall`
sends nothing more, holding the connection open."""


class ScriptedToolCall(BaseModel):
    name: str
    arguments: dict[str, Any] | str = {}
    """A dict is sent as its JSON text; a str is sent verbatim (it need not be JSON)."""
    id: str | None = None
    """None lets the server name it `call_<n>_<index>`, n being the 1-based request number."""


class ScriptStep(BaseModel):
    """One scripted answer; each request to the model consumes the next step."""

    content: str | None = None
    """The assistant text; for an error step (`status` != 200), the error message."""
    tool_calls: list[ScriptedToolCall] | None = None
    finish_reason: str | None = None
    """None means "tool_calls" when there are tool calls, else "stop"."""
    usage: Usage | None = None
    """None means 10 prompt tokens per request message and 5 completion tokens."""
    status: int = 200
    headers: dict[str, str] = {}
    body: str | None = None
    """Sent verbatim instead of the JSON answer, e.g. to send garbage."""
    delay: float = 0.0
    """Seconds to wait before answering; the client may give up first."""
    chunk_chars: int = Field(default=4, ge=1)
    """Streamed answers: characters of text, or of a call's arguments, per event; more
    for a text longer than `MAX_STREAM_PIECES` of them (see there)."""
    chunk_delay: float = 0.0
    """Streamed answers: seconds between events, so observers see words before the end."""
    stream_fault: StreamFault | None = None
    """Streamed answers: how the stream goes wrong after `fault_after` events."""
    fault_after: int = 2
    plain: bool = False
    """Answer a streaming request with the plain JSON body, as some servers do."""


def say(content: str, **kw: Any) -> ScriptStep:
    """A text answer."""
    return ScriptStep(content=content, **kw)


def call(
    name: str,
    arguments: dict[str, Any] | str | None = None,
    *,
    id: str | None = None,
    **kw: Any,
) -> ScriptStep:
    """An answer with one tool call; `kw` sets other step fields, e.g. `delay`."""
    tool_call = ScriptedToolCall(name=name, arguments={} if arguments is None else arguments, id=id)
    return calls(tool_call, **kw)


def calls(*tool_calls: ScriptedToolCall, **kw: Any) -> ScriptStep:
    """An answer with several tool calls; `kw` sets other step fields, e.g. `delay`."""
    return ScriptStep(tool_calls=list(tool_calls), **kw)


def fail(status: int, **kw: Any) -> ScriptStep:
    """An HTTP error answer with an OpenAI-style error body."""
    return ScriptStep(status=status, **kw)


def pieces(text: str, size: int) -> list[str]:
    """`text` as a stream sends it: `size`-character pieces, at most `MAX_STREAM_PIECES`."""
    step = max(size, -(-len(text) // MAX_STREAM_PIECES))
    return [text[i : i + step] for i in range(0, len(text), step)]
