"""The peers side by side (`scripts/bench --only peers`): Tarry, Temporal's floor and the
runtimes a team would pick instead, each playing the same chat against the same scripted
model over HTTP: a person's message, the model asking for `list_files`, the real tool, the
model answering (model -> tool -> model), then waiting for the next message.

Ways: Tarry (`bench.rig.tarry_worker`, the shipped settings), the floor
(`bench.floor.FloorToolChatWorkflow`), pydantic-ai's durable agent on Temporal
(`bench.peer_pydantic_temporal`, the same dev server), LangGraph with `interrupt()` and its
SQLite and Postgres checkpointers (`bench.peer_langgraph`; Postgres is `bench.pglite`'s), and
pydantic-ai's durable agent on DBOS (`bench.peer_dbos`, SQLite). Each at its defaults and at
its best documented setting: for the Temporal ways the dev server's default dynamic config
and the low-latency one (`bench.rig.CONFIGS`), two servers side by side; LangGraph's
`durability="exit"`; DBOS's `notification_listener_polling_interval_sec` at 10 ms. Every
row is divided by the floor at the same setting.

Figures, each way measured in turn within a round and the rounds repeated (so a machine
whose load drifts weighs on every way alike), medians over all rounds:
- start: a new chat opened with its first message until the chat waits again (for a team
  that starts a run per ticket or per message, what each one costs);
- per exchange: a reply sent to a waiting chat until the chat waits again;
- reply to model: the reply sent until the model receives the request it causes;
- busy: `chats` chats at once, each sent `busy_exchanges` replies one after another: wall
  time per exchange.
Beside them, what each way does with a process killed mid-call and with a chat that waits
for weeks, from its docs (not measured here).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from activities.tool_calls import ToolHost
from bench.floor import FloorToolChatWorkflow
from bench.peer_chat import OPENING, Close, OpenChat, Reply, Serve, exchanges
from bench.pglite import missing as pglite_missing
from bench.pglite import pglite
from bench.rig import (
    CONFIGS,
    DEFAULT_CONFIG,
    LOW_LATENCY,
    Server,
    console,
    dev_server,
    floor_worker,
    ms,
    ratio,
    shipped_label,
    table,
    tarry_plugin,
    tarry_worker,
)
from tarry.cli.processes import free_port
from tarry.contracts import RunInput
from tarry.testing.scripted_model import ScriptedModel

WARM_UP = 2
"""Replies a way answers in each round before the timed ones: first-use costs uncounted."""
PGLITE_STARTS_WITHIN = 120.0
DEFAULTS, BEST = "defaults", "best"

TEMPORAL_KILLED = "yes: retried on a live worker"
TEMPORAL_PARKED = "yes: in the server"
LANGGRAPH_KILLED = "once the app invokes the thread again"
LANGGRAPH_PARKED = "yes: a checkpoint"
DBOS_KILLED = "once the app launches again"
DBOS_PARKED = "in its database; a live workflow while the app runs"
"""What a way does when its process is killed in the middle of a model call, and whether a
chat can wait for weeks with no process holding it: from each one's docs, not measured."""


@dataclass(frozen=True)
class Way:
    label: str
    setting: str
    """`DEFAULTS` or `BEST`: the floor row at the same setting is its reference."""
    serve: Serve | None
    """Its worker, on the dev server of `config`; None when it cannot run (`note` says why)."""
    config: str = DEFAULT_CONFIG
    """The dev server it runs on (the dynamic config of the Temporal ways' setting)."""
    killed: str = TEMPORAL_KILLED
    parked: str = TEMPORAL_PARKED
    note: str = ""
    floor: bool = False


@dataclass
class Figures:
    way: Way
    start: list[float] = field(default_factory=list)
    exchange: list[float] = field(default_factory=list)
    to_model: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)
    """Per round: seconds of wall time per exchange, all chats busy at once."""
    failure: str = ""

    @staticmethod
    def _median(samples: Sequence[float]) -> float | None:
        return statistics.median(samples) if samples else None

    @property
    def medians(self) -> tuple[float | None, ...]:
        """Start, per exchange, reply to model, busy per exchange."""
        samples = (self.start, self.exchange, self.to_model, self.busy)
        return tuple(self._median(s) for s in samples)


# --- The ways ---------------------------------------------------------------------


@asynccontextmanager
async def _tarry(server: Server, base_url: str, _tools: ToolHost) -> AsyncIterator[OpenChat]:
    async with tarry_worker(server, base_url, server.storage.parent / "workspaces") as worker:

        async def open_chat() -> tuple[Reply, Close]:
            # A message sent before the run first waits is queued for that wait.
            run = await worker.tarry.start(RunInput(tools=["list_files"]))
            return run.send, run.stop

        yield open_chat


