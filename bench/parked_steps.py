"""Parked runs in growing steps, toward 100,000 on one machine (issue 62, item 3).

One dev server (SQLite file) and one Tarry worker process with the shipped settings
(`python -m workers`) for the whole run: runs are started in steps up to each checkpoint
(`--steps 10000,25000,50000,100000`), and at each one, once every run started has
reached its wait (the server's visibility counts it `WaitingUser`) and the worker is
idle: the worker's and the server's memory, the size of the server's database, the
step's start and park rates, and the time from a reply to the run's next stop point
for runs picked at random among those the worker's cache no longer holds (as
`parked_runs` times them), with the workflow tasks that timed out or failed while they
answered (`cold_replies.reply_troubles`).

The starts go out `concurrency` at a time over `connections` client connections, at
most `rate` a second (`parked_runs.start_all`). A run stops early, with a last
checkpoint at the runs it has, when its budget runs out, when a start fails (the server
refused it) or when the runs started stop reaching their wait; the table says which.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table
from temporalio.client import Client

from bench.cold_replies import timed_replies
from bench.parked_runs import (
    SLOW,
    START_CONCURRENCY,
    Storm,
    settled,
    start_all,
    task_troubles,
    uncached_pool,
)
from bench.rig import (
    Server,
    connect,
    console,
    dev_server,
    ms,
    percentile,
    rss_mib,
    shipped_label,
    table,
    tarry_env,
    worker_process,
)
from tarry.client import Tarry
from tarry.contracts import RunInput
from tarry.temporal.servers import dev_server_args
from tarry.testing.scripted_model import ScriptedModel

SQLITE_PRAGMAS = ("journal_mode=wal", "synchronous=normal")
"""The dev server's SQLite file in write-ahead-log mode, synced at its checkpoints rather
than at every commit (`start-dev --sqlite-pragma`): at its defaults every commit waits
for the disk, and 2,000 runs parked at 14.2 a second here instead of 30.8 (the
performance guide, "100,000 parked runs")."""
CONNECTIONS = 1
"""Client connections the starts share out."""
RATE: float | None = None
"""Starts a second at most (None: as fast as the server answers them)."""
AHEAD = 500
"""Runs started and not yet waiting, at most: a start waits until the server counts
enough of the runs before it waiting. The worker and the server park runs at a rate of
their own (2,000 runs: 30.8 a second here, whether the starts went out at 40 or 102 a
second, 30.0 over 4 connections 100 calls at a time); without this bound the starts get
minutes ahead of them, and a run stopped by its budget would still have those minutes
of runs to park before its last checkpoint."""
PATIENCE = 120.0
"""Seconds the runs started may go without one more of them reaching its wait before the
run stops: they no longer park."""
POLL = 5.0
"""Seconds between two counts of the waiting runs, once a step's starts are out."""
POLL_AHEAD = 2.0
"""Seconds between two counts of the waiting runs while starts are held back."""


@dataclass
class Checkpoint:
    started: int
    """Runs started so far (the checkpoint's size, or fewer where the run stopped)."""
    waiting: int
    """Of them, those the server's visibility counts waiting for their user."""
    step: int
    """Runs started in this step."""
    start_seconds: float
    """The step's start calls, first to last."""
    park_seconds: float
    """From the step's first start until its last run reached its wait."""
    worker_mib: float
    server_mib: float
    db_mib: float
    """The server's SQLite file with its write-ahead log."""
    latencies: list[float]
    timed_out_tasks: int
    failed_tasks: int
    """While the sampled runs answered their reply."""
    parking_timed_out: int
    parking_failed: int
    """In the sampled runs' histories before their reply: from their start to their wait."""
    load: float
    """The machine's load average over the last minute, when the replies were done."""

    @property
    def rates(self) -> tuple[float, float]:
        """The step's starts and parked runs a second."""
        return self.step / self.start_seconds, self.step / self.park_seconds

    @property
    def replies(self) -> tuple[float, float, float]:
        """The replies' p50, p99 and max, in seconds."""
        p50, p99, top = (percentile(self.latencies, p) for p in (50, 99, 100))
        return p50, p99, top


@dataclass
class Result:
    steps: list[int]
    samples: int
    concurrency: int
    connections: int
    rate: float | None
    ahead: int | None
    pragmas: tuple[str, ...]
    checkpoints: list[Checkpoint] = field(default_factory=list)
    stopped: str | None = None
    """Why the run stopped before its last step; None where it reached it."""
    load_at_start: float = 0.0


