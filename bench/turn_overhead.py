"""Result 1, turn overhead: one scripted conversation (N turns, one tool call each, then
a last answer) run four ways against the same zero-latency model server:

(a) Tarry with the shipped settings (streaming on, as shipped, and off), and with no
workflow cache as a comparison, (b) Temporal's floor (`bench.floor`, the SDK's default
cache), (c) a plain loop in this process calling the same activity code, (d) the SDK's
agent integration (the `bench` extra, which `scripts/bench` installs). Each way runs a
short conversation first, so first-use costs are not counted.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from statistics import median

from rich.table import Table
from temporalio.testing import ActivityEnvironment

from bench import tracing
from bench.floor import FloorTurnsWorkflow
from bench.rig import (
    CONFIGS,
    Server,
    console,
    dev_server,
    floor_worker,
    model_parts,
    ms,
    ratio,
    shipped_label,
    table,
    tarry_worker,
)
from tarry.contracts import ChatMessage, LlmRequest, Mode, Phase, RunInput, ToolInvocation
from tarry.testing.scripted_model import ScriptedModel, ScriptStep, call, say

PROMPT = "List the workspace again and again."
WARM_UP_TURNS = 2


def ways() -> list[str]:
    """The rows, in the order `measure` returns them."""
    return [
        f"(a) {shipped_label()}, streaming on",
        f"(a) {shipped_label()}, streaming off",
        "(a) Tarry, cache 0 (comparison)",
        "(b) Temporal floor",
        "(c) plain loop, no Temporal",
        "(d) SDK agent integration",
        f"(a) tracing on: {shipped_label()}, streaming on",
    ]


SHIPPED, FLOOR, AGENTS, TRACED = 0, 3, 5, 6
"""Indexes in `ways()`: the row the targets are about, and the references every row is
divided by."""


def script(turns: int) -> list[ScriptStep]:
    """`turns` answers with one `list_files` call each, then a last text answer."""
    return [call("list_files", {"path": "."}) for _ in range(turns)] + [say("done")]


@dataclass
class Outcome:
    seconds: float | None = None
    note: str = ""
    untraced: float | None = None
    """The tracing row's: the same conversation's time with tracing off, measured beside it."""


Conversation = Callable[[int], Awaitable[None]]
"""Runs the scripted conversation of N turns to its end."""


async def _timed(model: ScriptedModel, turns: int, converse: Conversation) -> Outcome:
    for n in (WARM_UP_TURNS, turns):
        model.add(*script(n))
        started = time.perf_counter()
        await converse(n)
        elapsed = time.perf_counter() - started
    if model.remaining:
        return Outcome(note=f"{model.remaining} scripted answers left unused")
    return Outcome(elapsed)


async def _tarry(
    server: Server,
    model: ScriptedModel,
    turns: int,
    root: Path,
    cache: int | None,
    stream: bool = True,
) -> Outcome:
    async with tarry_worker(server, model.base_url, root, cache, stream) as worker:

        async def converse(n: int) -> None:
            run = await worker.tarry.start(
                RunInput(prompt=PROMPT, mode=Mode.TASK, max_turns=n + 1, tools=["list_files"])
            )
            result = await run.result()
            if result.phase is not Phase.COMPLETED or result.turns != n + 1:
                raise RuntimeError(f"Tarry run ended {result.phase} after {result.turns} turns")

        return await _timed(model, turns, converse)


TRACING_PAIRS = 3
"""Runs with tracing off and on, alternately: on a shared machine the load drifts from one
minute to the next, and runs side by side share it."""


async def _traced(server: Server, model: ScriptedModel, turns: int, root: Path) -> Outcome:
    """The shipped row again, its worker tracing every run to a local OTLP receiver,
    measured in alternating pairs with tracing off (`Outcome.untraced`)."""
    off, on, spans = [], [], 0
    for _ in range(TRACING_PAIRS):
        off.append(await _tarry(server, model, turns, root, cache=None))
        async with tracing.receiver() as receiver:
            with tracing.tracing_to(receiver.endpoint):
                on.append(await _tarry(server, model, turns, root, cache=None))
        spans += receiver.spans
    if failed := [o.note for o in off + on if o.seconds is None]:
        return Outcome(note=failed[0])
    untraced = median(o.seconds or 0.0 for o in off)
    traced = median(o.seconds or 0.0 for o in on)
    note = f"{spans:,} spans sent; {traced / untraced:.2f}x off (medians of {TRACING_PAIRS} pairs)"
    return Outcome(traced, note, untraced)


async def _floor(server: Server, model: ScriptedModel, turns: int, root: Path) -> Outcome:
    async with floor_worker(
        server, model.base_url, root, FloorTurnsWorkflow, with_tools=True
    ) as queue:

        async def converse(n: int) -> None:
            await server.client.execute_workflow(
                FloorTurnsWorkflow.run,
                PROMPT,
                id=f"floor-{uuid.uuid4().hex[:8]}",
                task_queue=queue,
            )

        return await _timed(model, turns, converse)


async def _plain_loop(server: Server, model: ScriptedModel, turns: int, root: Path) -> Outcome:
    """The same activity functions called in a loop, outside any worker."""
    models, tools = model_parts(server, model.base_url, root)
    env = ActivityEnvironment(client=server.client)

    async def converse(n: int) -> None:
        messages = [ChatMessage(role="user", content=PROMPT)]
        for turn in range(1, n + 2):
            request = LlmRequest(profile="default", messages=messages, turn=turn)
            answer = await env.run(models.call_llm, request)
            messages.append(answer.message)
            for c in answer.message.tool_calls or []:
                invocation = ToolInvocation(
                    run_id="plain-loop", call_id=c.id, arguments=c.function.arguments
                )
                result = await tools.invoke(c.function.name, invocation)
                messages.append(
                    ChatMessage(role="tool", tool_call_id=c.id, content=result.to_content())
                )

    try:
        return await _timed(model, turns, converse)
    finally:
        await models.aclose()


async def _agents_sdk(server: Server, model: ScriptedModel, turns: int, root: Path) -> Outcome:
    try:
        from bench.agents_sdk import agents_worker
    except ImportError as e:
        return Outcome(note=f"not installed ({e.name}); `pip install -e '.[bench]'`")
    _, tools = model_parts(server, model.base_url, root)
    async with agents_worker(server.process.address, model.base_url, tools) as run:

        async def converse(n: int) -> None:
            await run(PROMPT, n + 2)

        return await _timed(model, turns, converse)


Way = Callable[[Server, ScriptedModel, int, Path], Awaitable[Outcome]]


async def measure(config: Sequence[str], turns: int, root: Path) -> list[Outcome]:
    """The ways of `ways()`, in order, on a fresh dev server with the given dynamic config."""
    measured: list[Way] = [
        partial(_tarry, cache=None),
        partial(_tarry, cache=None, stream=False),
        partial(_tarry, cache=0),
        _floor,
        _plain_loop,
        _agents_sdk,
        _traced,
    ]
    outcomes = []
    async with dev_server(config) as server:
        for way in measured:
            async with ScriptedModel() as model:
                try:
                    outcomes.append(await way(server, model, turns, root))
                except Exception as e:  # a way that breaks is a row that says why
                    outcomes.append(Outcome(note=f"failed: {type(e).__name__}: {e}"))
    return outcomes


async def run(turns: int, root: Path) -> dict[str, list[Outcome]]:
    """Measures under each dynamic config and prints one table per config."""
    results = {}
    for name, config in CONFIGS.items():
        outcomes = await measure(config, turns, root)
        results[name] = outcomes
        console.print(render(name, turns, outcomes))
    return results


def render(config: str, turns: int, outcomes: Sequence[Outcome]) -> Table:
    floor, agents = outcomes[FLOOR].seconds, outcomes[AGENTS].seconds
    t = table(
        f"Turn overhead: {turns} turns (model call + tool call), dynamic config: {config}",
        "way", "ms/turn", "x (b) floor", "x (d) SDK agents", "note",
    )  # fmt: skip
    for way, outcome in zip(ways(), outcomes, strict=True):
        per_turn = None if outcome.seconds is None else outcome.seconds / turns
        t.add_row(
            way,
            ms(per_turn),
            ratio(outcome.seconds, floor),
            ratio(outcome.seconds, agents),
            outcome.note,
        )
    return t
