"""The interface every search store keeps, and how a location opens one."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tarry.contracts.search import IndexedMessage, IndexedRun, IndexRequest, SearchHit
from tarry.core.identities import Caller
from tarry.core.ownership import Policy, principals

__all__ = [
    "SCHEMA_VERSION",
    "IndexedMessage",
    "IndexedRun",
    "Readable",
    "SearchHit",
    "SearchQuery",
    "SearchStore",
    "open_store",
    "words_of",
]

SCHEMA_VERSION = 1
"""The index's schema, kept in the store; a store of an older one is upgraded when it
opens (each store's `_UPGRADES`), one of a newer one refused."""

_WORD = re.compile(r"\w+")


def words_of(text: str) -> list[str]:
    """The words of a query, as each store matches them (all of them, in any order):
    punctuation is no operator, so what a person types cannot be a syntax error."""
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class Readable:
    """The runs a caller may read: their own (`user`), and those whose readers name one
    of `names` (theirs and their groups', `ownership.principals`)."""

    user: str
    names: frozenset[str]

    @classmethod
    def of(cls, policy: Policy, caller: Caller) -> Readable | None:
        """What `caller` may read under `policy`; None: every run."""
        if policy.sees_all(caller):
            return None
        return cls(caller.user, frozenset(principals(caller)))


@dataclass(frozen=True)
class SearchQuery:
    text: str
    since: datetime | None = None
    """Messages written at or after this; None: any."""
    agent: str | None = None
    """Only the runs of this sub-agent; None: every run."""
    readable: Readable | None = None
    """Only the runs a caller may read; None: every run (an operator's command line)."""
    limit: int = 20


class SearchStore(ABC):
    """An index of the runs' messages. Indexing a message already indexed (the same run
    and transcript index) changes nothing."""

    @abstractmethod
    async def index(self, request: IndexRequest) -> int:
        """Indexes `request`'s messages and records its run; answers how many were new."""

    @abstractmethod
    async def search(self, query: SearchQuery) -> list[SearchHit]:
        """The messages with every word of `query.text`, best first; none for no words."""

    @abstractmethod
    async def count(self) -> int:
        """How many messages are indexed."""

    @abstractmethod
    async def clear(self) -> None:
        """Forgets every run and message (a rebuild starts from nothing)."""

    @abstractmethod
    async def schema_version(self) -> int:
        """The version of the schema the store holds."""

    @abstractmethod
    async def close(self) -> None: ...


async def open_store(location: str) -> SearchStore:
    """The store at `location` (`TARRY_SEARCH_INDEX`): a SQLite file's path, created
    with its schema if there is none, or upgraded to `SCHEMA_VERSION`."""
    from tarry.search.sqlite import SqliteStore

    return await SqliteStore.open(Path(location))
