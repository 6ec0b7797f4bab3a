"""What a conversation is made of, and what people send a run: messages in the OpenAI chat
format, replies, decisions and stops, and the transcript as queries answer it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tarry.contracts._omit import when_empty, when_none
from tarry.contracts.audit import Door
from tarry.contracts.guardrails import GuardrailHit
from tarry.contracts.names import INTERRUPTED_NOTE
from tarry.contracts.previews import Preview

__all__ = [
    "TRANSCRIPT_PAGE_BYTES",
    "ChatMessage",
    "Decision",
    "DecisionRecord",
    "FunctionCall",
    "PauseRequest",
    "PendingApproval",
    "StopRequest",
    "StoredPage",
    "StoredPageIndex",
    "ToolCall",
    "TranscriptAnswer",
    "TranscriptPage",
    "TranscriptPageIndexRef",
    "TranscriptPageRef",
    "TranscriptQuery",
    "Usage",
    "UserInput",
    "estimate_tokens",
]


class FunctionCall(BaseModel):
    name: str
    arguments: str
    """The model's raw argument text; it is meant to be JSON but may not be."""


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class DecisionRecord(BaseModel):
    """How a gated tool call was decided: kept with its tool message, never sent to the model."""

    approved: bool
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    """The edited arguments the tool ran with, when a person edited them."""
    by: Literal["signal", "update", "deadline", "stop", "rule"]
    """How it was decided: this name was taken before people were named, and names never
    change, so the person is `user`. `rule`: by one of the run's approval rules, or as a
    person decided an earlier call and asked to be remembered (`user` says which)."""
    at: datetime
    source: str | None = Field(default=None, exclude_if=when_none)
    """The door the decision came through, as `Decision.source` named it (`mcp`, `link`)."""
    user: str | None = Field(default=None, exclude_if=when_none)
    """Who decided (`Decision.by`), or who stopped the run for a call a stop rejected;
    `rule N` (the run's Nth approval rule, from 1) or `remembered` (an earlier decision
    made with `remember`); null for a deadline's default and for decisions recorded
    before people were named."""
    remember: Literal["run"] | None = Field(default=None, exclude_if=when_none)
    """A person's decision that stands for the like calls after it (`Decision.remember`)."""


class ChatMessage(BaseModel):
    """One message of the transcript, as `chat.completions` takes it."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    decision: DecisionRecord | None = None
    """Transcript metadata on a gated call's tool message; not part of what the model sees."""
    interrupted: bool = False
    """An answer a `stop`, or a reply under `ReplyPolicy.INTERRUPT`, cut short: the words
    the model had written by then."""
    by: str | None = Field(default=None, exclude_if=when_none)
    """Transcript metadata on a reply: who sent it (`UserInput.by`); not sent to the model."""
    blocks: list[dict[str, Any]] | None = Field(default=None, exclude_if=when_none)
    """Transcript metadata on an MCP tool's message: its content blocks (images, audio,
    resources) exactly as the server gave them; the model reads their summary."""
    guardrails: list[GuardrailHit] = Field(default=[], exclude_if=when_empty)
    """Transcript metadata: the guardrails that redacted or blocked this message's text
    (`content` is what they let through); not sent to the model."""
    acting_for: str | None = Field(default=None, exclude_if=when_none)
    """Transcript metadata on an MCP tool's message: the person whose own grant the call
    carried (`auth = "oauth"`); not sent to the model."""
    profile: str | None = Field(default=None, exclude_if=when_none)
    """Transcript metadata on an answer: the profile that wrote it, when it was a fallback
    of the run's own (`ModelProfile.fallback`); not sent to the model."""
    cached: bool = Field(default=False, exclude_if=lambda v: not v)
    """Transcript metadata on an answer: it came from the response cache, at no cost."""

    def for_model(self) -> dict[str, Any]:
        """The message as the provider takes it: no nulls, no Tarry metadata; an
        interrupted answer says so in its text, the one place a model reads it."""
        message = self.model_dump(
            mode="json",
            exclude_none=True,
            exclude={
                "decision",
                "interrupted",
                "blocks",
                "by",
                "guardrails",
                "profile",
                "cached",
                "acting_for",
            },
        )
        if self.interrupted:
            message["content"] = f"{self.content or ''} {INTERRUPTED_NOTE}".lstrip()
        return message


def estimate_tokens(message: ChatMessage) -> int:
    """About four characters of JSON per token: close enough to budget by, no tokenizer.
    The model call fits its window by it, and a run counts its pins by it."""
    return len(json.dumps(message.for_model(), ensure_ascii=False)) // 4 + 1


