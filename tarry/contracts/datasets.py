"""What an evaluation dataset is made of: the decision points of recorded runs.

Every approve, reject and edit a person made is a label: the conversation up to the
model's proposal, what it proposed, and what the person decided. So is every verdict on
a text a guardrail asked about (allowed, edited, blocked): the text as the guardrail saw
it, the guardrail, and what the person decided. A dataset is these
points as JSON lines, immutable once written; a new selection is a new version. The
eval replays each point's `messages` against a candidate model and scores what it
proposes against `decision`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from tarry.contracts._omit import when_none
from tarry.contracts.activities import ToolDefinition
from tarry.contracts.guardrails import GuardPoint, Guardrail, GuardrailMatch
from tarry.contracts.messages import ChatMessage, ToolCall, Usage
from tarry.contracts.names import ErrorCode

__all__ = [
    "QUERY_KEYS",
    "DatasetManifest",
    "DecisionPoint",
    "GuardrailAsk",
    "Label",
    "SkippedRun",
    "Verdict",
]

QUERY_KEYS = ("phase", "tool", "since", "until", "schedule", "agent", "user", "model", "limit")
"""What `tarry dataset create --from` takes: `KEY=VALUE` terms, each key at most once."""


class Verdict(StrEnum):
    """What happened to a proposal."""

    APPROVED = "approved"
    REJECTED = "rejected"
    EDITED = "edited"
    """Approved after a person changed its arguments (`Label.arguments`)."""
    ANSWERED = "answered"
    """A final answer; `Label.reply` is the user's next message, if one came."""


class Label(BaseModel):
    """The human decision on one proposal, as the run recorded it."""

    verdict: Verdict
    by: str | None = None
    """Who decided (`DecisionRecord.user`); null for a decision recorded before people
    were named, or a final answer nobody replied to."""
    reason: str | None = Field(default=None, exclude_if=when_none)
    """A rejection's reason."""
    arguments: dict[str, Any] | None = Field(default=None, exclude_if=when_none)
    """An edit's arguments: what the tool ran with."""
    reply: str | None = Field(default=None, exclude_if=when_none)
    """For a final answer: the user's next message, if any."""
    at: datetime | None = None


class GuardrailAsk(BaseModel):
    """A text a guardrail asked a person about (`GuardVerdict.ASK`), as its check saw it."""

    guardrail: Guardrail
    """The guardrail as the run had it."""
    on: GuardPoint
    text: str
    matches: list[GuardrailMatch] = []
    """What the guardrail found in `text`."""


class DecisionPoint(BaseModel):
    """One labelled proposal of a recorded run."""

    id: str
    """Stable within a dataset: `RUN_ID/INDEX/CALL_ID` (`answer` for a final answer, the
    decision's `guardrail-N` for a guardrail's ask), INDEX being the place in the
    transcript of the proposal (or of the message that keeps the guardrail's hit)."""
    run_id: str
    owner: str | None = None
    """The run's owner when the point was collected (`TarryOwner`)."""
    model: str
    """The model profile that made the proposal."""
    system: str | None = None
    messages: list[ChatMessage]
    """The conversation the model saw before it proposed, without Tarry's metadata, so a
    candidate is asked exactly this."""
    tools: list[ToolDefinition] = []
    """The catalogue offered with it."""
    proposal: ToolCall | None = None
    """The gated call proposed; null for a final answer."""
    answer: str | None = Field(default=None, exclude_if=when_none)
    """The final answer proposed, for `Verdict.ANSWERED`."""
    guardrail: GuardrailAsk | None = Field(default=None, exclude_if=when_none)
    """For a guardrail's ask: the text and the guardrail. The person allowed the text
    (`APPROVED`), edited it (`EDITED`) or blocked it (`REJECTED`); `messages` is empty."""
    label: Label
    usage: Usage | None = Field(default=None, exclude_if=when_none)
    """What the original call cost, when the run recorded it."""
    latency_ms: float | None = Field(default=None, exclude_if=when_none)
    """How long the original call took, when the run recorded it."""


class SkippedRun(BaseModel):
    """A run a query selected whose points could not be read (no worker answers for it,
    its workflow task fails, its pages are missing, it did not answer in time): the
    version is made without it, and says so."""

    run_id: str
    code: ErrorCode
    message: str


class DatasetManifest(BaseModel):
    """The header of a dataset version: what was selected, by whom, when."""

    name: str
    version: int = Field(ge=1)
    query: str
    """The selection it was built from, as given to `tarry dataset create --from`."""
    created_by: str | None = None
    created_at: datetime
    runs: int
    points: int
    skipped: list[SkippedRun] = []
    """The selected runs left out because they could not be read, and why."""
