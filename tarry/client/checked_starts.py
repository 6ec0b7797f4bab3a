"""What the workers answered a start's check, kept for the next start that asks the same.

A client that starts a run per message or per ticket (the API, a bot) asks the workers the
same question before every start: a round trip through the server to a worker, most of
what a start cost beyond Temporal's floor (docs/guides/performance.md). An answer that
lets a run start is kept, with the catalogue it carries, and a start asking the same of the
same workers takes it instead:

- while the same workers poll the queue (`worker_of`: identity and build): a worker
  restarted or deployed anew is another, and its configuration may have changed with it;
- for at most `KEPT_FOR` seconds: an MCP server's tools can change under a running worker.

A refusal is never kept: a start that names what the workers lack asks every time, so one
that gained it meanwhile is heard at once. A run started on a kept answer keeps what the
workers said when it was asked, as a run started that much earlier would.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

from temporalio.client import Client

from tarry.contracts import CatalogueRequest, CheckedCatalogue

__all__ = ["KEPT_FOR", "CheckedStarts", "checked_starts"]

KEPT_FOR = 30.0
"""Seconds a positive answer is kept, as `SERVED_FOR` keeps a run's worker."""


@dataclass(frozen=True)
class _Kept:
    workers: frozenset[str]
    answer: CheckedCatalogue
    until: float


class CheckedStarts:
    """One client's kept answers, by task queue and what the start asked."""

    MOST = 256
    """Answers kept at most: the oldest goes first."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], _Kept] = {}

    def get(
        self, queue: str, request: CatalogueRequest, workers: frozenset[str]
    ) -> CheckedCatalogue | None:
        """The answer kept for `request` on `queue`, if `workers` gave it and it is fresh."""
        kept = self._kept.get((queue, request.model_dump_json()))
        if kept is None or kept.workers != workers or time.monotonic() > kept.until:
            return None
        return kept.answer

    def keep(
        self,
        queue: str,
        request: CatalogueRequest,
        workers: frozenset[str],
        answer: CheckedCatalogue,
    ) -> None:
        """Keeps `answer`, which `workers` gave, unless it refuses (or no one can tell who
        gave it)."""
        if answer.refusal is not None or not workers:
            return
        key = (queue, request.model_dump_json())
        self._kept.pop(key, None)
        if len(self._kept) >= self.MOST:
            del self._kept[next(iter(self._kept))]
        self._kept[key] = _Kept(workers, answer, time.monotonic() + KEPT_FOR)


_OF_CLIENT: weakref.WeakKeyDictionary[Client, CheckedStarts] = weakref.WeakKeyDictionary()


def checked_starts(client: Client) -> CheckedStarts:
    """The answers kept for the starts of `client` (of its connection, whoever uses it)."""
    kept = _OF_CLIENT.get(client)
    if kept is None:
        kept = _OF_CLIENT[client] = CheckedStarts()
    return kept
