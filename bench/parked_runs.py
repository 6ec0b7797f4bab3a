"""Result 3, many waiting runs: N runs (10,000 at full size) parked on one worker
process and one dev server (SQLite file), then the time from a reply to the run's next
stop point, for runs picked at random, one at a time, among those the worker no longer
caches: the runs started first, which a cache smaller than N has evicted since.

Rows: Tarry with the shipped settings (`python -m workers`, the default workflow cache
or the caller's `TARRY_WORKFLOW_CACHE`), Tarry with no workflow cache (a comparison: every
task replays), and `bench.floor.ParkedWorkflow` (a reply is an update answered at once)
with the SDK's default cache of 1,000 runs, the reference. `--tail` adds the experiments
that find where the slowest replies come from.

Besides the times, each row counts what the sampled runs' histories show went wrong:
workflow tasks that timed out (a task put on a worker's sticky queue that nobody took
within `sticky_queue_schedule_to_start_timeout`) or failed.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from rich.table import Table
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.floor import ParkedWorkflow
from bench.rig import (
    console,
    dev_server,
    ms,
    percentile,
    ratio,
    rss_mib,
    shipped_cache,
    shipped_label,
    table,
    tarry_env,
    worker_process,
)
from tarry.client import Tarry
from tarry.contracts import Phase, RunInput
from tarry.temporal.servers import dev_server_args
from tarry.testing.scripted_model import ScriptedModel

START_CONCURRENCY = 50
SLOW = 1.0
"""Seconds: a reply slower than this is counted as an outlier."""


@dataclass(frozen=True)
class Variant:
    label: str
    tarry: bool = False
    """Tarry's own worker (`python -m workers`), else `python -m bench.worker`."""
    worker_env: dict[str, str] = field(default_factory=dict)
    server_args: tuple[str, ...] = ()
    """Dynamic config beyond the low-latency values `tarry dev` sets."""


@dataclass
class Result:
    variant: Variant
    worker_mib: float
    server_mib: float
    latencies: list[float]
    start_seconds: float
    timed_out_tasks: int
    failed_tasks: int


BARE = 2
"""The index in `variants()` of the reference row."""


def variants(parked: int, tail: bool) -> list[Variant]:
    rows = [
        Variant(shipped_label(), tarry=True, worker_env=tarry_env()),
        Variant(
            "Tarry, cache 0 (comparison)",
            tarry=True,
            worker_env={**tarry_env(), "TARRY_WORKFLOW_CACHE": "0"},
        ),
        Variant("bare, SDK default cache 1,000", worker_env={"BENCH_CACHE": "1000"}),
    ]
    if tail:
        rows += [
            Variant(f"bare, cache {parked:,}", worker_env={"BENCH_CACHE": str(parked)}),
            Variant(
                "bare, cache 1,000, sticky timeout 1 s",
                worker_env={"BENCH_CACHE": "1000", "BENCH_STICKY_TIMEOUT": "1"},
            ),
            Variant(
                "bare, cache 1,000, 20 task polls",
                worker_env={"BENCH_CACHE": "1000", "BENCH_POLLS": "20"},
            ),
        ]
    return rows


async def start_all(
    n: int,
    start: Callable[[str], Awaitable[None]],
    *,
    first: int = 0,
    concurrency: int = START_CONCURRENCY,
    rate: float | None = None,
    until: float | None = None,
    admit: Callable[[int], Awaitable[None]] | None = None,
) -> Storm:
    """Starts runs `parked-{first}` to `parked-{n - 1}`, `concurrency` calls at a time and
    at most `rate` a second (None: as fast as they return), in id order, each once
    `admit(i)` (if given) lets it; stops starting at the monotonic time `until`, or at
    the first start that fails. Which ran, and for how long, is in the `Storm`."""
    storm = Storm(first, first)
    began = time.monotonic()
    issued = first

    async def caller() -> None:
        nonlocal issued
        while issued < n and storm.error is None and (until is None or time.monotonic() < until):
            i = issued
            issued += 1
            if rate is not None:
                await asyncio.sleep(began + (i - first) / rate - time.monotonic())
            if admit is not None:
                await admit(i)
            try:
                await start(f"parked-{i}")
            except Exception as e:  # the server refused or failed: the storm stops here
                storm.error = storm.error or f"parked-{i}: {type(e).__name__}: {e}"
                return
            storm.started += 1

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    storm.seconds = time.monotonic() - began
    return storm


@dataclass
class Storm:
    """What `start_all` did: runs `parked-{first}` on, `started` of them (not in id
    order where one failed), in `seconds`; `error` names the start that failed."""

    first: int
    started: int
    seconds: float = 0.0
    error: str | None = None

    @property
    def count(self) -> int:
        return self.started - self.first

    def checked(self) -> Storm:
        """The storm, where every start went through; else `RuntimeError` naming the
        start that failed."""
        if self.error is not None:
            raise RuntimeError(self.error)
        return self