class Usage(BaseModel):
    prompt_tokens: int = 0
    """All input tokens, as OpenAI counts them: those read from and written to a prompt
    cache included. Billed at full price: `prompt_tokens - cache_read_tokens -
    cache_write_tokens`."""
    completion_tokens: int = 0
    total_tokens: int = 0
    # Left out while 0, so usage recorded before prompt caching and prices encodes as it did.
    cache_read_tokens: int = Field(default=0, exclude_if=when_empty)
    """Input tokens read from the provider's prompt cache (billed at about a tenth)."""
    cache_write_tokens: int = Field(default=0, exclude_if=when_empty)
    """Input tokens written to the provider's prompt cache (billed at about 1.25 times)."""
    cost_usd: float = Field(default=0.0, exclude_if=when_empty)
    """Estimated from the profile's prices (`ModelProfile.prices`) by the worker; 0, and
    left out of payloads, where the profile has none."""
    cached_calls: int = Field(default=0, exclude_if=when_empty)
    """Model calls answered from the response cache (`ModelProfile.cache`): they cost
    nothing and count no tokens."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            cached_calls=self.cached_calls + other.cached_calls,
        )


class UserInput(BaseModel):
    """A reply: the payload of the `user_input` signal and the `send` update."""

    text: str
    id: str | None = None
    """A client message id; a second message with an id the run has seen is ignored."""
    by: str | None = Field(default=None, exclude_if=when_none)
    """Who sent it (kept on its transcript message); null (the Temporal UI, an older
    client) is recorded as `temporal-ui`. Left out while null, so older payloads match."""
    door: Door | None = Field(default=None, exclude_if=when_none)
    """The door it came through (`tarry.contracts.audit`); null: `temporal-ui`."""

    @field_validator("text")
    @classmethod
    def _utf8(cls, text: str) -> str:
        # JSON can carry unpaired surrogates (`"\udcff"`), which no provider accepts.
        try:
            text.encode()
        except UnicodeEncodeError:
            raise ValueError(
                "the text is not valid UTF-8 (it has unpaired surrogates: "
                "often bytes read with the wrong encoding)"
            ) from None
        return text


class StopRequest(BaseModel):
    reason: str | None = None
    by: str | None = Field(default=None, exclude_if=when_none)
    """Who stopped the run; null is recorded as `temporal-ui`."""
    door: Door | None = Field(default=None, exclude_if=when_none)
    """The door it came through (`tarry.contracts.audit`); null: `temporal-ui`."""


class PauseRequest(BaseModel):
    """The payload of the `pause` signal (none, from before people were named)."""

    by: str | None = Field(default=None, exclude_if=when_none)
    """Who paused the run; null is recorded as `temporal-ui`."""
    door: Door | None = Field(default=None, exclude_if=when_none)
    """The door it came through (`tarry.contracts.audit`); null: `temporal-ui`."""


class Decision(BaseModel):
    """The payload of the `approve` signal and the `decide` update."""

    call_id: str | None = None
    """The call decided on; null decides every pending call."""
    approved: bool
    reason: str | None = None
    """Told to the model when the call is rejected."""
    arguments: dict[str, Any] | None = None
    """Edited arguments to run the call with, checked against the tool's schema."""
    source: str | None = Field(default=None, exclude_if=when_none)
    """The door it came through when that is not a person's own client: `mcp` for
    `tarry mcp`, where an assistant may decide without asking its user; `link` for a
    notification's action link, decided as the user it was sent to. Kept with the
    decision (`DecisionRecord.source`); left out while null, so older payloads match."""
    by: str | None = Field(default=None, exclude_if=when_none)
    """Who decides (`DecisionRecord.user`); null: an operator straight from Temporal,
    recorded as `temporal-ui` and never refused."""
    door: Door | None = Field(default=None, exclude_if=when_none)
    """The door it came through (`tarry.contracts.audit`); null: `temporal-ui`."""
    groups: list[str] = Field(default=[], exclude_if=when_empty)
    """The groups `by` belongs to, as the door that resolved the caller found them in its
    configuration: the run checks `RunInput.approvers` against `by` and these."""
    remember: Literal["run"] | None = Field(default=None, exclude_if=when_none)
    """`run`: the run decides the same way, without asking, the later calls of the same
    tool that a person would be asked about for the same reason: those its same approval
    rule asks about, or, for a call no rule asked about, those with the same arguments.
    Not with edited `arguments`, which belong to one call. Left out while null."""


