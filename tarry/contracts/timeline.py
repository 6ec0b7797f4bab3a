"""A run's timeline: where its time went, as spans on one time axis.

Model calls, tool calls, guardrail checks, waits for a person (input, an approval, a
budget, a failing model, a sub-agent's person) and sub-agents, local or remote, each
with its start, its duration, and the tokens and cost of a model call or a sub-agent.
`tarry.client.timeline` builds it from the run's Temporal history across its
continue-as-new chain, so it needs no trace store; `GET /v1/runs/{id}/timeline`, `tarry
show RUN --timeline` and the inbox's run page show it. Built on request, never stored: no
run's history holds one.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from tarry.contracts._omit import when_none
from tarry.contracts.names import WaitingFor

__all__ = [
    "RunTimeline",
    "SpanKind",
    "SpanStatus",
    "TimelineSpan",
]


class SpanKind(StrEnum):
    """What a span of the timeline is."""

    MODEL = "model"
    TOOL = "tool"
    WAIT = "wait"
    """The run waited for a person (`TimelineSpan.waiting_for` says for what)."""
    AGENT = "agent"
    """A sub-agent's run (`TimelineSpan.run_id`), from its start to its end; or a
    request to a remote A2A agent (`TimelineSpan.task_id`): a message sent, a poll of its
    task, its cancelling."""
    GUARDRAIL = "guardrail"
    """A text checked against guardrails (`TimelineSpan.guardrails`, `verdict`)."""


class SpanStatus(StrEnum):
    """How a span ended, or that it has not."""

    OK = "ok"
    FAILED = "failed"
    """The call failed (its retries spent), or the sub-agent failed or timed out."""
    CANCELLED = "cancelled"
    """Cut short: by a stop, an interrupting reply, a terminated sub-agent."""
    OPEN = "open"
    """Still going: its `end` is null, and its duration grows until it ends."""


class TimelineSpan(BaseModel):
    """One model call, tool call, guardrail check, wait for a person or sub-agent of a
    run's timeline."""

    kind: SpanKind
    name: str
    """What the Temporal UI shows it as: `turn 2 · default`, `write_file plan.md`,
    `approval`, the sub-agent's run id; a guardrail check's, where it looked and which
    guardrails (`input: no-pii, no-weapons`)."""
    start: datetime
    end: datetime | None = None
    """Null while it is open."""
    offset_s: float = Field(ge=0)
    """Seconds from the run's start to the span's."""
    duration_s: float = Field(ge=0)
    """Seconds from its start to its end, or, while it is open, to the timeline's `now`."""
    status: SpanStatus = SpanStatus.OK
    attempts: int = Field(default=1, ge=1)
    """A call's attempts (more than one: it was retried)."""
    tokens: int | None = Field(default=None, exclude_if=when_none)
    """A model call's tokens, or all of a local sub-agent's."""
    cost_usd: float | None = Field(default=None, exclude_if=when_none)
    """Estimated from the profile's prices (`Usage.cost_usd`); null without them."""
    cached: bool = Field(default=False, exclude_if=lambda v: not v)
    """A model call the response cache answered (`ModelProfile.cache`), at no cost."""
    waiting_for: WaitingFor | None = Field(default=None, exclude_if=when_none)
    """What a wait waited for."""
    by: str | None = Field(default=None, exclude_if=when_none)
    """Who answered a wait: the last person who acted on the run while it waited."""
    run_id: str | None = Field(default=None, exclude_if=when_none)
    """A sub-agent's run id."""
    task_id: str | None = Field(default=None, exclude_if=when_none)
    """A remote A2A agent's task, that the request went to or started."""
    guardrails: list[str] | None = Field(default=None, exclude_if=when_none)
    """The guardrails a check applied, in order, by name."""
    verdict: str | None = Field(default=None, exclude_if=when_none)
    """What a check's guardrails did: `allow` (none hit), or the verdict of the last hit
    (`redact`, `block`, `ask`); null while it runs or when it failed."""


class RunTimeline(BaseModel):
    """Where a run's time went (`RunHandle.timeline`): its spans on one time axis, from
    the run's start, as of `now`."""

    run_id: str
    started_at: datetime
    """When the run's first segment started."""
    now: datetime
    """When the timeline was read: open spans are measured to it."""
    duration_s: float = Field(ge=0)
    """Seconds from the run's start to its end, or to `now` while it is open."""
    ended: bool
    spans: list[TimelineSpan]
    """In the order they started."""

    def spent(self) -> tuple[int, float]:
        """The tokens and cost of the whole team: the run's model calls and each of its
        sub-agents (whose span holds all of the sub-agent's own)."""
        spans = [s for s in self.spans if s.kind in (SpanKind.MODEL, SpanKind.AGENT)]
        return sum(s.tokens or 0 for s in spans), sum(s.cost_usd or 0 for s in spans)