async def settled(pid: int, settle: float) -> float:
    """Waits until the worker has been idle (under 5 % of a core) for two seconds in a
    row, then `settle` seconds more: the runs have all reached their wait. Returns the
    monotonic time the idle stretch began."""
    worker = psutil.Process(pid)
    worker.cpu_percent()
    quiet = 0
    quiet_since = time.monotonic()
    while quiet < 2:
        await asyncio.sleep(1.0)
        if worker.cpu_percent() < 5.0:
            quiet_since = quiet_since if quiet else time.monotonic() - 1.0
            quiet += 1
        else:
            quiet = 0
    await asyncio.sleep(settle)
    return quiet_since


async def task_troubles(
    client: Client, ids: Sequence[str], run_ids: Sequence[str] | None = None
) -> tuple[int, int]:
    """Workflow tasks timed out and failed in the runs' histories: each workflow's
    current run, or the run of `run_ids` (one for each id) where a run handed over."""
    timed_out = failed = 0
    runs: Sequence[str | None] = run_ids or [None] * len(ids)
    for workflow_id, run_id in zip(ids, runs, strict=True):
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        for event in history.events:
            timed_out += event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
            failed += event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    return timed_out, failed


async def measure(
    variant: Variant, parked: int, samples: int, settle: float, data_dir: Path, seed: int
) -> Result:
    config = [*dev_server_args(), *variant.server_args]
    async with (
        dev_server(config, data_dir) as server,
        ScriptedModel(when_exhausted="echo") as model,
    ):
        client = server.client
        queue = f"parked-{uuid.uuid4().hex[:8]}"
        worker = worker_process(
            server, model, queue, data_dir, variant.worker_env, floor=not variant.tarry
        )
        await worker.start()
        try:
            tarry = Tarry(client, queue)

            async def start(workflow_id: str) -> None:
                if variant.tarry:
                    await tarry.start(RunInput(), run_id=workflow_id)
                else:
                    await client.start_workflow(
                        ParkedWorkflow.run, id=workflow_id, task_queue=queue
                    )

            started = (await start_all(parked, start)).checked().seconds
            assert worker.process is not None
            assert server.process.process is not None
            await settled(worker.process.pid, settle)
            worker_mib = rss_mib(worker.process.pid)
            server_mib = rss_mib(server.process.process.pid)
            picked = random.Random(seed).sample(range(uncached_pool(parked, samples)), samples)
            latencies = []
            for n, i in enumerate(picked):
                began = time.perf_counter()
                if variant.tarry:
                    state = await tarry.get(f"parked-{i}").send(f"reply {n}")
                    assert state.phase is Phase.WAITING_USER, state
                else:
                    handle = client.get_workflow_handle(f"parked-{i}")
                    await handle.execute_update(ParkedWorkflow.poke, n)
                latencies.append(time.perf_counter() - began)
            ids = [f"parked-{i}" for i in picked]
            timed_out, failed = await task_troubles(client, ids)
        finally:
            await worker.stop()
    return Result(variant, worker_mib, server_mib, latencies, started, timed_out, failed)


def uncached_pool(parked: int, samples: int) -> int:
    """How many of the runs started first the shipped cache has evicted, less a margin for
    the starts that ran concurrently; all of them where the cache holds every run."""
    evicted = parked - shipped_cache() - START_CONCURRENCY
    return evicted if evicted >= samples else parked


async def run(
    parked: int, samples: int, settle: float, root: Path, *, tail: bool = False, seed: int = 6
) -> list[Result]:
    results = []
    for i, variant in enumerate(variants(parked, tail)):
        results.append(await measure(variant, parked, samples, settle, root / f"parked-{i}", seed))
    console.print(render(parked, samples, settle, results))
    return results


def render(parked: int, samples: int, settle: float, results: Sequence[Result]) -> Table:
    bare_p50, bare_p99 = (percentile(results[BARE].latencies, p) for p in (50, 99))
    pool = uncached_pool(parked, samples)
    cache = shipped_cache()
    which = (
        f"the first {pool:,} started, which the shipped cache of {cache:,} no longer holds"
        if pool < parked
        else f"all of them (the shipped cache of {cache:,} holds every run)"
    )
    t = table(
        f"Many waiting runs: {parked:,} parked on one worker and one dev server (SQLite); "
        f"{samples} replies to random runs among {which}, after a {settle:g} s settle",
        "workflow and worker", "worker MiB", "server MiB", "starts/s",
        "p50 ms", "p99 ms", "max ms", "p50 x bare", "p99 x bare", f"> {SLOW:g} s",
        "WFT timed out", "WFT failed",
    )  # fmt: skip
    for r in results:
        p50, p99, top = (percentile(r.latencies, p) for p in (50, 99, 100))
        t.add_row(
            r.variant.label,
            f"{r.worker_mib:,.0f}",
            f"{r.server_mib:,.0f}",
            f"{parked / r.start_seconds:,.0f}",
            ms(p50),
            ms(p99),
            ms(top),
            ratio(p50, bare_p50),
            ratio(p99, bare_p99),
            str(sum(x > SLOW for x in r.latencies)),
            str(r.timed_out_tasks),
            str(r.failed_tasks),
        )
    return t
