"""Live sessions with the worker's MCP servers: one per server, shared by every call,
opened on first use and opened again once it broke, so a stdio server that died is a
new process at the next call.

Needs the `mcp` extra; `workers.plugin` imports this only for a worker configured with
MCP servers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tarry.config.settings import McpServer

__all__ = ["Connection", "ServerDown", "session_as"]

_CLOSE_TIMEOUT = 5.0
"""Seconds a closing session may take; a server that hangs must not hang the worker."""


class ServerDown(Exception):
    """The server could not be reached: nothing was sent to it."""


class Connection:
    """The session with one configured server."""

    def __init__(self, name: str, config: McpServer) -> None:
        self.name = name
        self._config = config
        self._live: _Live | None = None
        self._lock = asyncio.Lock()

    async def client(self) -> Client:
        """The live session, opened when there is none; `ServerDown` when it cannot be."""
        async with self._lock:
            if self._live is None or self._live.ended:
                self._live = _Live(self._open)
            live = self._live
        try:
            return await live.ready()
        except Exception as e:
            await self.retire(live)
            raise ServerDown(f"MCP server {self.name!r} is unreachable: {_reason(e)}") from e

    async def retire(self, live: _Live | None = None) -> None:
        """Closes the session (`live`, when given: only if it is still the current one),
        so the next call opens a new one."""
        async with self._lock:
            if live is not None and live is not self._live:
                return
            current, self._live = self._live, None
        if current is not None:
            await current.close()

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[Client]:
        config = self._config
        if config.command is not None:
            params = StdioServerParameters(
                command=config.command,
                args=config.args,
                env=config.env or None,
                cwd=config.cwd,
            )
            async with Client(params, cache=None) as client:
                yield client
            return
        assert config.url is not None  # McpServer validates: a command or a URL
        http = httpx2.AsyncClient(headers=config.headers, timeout=httpx2.Timeout(30, read=300))
        async with http, Client(streamable_http_client(config.url, http_client=http)) as client:
            yield client


@asynccontextmanager
async def session_as(
    config: McpServer, bearer: str, refused: Callable[[], None]
) -> AsyncIterator[Client]:
    """A session of its own for one call with a person's token (`auth = "oauth"`): never
    shared, so one person's grant carries no other person's call. `refused` is called
    when the server answers 401 (the token was revoked at its authorization server)."""

    async def seen(response: httpx2.Response) -> None:
        if response.status_code == 401:
            refused()

    assert config.url is not None  # McpServer validates: OAuth is for a URL
    headers = {**config.headers, "Authorization": f"Bearer {bearer}"}
    http = httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(30, read=300),
        event_hooks={"response": [seen]},
    )
    async with http, Client(streamable_http_client(config.url, http_client=http)) as client:
        yield client


class _Live:
    """One session, entered and exited by a task of its own: the SDK's transports are
    anyio task groups, which must be left by the task that entered them, while the calls
    that use the session come from many activity tasks."""

    def __init__(self, open: Callable[[], AbstractAsyncContextManager[Client]]) -> None:
        self._ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._owner = asyncio.create_task(self._own(open))

    async def _own(self, open: Callable[[], AbstractAsyncContextManager[Client]]) -> None:
        try:
            async with open() as client:
                self._ready.set_result(client)
                await self._stop.wait()
        except asyncio.CancelledError:
            self._ready.cancel()
        except BaseException as e:  # a dead stdio process ends the session with a group
            if not self._ready.done():
                self._ready.set_exception(e)

    @property
    def ended(self) -> bool:
        return self._owner.done()

    async def ready(self) -> Client:
        # Shielded: a caller cancelled while it waits must not cancel the others' session.
        return await asyncio.shield(self._ready)

    async def close(self) -> None:
        self._stop.set()
        if not self._ready.done():
            self._owner.cancel()
        await asyncio.wait([self._owner], timeout=_CLOSE_TIMEOUT)


def _reason(e: BaseException) -> str:
    """The innermost cause of a failure, which anyio wraps in exception groups."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}"
