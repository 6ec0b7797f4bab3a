"""Start-up of the command line: a command's whole process, from its launch to its exit.

`tarry --help` imports no client; `tarry status RUN` is a command that connects: it asks a
dev server of its own about a run that server does not have, and ends with that error's
one line (exit code 1) after one round trip. Beside them, `python -c pass` (the interpreter
alone: what no Python command can go below) and `temporal --help` (the Temporal CLI, a Go
binary: the reference a person compares a command line with). Every command runs once per
round, the rounds interleaved, so that a burst of load on a shared machine falls on all of
them alike; the table shows each one's median and its ratios to the two references.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from bench.rig import console, ms, ratio, table
from tarry.cli.processes import DevServer
from tarry.temporal.servers import find_binary

NO_SUCH_RUN = "bench-startup-no-such-run"


@dataclass
class Command:
    label: str
    argv: list[str]
    seconds: list[float] = field(default_factory=list)
    exit_code: int | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def commands() -> list[Command]:
    """The commands timed, the two references first."""
    tarry = str(find_binary("tarry"))
    return [
        Command("python -c pass", [sys.executable, "-c", "pass"]),
        Command("temporal --help", [str(find_binary("temporal")), "--help"]),
        Command("tarry --help", [tarry, "--help"]),
        Command(
            "tarry status RUN (a run the server does not have)", [tarry, "status", NO_SUCH_RUN]
        ),
    ]


async def _timed(command: Command, env: dict[str, str]) -> None:
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *command.argv, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    command.exit_code = await process.wait()
    command.seconds.append(time.perf_counter() - began)


async def run(rounds: int, root: Path) -> list[Command]:
    async with DevServer(root / "command-startup") as server:
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("TARRY_", "TEMPORAL_"))
        } | {"TEMPORAL_ADDRESS": server.address, "NO_COLOR": "1"}
        timed = commands()
        for _ in range(rounds):
            for command in timed:
                await _timed(command, env)
    console.print(render(timed, rounds))
    return timed


def render(timed: list[Command], rounds: int) -> Table:
    python, temporal = timed[0].median, timed[1].median
    t = table(
        f"Start-up: a command's process, launch to exit (median of {rounds} rounds)",
        "command", "median ms", "min ms", "x python -c pass", "x temporal --help", "exit code",
    )  # fmt: skip
    for c in timed:
        t.add_row(
            c.label,
            ms(c.median),
            ms(min(c.seconds)),
            ratio(c.median, python),
            ratio(c.median, temporal),
            str(c.exit_code),
        )
    return t
