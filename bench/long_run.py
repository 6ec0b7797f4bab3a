"""Result 2, the long run: one chat run driven through many turns with `RunHandle.send`,
each reply 4 KiB (the model echoes it, so each answer is 4 KiB too), on Tarry's own
worker process (`python -m workers`) and a dev server with the low-latency config.

The big-message line (`BIG_MESSAGES`) does the same with 32 KiB replies and answers, a
person pasting documents into a long chat: there the server suggests the hand-over in
the middle of turns, and what a run carries from segment to segment shows. It reports
the worker's memory at turns 300, 1,000 and 2,000 of 2,000 (against turn 300), the time
per turn at the last turn against turn 300, the largest continue-as-new input, and the
history of each segment.

It reports the per-turn latency around turns 10, 1,000 and 5,000, the sawtooth within a
segment (without a workflow cache each task replays the segment's history so far, so a
turn costs more the later it comes in its segment, until the hand-over resets it), each
segment of the run's chain (continue-as-new hand-overs) with its history's events and
bytes, and the worker's memory over time (resident, at turns 50, 500, 1,000, 2,500 and
5,000 of 5,000) and at its peak. It runs with the shipped settings (the default workflow
cache, or the caller's `TARRY_WORKFLOW_CACHE`, and the default hand-over length) and, as
a comparison, with no workflow cache. It uses the public client only: the chain is found
by listing the executions of the workflow id. A turn that takes longer than
`TURN_TIMEOUT`, or a run past its time budget, ends the measurement, and the table says
where and why.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError

from bench.rig import (
    console,
    dev_server,
    ms,
    peak_rss_mib,
    ratio,
    rss_mib,
    shipped_cache,
    table,
    tarry_env,
    worker_process,
)
from tarry.client import Tarry, TarryError
from tarry.contracts import RunInput
from tarry.temporal.servers import dev_server_args
from tarry.testing.scripted_model import ScriptedModel
from workflows.memory import WorkflowInput

MESSAGE_BYTES = 4096
TURN_TIMEOUT = 60.0
"""Seconds one `send` may take before the run counts as stuck."""
WINDOW = 10
"""The latency "at turn k" is the median of turns k-9..k."""


_CLOSING = {
    f"WORKFLOW_EXECUTION_{end}"
    for end in ("COMPLETED", "FAILED", "TIMED_OUT", "CANCELED", "TERMINATED", "CONTINUED_AS_NEW")
}


@dataclass
class Segment:
    run_id: str
    events: int
    bytes: int
    status: str
    turns: int
    """Replies the segment accepted (`send` updates)."""
    handed_over: int | None
    """The bytes of the input it continued as new with, as the workflow encoded it
    (before the payload store took it); None for the last segment."""


SHIPPED_HANDOVER = RunInput().continue_as_new_after_turns


@dataclass(frozen=True)
class Setup:
    workflow_cache: int | None
    """None: the shipped settings (`bench.rig.shipped_cache`)."""
    handover_turns: int = SHIPPED_HANDOVER
    """`RunInput.continue_as_new_after_turns`."""
    message_bytes: int = MESSAGE_BYTES
    """Each reply's size, and so each answer's (the model echoes)."""
    reference_share: float | None = None
    """Where the figures are compared, as a share of the run's turns (0.15: turn 300 of
    2,000); None: latency against turn 10 and memory against turn 500 of 5,000."""

    @property
    def shipped(self) -> bool:
        """The settings Tarry ships with (or the caller's `TARRY_*` ones)."""
        return self.handover_turns == SHIPPED_HANDOVER and self.workflow_cache in (
            None,
            shipped_cache(),
        )

    @property
    def label(self) -> str:
        cache = shipped_cache() if self.workflow_cache is None else self.workflow_cache
        return f"cache {cache:,}, hand-over every {self.handover_turns} turns" + (
            " (shipped settings)" if self.shipped else " (comparison)"
        )

    @property
    def big(self) -> bool:
        return self.reference_share is not None

    def worker_env(self) -> dict[str, str]:
        if self.workflow_cache is None:
            return tarry_env()
        return {**tarry_env(), "TARRY_WORKFLOW_CACHE": str(self.workflow_cache)}


SETUPS = (Setup(None), Setup(0))
BIG_MESSAGES = Setup(None, message_bytes=32 * 1024, reference_share=0.15)


@dataclass
class LongRun:
    setup: Setup
    turns: int
    latencies: list[float] = field(default_factory=list)
    stopped: str = ""
    segments: list[Segment] = field(default_factory=list)
    peak_worker_mib: float | None = None
    worker_mib: dict[int, float] = field(default_factory=dict)
    """The worker's resident memory after each of `memory_marks`."""
    seconds: float = 0.0

    @property
    def reference(self) -> int:
        """The turn latency is compared with: 10, or the big-message line's turn 300."""
        return self.memory_reference if self.setup.big else WINDOW

    @property
    def marks(self) -> list[int]:
        """Turns 10, a fifth of the way and the last: 10, 1,000 and 5,000 of 5,000 (the
        big-message line: 300 and 2,000 of 2,000)."""
        if self.setup.big:
            return sorted({self.reference, self.turns})
        return sorted({WINDOW, self.turns // 5, self.turns})

    @property
    def memory_marks(self) -> list[int]:
        """Turns 50, 500, 1,000, 2,500 and 5,000 of 5,000 (the big-message line: 300,
        1,000 and 2,000 of 2,000)."""
        if self.setup.big:
            return sorted({self.memory_reference, self.turns // 2, self.turns} - {0})
        return sorted(
            {self.turns // 100, self.memory_reference, self.turns // 5, self.turns // 2, self.turns}
            - {0}
        )

    @property
    def memory_reference(self) -> int:
        """The turn memory is compared with: 500 of 5,000 (the big-message line: 300 of
        2,000)."""
        share = self.setup.reference_share or 0.1
        return max(1, round(self.turns * share))

    @property
    def largest_hand_over(self) -> int | None:
        """The bytes of the largest input a segment continued as new with."""
        return max((s.handed_over for s in self.segments if s.handed_over), default=None)

    def at(self, turn: int) -> float | None:
        window = self.latencies[max(0, turn - WINDOW) : turn]
        return statistics.median(window) if len(self.latencies) >= turn else None

    def in_segment(self, edge: str) -> float | None:
        """Median latency of the first (`edge="first"`) or last `WINDOW` turns of each
        segment the run handed over: where the sawtooth is lowest and highest."""
        window: list[float] = []
        start = 0
        for segment in self.segments:
            if segment.status != "CONTINUED_AS_NEW":
                break
            turns = self.latencies[start : start + segment.turns]
            window += turns[:WINDOW] if edge == "first" else turns[-WINDOW:]
            start += segment.turns
        return statistics.median(window) if window else None


def message(turn: int, size: int = MESSAGE_BYTES) -> str:
    head = f"Turn {turn}: "
    return head + "x" * (size - len(head))


async def chain(client: Client, workflow_id: str) -> list[Segment]:
    """Every execution of the workflow id, oldest first, with its history's size and
    the size of the input it handed over."""
    executions = [e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    executions.sort(key=lambda e: e.start_time)
    segments = []
    for e in executions:
        history = await client.get_workflow_handle(workflow_id, run_id=e.run_id).fetch_history()
        size = sum(event.ByteSize() for event in history.events)
        # The closing event, not visibility: that can lag behind the history.
        last = EventType.Name(history.events[-1].event_type).removeprefix("EVENT_TYPE_")
        status = last.removeprefix("WORKFLOW_EXECUTION_") if last in _CLOSING else "running"
        turns = sum(
            event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
            for event in history.events
        )
        handed_over = None
        if status == "CONTINUED_AS_NEW":
            closing = history.events[-1].workflow_execution_continued_as_new_event_attributes
            decode = client.data_converter.decode
            [input] = await decode(closing.input.payloads, [WorkflowInput])
            [payload] = client.data_converter.payload_converter.to_payloads([input])
            handed_over = payload.ByteSize()
        segments.append(Segment(e.run_id, len(history.events), size, status, turns, handed_over))
    return segments


async def run(
    turns: int, budget: float, root: Path, setups: Sequence[Setup] = SETUPS
) -> list[LongRun]:
    """Each setup in turn, each within `budget` seconds."""
    results = []
    for i, setup in enumerate(setups):
        results.append(await measure(setup, turns, budget, root / f"long-run-{i}"))
        console.print(render(results[-1]))
    return results


async def measure(setup: Setup, turns: int, budget: float, data_dir: Path) -> LongRun:
    result = LongRun(setup, turns)
    async with (
        dev_server(dev_server_args(), data_dir) as server,
        ScriptedModel(when_exhausted="echo") as model,
    ):
        queue = f"long-{uuid.uuid4().hex[:8]}"
        worker = worker_process(server, model, queue, data_dir, setup.worker_env())
        await worker.start()
        try:
            handle = await Tarry(server.client, queue).start(
                RunInput(continue_as_new_after_turns=setup.handover_turns)
            )
            began = time.perf_counter()
            for turn in range(1, turns + 1):
                if time.perf_counter() - began > budget:
                    result.stopped = f"time budget of {budget:g} s spent after turn {turn - 1}"
                    break
                sent = time.perf_counter()
                try:
                    async with asyncio.timeout(TURN_TIMEOUT):
                        await handle.send(message(turn, setup.message_bytes))
                except TimeoutError:
                    result.stopped = f"turn {turn}: no answer within {TURN_TIMEOUT:g} s"
                    break
                except (TarryError, WorkflowUpdateFailedError, RPCError) as e:
                    # E.g. the server terminated the run: its history passed the limit.
                    cause = getattr(e, "cause", None) or e
                    result.stopped = f"turn {turn}: {type(cause).__name__}: {cause}"
                    break
                result.latencies.append(time.perf_counter() - sent)
                # The model server keeps each request's body: whole conversations of
                # hundreds of KiB, gigabytes over 5,000 turns in this process.
                model.requests.clear()
                if turn in result.memory_marks:
                    assert worker.process is not None
                    result.worker_mib[turn] = rss_mib(worker.process.pid)
            result.seconds = time.perf_counter() - began
            assert worker.process is not None
            result.peak_worker_mib = peak_rss_mib(worker.process.pid)
            result.segments = await chain(server.client, handle.id)
        finally:
            await worker.stop()
    return result


def render(r: LongRun) -> Table:
    done = len(r.latencies)
    reference = r.at(r.reference)
    title = (
        f"Long run, {r.setup.label}: {done:,} of {r.turns:,} turns of "
        f"{r.setup.message_bytes // 1024} KiB messages in "
        f"{r.seconds:,.0f} s; peak worker memory "
        f"{'n/a' if r.peak_worker_mib is None else f'{r.peak_worker_mib:,.0f} MiB'}"
        + (f"; stopped at {r.stopped}" if r.stopped else "")
    )
    t = table(title, "figure", "value", f"x turn {r.reference:,}")
    for mark in r.marks:
        t.add_row(f"ms per turn at turn {mark:,}", ms(r.at(mark)), ratio(r.at(mark), reference))
    if done and done < r.turns:
        last = r.at(done)
        t.add_row(f"ms per turn at turn {done:,}, the last", ms(last), ratio(last, reference))
        t.add_row(
            f"time {r.turns:,} turns would take at this pace",
            f"{r.seconds / done * r.turns:,.0f} s",
            "",
        )
    if done:
        t.add_row("mean ms per turn over the run", ms(r.seconds / done), "")
    base = r.worker_mib.get(r.memory_reference)
    for mark, mib in r.worker_mib.items():
        t.add_row(
            f"worker MiB at turn {mark:,} (x: to turn {r.memory_reference:,})",
            f"{mib:,.0f}",
            ratio(mib, base),
        )
    first = r.in_segment("first")
    for edge in ("first", "last"):
        figure = r.in_segment(edge)
        t.add_row(
            f"ms per turn, {edge} {WINDOW} turns of a handed-over segment (x: to the first)",
            ms(figure),
            ratio(figure, first),
        )
    handovers = len(r.segments) - 1
    t.add_row("continue-as-new hand-overs", str(handovers), "")
    if (largest := r.largest_hand_over) is not None:
        t.add_row("largest continue-as-new input", f"{largest / 2**20:,.2f} MiB", "")
    closed = [s for s in r.segments if s.status == "CONTINUED_AS_NEW"]
    if closed:
        t.add_row(
            f"handed-over segments ({len(closed)}), smallest-largest",
            f"{span(s.turns for s in closed)} turns, {span(s.events for s in closed)} events, "
            f"{span((s.bytes / 2**20 for s in closed), '{:,.2f}')} MiB",
            "",
        )
    for i, s in enumerate(r.segments, 1):
        if s not in closed:
            t.add_row(
                f"segment {i} ({s.status.lower()})",
                f"{s.turns:,} turns, {s.events:,} events, {s.bytes / 2**20:,.2f} MiB",
                "",
            )
    return t


def span(values: Iterable[float], form: str = "{:,.0f}") -> str:
    """`low-high`, or one value where they agree."""
    both = list(values)
    low, high = form.format(min(both)), form.format(max(both))
    return low if low == high else f"{low}-{high}"