@asynccontextmanager
async def _floor(server: Server, base_url: str, _tools: ToolHost) -> AsyncIterator[OpenChat]:
    workspaces = server.storage.parent / "workspaces"
    async with floor_worker(
        server, base_url, workspaces, FloorToolChatWorkflow, with_tools=True
    ) as queue:

        async def open_chat() -> tuple[Reply, Close]:
            handle = await server.client.start_workflow(
                FloorToolChatWorkflow.run, id=f"floor-{time.monotonic_ns()}", task_queue=queue
            )

            async def reply(text: str) -> str:
                return await handle.execute_update(FloorToolChatWorkflow.send, text)

            async def close() -> None:
                await handle.signal(FloorToolChatWorkflow.finish)
                await handle.result()

            return reply, close

        yield open_chat


def _not_installed(label: str, error: ImportError) -> Way:
    note = f"not installed ({error.name}): `pip install -e '.[bench]'`"
    return Way(label, DEFAULTS, None, note=note)


def _temporal_ways() -> list[Way]:
    """Tarry, the floor and pydantic-ai on Temporal, on each dev server."""
    try:
        from bench.peer_pydantic_temporal import serve as pydantic_temporal
    except ImportError as e:
        pydantic: list[Way] = [_not_installed("pydantic-ai on Temporal", e)]
    else:
        pydantic = [
            Way("pydantic-ai on Temporal (TemporalDurability)", setting, pydantic_temporal, config)
            for setting, config in ((DEFAULTS, DEFAULT_CONFIG), (BEST, LOW_LATENCY))
        ]
    ways = []
    for setting, config in ((DEFAULTS, DEFAULT_CONFIG), (BEST, LOW_LATENCY)):
        ways.append(Way(shipped_label(), setting, _tarry, config))
        ways.append(Way("Temporal floor", setting, _floor, config, floor=True))
    return ways + pydantic


def _langgraph_ways(root: Path, postgres: str | None) -> list[Way]:
    sqlite = "LangGraph, interrupt(), SQLite checkpointer"
    label = "LangGraph, interrupt(), Postgres checkpointer (PGlite)"
    try:
        from bench import peer_langgraph
    except ImportError as e:  # a row for each checkpointer all the same, saying why
        return [_not_installed(sqlite, e), _not_installed(label, e)]
    ways = [
        Way(sqlite, DEFAULTS, peer_langgraph.sqlite(root / "langgraph.sqlite"),
            killed=LANGGRAPH_KILLED, parked=LANGGRAPH_PARKED, note='durability="async"'),
        Way(sqlite, BEST, peer_langgraph.sqlite(root / "langgraph-exit.sqlite", "exit"),
            killed=LANGGRAPH_KILLED, parked=LANGGRAPH_PARKED,
            note='durability="exit": saved only where the graph stops'),
    ]  # fmt: skip
    if postgres is None:
        reason = pglite_missing() or "PGlite did not start"
        return [*ways, Way(label, DEFAULTS, None, note=reason)]
    serve = peer_langgraph.postgres(postgres)
    return [
        *ways,
        Way(label, DEFAULTS, serve, killed=LANGGRAPH_KILLED, parked=LANGGRAPH_PARKED,
            note="PGlite: one WebAssembly backend"),
    ]  # fmt: skip


def _dbos_ways(root: Path) -> list[Way]:
    try:
        from bench import peer_dbos
    except ImportError as e:
        return [_not_installed("pydantic-ai on DBOS", e)]
    label = "pydantic-ai on DBOS (DBOSDurability), SQLite"
    url = f"sqlite:///{root / 'dbos.sqlite'}"
    return [
        Way(label, DEFAULTS, peer_dbos.on(url), killed=DBOS_KILLED, parked=DBOS_PARKED,
            note="polls for messages every 1 s"),
        Way(label, BEST, peer_dbos.on(url, polling=0.01), killed=DBOS_KILLED,
            parked=DBOS_PARKED, note="polls every 10 ms"),
    ]  # fmt: skip


# --- Measuring --------------------------------------------------------------------


