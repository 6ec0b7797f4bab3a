"""Start plus first exchange (issue 62, item 4): what a team that starts a run per ticket
or per message pays: a run started with the tool it names, the model calling that tool,
then answering, to the run's result; beside Temporal's floor (`FloorTurnsWorkflow`)
starting and doing the same exchange. Each round starts one of each, one after the
other, on one dev server and one scripted model, so the ratio is of the same minute's
machine; the figures are the medians of the rounds, under both dynamic configs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from rich.table import Table

from bench.floor import FloorTurnsWorkflow
from bench.rig import CONFIGS, console, dev_server, floor_worker, ms, ratio, table, tarry_worker
from tarry.contracts import Mode, Phase, RunInput
from tarry.testing.scripted_model import ScriptedModel, call, say

PROMPT = "List the workspace, then say what is there."
WARM_UP = 2
"""Rounds before the timed ones, so first-use costs are not counted."""


@dataclass
class Starts:
    config: str
    tarry: list[float]
    """Seconds from asking for the start to the run's result, one per round."""
    floor: list[float]

    @property
    def ratio(self) -> float:
        return median(self.tarry) / median(self.floor)


async def _timed(model: ScriptedModel, exchange: Callable[[], Awaitable[None]]) -> float:
    model.add(call("list_files", {"path": "."}), say("a few files"))
    started = time.perf_counter()
    await exchange()
    return time.perf_counter() - started


async def measure(config: str, rounds: int, root: Path) -> Starts:
    """`rounds` timed rounds of a Tarry start and a floor start under dynamic `config`."""
    result = Starts(config, [], [])
    async with (
        dev_server(CONFIGS[config]) as server,
        ScriptedModel() as model,
        tarry_worker(server, model.base_url, root) as worker,
        floor_worker(server, model.base_url, root, FloorTurnsWorkflow, with_tools=True) as queue,
    ):

        async def tarry() -> None:
            input = RunInput(prompt=PROMPT, mode=Mode.TASK, max_turns=2, tools=["list_files"])
            run = await worker.tarry.start(input)
            ended = await run.result()
            if ended.phase is not Phase.COMPLETED or ended.turns != 2:
                raise RuntimeError(f"Tarry run ended {ended.phase} after {ended.turns} turns")

        async def floor() -> None:
            floor_id = f"floor-{uuid.uuid4().hex[:8]}"
            client = server.client
            await client.execute_workflow(
                FloorTurnsWorkflow.run, PROMPT, id=floor_id, task_queue=queue
            )

        for n in range(WARM_UP + rounds):
            times = await _timed(model, tarry), await _timed(model, floor)
            if n >= WARM_UP:
                result.tarry.append(times[0])
                result.floor.append(times[1])
    return result


async def run(rounds: int, root: Path) -> list[Starts]:
    """Measures under each dynamic config and prints the table."""
    results = [await measure(config, rounds, root / "workspaces") for config in CONFIGS]
    console.print(render(rounds, results))
    return results


def render(rounds: int, results: Sequence[Starts]) -> Table:
    t = table(
        f"Start plus first exchange (model → tool → model): medians of {rounds} rounds",
        "dynamic config", "Tarry ms", "(b) floor ms", "x floor",
    )  # fmt: skip
    for r in results:
        t.add_row(
            r.config,
            ms(median(r.tarry)),
            ms(median(r.floor)),
            ratio(median(r.tarry), median(r.floor)),
        )
    return t