async def run(
    steps: Sequence[int],
    samples: int,
    settle: float,
    root: Path,
    *,
    budget: float | None = None,
    concurrency: int = START_CONCURRENCY,
    connections: int = CONNECTIONS,
    rate: float | None = RATE,
    pragmas: Sequence[str] = SQLITE_PRAGMAS,
    ahead: int | None = AHEAD,
    seed: int = 62,
) -> Result:
    """Parks runs up to each of `steps` in turn and measures each checkpoint; stops
    starting runs when `budget` seconds (None: no limit) less the time a checkpoint's
    measurement takes have passed, and measures where it got. Prints a line a checkpoint
    as it is measured, then the table."""
    began = time.monotonic()
    # Kept for the last checkpoint: its runs' wait for the last of them to park (at most
    # `PATIENCE`), its settle, its replies at a second each at worst.
    until = None if budget is None else began + budget - PATIENCE - settle - samples
    result = Result(sorted(steps), samples, concurrency, connections, rate, ahead, tuple(pragmas))
    result.load_at_start = os.getloadavg()[0]
    async with (
        dev_server([*dev_server_args(), *sqlite_args(pragmas)], root) as server,
        ScriptedModel(when_exhausted="echo") as model,
    ):
        queue = f"steps-{uuid.uuid4().hex[:8]}"
        worker = worker_process(server, model, queue, root, tarry_env())
        clients = [server.client] + [await connect(server) for _ in range(connections - 1)]
        doors = [Tarry(client, queue) for client in clients]
        await worker.start()
        try:
            assert worker.process is not None
            replied: set[int] = set()
            picks = random.Random(seed)
            started = 0

            pid = worker.process.pid

            async def measure(storm: Storm, step_began: float) -> Checkpoint:
                """Once the runs started wait and the worker is idle: memory, then
                `samples` timed replies to runs not replied to before."""
                waiting, parked_at = await parked(server.client, queue, storm.started)
                await settled(pid, settle)
                pool = uncached_pool(storm.started, samples)
                fresh = [i for i in range(pool) if i not in replied]
                picked = picks.sample(fresh, min(samples, len(fresh)))
                replied.update(picked)
                ids = [f"parked-{i}" for i in picked]
                worker_mib = rss_mib(pid)
                assert server.process.process is not None
                server_mib = rss_mib(server.process.process.pid)
                latencies, timed_out, failed = await timed_replies(server.client, doors[0], ids)
                # Every task of their histories, less those while they answered.
                all_timed_out, all_failed = await task_troubles(server.client, ids)
                return Checkpoint(
                    started=storm.started,
                    waiting=waiting,
                    step=storm.count,
                    start_seconds=storm.seconds,
                    park_seconds=max(parked_at - step_began, storm.seconds),
                    worker_mib=worker_mib,
                    server_mib=server_mib,
                    db_mib=db_mib(server),
                    latencies=latencies,
                    timed_out_tasks=timed_out,
                    failed_tasks=failed,
                    parking_timed_out=all_timed_out - timed_out,
                    parking_failed=all_failed - failed,
                    load=os.getloadavg()[0],
                )

            for target in result.steps:

                async def start(workflow_id: str) -> None:
                    door = doors[int(workflow_id.removeprefix("parked-")) % len(doors)]
                    await door.start(RunInput(), run_id=workflow_id)

                step_began = time.monotonic()
                storm = await start_all(
                    target,
                    start,
                    first=started,
                    concurrency=concurrency,
                    rate=rate,
                    until=until,
                    admit=Ahead(server.client, queue, ahead).admit if ahead else None,
                )
                started = storm.started
                if storm.count == 0:  # nothing more could be started: the last row stands
                    result.stopped = storm.error or f"the budget ran out at {started:,} runs"
                    break
                if storm.error is not None:
                    result.stopped = f"a start failed: {storm.error}"
                elif started < target:
                    result.stopped = f"the budget ran out at {started:,} of {target:,} runs"
                try:
                    point = await measure(storm, step_began)
                except Exception as e:  # the server or the worker gave out: the table stands
                    result.stopped = f"its checkpoint failed: {type(e).__name__}: {e}"
                    break
                if point.waiting < started and result.stopped is None:
                    result.stopped = (
                        f"{started - point.waiting:,} runs started did not reach their wait "
                        f"within {PATIENCE:g} s"
                    )
                result.checkpoints.append(point)
                console.print(line(point), soft_wrap=True)
                if result.stopped is not None:
                    break
        finally:
            await worker.stop()
    console.print(render(result))
    return result


