"""What the search index is written with and what it answers: imported from this module.

The `index_messages` activity takes an `IndexRequest`: a run (`IndexedRun`: who may read
it, as its search attributes say) and its messages not yet indexed, each named by the
run and its transcript index, which never change (a hand-over keeps the numbering). The
store keeps one row per name, so a retried or replayed request indexes nothing twice.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, model_validator

from tarry.contracts.messages import ChatMessage, Usage

__all__ = [
    "INDEX_ACTIVITY",
    "IndexAnswer",
    "IndexRequest",
    "IndexedMessage",
    "IndexedRun",
    "SearchHit",
    "agent_of",
    "indexed_text",
]

INDEX_ACTIVITY = "index_messages"

_SUB_AGENT = re.compile(r":([A-Za-z0-9_.-]+)-[0-9]+$")
"""A sub-agent's run id, `LEAD:AGENT-N` (`workflows.agents.child_id`)."""


def agent_of(run_id: str) -> str | None:
    """The sub-agent whose run `run_id` is; None: a run of its own."""
    found = _SUB_AGENT.search(run_id)
    return found.group(1) if found else None


def indexed_text(message: ChatMessage) -> str:
    """What of `message` search finds it by: its text and its tool calls' names and
    arguments."""
    calls = [f"{c.function.name} {c.function.arguments}" for c in message.tool_calls or ()]
    return "\n".join(part for part in (message.content, *calls) if part)


class IndexedRun(BaseModel):
    """A run as the index knows it: its owner and the names that may read it (its
    readers and writers), set once at its start, and its sub-agent's name."""

    run_id: str
    owner: str | None = None
    readers: list[str] = []
    agent: str | None = None


class IndexedMessage(BaseModel):
    """One message of a run's transcript: `index` is its place in the transcript."""

    index: int
    role: Literal["system", "user", "assistant", "tool"]
    text: str
    at: datetime
    """When the run wrote it (the workflow's time), or, rebuilt, when its run started."""


class IndexRequest(BaseModel):
    run: IndexedRun
    messages: list[IndexedMessage]


class IndexAnswer(BaseModel):
    """The index activity's answer: how many of the messages were new, and what embedding
    them used (an embedding profile's), which counts against the run's budget. The
    vectors stay on the worker: a run's history never holds them."""

    new: int = 0
    usage: Usage | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_a_count(cls, value: object) -> object:
        """The activity answered the count alone before embeddings: a recorded history's
        answer still reads."""
        return {"new": value} if isinstance(value, int) else value


class SearchHit(BaseModel):
    """One message a search found: where it is (run, transcript index) and its snippet,
    the matched words in `[` `]`."""

    run_id: str
    index: int
    role: str
    snippet: str
    at: datetime
    agent: str | None = None
    score: float
    """Higher is better; comparable within one search only: the store's text rank, or in
    a hybrid search the reciprocal rank fusion of its words' and its meaning's ranks
    (`tarry.search.fused`)."""
