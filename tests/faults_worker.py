"""`python -m tests.faults_worker`: a worker built as `python -m workers` builds its own
(`build_worker`, `ModelClient`, `ToolHost`, configured from the environment), with two
test tools besides the built-ins, so a test can kill it while a tool runs.

`block(name)` and `block_once(name)` each append a line to `<workspace>/<name>.starts`
when they begin, then wait until `<workspace>/<name>.release` exists. `block` is
idempotent (retried after its worker died); `block_once` is not (`idempotent=False`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import NoReturn

from activities.context import ContextStore
from activities.llm import ModelClient
from activities.tools import BUILTIN_TOOLS, Tool, ToolContext, ToolHost, tool
from tarry.client import connect_temporal
from tarry.entrypoint import run_main
from tarry.settings import TarrySettings
from tarry.storage import storage_driver
from workers.worker import build_worker

log = logging.getLogger("tarry.faults_worker")


async def _block(ctx: ToolContext, name: str) -> str:
    """Record a start, then wait until the test releases the call."""
    with (ctx.workspace / f"{name}.starts").open("a") as starts:
        starts.write(f"{os.getpid()}\n")
    release = ctx.workspace / f"{name}.release"
    while not release.exists():  # the test releases it, from another process
        await asyncio.sleep(0.05)
    return f"released {name}"


block = tool(name="block")(_block)
block_once = tool(name="block_once", idempotent=False)(_block)
FAULT_TOOLS: tuple[Tool, ...] = (block, block_once)


async def _main() -> int:
    settings = TarrySettings()
    client = await connect_temporal(settings)
    tools = ToolHost(settings.tarry_workspace_root, (*BUILTIN_TOOLS, *FAULT_TOOLS))
    contexts = ContextStore(storage_driver(settings), client.data_converter)
    models = ModelClient(settings.model_profiles(), tools, contexts)
    worker = build_worker(client, settings.tarry_task_queue, models, tools)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        log.info("worker ready: pid %d, task queue %r", os.getpid(), settings.tarry_task_queue)
        await stop.wait()
    await models.aclose()
    return 0


def main() -> NoReturn:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    run_main(_main)


if __name__ == "__main__":
    main()
