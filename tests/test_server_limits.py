"""The API's server within `[api.limits]`, over real sockets: a connection that does not
say what it wants in time is closed, and beyond the requests it serves at once the next
is 503. Served here with an app of the test's own, whose requests wait until the test
lets them go: the limits are the server's, whatever app it serves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tarry.api import ApiServer
from tarry.config.tables import ServerLimits
from tests.deadline import deadline

HEADER_SECONDS = 0.5
"""The servers' `header_timeout` here: short, so that the tests see connections closed
soon. Its firing is the behaviour they assert, a timeout of the product's, not a bound of
a test's wait (`tests/test_deadlines.py`)."""


class HeldApp:
    """`/held` answers once the test calls `release()`; `/now` at once."""

    def __init__(self) -> None:
        self._arrived: asyncio.Queue[None] = asyncio.Queue()
        self._released = asyncio.Event()
        self.app = Starlette(routes=[Route("/held", self._held), Route("/now", self._now)])

    def release(self) -> None:
        self._released.set()

    async def until_held(self, requests: int) -> None:
        """Until `requests` more requests to `/held` have arrived."""
        async with asyncio.timeout(deadline(10)):
            for _ in range(requests):
                await self._arrived.get()

    async def _held(self, _: Request) -> PlainTextResponse:
        self._arrived.put_nowait(None)
        await self._released.wait()
        return PlainTextResponse("released")

    async def _now(self, _: Request) -> PlainTextResponse:
        return PlainTextResponse("now")


@asynccontextmanager
async def served(limits: ServerLimits) -> AsyncIterator[tuple[HeldApp, httpx.AsyncClient, int]]:
    """A `HeldApp` served within `limits`: it, a client of the server, and its port."""
    held = HeldApp()
    async with (
        ApiServer(held.app, "127.0.0.1", 0, limits) as server,
        httpx.AsyncClient(base_url=server.url, timeout=deadline(30)) as http,
    ):
        try:
            yield held, http, server.port
        finally:
            held.release()


def limits(**overrides: float) -> ServerLimits:
    return ServerLimits.model_validate({"header_timeout": HEADER_SECONDS} | overrides)


async def closed_by_the_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server closes the connection (a read gets end of file) before a
    deadline, reading whatever it sends first."""
    try:
        async with asyncio.timeout(deadline(10)):
            while await reader.read(4096):
                pass
    except TimeoutError:
        return False
    return True


async def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout() -> None:
    async with served(limits()) as (_, _, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        closed = await closed_by_the_server(reader)
        writer.close()

    assert closed


async def test_a_connection_that_sends_half_a_request_line_is_closed_after_the_header_timeout() -> (
    None
):
    async with served(limits()) as (_, _, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /no")
        await writer.drain()

        closed = await closed_by_the_server(reader)
        writer.close()

    assert closed


async def test_headers_sent_a_byte_at_a_time_do_not_extend_the_header_timeout() -> None:
    async with served(limits()) as (_, _, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /now HTTP/1.1\r\nHost: 127.0.0.1\r\n")

        async def trickle() -> None:
            while True:
                writer.write(b"X")  # one header's name that never ends
                await writer.drain()
                await asyncio.sleep(HEADER_SECONDS / 10)

        trickling = asyncio.create_task(trickle())
        closed = await closed_by_the_server(reader)
        trickling.cancel()
        writer.close()

    assert closed


async def test_half_a_request_on_a_kept_alive_connection_is_closed_after_the_header_timeout() -> (
    None
):
    async with served(limits(idle_timeout=3600)) as (_, _, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /now HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = await asyncio.wait_for(reader.readuntil(b"now"), deadline(10))
        writer.write(b"GET /no")

        closed = await closed_by_the_server(reader)
        writer.close()

    assert first.startswith(b"HTTP/1.1 200")
    assert closed


async def test_a_request_slower_than_the_header_timeout_to_answer_is_answered() -> None:
    async with served(limits()) as (held, http, _):
        answer = asyncio.create_task(http.get("/held"))
        await held.until_held(1)
        await asyncio.sleep(HEADER_SECONDS * 2)  # past the header timeout, as a slow run's
        held.release()
        response = await answer

    assert (response.status_code, response.text) == (200, "released")


async def test_a_request_beyond_max_concurrent_requests_is_503_with_retry_after() -> None:
    async with served(limits(max_concurrent_requests=2)) as (held, http, _):
        holding = [asyncio.create_task(http.get("/held")) for _ in range(2)]
        await held.until_held(2)

        refused = await http.get("/now")
        held.release()
        answered = await asyncio.gather(*holding)
        after = await http.get("/now")

    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
    assert refused.headers["Retry-After"] == "1"
    assert [r.status_code for r in answered] == [200, 200]
    assert after.status_code == 200