def waiting_query(queue: str) -> str:
    return f"TaskQueue = '{queue}' AND TarryPhase = 'WaitingUser' AND ExecutionStatus = 'Running'"


class Ahead:
    """Holds back the start of run `i` while fewer than `i - ahead` runs wait: the
    server's count, asked again at most every `POLL_AHEAD` seconds, by one caller at a
    time."""

    def __init__(self, client: Client, queue: str, ahead: int) -> None:
        self.client, self.query, self.ahead = client, waiting_query(queue), ahead
        self.waiting = 0
        self.lock = asyncio.Lock()

    async def admit(self, i: int) -> None:
        while i - self.waiting > self.ahead:
            async with self.lock:
                if i - self.waiting > self.ahead:
                    await asyncio.sleep(POLL_AHEAD)
                    self.waiting = (await self.client.count_workflows(self.query)).count


async def parked(client: Client, queue: str, started: int) -> tuple[int, float]:
    """Waits until the server counts all `started` runs of `queue` waiting for their user,
    or until that count has not grown for `PATIENCE` seconds; returns the count and the
    monotonic time it reached its last value."""
    query = waiting_query(queue)
    waiting, since = -1, time.monotonic()
    while True:
        count = (await client.count_workflows(query)).count
        if count != waiting:
            waiting, since = count, time.monotonic()
        if waiting >= started or time.monotonic() - since > PATIENCE:
            return waiting, since
        await asyncio.sleep(POLL)


def sqlite_args(pragmas: Sequence[str]) -> list[str]:
    return [arg for pragma in pragmas for arg in ("--sqlite-pragma", pragma)]


def db_mib(server: Server) -> float:
    db = server.process.db
    files = [db, db.with_name(db.name + "-wal")]
    return sum(f.stat().st_size for f in files if f.exists()) / 2**20


def line(point: Checkpoint) -> str:
    """The checkpoint in one line, printed as soon as it is measured."""
    (starts, parks), (p50, p99, top) = point.rates, point.replies
    return (
        f"checkpoint {point.started:,} started, {point.waiting:,} waiting: "
        f"{starts:,.1f} starts/s, {parks:,.1f} parked/s; worker {point.worker_mib:,.0f} MiB, "
        f"server {point.server_mib:,.0f} MiB, db {point.db_mib:,.0f} MiB; "
        f"reply p50 {ms(p50)} p99 {ms(p99)} max {ms(top)} ms; "
        f"WFT timed out {point.timed_out_tasks}, failed {point.failed_tasks} while answering, "
        f"{point.parking_timed_out} and {point.parking_failed} while parking; load {point.load:.1f}"
    )


def render(result: Result) -> Table:
    rate = "as fast as they return" if result.rate is None else f"at most {result.rate:g}/s"
    if result.ahead:
        rate += f", at most {result.ahead:,} ahead of the runs waiting"
    pragmas = ", ".join(result.pragmas) or "its defaults"
    end = (
        f"reached {result.steps[-1]:,}"
        if result.stopped is None
        else f"stopped early: {result.stopped}"
    )
    t = table(
        f"Parked runs in steps on one dev server (SQLite: {pragmas}) and one worker process "
        f"({shipped_label()}); at each checkpoint {result.samples} replies to random runs "
        f"the cache no longer holds (WFT timed out, failed: while they answered; parking: timed "
        f"out / failed before). Starts {result.concurrency} at a time over "
        f"{result.connections} connection(s), {rate}; load {result.load_at_start:.1f} at "
        f"the start; {end}",
        "parked", "waiting", "step", "starts/s", "parked/s", "worker MiB", "server MiB",
        "db MiB", "p50 ms", "p99 ms", "max ms", f"> {SLOW:g} s", "WFT timed out",
        "WFT failed", "parking", "load",
    )  # fmt: skip
    for point in result.checkpoints:
        (starts, parks), (p50, p99, top) = point.rates, point.replies
        t.add_row(
            f"{point.started:,}",
            f"{point.waiting:,}",
            f"{point.step:,}",
            f"{starts:,.1f}",
            f"{parks:,.1f}",
            f"{point.worker_mib:,.0f}",
            f"{point.server_mib:,.0f}",
            f"{point.db_mib:,.0f}",
            ms(p50),
            ms(p99),
            ms(top),
            str(sum(x > SLOW for x in point.latencies)),
            str(point.timed_out_tasks),
            str(point.failed_tasks),
            f"{point.parking_timed_out} / {point.parking_failed}",
            f"{point.load:.1f}",
        )
    return t
