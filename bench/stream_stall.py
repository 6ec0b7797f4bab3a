"""Issue 23: a long streamed answer must not freeze the worker. The longest gap between
ticks of the worker's event loop while one run's answer arrives as a stream of tiny
deltas: a 4 MB text in 4-character deltas, and a 3 MB `write_file` whose arguments come
in 5-character fragments. Every other run on the worker (its heartbeats, its polls, the
next person's answer) waits as long as the loop is held.

The reference is the same run with a short answer, in the same minute on the same
worker: the loop's gaps when nothing in it grows with an answer. The scripted model runs
in a process of its own, so that the loop measured is the worker's alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from bench.rig import CONFIGS, LOW_LATENCY, console, dev_server, ms, ratio, table, tarry_worker
from tarry.cli.processes import free_port
from tarry.contracts import Phase, RunInput
from tarry.testing.script import ScriptedToolCall, ScriptStep, say

TICK_SECONDS = 0.001
"""How often the ticker asks to run: far below the stalls it is there to see."""
STALL_LIMIT_SECONDS = 0.1
"""The issue's bound on the longest stall."""


@dataclass(frozen=True)
class Answer:
    label: str
    step: ScriptStep
    deltas: int
    """Events the answer's text or arguments come in."""


def answers(text_bytes: int, file_bytes: int) -> list[Answer]:
    """The reference, then a `text_bytes` text in 4-character deltas and a `write_file`
    of `file_bytes` in 5-character argument fragments, as models stream them."""
    text = ("word " * (text_bytes // 5 + 1))[:text_bytes]
    content = ("line of the file\n" * (file_bytes // 17 + 1))[:file_bytes]
    arguments = json.dumps({"path": "big.txt", "content": content})
    write = ScriptedToolCall(name="write_file", arguments=arguments)
    return [
        Answer("a short answer (warm-up, not shown)", say("Hello."), 2),
        Answer("a short answer (reference)", say("Hello there."), 3),
        Answer(
            f"{_mb(text_bytes)} text, 4-character deltas",
            say(text, chunk_chars=4, max_pieces=None),
            -(-text_bytes // 4),
        ),
        Answer(
            f"{_mb(file_bytes)} write_file, 5-character fragments",
            ScriptStep(tool_calls=[write], chunk_chars=5, max_pieces=None),
            -(-len(arguments) // 5),
        ),
    ]


@dataclass
class Stall:
    answer: Answer
    longest: float
    """Seconds: the longest gap between two ticks of the worker's loop, as a clock on
    the wall sees it: what every other run on the worker waits."""
    held: float
    """Seconds of the loop's thread's own CPU time between two ticks, at the most: how
    long the worker's code held the loop, without the moments a busy machine gave the
    process no CPU at all (which the wall-clock gap counts too)."""
    seconds: float
    """From the run's start to its waiting for the user again."""


class Ticker:
    """A task on the loop that wakes every `TICK_SECONDS` and keeps the longest gap
    between two of its wakes, by the wall clock and by the thread's CPU time."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.held = 0.0

    async def run(self) -> None:
        last, last_cpu = time.perf_counter(), time.thread_time()
        while True:
            await asyncio.sleep(TICK_SECONDS)
            now, cpu = time.perf_counter(), time.thread_time()
            self.longest = max(self.longest, now - last)
            self.held = max(self.held, cpu - last_cpu)
            last, last_cpu = now, cpu


@contextlib.asynccontextmanager
async def ticking() -> AsyncIterator[Ticker]:
    ticker = Ticker()
    task = asyncio.create_task(ticker.run())
    try:
        yield ticker
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def model_process(steps: list[ScriptStep], root: Path) -> AsyncIterator[str]:
    """`tarry-scripted-model` serving `steps` (then an answer after each tool result) in
    a process of its own; yields its base URL."""
    script = root / "stream-stall-script.json"
    followed = [s for step in steps for s in [step, *([say("Wrote it.")] * bool(step.tool_calls))]]
    script.write_text(json.dumps([s.model_dump(mode="json") for s in followed]))
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tarry.testing.scripted_model",
        "--port", str(port), "--script", str(script),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
        if b"listening" not in line:
            raise RuntimeError(f"the scripted model did not start: {line!r}")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        await process.wait()


async def run(text_bytes: int, file_bytes: int, root: Path) -> list[Stall]:
    measured = answers(text_bytes, file_bytes)
    stalls = []
    async with (
        dev_server(CONFIGS[LOW_LATENCY]) as server,
        model_process([a.step for a in measured], root) as base_url,
        tarry_worker(server, base_url, root / "workspaces") as worker,
    ):
        for answer in measured:
            async with ticking() as ticker:
                began = time.perf_counter()
                run = await worker.tarry.start(RunInput(prompt="go"))
                await run.wait_for({Phase.WAITING_USER}, timeout=1800)
                seconds = time.perf_counter() - began
            stalls.append(Stall(answer, ticker.longest, ticker.held, seconds))
            await run.stop()
    del stalls[0]  # the worker's first run, which also pays for its start
    console.print(render(stalls))
    return stalls


def render(stalls: list[Stall]) -> Table:
    reference = stalls[0]
    t = table(
        "Worker event-loop stall while one run's answer streams in "
        f"(a ticker every {TICK_SECONDS * 1000:g} ms on the worker's loop; "
        f"limit {STALL_LIMIT_SECONDS * 1000:g} ms)",
        "answer", "deltas", "longest stall ms", "x reference", "x limit",
        "loop held ms (CPU)", "x reference", "x limit", "run s",
    )  # fmt: skip
    for stall in stalls:
        t.add_row(
            stall.answer.label,
            f"{stall.answer.deltas:,}",
            ms(stall.longest),
            ratio(stall.longest, reference.longest),
            ratio(stall.longest, STALL_LIMIT_SECONDS),
            ms(stall.held),
            ratio(stall.held, reference.held),
            ratio(stall.held, STALL_LIMIT_SECONDS),
            f"{stall.seconds:.1f}",
        )
    return t


def _mb(size: int) -> str:
    return f"{size / 1_000_000:g} MB"
