"""The worker process (`python -m workers`, `tarry worker`): a `Worker` with `TarryPlugin`
and the settings from the environment, serving until it is told to stop."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence

from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.tool_calls import BUILTIN_TOOLS, Tool
from tarry.config.settings import TarrySettings
from tarry.temporal.connection import connect_temporal
from tarry.temporal.servers import missing_search_attributes, search_attribute_command
from workers.flat_memory import keep_memory_flat
from workers.plugin import TarryPlugin
from workers.telemetry import metrics_url, worker_runtime

__all__ = ["WorkerSetupError", "check_search_attributes", "run_worker"]

log = logging.getLogger("tarry.worker")


class WorkerSetupError(Exception):
    """The worker cannot serve runs as configured; the message says what to do."""


async def check_search_attributes(client: Client, namespace: str) -> None:
    """Refuses to start where runs could not record their phase: on such a namespace
    every workflow task would fail (`search attribute ... is not defined`) forever."""
    try:
        missing = await missing_search_attributes(client, namespace)
    except RPCError as e:
        # Some deployments do not let workers read the namespace's schema; carry on.
        log.warning("cannot check Tarry's search attributes (%s); runs need them", e.message)
        return
    if missing:
        raise WorkerSetupError(
            f"namespace {namespace!r} lacks the search attributes {', '.join(missing)}; "
            f"create them with: {search_attribute_command(namespace, missing)}"
        )


async def run_worker(settings: TarrySettings, tools: Sequence[Tool] = BUILTIN_TOOLS) -> None:
    """Serves `tools` until SIGINT or SIGTERM, then lets in-flight tasks finish and returns.
    Raises `tarry.temporal.connection.ConnectError` when Temporal refuses or is not there."""
    plugin = TarryPlugin(settings, tools=tools)
    try:
        runtime = worker_runtime(settings)
    except ValueError as e:  # the SDK's: "Failed starting Prometheus exporter: ..."
        raise WorkerSetupError(f"{e}; set TARRY_METRICS_PORT to a free port") from None
    # A server that refuses or is not there: `ConnectError`, one line and its exit code.
    client = await connect_temporal(settings, runtime=runtime)
    await check_search_attributes(client, client.namespace)
    worker = Worker(client, task_queue=settings.tarry_task_queue, plugins=[plugin])
    keep_memory_flat()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        log.info(
            "worker ready: task queue %r on %s, tools: %s",
            settings.tarry_task_queue,
            client.service_client.config.target_host,
            ", ".join(plugin.tools.names),
        )
        if settings.tarry_deployment:
            log.info(
                "build %r of worker deployment %r: runs stay on their build until a hand-over",
                settings.tarry_build_id,
                settings.tarry_deployment,
            )
        if url := metrics_url(settings):
            log.info("metrics at %s", url)
        await stop.wait()
        log.info("shutting down")
    await plugin.aclose()
