"""Item 4, start-up: from launching `tarry dev` to a worker that takes runs, shown by a
run started and answered (the offline scripted model answers it). Measured on a new
data directory (the first start creates the database) and again on the same one,
each against a bare `temporal server start-dev` started the same way as reference.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from bench.rig import console, ms, ratio, table
from tarry.cli.processes import DevServer, free_port
from tarry.client import Tarry, connect_temporal
from tarry.config.settings import TarrySettings
from tarry.contracts import Phase, RunInput
from tarry.temporal.servers import find_binary

READY_TIMEOUT = 120.0


@dataclass
class Startup:
    label: str
    summary: float
    """Seconds until `tarry dev` printed where everything is."""
    answered: float
    """Seconds until a run started then was answered."""
    bare_server: float
    """Seconds a bare dev server took to answer, on a data directory in the same state."""


async def _bare_server(data_dir: Path) -> float:
    began = time.perf_counter()
    server = DevServer(data_dir)
    await server.start()
    elapsed = time.perf_counter() - began
    await server.stop()
    return elapsed


async def _first_answer(settings: TarrySettings) -> None:
    """Connects, starts a run and waits for its answer, retrying until the stack is up."""
    while True:
        try:
            async with asyncio.timeout(5.0):
                client = await connect_temporal(settings)
            run = await Tarry(client).start(RunInput(prompt="Are you up?"))
            await run.wait_for({Phase.WAITING_USER}, timeout=READY_TIMEOUT)
            return
        except (RuntimeError, TimeoutError):  # not listening yet, or not serving yet
            await asyncio.sleep(0.05)


async def _tarry_dev(data_dir: Path) -> tuple[float, float]:
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
        "TARRY_UI_PORT": str(free_port()),
    }
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        str(find_binary("tarry")), "dev", "--data-dir", str(data_dir),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        async with asyncio.timeout(READY_TIMEOUT):
            settings = TarrySettings(temporal_address=env["TEMPORAL_ADDRESS"])
            answered = asyncio.create_task(_first_answer(settings))
            while b"Ctrl-C to stop" not in (line := await process.stdout.readline()):
                if not line:
                    raise RuntimeError("`tarry dev` exited before it was up")
            summary = time.perf_counter() - began
            await answered
            return summary, time.perf_counter() - began
    finally:
        process.send_signal(signal.SIGTERM)
        await process.communicate()


async def run(root: Path) -> list[Startup]:
    results = []
    for label in ("new data directory", "same data directory again"):
        summary, answered = await _tarry_dev(root / "tarry-dev")
        bare = await _bare_server(root / "bare")
        results.append(Startup(label, summary, answered, bare))
    console.print(render(results))
    return results


def render(results: list[Startup]) -> Table:
    t = table(
        "Start-up: `tarry dev` to a worker that takes runs",
        "data directory", "summary printed ms", "first run answered ms",
        "bare dev server ms", "answered x bare server",
    )  # fmt: skip
    for r in results:
        t.add_row(
            r.label,
            ms(r.summary),
            ms(r.answered),
            ms(r.bare_server),
            ratio(r.answered, r.bare_server),
        )
    return t
