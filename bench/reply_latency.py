"""Result 4, reply to model: the delay a person feels after pressing enter, from a
`send` to the provider receiving the model request it causes (the scripted model
stamps each request's arrival), for a chat run waiting for its user.

Beside it, in the same run, Temporal's floor (`bench.floor.FloorChatWorkflow`): from an
`update` to its activity starting (stamped by a worker interceptor) and to the same model
request arriving. Tarry with no workflow cache is a comparison row.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from bench.floor import FloorChatWorkflow
from bench.rig import (
    CONFIGS,
    Server,
    console,
    dev_server,
    floor_worker,
    ms,
    percentile,
    ratio,
    shipped_label,
    table,
    tarry_worker,
)
from tarry.contracts import Phase, RunInput
from tarry.testing.scripted_model import ScriptedModel

WARM_UP = 3
"""Replies sent before the timed ones, so first-use costs are not counted."""


@dataclass
class Latencies:
    label: str
    seconds: list[float] = field(default_factory=list)

    @property
    def p50(self) -> float | None:
        return percentile(self.seconds, 50) if self.seconds else None

    @property
    def p99(self) -> float | None:
        return percentile(self.seconds, 99) if self.seconds else None


class _StartStamps(Interceptor):
    """Records `time.monotonic()` as each activity starts on the worker."""

    def __init__(self) -> None:
        self.started: list[float] = []

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        stamps = self.started

        class Stamp(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                stamps.append(time.monotonic())
                return await super().execute_activity(input)

        return Stamp(next)


async def _tarry(
    server: Server, samples: int, root: Path, label: str, cache: int | None
) -> Latencies:
    result = Latencies(label)
    async with (
        ScriptedModel(when_exhausted="echo") as model,
        tarry_worker(server, model.base_url, root, cache) as worker,
    ):
        run = await worker.tarry.start(RunInput())
        await run.wait_for({Phase.WAITING_USER})
        for n in range(WARM_UP + samples):
            sent = time.monotonic()
            await run.send(f"reply {n}")
            if n >= WARM_UP:
                result.seconds.append(model.requests[-1].arrived - sent)
        await run.stop()
    return result


async def _floor(server: Server, samples: int, root: Path) -> tuple[Latencies, Latencies]:
    started = Latencies("(b) Temporal floor: update → activity start")
    arrived = Latencies("(b) Temporal floor: update → model request")
    stamps = _StartStamps()
    async with ScriptedModel(when_exhausted="echo") as model:
        floor = floor_worker(server, model.base_url, root, FloorChatWorkflow, interceptors=[stamps])
        async with floor as queue:
            handle = await server.client.start_workflow(
                FloorChatWorkflow.run, id=f"floor-chat-{uuid.uuid4().hex[:8]}", task_queue=queue
            )
            for n in range(WARM_UP + samples):
                sent = time.monotonic()
                await handle.execute_update(FloorChatWorkflow.send, f"reply {n}")
                if n >= WARM_UP:
                    started.seconds.append(stamps.started[-1] - sent)
                    arrived.seconds.append(model.requests[-1].arrived - sent)
            await handle.signal(FloorChatWorkflow.finish)
            await handle.result()
    return started, arrived


async def measure(config: Sequence[str], samples: int, root: Path) -> list[Latencies]:
    """Rows in order: Tarry as shipped, Tarry with no cache, the floor's activity start
    (the reference), the floor's model request."""
    async with dev_server(config) as server:
        shipped = await _tarry(server, samples, root, f"(a) {shipped_label()}", None)
        no_cache = await _tarry(server, samples, root, "(a) Tarry, cache 0 (comparison)", 0)
        started, arrived = await _floor(server, samples, root)
    return [shipped, no_cache, started, arrived]


async def run(samples: int, root: Path) -> dict[str, list[Latencies]]:
    results = {}
    for name, config in CONFIGS.items():
        results[name] = await measure(config, samples, root / "workspaces")
        console.print(render(name, samples, results[name]))
    return results


REFERENCE = 2
"""The row every other is divided by: the floor's update → activity start."""


def render(config: str, samples: int, rows: Sequence[Latencies]) -> Table:
    reference = rows[REFERENCE]
    t = table(
        f"Reply to model: {samples} replies to one waiting chat run, from `send` to the model "
        f"request arriving; dynamic config: {config}",
        "way", "p50 ms", "p99 ms", "p50 x floor start", "p99 x floor start",
    )  # fmt: skip
    for row in rows:
        t.add_row(
            row.label,
            ms(row.p50),
            ms(row.p99),
            ratio(row.p50, reference.p50),
            ratio(row.p99, reference.p99),
        )
    return t
