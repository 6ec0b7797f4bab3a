"""The Temporal server of `tarry dev` and the demo: the one already on TEMPORAL_ADDRESS
when one answers there, else a dev server started on this machine (`processes.DevServer`),
its data in the data directory, so runs survive a restart.

What keeps it from serving (a busy port, something there that is not Temporal, a
namespace that does not exist) is a `DevStackError` that says what to do about it.
"""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AsyncExitStack
from pathlib import Path

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from tarry.cli.processes import HOST, DevServer, DevServerError
from tarry.config.settings import TarrySettings
from tarry.temporal.connection import ConnectError, connect_temporal, temporal_connection
from tarry.temporal.servers import is_loopback, register_search_attributes

PROBE_TIMEOUT = 5.0
"""Seconds to wait for whatever listens on the Temporal port to prove it is Temporal."""


class DevStackError(Exception):
    """A problem the user can fix; the message is one line that says how."""


def ui_port(settings: TarrySettings) -> int:
    """TARRY_UI_PORT, else the gRPC port + 1000 as the `temporal` CLI does (8233)."""
    return settings.tarry_ui_port or split_address(settings.temporal_address)[1] + 1000


def split_address(address: str) -> tuple[str, int]:
    """TEMPORAL_ADDRESS as its host and port."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise DevStackError(f"TEMPORAL_ADDRESS must be HOST:PORT, not {address!r}")
    return host, int(port)


async def temporal_server(
    stack: AsyncExitStack, settings: TarrySettings, data_dir: Path
) -> tuple[Client, DevServer | None]:
    """A client of the server on TEMPORAL_ADDRESS, with Tarry's search attributes, and
    the dev server started for it (`stack` stops it), or None when one was running."""
    host, port = split_address(settings.temporal_address)
    server = None
    client = await _reuse_server(settings, host, port)
    if client is None:
        server = await _start_server(stack, settings, data_dir)
        client = await connect_temporal(settings)
    await _ensure_search_attributes(client, settings)
    return client, server


async def _listening(host: str, port: int) -> bool:
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _connect(settings: TarrySettings, timeout: float) -> Client | None:  # noqa: ASYNC109
    """A client if a Temporal server answers within `timeout`, else None."""
    connection = temporal_connection(settings)
    try:
        async with asyncio.timeout(timeout):
            return await connection.connect(settings)
    except ConnectError:
        if connection.tls is not None:
            raise  # TLS refused is its own one line (and exit code), not "not Temporal"
        return None
    except TimeoutError:
        return None


async def _reuse_server(settings: TarrySettings, host: str, port: int) -> Client | None:
    """A client of the server already on TEMPORAL_ADDRESS; None when nothing listens there."""
    if not await _listening(host, port):
        if not is_loopback(host):
            raise DevStackError(
                f"no Temporal server answers at {settings.temporal_address}, and a dev server "
                "can only be started on this machine; start that server or unset TEMPORAL_ADDRESS"
            )
        return None
    client = await _connect(settings, PROBE_TIMEOUT)
    if client is None:
        raise DevStackError(
            f"port {port} is in use by something that is not a Temporal server; stop it "
            "or set TEMPORAL_ADDRESS to a free port, e.g. TEMPORAL_ADDRESS=127.0.0.1:7300"
        )
    return client


async def _start_server(
    stack: AsyncExitStack, settings: TarrySettings, data_dir: Path
) -> DevServer:
    """Starts the dev server, its output going to `<data_dir>/temporal.log`, and returns
    once it serves. It is stopped after the worker, which would otherwise lose its
    server mid-shutdown."""
    ui = ui_port(settings)
    if await _listening(HOST, ui):
        raise DevStackError(
            f"the Web UI port {ui} is in use; stop what uses it or set TARRY_UI_PORT to a free port"
        )
    server = DevServer(
        data_dir,
        port=split_address(settings.temporal_address)[1],
        ui_port=ui,
        namespace=settings.temporal_namespace,
    )
    stack.push_async_callback(server.stop)
    try:
        await server.start()
    except DevServerError as e:
        raise DevStackError(str(e)) from None
    return server


async def _ensure_search_attributes(client: Client, settings: TarrySettings) -> None:
    """Adds the search attributes a server lacks: a reused server may predate Tarry."""
    namespace = settings.temporal_namespace
    try:
        await register_search_attributes(client, namespace)
    except RPCError as e:
        if e.status is RPCStatusCode.NOT_FOUND:
            raise DevStackError(
                f"the Temporal server at {settings.temporal_address} has no namespace "
                f"{namespace!r}; create it with `temporal operator namespace create {namespace}`"
            ) from None
        raise
