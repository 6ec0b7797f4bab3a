"""What keeps connections from piling up on the API's server (`[api.limits]`,
`tarry.api.server`): a request's head must arrive whole within `header_timeout`, an
idle connection closes after `idle_timeout`, and beyond `max_concurrent_requests`
requests at once the next is 503.

uvicorn closes a connection idle after a response (`timeout_keep_alive`), but bounds
neither a new connection that sends nothing nor a request line sent a byte at a time:
each would hold a socket for as long as its sender liked. `HeadTimeoutH11` adds that
bound to uvicorn's h11 protocol. uvicorn's own `limit_concurrency` answers a plain-text
503; `ConcurrencyLimit` answers the API's error body instead, with `Retry-After`.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus

import h11
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from tarry.api.errors import error_response

__all__ = ["RETRY_AFTER", "ConcurrencyLimit", "HeadTimeoutH11"]

RETRY_AFTER = 1
"""Seconds a client is asked to wait before it tries a request refused as too many."""


class HeadTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, which closes a connection whose request line and headers
    do not arrive whole within `header_timeout` seconds of its opening, or of the first
    byte of a request on a kept-alive connection. Bytes that trickle in do not extend it."""

    header_timeout: float = 10.0
    """Set on a subclass per server (`with_header_timeout`): uvicorn makes the protocol."""

    _head_timer: asyncio.TimerHandle | None = None

    @classmethod
    def with_header_timeout(cls, seconds: float) -> type[HeadTimeoutH11]:
        return type(cls.__name__, (cls,), {"header_timeout": seconds})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _watch_head(self) -> None:
        """Starts the head's timer while a request's head is awaited, once; stops it when
        the head has come (h11 then waits for the body, or for nothing more)."""
        awaiting_head = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if not awaiting_head:
            self._stop_head_timer()
        elif self._head_timer is None and self.timeout_keep_alive_task is None:
            # Between requests, uvicorn's keep-alive timer bounds the wait until the
            # first byte; that byte cancels it, and the head's bound starts.
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_too_slow)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE:
            self.transport.close()


class ConcurrencyLimit:
    """ASGI middleware that serves at most `limit` HTTP requests at once (an event stream
    counts while it is open) and answers any more 503 `SERVICE_UNAVAILABLE`, with
    `Retry-After`, without reading them."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit
        self._open = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._open >= self.limit:
            refusal = error_response(
                HTTPStatus.SERVICE_UNAVAILABLE,
                HTTPStatus.SERVICE_UNAVAILABLE.name,
                f"the server is serving {self.limit} requests, as many as it serves at once"
                f" ([api.limits] max_concurrent_requests); try again in {RETRY_AFTER} s",
                headers={"Retry-After": str(RETRY_AFTER)},
            )
            await refusal(scope, receive, send)
            return
        self._open += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self._open -= 1
