"""One reader of a run's events per process, however many people watch it.

Every reader of `RunHandle.events` polls the run with updates, which its history
records; a hundred browser tabs on one run must not poll it a hundred times. A `Feed`
reads a run's events once and hands each to every stream that follows it; `Feeds` keeps
one per run for as long as anyone follows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncGenerator

from tarry.client import Tarry
from tarry.contracts.events import RunEvent

__all__ = ["Feed", "Feeds"]

KEEP_AT_MOST = 1024
"""Events a feed holds before it forgets those every follower has read; the rest stay
for followers still behind, and for newcomers that resume there."""


class Feed:
    """The events of one run from offset `start`, read once, followed by many."""

    def __init__(self, tarry: Tarry, run_id: str, start: int) -> None:
        self.start = start
        """The smallest offset this feed can still serve whole."""
        self.followers = 0
        self._events: list[RunEvent] = []
        self._base = 0
        """The position, counted from the feed's first event, of `_events[0]`."""
        self._positions: dict[int, int] = {}
        self._tickets = itertools.count()
        self._arrived = asyncio.Event()
        self._error: BaseException | None = None
        self._reading = asyncio.create_task(self._read(tarry, run_id))

    @property
    def ended(self) -> bool:
        return self._reading.done()

    async def _read(self, tarry: Tarry, run_id: str) -> None:
        try:
            async for event in tarry.get(run_id).events(self.start):
                self._events.append(event)
                self._forget_what_all_have_read()
                self._wake()
        except Exception as e:  # every follower raises it
            self._error = e
        finally:
            self._wake()

    def _wake(self) -> None:
        self._arrived.set()
        self._arrived = asyncio.Event()

    def _forget_what_all_have_read(self) -> None:
        if len(self._events) <= KEEP_AT_MOST:
            return
        end = self._base + len(self._events)
        oldest = min(self._positions.values(), default=end)
        forgotten, self._events = (
            self._events[: oldest - self._base],
            self._events[oldest - self._base :],
        )
        self._base = oldest
        offsets = [e.offset for e in forgotten if e.offset is not None]
        if offsets:
            self.start = offsets[-1] + 1

    async def follow(self, from_offset: int) -> AsyncGenerator[RunEvent]:
        """The feed's events from `from_offset` on (which must not be below `start`),
        until the run has ended and its last event is read.

        A message the client recovered from the transcript has no offset: it counts as
        part of the event it came before."""
        ticket = next(self._tickets)
        position = self._base
        self._positions[ticket] = position
        reached = False
        try:
            while True:
                while position < self._base + len(self._events):
                    event = self._events[position - self._base]
                    position += 1
                    self._positions[ticket] = position
                    reached = reached or (event.offset is not None and event.offset >= from_offset)
                    if reached:
                        yield event
                if self.ended:
                    if self._error is not None:
                        raise self._error
                    return
                await self._arrived.wait()
        finally:
            del self._positions[ticket]

    async def close(self) -> None:
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading


class Feeds:
    """The feed of each run someone follows in this process."""

    def __init__(self, tarry: Tarry) -> None:
        self._tarry = tarry
        self._feeds: dict[str, Feed] = {}

    async def events(self, run_id: str, from_offset: int = 0) -> AsyncGenerator[RunEvent]:
        """The run's events from `from_offset`, as `RunHandle.events` gives them, read
        through the run's shared feed. A follower resuming before what that feed still
        holds gets a feed of its own, as does one that comes after the feed ended (the
        run may have been resumed since)."""
        feed = self._feeds.get(run_id)
        if feed is None or feed.ended:
            feed = self._feeds[run_id] = Feed(self._tarry, run_id, from_offset)
        elif from_offset < feed.start:
            feed = Feed(self._tarry, run_id, from_offset)
        feed.followers += 1
        try:
            async for event in feed.follow(from_offset):
                yield event
        finally:
            feed.followers -= 1
            if feed.followers == 0:
                if self._feeds.get(run_id) is feed:
                    del self._feeds[run_id]
                await feed.close()

    async def aclose(self) -> None:
        for feed in list(self._feeds.values()):
            await feed.close()
        self._feeds.clear()
