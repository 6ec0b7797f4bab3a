"""An HTTP client that connects only to public addresses: for URLs people give the
workers (A2A push configs), which must not make a worker POST to its own machine, its
network or a cloud's metadata service (169.254.169.254): server-side request forgery.

The check sits in httpcore's network backend, where a connection is opened: the host is
resolved once, every address it resolves to must be public (`tarry.core.addresses`), and the socket
is opened to an address that was checked, so no second lookup can answer otherwise
between the check and the connection (DNS rebinding). httpcore still starts TLS with the
URL's host name, so the certificate is checked against the name, as on any request, and
the request keeps its URL and `Host` header. `ssrfguard` pins its connections at the same
seam; this is the few lines of it a push needs, without a dependency for every worker.

The client is built with its transport, so it takes no proxy from the environment
(`HTTP_PROXY`): a proxy would resolve the host itself, unchecked.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterable

import httpcore
import httpx

from tarry.core.addresses import is_public

__all__ = ["PrivateAddress", "public_only_client"]

_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)
"""httpx's own defaults, for the pool built here as for the one it would build."""


class PrivateAddress(Exception):
    """A host resolves to an address that is not public; another attempt gets the same."""


class _PublicOnly(httpcore.AsyncNetworkBackend):
    """httpcore's own backend, connecting only to the public addresses a host resolves to."""

    def __init__(self) -> None:
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                found = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"{host} did not resolve in time") from None
        except OSError as e:
            raise httpcore.ConnectError(f"{host} did not resolve: {e}") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
        if private := [a for a in addresses if not is_public(a)]:
            raise PrivateAddress(f"its host resolves to {', '.join(private)}, not a public address")
        failure: Exception = httpcore.ConnectError(f"{host} resolves to no address")
        for address in addresses:
            try:
                return await self._backend.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as e:
                failure = e
        raise failure

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def public_only_client(verify: ssl.SSLContext) -> httpx.AsyncClient:
    """A client whose requests reach public addresses only; one to a host that resolves
    to any other raises `PrivateAddress`."""
    transport = httpx.AsyncHTTPTransport(verify=verify, limits=_LIMITS)
    # httpx takes no network backend; its pool is httpcore's, which does.
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=verify,
        max_connections=_LIMITS.max_connections,
        max_keepalive_connections=_LIMITS.max_keepalive_connections,
        keepalive_expiry=_LIMITS.keepalive_expiry,
        network_backend=_PublicOnly(),
    )
    return httpx.AsyncClient(transport=transport)
