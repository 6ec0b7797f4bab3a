"""Serving the API with uvicorn inside a process that has other work too (`tarry
serve`, `tarry dev`, tests): on a socket bound here, so a busy port is one clear error,
and without uvicorn's signal handlers, so the process's own Ctrl-C handling stands."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Generator
from contextlib import contextmanager
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp

from tarry.api.access import AllowedHosts
from tarry.api.limits import ConcurrencyLimit, HeadTimeoutH11
from tarry.config.settings import TarrySettings
from tarry.config.tables import ServerLimits
from tarry.temporal.servers import is_loopback

__all__ = ["GRACE", "ApiServer", "ApiSetupError", "check_exposure"]


GRACE = 2
"""Seconds open requests (event streams never end by themselves) get at shutdown."""


class ApiSetupError(Exception):
    """A problem the user can fix; the message is one line that says how."""


def check_exposure(host: str, settings: TarrySettings) -> None:
    """Refuses to serve beyond this machine without tokens: whoever reaches the API can
    start runs, answer them and approve what their agents do. Nor, without tokens, to
    any `Host`: then any web page whose name resolves to 127.0.0.1 could. And says which
    entry of TARRY_API_ALLOWED_HOSTS is no host."""
    try:
        AllowedHosts.parse(settings.tarry_api_allowed_hosts)
    except ValueError as e:
        raise ApiSetupError(str(e)) from None
    if settings.api_authenticates():
        return
    if not is_loopback(host):
        raise ApiSetupError(
            f"refusing to serve the API on {host} with no TARRY_API_TOKENS: anyone who"
            " reaches it could drive your runs; set TARRY_API_TOKENS=TOKEN[,TOKEN...]"
            " (or the config's [api.oidc] or [api] trusted_proxy) or listen on 127.0.0.1"
        )


class _Embedded(uvicorn.Server):
    @contextmanager
    def capture_signals(self) -> Generator[None]:
        # uvicorn would replace the process's SIGINT and SIGTERM handlers, then raise
        # the signal again after its own shutdown.
        yield


class ApiServer:
    """`app` (the API, or `tarry mcp --http`'s) served on `host:port` (0: any free port)
    from `start()` until `stop()`, within `limits` (`[api.limits]`; None: the defaults)."""

    def __init__(
        self, app: ASGIApp, host: str, port: int, limits: ServerLimits | None = None
    ) -> None:
        self.host, self.port = host, port
        limits = limits or ServerLimits()
        config = uvicorn.Config(
            ConcurrencyLimit(app, limits.max_concurrent_requests),
            http=HeadTimeoutH11.with_header_timeout(limits.header_timeout),
            timeout_keep_alive=limits.idle_timeout,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=GRACE,
            # A request's address is its connection's: `[api] trusted_proxy` believes a
            # gateway by it, which `X-Forwarded-For` from any loopback caller must not forge.
            proxy_headers=False,
        )
        self._server = _Embedded(config)
        self._serving: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        try:
            # uvicorn ends the process when it cannot bind; bound here, it need not.
            listening = socket.create_server(
                (self.host, self.port), family=_family(self.host), reuse_port=False
            )
        except OSError as e:
            raise ApiSetupError(
                f"cannot serve the API on {self.host}:{self.port} ({e.strerror or e}); choose"
                " another with --port or TARRY_API_PORT"
            ) from None
        self.port = listening.getsockname()[1]
        self._serving = asyncio.create_task(self._server.serve(sockets=[listening]))
        while not self._server.started:
            if self._serving.done():
                await self._serving
                raise ApiSetupError("the API server stopped while starting")
            await asyncio.sleep(0.01)

    async def wait(self) -> None:
        """Until the server stops."""
        assert self._serving is not None, "start() first"
        await asyncio.shield(self._serving)

    async def stop(self) -> None:
        if self._serving is None:
            return
        self._server.should_exit = True
        await self._serving

    async def __aenter__(self) -> ApiServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _error: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        await self.stop()


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
