"""A long streamed answer must not freeze the worker. The longest gap between
ticks of the worker's event loop while one run's answer arrives as a stream of tiny
deltas: a 4 MB text in 4-character deltas, and a 3 MB `write_file` whose arguments come
in 5-character fragments. Every other run on the worker (its heartbeats, its polls, the
next person's answer) waits as long as the loop is held.

Two references, measured in the same minutes on the same worker: the same run with a
short answer (the loop's gaps when nothing in it grows with an answer), and the loop
kept busy in 1 ms slices with no answer at all, as long as the longest answer took (the
gaps a busy process gets from the machine alone: on a loaded machine the scheduler
leaves a running process without CPU for a while, which the wall clock counts and the
loop thread's own CPU time does not). The scripted model runs in a process of its own,
so that the loop measured is the worker's alone.
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
BUSY_SECONDS = 30.0
"""The most the machine's reference keeps the loop busy."""


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
    label: str
    deltas: int | None
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
            stalls.append(Stall(answer.label, answer.deltas, ticker.longest, ticker.held, seconds))
            await run.stop()
        del stalls[0]  # the worker's first run, which also pays for its start
        seconds = min(max(s.seconds for s in stalls), BUSY_SECONDS)
        async with ticking() as ticker:
            await _busy(seconds)
        label = "no answer, the loop busy in 1 ms slices (the machine)"
        stalls.append(Stall(label, None, ticker.longest, ticker.held, seconds))
    console.print(render(stalls))
    return stalls


async def _busy(seconds: float) -> None:
    """Keeps the loop busy for `seconds`, giving the other tasks a turn every 1 ms."""
    end = time.perf_counter() + seconds
    while (now := time.perf_counter()) < end:
        while time.perf_counter() < now + 0.001:
            pass
        await asyncio.sleep(0)


def render(stalls: list[Stall]) -> Table:
    short, machine = stalls[0], stalls[-1]
    t = table(
        "Worker event-loop stall while one run's answer streams in "
        f"(a ticker every {TICK_SECONDS * 1000:g} ms on the worker's loop; "
        f"limit {STALL_LIMIT_SECONDS * 1000:g} ms)",
        "answer", "deltas", "longest stall ms", "x short answer", "x machine", "x limit",
        "loop held ms (CPU)", "x short answer", "x limit", "s",
    )  # fmt: skip
    for stall in stalls:
        t.add_row(
            stall.label,
            "" if stall.deltas is None else f"{stall.deltas:,}",
            ms(stall.longest),
            ratio(stall.longest, short.longest),
            ratio(stall.longest, machine.longest),
            ratio(stall.longest, STALL_LIMIT_SECONDS),
            ms(stall.held),
            ratio(stall.held, short.held),
            ratio(stall.held, STALL_LIMIT_SECONDS),
            f"{stall.seconds:.1f}",
        )
    return t


def _mb(size: int) -> str:
    return f"{size / 1_000_000:g} MB"
