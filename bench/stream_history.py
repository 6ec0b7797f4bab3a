"""What streaming costs in history: events and bytes per turn of one chat, with
streaming off, on with no observer, and on with an observer following the run.

Each answer is written over about `WRITING_SECONDS` (the scripted model pauses between
chunks), long enough to be streamed: the activity publishes its deltas as a batched
signal about every 200 ms, and each poll of an observer is an update. Both enter
history; the tokens themselves never do. Figures are per turn, over the whole chain.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from bench.rig import (
    CONFIGS,
    LOW_LATENCY,
    Server,
    console,
    dev_server,
    ratio,
    shipped_cache,
    table,
    tarry_worker,
)
from tarry.client import RunHandle
from tarry.contracts import Phase, RunInput
from tarry.testing.scripted_model import ScriptedModel, say

WRITING_SECONDS = 2.0
ANSWER = "word " * 100
CHUNK_CHARS = 10
SETUPS = {  # name: (stream, observe)
    "streaming off": (False, False),
    "streaming on, no observer": (True, False),
    "streaming on, an observer": (True, True),
}


@dataclass
class Cost:
    events: float
    kib: float
    signals: float
    updates: float


async def run(turns: int, root: Path) -> list[Cost]:
    costs = []
    async with dev_server(CONFIGS[LOW_LATENCY]) as server:
        for stream, observe in SETUPS.values():
            costs.append(await _measure(server, stream, observe, turns, root))
    console.print(render(turns, costs))
    return costs


async def _measure(server: Server, stream: bool, observe: bool, turns: int, root: Path) -> Cost:
    delay = WRITING_SECONDS / (len(ANSWER) / CHUNK_CHARS)
    async with ScriptedModel() as model:
        model.add(*(say(ANSWER, chunk_chars=CHUNK_CHARS, chunk_delay=delay) for _ in range(turns)))
        async with tarry_worker(server, model.base_url, root, stream=stream) as worker:
            run = await worker.tarry.start(RunInput(prompt="", continue_as_new_after_turns=1000))
            observer = asyncio.create_task(_observe(run)) if observe else None
            await run.wait_for({Phase.WAITING_USER})
            for n in range(turns):
                await run.send(f"reply {n}")
            await run.stop()
            await run.result()
            if observer:
                observer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await observer
            history = await worker.tarry.client.get_workflow_handle(run.id).fetch_history()
    events = history.events
    # Less the one `stop` signal and each turn's own `send` update.
    signals = (
        sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED for e in events) - 1
    )
    updates = sum(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED for e in events
    )
    return Cost(
        events=len(events) / turns,
        kib=sum(e.ByteSize() for e in events) / 1024 / turns,
        signals=signals / turns,
        updates=updates / turns - 1,
    )


def _count(events: Sequence[HistoryEvent], kind: EventType.ValueType) -> int:
    return sum(e.event_type == kind for e in events)


async def _observe(run: RunHandle) -> None:
    async for _ in run.events():
        pass


def render(turns: int, costs: list[Cost]) -> Table:
    off = costs[0]
    t = table(
        f"History per turn: {turns} turns, each answer written over {WRITING_SECONDS:g} s "
        f"(cache {shipped_cache():,}, low-latency config)",
        "setup", "events", "x off", "KiB", "x off", "publish signals", "observer polls",
    )  # fmt: skip
    for setup, cost in zip(SETUPS, costs, strict=True):
        t.add_row(
            setup,
            f"{cost.events:.1f}",
            ratio(cost.events, off.events),
            f"{cost.kib:.1f}",
            ratio(cost.kib, off.kib),
            f"{cost.signals:.1f}",
            f"{cost.updates:.1f}",
        )
    return t
