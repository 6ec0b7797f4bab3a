"""How every Tarry process reaches Temporal: one client with Tarry's data converter."""

from __future__ import annotations

import atexit
import gc

from temporalio.client import Client
from temporalio.runtime import Runtime

from tarry.codec import data_converter
from tarry.settings import TarrySettings

__all__ = ["connect_temporal"]

# sdk-python #300: the SDK's service client and its services refer to each other (a
# reference cycle), so the Rust connection under a client is freed only by the cycle
# collector. Left to interpreter finalisation, freeing it can abort the process (exit
# 134 or 139, `PyGILState_Release`) after all its work is done: 5 of 20 runs of a plain
# `asyncio.run(main())` script did. Collecting at exit, while the interpreter is still
# whole, frees it safely, so a script that uses this client needs nothing special.
atexit.register(gc.collect)


async def connect_temporal(
    settings: TarrySettings | None = None, *, runtime: Runtime | None = None
) -> Client:
    """A Temporal client with the data converter every Tarry process uses: pydantic,
    encrypting payloads when `TARRY_ENCRYPTION_KEY` is set, and large payloads kept
    outside history (see `tarry.codec`). `runtime`: the SDK runtime for a worker's
    client that serves metrics (`workers.telemetry`); the default one otherwise."""
    settings = settings or TarrySettings()
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=data_converter(settings),
        runtime=runtime,
    )
