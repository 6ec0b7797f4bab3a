"""The HTTP API's own bodies; everything else it takes and gives is a Tarry contract
(`RunInput`, `RunState`, `Decision`, `StopRequest`, `TranscriptPage`, `RunEvent`)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from tarry.contracts import RunInput, RunState
from tarry.runs import RunRow

__all__ = [
    "Accepted",
    "Health",
    "MessageRequest",
    "RunList",
    "RunSummary",
    "RunView",
    "StartRequest",
    "Started",
]


class StartRequest(RunInput):
    """A `RunInput`, and the run's id if the caller chooses it."""

    id: str | None = None
    """The run id; `run-<short uuid>` if none, or one derived from the Idempotency-Key."""


class RunView(RunState):
    """A run's `state`, with its id."""

    id: str


class Started(BaseModel):
    id: str
    state: RunState | None
    """The run's first state; null when no worker serves its task queue yet."""


class MessageRequest(BaseModel):
    text: str


class Accepted(BaseModel):
    """The request was handed to the run, which acts on it at its next turn boundary."""

    accepted: Literal[True] = True


class RunSummary(BaseModel):
    """A run as visibility records it, without asking the run (no worker needed)."""

    id: str
    phase: str | None
    waiting_for: str | None
    turns: int | None
    model: str | None
    summary: str | None
    updated_at: datetime
    """When the run ended, else when its latest continue-as-new segment started."""

    @classmethod
    def of(cls, row: RunRow) -> RunSummary:
        return cls(id=row.run_id, **row.model_dump(exclude={"run_id", "started"}))


class RunList(BaseModel):
    runs: list[RunSummary]
    next_cursor: str | None
    """Pass as `cursor` for the next page; null after the last."""


class Health(BaseModel):
    temporal: Literal["reachable", "unreachable"]
