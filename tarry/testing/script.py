"""The steps a scripted model answers with, whichever provider's dialect it speaks:
text, tool calls, HTTP errors, delays, and streams that go wrong on cue."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from pydantic import BaseModel, Field

from tarry.contracts import Usage

MAX_STREAM_PIECES = 2000
"""The most events one streamed text (or one call's arguments) is cut into unless a step
says otherwise (`ScriptStep.max_pieces`): a real model sends a token or so per event, but
rarely writes a megabyte in one answer, which the offline model does when it echoes one,
and a step with a `chunk_delay` would take hours to send 750,000 events."""


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
    for a text longer than `max_pieces` of them."""
    max_pieces: int | None = Field(default=MAX_STREAM_PIECES, ge=1)
    """Streamed answers: the most events a text (or a call's arguments) is cut into; None
    sends every piece at `chunk_chars`, however many, as a model writing a long answer
    token by token does."""
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


def pieces(text: str, size: int, limit: int | None = MAX_STREAM_PIECES) -> Iterator[str]:
    """`text` as a stream sends it: `size`-character pieces, at most `limit` of them."""
    step = size if limit is None else max(size, -(-len(text) // limit))
    return (text[i : i + step] for i in range(0, len(text), step))


PIECE = "\x00piece\x00"
"""A stand-in for each piece's text in the frame `framed` fills in."""


def framed(frame: str, texts: Iterable[str]) -> Iterator[str]:
    """`frame` (a stream event encoded with `PIECE` as its text) for each of `texts`:
    each text's JSON string put in the place of `PIECE`'s. The same events at a fraction
    of the cost of encoding each whole, so a stream of a million goes out quickly."""
    before, after = frame.split(json.dumps(PIECE), 1)
    for text in texts:
        yield before + json.dumps(text) + after
