"""Stopping a long-running command cleanly on Ctrl-C or SIGTERM: `tarry dev`, `tarry
serve` and the demo run their work until a signal comes, then shut down what they
started, without a traceback."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

T = TypeVar("T")


@asynccontextmanager
async def stop_signals() -> AsyncIterator[asyncio.Event]:
    """SIGINT and SIGTERM set the event, for the whole block.

    The whole block, shutdown included: a second Ctrl-C while the stack stops must not
    interrupt the shutdown halfway and leave the dev server running with nobody to stop
    it. SIGTERM too, so `kill` stops the stack as cleanly as Ctrl-C does.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


async def unless_stopped(stop: asyncio.Event, work: Coroutine[Any, Any, T]) -> T | None:
    """Runs `work` to its end, or cancels it once `stop` is set and returns None."""
    finished = await race(work, stop.wait())
    return None if finished is None else finished.result()


async def race(
    work: Coroutine[Any, Any, T], rival: Coroutine[Any, Any, object]
) -> asyncio.Task[T] | None:
    """Runs `work` until it or `rival` ends; the other is cancelled.

    Returns the finished task of `work`, or None when `rival` ended first (an error
    of `rival` is raised instead). Neither task outlives the call, also when the call
    itself is cancelled.
    """
    tasks = (asyncio.create_task(work), asyncio.create_task(rival))
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    done, lost = tasks
    if not done.cancelled():
        return done
    lost.result()
    return None
