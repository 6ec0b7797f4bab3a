"""A test's own HTTP server: an aiohttp application on a free port of 127.0.0.1, for the
receivers and fake APIs the tests stand up (webhooks, pushes, OTLP, a codec server)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

__all__ = ["serving_app"]


@asynccontextmanager
async def serving_app(app: web.Application) -> AsyncIterator[str]:
    """`app` served until the block ends; its base URL (`http://127.0.0.1:PORT`)."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