class PendingApproval(BaseModel):
    """A decision a run waits for: on a gated tool call, or on a guardrail's flagged text."""

    call_id: str
    tool: str
    arguments: str
    """The model's argument text, as it asked."""
    deadline: datetime | None = None
    approvers: list[str] | None = Field(default=None, exclude_if=when_none)
    """The users and groups who may decide it (`RunInput.approvers`); null: anyone."""
    rule: int | None = Field(default=None, exclude_if=when_none)
    """The approval rule (from 1) that asks for a decision on it; null: `require_approval`."""
    preview: Preview | None = Field(default=None, exclude_if=when_none)
    """What the person is shown of the call, made when it was gated
    (`tarry.contracts.previews`); null: a run from before previews, or none could be made."""
    guardrail: GuardrailHit | None = Field(default=None, exclude_if=when_none)
    """Not a tool call: a text a guardrail asks about (`GuardVerdict.ASK`; its `on` says
    where the text was). `tool` names the guardrail, `arguments` is `{"text": ...}`, the
    text as the guardrail saw it (its matches' places are in it). Approving allows the
    text; approving with `arguments` `{"text": ...}` (`TEXT_SCHEMA`) goes on with that
    edit; rejecting blocks it, as a `block` verdict does where it was."""


TRANSCRIPT_PAGE_BYTES = 128 * 1024
"""A transcript page stops before this much JSON (but holds at least one message), so a
query answer stays far below the size where payloads go to external storage and the
`temporal` CLI and the Web UI would see a reference instead of text."""


class TranscriptQuery(BaseModel):
    start: int = Field(default=0, ge=0)
    limit: int = Field(default=100, ge=1)
    """At most this many messages; fewer when they pass `TRANSCRIPT_PAGE_BYTES`."""


class TranscriptPage(BaseModel):
    """What the `transcript` query answers: `messages[start:next_start]` of `total`."""

    messages: list[ChatMessage]
    start: int
    total: int

    @property
    def next_start(self) -> int | None:
        """Where the next page starts; None after the last one."""
        end = self.start + len(self.messages)
        return end if end < self.total else None

    @classmethod
    def of(cls, messages: Sequence[ChatMessage], start: int, total: int, limit: int) -> Self:
        """Up to `limit` of `messages` (the transcript's from `start` on), stopping before
        the page's JSON passes `TRANSCRIPT_PAGE_BYTES` (a first message bigger than that
        comes alone)."""
        page: list[ChatMessage] = []
        size = 0
        for message in messages[:limit]:
            size += len(message.model_dump_json())
            if page and size > TRANSCRIPT_PAGE_BYTES:
                break
            page.append(message)
        return cls(messages=page, start=start, total=total)


class TranscriptPageRef(BaseModel):
    """An immutable page of a run's older messages in the payload store: the run keeps
    this reference instead of the messages (see `workflows/pages.py`)."""

    claim: dict[str, str]
    """The storage driver's claim (the file driver's: the SHA-256 digest of the page)."""
    start: int
    """The transcript index of the page's first message."""
    count: int

    @property
    def end(self) -> int:
        return self.start + self.count


class StoredPage(BaseModel):
    """The page activity's input: the messages to store, from transcript index `start`."""

    start: int
    messages: list[ChatMessage]


class TranscriptPageIndexRef(BaseModel):
    """An immutable index of a run's oldest pages in the payload store: their references,
    and the index of the pages before them. A run keeps its newest page references and
    this one, so what it carries does not grow with its length (`workflows/pages.py`)."""

    claim: dict[str, str]
    """The storage driver's claim on the index."""
    end: int
    """The transcript index after the last message of the pages it and its predecessors
    name: they hold the messages from 0 to here."""


class StoredPageIndex(BaseModel):
    """The page index activity's input, and what the store holds of an index."""

    pages: list[TranscriptPageRef]
    previous: TranscriptPageIndexRef | None = None
    """The index of the pages before these; null for the first."""


class TranscriptAnswer(TranscriptPage):
    """What the `transcript` query answers: the messages a run keeps in memory, or,
    from a `start` before them, the references of the stored pages from there on
    (`messages` is then empty; `next_start` is where the pages end), or, from a `start`
    before those too, the newest page index (`index`; `next_start` is where it ends).
    The client reads pages and indexes from the payload store
    (`RunHandle.transcript_page`), so its callers see only messages."""

    stored: list[TranscriptPageRef] = []
    index: TranscriptPageIndexRef | None = Field(default=None, exclude_if=when_none)

    @property
    def next_start(self) -> int | None:
        if self.index is not None:
            end = self.index.end
        elif self.stored:
            end = self.stored[-1].end
        else:
            return super().next_start
        return end if end < self.total else None
