"""Result 5, throughput: N chat runs active at once on one worker process, each sent
replies one after another (each reply one model call, answered at once by the scripted
model), for turns per second and the worker's CPU per turn (psutil, user + system).

Beside it, in the same run, Temporal's floor doing the same: `bench.floor.FloorChatWorkflow`
on `python -m bench.worker`, where each `send` update runs the same `call_llm` activity.
Tarry with no workflow cache is a comparison row. Both workers see the low-latency
dynamic config `tarry dev` sets.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
from rich.table import Table
from temporalio.client import Client
from temporalio.service import RPCError

from bench.floor import FloorChatWorkflow
from bench.rig import (
    console,
    dev_server,
    ms,
    ratio,
    shipped_label,
    table,
    tarry_env,
    worker_process,
)
from tarry.client import Tarry
from tarry.contracts import Phase, RunInput
from tarry.temporal.servers import dev_server_args
from tarry.testing.scripted_model import ScriptedModel

Send = Callable[[int], Awaitable[None]]
"""Sends one reply (its number) to one run and waits for the answer."""


@dataclass(frozen=True)
class Way:
    label: str
    tarry: bool
    worker_env: dict[str, str]


@dataclass
class Throughput:
    way: Way
    turns: int
    seconds: float
    worker_cpu: float
    """Seconds of CPU the worker process (and its children) spent on the timed turns."""
    server_cpu: float

    @property
    def per_second(self) -> float:
        return self.turns / self.seconds

    @property
    def cpu_per_turn(self) -> float:
        return self.worker_cpu / self.turns


COMPARISON = 1
"""The index in `ways()` of Tarry at cache 0, a comparison that may fail to finish."""


def ways() -> list[Way]:
    return [
        Way(f"(a) {shipped_label()}", True, tarry_env()),
        Way("(a) Tarry, cache 0 (comparison)", True, {**tarry_env(), "TARRY_WORKFLOW_CACHE": "0"}),
        Way("(b) Temporal floor", False, {}),
    ]


def floor_of(results: Sequence[Throughput]) -> Throughput:
    """The row every other is divided by: Temporal's floor."""
    return next(r for r in results if not r.way.tarry)


def _cpu(pid: int) -> float:
    process = psutil.Process(pid)
    total = 0.0
    for p in (process, *process.children(recursive=True)):
        times = p.cpu_times()
        total += times.user + times.system
    return total


async def measure(way: Way, runs: int, turns: int, data_dir: Path) -> Throughput:
    async with (
        dev_server(dev_server_args(), data_dir) as server,
        ScriptedModel(when_exhausted="echo") as model,
    ):
        queue = f"throughput-{uuid.uuid4().hex[:8]}"
        worker = worker_process(server, model, queue, data_dir, way.worker_env, floor=not way.tarry)
        await worker.start()
        try:
            sends = await asyncio.gather(
                *(_start(server.client, queue, way, i) for i in range(runs))
            )
            await asyncio.gather(*(send(0) for send in sends))  # warm-up: one turn each
            model.requests.clear()
            assert worker.process is not None
            assert server.process.process is not None
            worker_pid, server_pid = worker.process.pid, server.process.process.pid
            worker_cpu, server_cpu = _cpu(worker_pid), _cpu(server_pid)
            began = time.perf_counter()

            async def converse(send: Send) -> None:
                for n in range(1, turns + 1):
                    await send(n)

            await asyncio.gather(*(converse(send) for send in sends))
            seconds = time.perf_counter() - began
            worker_cpu = _cpu(worker_pid) - worker_cpu
            server_cpu = _cpu(server_pid) - server_cpu
            if len(model.requests) != runs * turns:
                raise RuntimeError(f"{len(model.requests)} model calls for {runs * turns} turns")
        finally:
            await worker.stop()
    return Throughput(way, runs * turns, seconds, worker_cpu, server_cpu)


async def _start(client: Client, queue: str, way: Way, i: int) -> Send:
    """Starts run `i` of `way`, waiting for its user; returns how to send it a reply."""
    if way.tarry:
        run = await Tarry(client, queue).start(RunInput(), run_id=f"busy-{i}")
        await run.wait_for({Phase.WAITING_USER})

        async def send_tarry(n: int) -> None:
            await run.send(f"reply {n}")

        return send_tarry
    handle = await client.start_workflow(FloorChatWorkflow.run, id=f"busy-{i}", task_queue=queue)

    async def send_floor(n: int) -> None:
        await handle.execute_update(FloorChatWorkflow.send, f"reply {n}")

    return send_floor


async def run(runs: int, turns: int, root: Path) -> list[Throughput]:
    results = []
    for i, way in enumerate(ways()):
        try:
            results.append(await measure(way, runs, turns, root / f"throughput-{i}"))
        except (RPCError, RuntimeError) as e:
            if i != COMPARISON:
                raise
            # At cache 0 every task replays its run's segment: under this load the worker
            # may not finish tasks within their timeout, and the server refuses updates.
            console.print(f"{way.label}: did not finish: {type(e).__name__}: {e}")
    console.print(render(runs, turns, results))
    return results


def render(runs: int, turns: int, results: Sequence[Throughput]) -> Table:
    floor = floor_of(results)
    t = table(
        f"Throughput: {runs} chat runs active at once on one worker process, {turns} replies "
        "each, one model call per reply (low-latency config)",
        "way", "turns/s", "x floor", "worker CPU ms/turn", "x floor",
        "server CPU ms/turn", "x floor",
    )  # fmt: skip
    for r in results:
        t.add_row(
            r.way.label,
            f"{r.per_second:,.1f}",
            ratio(r.per_second, floor.per_second),
            ms(r.cpu_per_turn),
            ratio(r.cpu_per_turn, floor.cpu_per_turn),
            ms(r.server_cpu / r.turns),
            ratio(r.server_cpu, floor.server_cpu),
        )
    return t
