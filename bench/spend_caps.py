"""The cost of daily caps on a turn (issue 58, item 2): a chat whose owner has a daily
cap, every model call reserved on their ledger before and settled after, against the
same chat of an owner without one. The chats alternate on one dev server, one worker
and one scripted model, so the ratio is of the same minute's machine."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from rich.table import Table

from bench.rig import console, dev_server, ms, ratio, table, tarry_worker
from tarry.client import Tarry
from tarry.contracts import Phase, RunInput
from tarry.core.identities import Caller
from tarry.core.limits import Limits
from tarry.testing.scripted_model import ScriptedModel, say

PAIRS = 3
"""Rounds of the two chats, one after another: the load drifts minute to minute."""
CAPPED = Caller("bench-capped", limits=Limits(max_tokens_per_day=10**12))
FREE = Caller("bench-free")


@dataclass
class Result:
    free: float
    """Seconds per turn, no daily cap (median of `PAIRS` chats)."""
    capped: float
    """Seconds per turn, a daily cap: a reservation and a settlement per call."""

    @property
    def ratio(self) -> float:
        return self.capped / self.free


async def run(turns: int, root: Path) -> Result:
    """Times `turns`-turn chats with and without a daily cap, `PAIRS` rounds of the two."""
    times: dict[str, list[float]] = {"free": [], "capped": []}
    async with (
        dev_server(()) as server,
        ScriptedModel() as model,
        tarry_worker(server, model.base_url, root) as worker,
    ):

        async def chat(tarry: Tarry) -> float:
            model.add(*(say("Noted.") for _ in range(turns)))
            run = await tarry.start(RunInput(prompt="hello"))
            started = time.perf_counter()
            await run.wait_for({Phase.WAITING_USER})
            for _ in range(turns - 1):
                await run.send("go on")
            elapsed = time.perf_counter() - started
            await run.stop()
            return elapsed / turns

        capped, free = worker.tarry.acting_as(CAPPED), worker.tarry.acting_as(FREE)
        await chat(capped)  # warm-up: the first call starts the day's ledger
        for _ in range(PAIRS):
            times["free"].append(await chat(free))
            times["capped"].append(await chat(capped))
    result = Result(median(times["free"]), median(times["capped"]))
    console.print(render(turns, result))
    return result


def render(turns: int, result: Result) -> Table:
    t = table(
        f"Daily caps: {turns}-turn chats, medians of {PAIRS} rounds",
        "way", "ms/turn", "x (r) no cap", "note",
    )  # fmt: skip
    t.add_row("(r) no daily cap", ms(result.free), "1.00x")
    t.add_row(
        "a daily cap",
        ms(result.capped),
        ratio(result.capped, result.free),
        "each call reserved on the owner's ledger, and settled",
    )
    return t