async def _round(
    way: Way, figures: Figures, server: Server, model: ScriptedModel, tools: ToolHost,
    replies: int, chats: int, busy_exchanges: int,
) -> None:  # fmt: skip
    """One round of `way`: `replies` timed replies to one chat, `replies` chats started
    one after another, each timed to its first answer, then the busy chats."""
    assert way.serve is not None
    async with way.serve(server, model.base_url, tools) as open_chat:
        reply, close = await open_chat()
        for n in range(WARM_UP + replies):
            before = len(model.requests)
            sent = time.monotonic()
            await reply(OPENING if n == 0 else f"Again, please ({n}).")
            if n >= WARM_UP:
                figures.exchange.append(time.monotonic() - sent)
                figures.to_model.append(model.requests[before].arrived - sent)
        await close()
        for n in range(WARM_UP + replies):
            sent = time.monotonic()
            reply, close = await open_chat()
            await reply(OPENING)
            if n >= WARM_UP:
                figures.start.append(time.monotonic() - sent)
            await close()
        opened = await asyncio.gather(*(open_chat() for _ in range(chats)))

        async def talk(reply: Reply) -> None:
            for n in range(busy_exchanges):
                await reply(OPENING if n == 0 else f"Again, please ({n}).")

        started = time.monotonic()
        await asyncio.gather(*(talk(reply) for reply, _ in opened))
        figures.busy.append((time.monotonic() - started) / (chats * busy_exchanges))
        await asyncio.gather(*(close() for _, close in opened))


@asynccontextmanager
async def _postgres() -> AsyncIterator[str | None]:
    """PGlite's server for the Postgres checkpointer, or None where it cannot start."""
    if pglite_missing():
        yield None
        return
    async with pglite(free_port(), PGLITE_STARTS_WITHIN) as url:
        yield url


async def measure(
    rounds: int, replies: int, chats: int, busy_exchanges: int, root: Path
) -> list[Figures]:
    """Every way of the table, in its order, `rounds` times over."""
    async with AsyncExitStack() as stack:
        model = await stack.enter_async_context(ScriptedModel())
        model.add_conversation(OPENING, *exchanges(WARM_UP + max(replies, busy_exchanges)))
        servers: dict[str, Server] = {}
        tools: dict[str, ToolHost] = {}
        for name, config in CONFIGS.items():
            server = await stack.enter_async_context(dev_server(config, root / name))
            plugin = tarry_plugin(server, model.base_url, root / name / "workspaces")
            stack.push_async_callback(plugin.aclose)
            servers[name], tools[name] = server, plugin.tools
        postgres = await stack.enter_async_context(_postgres())
        ways = _temporal_ways() + _langgraph_ways(root, postgres) + _dbos_ways(root)
        results = [Figures(way) for way in ways]
        for _ in range(rounds):
            for figures in results:
                way = figures.way
                if way.serve is None or figures.failure:
                    continue
                try:
                    await _round(way, figures, servers[way.config], model, tools[way.config],
                                 replies, chats, busy_exchanges)  # fmt: skip
                except Exception as e:  # a way that breaks is a row that says why
                    figures.failure = f"failed: {type(e).__name__}: {e}"[:200]
    return results


async def run(
    rounds: int, replies: int, chats: int, busy_exchanges: int, root: Path
) -> list[Figures]:
    results = await measure(rounds, replies, chats, busy_exchanges, root)
    console.print(render(rounds, replies, chats, busy_exchanges, results))
    return results


def cells(figures: Figures, results: Sequence[Figures]) -> list[str]:
    """A row's eight figures: start, per exchange, reply to model and busy, each in ms and as
    a ratio to the floor at the row's setting ("n/a" where the way did not run: its note
    says why)."""
    floors = {f.way.setting: f for f in results if f.way.floor}
    floor = floors.get(figures.way.setting)
    reference = floor.medians if floor else (None,) * len(figures.medians)
    row = []
    for value, ref in zip(figures.medians, reference, strict=True):
        row += [ms(value), ratio(value, ref)]
    return row


def render(
    rounds: int, replies: int, chats: int, busy_exchanges: int, results: Sequence[Figures]
) -> Table:
    t = table(
        f"The peers: a reply to a waiting chat, model -> list_files -> model; medians of "
        f"{rounds} interleaved rounds of {replies} replies to one chat, {replies} chats "
        f"started with their first message, then {chats} chats at once, {busy_exchanges} "
        f"replies each. x floor: to the floor at the same setting",
        "way", "setting", "start + exchange ms", "x floor", "ms/exchange", "x floor",
        "reply → model ms", "x floor",
        "busy ms/exchange", "x floor", "killed mid-call", "waits weeks, no process", "note",
    )  # fmt: skip
    for figures in results:
        way = figures.way
        t.add_row(way.label, way.setting, *cells(figures, results), way.killed, way.parked,
                  figures.failure or way.note)  # fmt: skip
    return t
