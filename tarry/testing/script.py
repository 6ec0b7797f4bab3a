"""The steps a scripted model answers with, whichever provider's dialect it speaks:
text, tool calls, HTTP errors, delays, and streams that go wrong on cue; and the script
file `tarry scripted-model --script` reads (`Script`), the format docs/guides/scripted-model.md
documents.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

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
    # A misspelt key in a script file is an error, not a field silently left at its default.
    model_config = ConfigDict(extra="forbid")

    name: str
    """The tool's name, as the run's catalogue has it (`finish` ends a task)."""
    arguments: dict[str, Any] | str = {}
    """A dict is sent as its JSON text; a str is sent verbatim (it need not be JSON)."""
    id: str | None = None
    """None lets the server name it `call_<n>_<index>`, n being the 1-based request number."""


class ScriptStep(BaseModel):
    """One scripted answer: what a request gets (see `Script` for which one)."""

    model_config = ConfigDict(extra="forbid")

    content: str | None = None
    """The assistant text; for an error step (`status` != 200), the error message."""
    tool_calls: list[ScriptedToolCall] | None = None
    """The calls the answer asks for, beside its text or instead of it."""
    finish_reason: str | None = None
    """None means "tool_calls" when there are tool calls, else "stop"."""
    usage: Usage | None = None
    """None means 10 prompt tokens per request message and 5 completion tokens."""
    status: int = 200
    """Not 200: an HTTP error answer, in the provider's error shape, `content` its message."""
    headers: dict[str, str] = {}
    """Sent with the answer, e.g. `retry-after` with a 429."""
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
    """Streamed answers: the events sent whole before `stream_fault`."""
    plain: bool = False
    """Answer a streaming request with the plain JSON body, as some servers do."""
    if_rejected: ScriptStep | None = None
    """The answer after this step's calls when one of them did not run (a person or a
    rule rejected it, or nobody decided before its deadline), given instead of the next
    step: so a script can have the model say it wrote nothing rather than play on as if
    the write had happened. None: the next step, whatever the calls' results."""
    if_withheld: ScriptStep | None = None
    """The answer given in this step's place when an output guardrail withheld it (the
    request ends with the run's note that says so, `WITHHELD_NOTE`): so a script can have
    the model answer again otherwise, as a model told why does. None: this step again."""


class Conversation(BaseModel):
    """The answers for every conversation that opens with `prompt`, by where it stands.

    A request whose first user message is `prompt` (compared without regard to case or
    runs of whitespace) gets `steps[n]`, n being the number of assistant messages it
    holds: the model's answers so far. So the answer depends only on the conversation,
    not on what other runs asked before it: any number of runs can play it, at once or
    one after another, and a call the worker retries gets the same answer again.
    """

    model_config = ConfigDict(extra="forbid")

    prompt: str
    """The first user message of the conversations this plays."""
    steps: list[ScriptStep]
    """The model's answers, the first to the prompt, each next one after the last."""

    def answers(self, first_user_message: str) -> bool:
        """Whether a request whose first user message is this belongs to it."""
        return _normal(first_user_message) == _normal(self.prompt)


class Script(BaseModel):
    """A script file. A request of a conversation one of `conversations` opens gets
    that conversation's answer for where it stands; any other request (or one past its
    conversation's steps) gets the next of `steps`, in order, whatever it asks. A file
    holding only a JSON list is its `steps`."""

    model_config = ConfigDict(extra="forbid")

    steps: list[ScriptStep] = []
    """The answers for every request no conversation answers, in order."""
    conversations: list[Conversation] = []
    """The answers for the conversations that open with their prompts."""

    @classmethod
    def from_json(cls, text: str) -> Script:
        """The script a file's text holds: an object with `steps` and `conversations`,
        or a bare list of steps. Not JSON, or not a script, is a `ValidationError`
        that names the key at fault."""
        if text.lstrip().startswith("["):
            return cls(steps=TypeAdapter(list[ScriptStep]).validate_json(text))
        return cls.model_validate_json(text)


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()


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
