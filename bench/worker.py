"""`python -m bench.worker`: a worker process for Temporal's floor workflows
(`bench.floor.ParkedWorkflow` and `FloorChatWorkflow`, with Tarry's real `call_llm`), so
its memory and CPU are its own. Configured from the environment like `python -m workers`,
plus:

BENCH_CACHE          max_cached_workflows (the SDK's default: 1000)
BENCH_POLLS          max_concurrent_workflow_task_polls (the SDK's default: 5)
BENCH_STICKY_TIMEOUT sticky_queue_schedule_to_start_timeout in seconds (default: 10)
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta

from temporalio.worker import Worker

from bench.floor import FloorChatWorkflow, ParkedWorkflow
from tarry.config.settings import TarrySettings
from tarry.temporal.connection import connect_temporal
from tarry.temporal.entrypoint import run_main
from workers.plugin import TarryPlugin


async def main() -> int:
    settings = TarrySettings()
    client = await connect_temporal(settings)
    # Tarry's model activity as Tarry's worker builds it, under the floor's workflows.
    plugin = TarryPlugin(settings)
    models = plugin.model_client(client.data_converter)
    worker = Worker(
        client,
        task_queue=settings.tarry_task_queue,
        workflows=[ParkedWorkflow, FloorChatWorkflow],
        activities=[models.call_llm],
        max_cached_workflows=int(os.environ.get("BENCH_CACHE", "1000")),
        max_concurrent_workflow_task_polls=int(os.environ.get("BENCH_POLLS", "5")),
        sticky_queue_schedule_to_start_timeout=timedelta(
            seconds=float(os.environ.get("BENCH_STICKY_TIMEOUT", "10"))
        ),
    )
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with worker:
        print("worker ready", file=sys.stderr, flush=True)
        await stop.wait()
    await plugin.aclose()
    return 0


if __name__ == "__main__":
    run_main(main)
