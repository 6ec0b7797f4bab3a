"""Each user's share of the API (`[api.limits] starts_per_minute`, `streams_per_user`):
one person's script starting runs in a loop, or a page opening streams without end,
is refused 429 `QUOTA_EXCEEDED` with `Retry-After`, and leaves the others their share.

Counted per API process, in memory: a restart forgets the counts, and each process of a
deployment with several counts its own.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterable, Callable

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

from tarry.config.tables import ServerLimits
from tarry.contracts import ErrorCode
from tarry.core.errors import RetryLater

__all__ = ["CountedStream", "UserQuotas"]

WINDOW = 60.0
"""Seconds over which `starts_per_minute` counts a user's starts."""

STREAM_RETRY_AFTER = 5
"""Seconds a user at their streams' cap is asked to wait: until a stream of theirs ends."""


class UserQuotas:
    """The users' starts in the last minute and open streams, against their caps."""

    def __init__(self, limits: ServerLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.starts_per_minute = limits.starts_per_minute
        self.streams_per_user = limits.streams_per_user
        self._clock = clock
        self._starts: defaultdict[str, deque[float]] = defaultdict(deque)
        self._streams: defaultdict[str, int] = defaultdict(int)

    def admit_start(self, user: str) -> None:
        """Counts a request of `user` that may start a run; `QUOTA_EXCEEDED` (counting
        nothing) when they sent `starts_per_minute` in the last minute."""
        if self.starts_per_minute is None:
            return
        now = self._clock()
        starts = self._starts[user]
        while starts and starts[0] <= now - WINDOW:
            starts.popleft()
        if len(starts) >= self.starts_per_minute:
            raise RetryLater(
                ErrorCode.QUOTA_EXCEEDED,
                f"{user} started {len(starts)} runs in the last minute, as many as"
                " [api.limits] starts_per_minute allows; try again after Retry-After",
                retry_after=max(1, math.ceil(starts[0] + WINDOW - now)),
            )
        starts.append(now)

    def open_stream(self, user: str) -> Callable[[], None]:
        """Counts an event stream of `user` open; what gives it back once it ends (once,
        however often called). `QUOTA_EXCEEDED` when they hold `streams_per_user`."""
        if self.streams_per_user is None:
            return lambda: None
        if self._streams[user] >= self.streams_per_user:
            raise RetryLater(
                ErrorCode.QUOTA_EXCEEDED,
                f"{user} holds {self._streams[user]} event streams open, as many as"
                " [api.limits] streams_per_user allows; close one (a browser tab on a run)",
                retry_after=STREAM_RETRY_AFTER,
            )
        self._streams[user] += 1
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if not given_back:
                given_back = True
                self._streams[user] -= 1

        return give_back


class CountedStream(EventSourceResponse):
    """An event stream that gives its user's slot back however it ends: at the run's
    end, when the client goes, or when the server stops."""

    def __init__(
        self, content: AsyncIterable[ServerSentEvent], give_back: Callable[[], None]
    ) -> None:
        super().__init__(content)
        self._give_back = give_back

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._give_back()
