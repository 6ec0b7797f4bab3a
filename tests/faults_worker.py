"""`python -m tests.faults_worker`: the worker `python -m workers` runs (`run_worker`,
configured from the environment), with two test tools besides the built-ins, so a test
can kill it while a tool runs.

`block(name)`, `block_once(name)` and `block_quick(name)` each append a line to
`<workspace>/<name>.starts` when they begin, then wait until `<workspace>/<name>.release`
exists. `block` is idempotent (retried after its worker died); `block_once` is not
(`idempotent=False`); `block_quick` is declared quick, so it runs as a local activity.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import NoReturn

from activities.tool_calls import BUILTIN_TOOLS, Tool, ToolContext, tool
from tarry.config.settings import TarrySettings
from tarry.temporal.entrypoint import run_main
from workers.worker import run_worker


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
block_quick = tool(name="block_quick", quick=True)(_block)
FAULT_TOOLS: tuple[Tool, ...] = (block, block_once, block_quick)


async def _main() -> int:
    await run_worker(TarrySettings(), (*BUILTIN_TOOLS, *FAULT_TOOLS))
    return 0


def main() -> NoReturn:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    run_main(_main)


if __name__ == "__main__":
    main()
