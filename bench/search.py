"""Search across runs (issue 59, item 6): what indexing adds to a turn, and how fast a
search answers at 100,000 messages.

- Turns: the same chat on a worker that indexes every message and on one with no index,
  alternating on one dev server and one scripted model, so the ratio is of the same
  minute's machine.
- Searches: an index filled with `messages` messages of 1,000 runs of 20 owners (the
  words drawn from a vocabulary of 5,000, the same every time), then searches of one and
  two words, as an operator (every run) and as one owner (the runs they may read): p50
  and p99 of each, on each store: SQLite, and PostgreSQL (PGlite's, `bench/pglite.py`:
  one WebAssembly backend under Node, not a Postgres server's processes, so its times
  bound a real server's from above rather than stand for them).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from statistics import median, quantiles

from rich.table import Table

from bench.pglite import pglite
from bench.rig import InProcessTarry, console, dev_server, ms, ratio, table, tarry_worker
from tarry.cli.processes import free_port
from tarry.contracts import Phase, RunInput
from tarry.contracts.search import IndexedMessage, IndexedRun, IndexRequest
from tarry.search import Readable, SearchQuery, SearchStore, open_store
from tarry.testing.scripted_model import ScriptedModel, say

PAIRS = 3
"""Rounds of the two chats, one after another: the load drifts minute to minute."""
RUNS = 1_000
OWNERS = 20
VOCABULARY = 5_000
WORDS_PER_MESSAGE = 30
BATCH = 50
"""Messages per index request, as a long turn's worth."""
SEARCHES = 200
REPLY = "Please look at the pricing page again and tell me what changed since last week."
ANSWER = "The pricing page now lists three plans; the team plan lost its annual discount."


@dataclass
class Result:
    plain: float
    """Seconds per turn, no index (median of `PAIRS` chats)."""
    indexed: float
    """Seconds per turn, every message indexed."""
    messages: int
    lexical: dict[str, dict[str, list[float]]]
    """Seconds per search, by store (`STORES`), then by the kind of search."""

    @property
    def ratio(self) -> float:
        return self.indexed / self.plain

    def p99(self, store: str) -> float:
        """The slowest kind's 99th percentile on `store`."""
        return max(_percentile(times, 99) for times in self.lexical[store].values())


STORES = ("SQLite", "PostgreSQL")
PGLITE_STARTS_WITHIN = 120.0
"""Seconds PGlite may take to answer (a few on an idle machine)."""


def _percentile(times: list[float], n: int) -> float:
    return quantiles(times, n=100, method="inclusive")[n - 1] if len(times) > 1 else times[0]


async def run(turns: int, messages: int, root: Path, postgres: str | None = None) -> Result:
    """The turns, then the searches on each store; `postgres`: the URL of an empty
    PostgreSQL database to fill (None: a PGlite server of the bench's own)."""
    plain, indexed = await _turns(turns, root)
    lexical = {"SQLite": await _searches(messages, str(root / "search-bench.db"))}
    if postgres is None:
        async with pglite(free_port(), PGLITE_STARTS_WITHIN) as url:
            lexical["PostgreSQL"] = await _searches(messages, url)
    else:
        lexical["PostgreSQL"] = await _searches(messages, postgres)
    result = Result(plain, indexed, messages, lexical)
    console.print(render(turns, result))
    return result


async def _turns(turns: int, root: Path) -> tuple[float, float]:
    times: dict[str, list[float]] = {"plain": [], "indexed": []}
    index = str(root / "search-turns.db")
    async with (
        dev_server(()) as server,
        ScriptedModel() as model,
        tarry_worker(server, model.base_url, root) as plain,
        tarry_worker(server, model.base_url, root, search_index=index) as indexing,
    ):

        async def chat(worker: InProcessTarry) -> float:
            model.add(*(say(ANSWER) for _ in range(turns)))
            run = await worker.tarry.start(RunInput(prompt=REPLY))
            started = time.perf_counter()
            await run.wait_for({Phase.WAITING_USER})
            for _ in range(turns - 1):
                await run.send(REPLY)
            elapsed = time.perf_counter() - started
            await run.stop()
            return elapsed / turns

        await chat(indexing)  # warm-up: the index's file and schema
        for _ in range(PAIRS):
            times["plain"].append(await chat(plain))
            times["indexed"].append(await chat(indexing))
    return median(times["plain"]), median(times["indexed"])


def _vocabulary() -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    draw = random.Random(59)
    return ["".join(draw.choices(letters, k=draw.randint(3, 10))) for _ in range(VOCABULARY)]


async def fill(store: SearchStore, messages: int) -> list[str]:
    """`messages` messages of `RUNS` runs into `store`; the vocabulary they are made of."""
    words = _vocabulary()
    draw = random.Random(6)
    # Zipf-like: a few words are common, most are rare, as in conversation.
    weights = [1 / (rank + 1) for rank in range(VOCABULARY)]
    now = datetime.now(UTC)
    per_run = max(1, messages // RUNS)
    for r in range(0, messages, per_run):
        number = r // per_run
        run = IndexedRun(run_id=f"run-{number}", owner=f"user-{number % OWNERS}")
        batch: list[IndexedMessage] = []
        for i in range(min(per_run, messages - r)):
            text = " ".join(draw.choices(words, weights, k=WORDS_PER_MESSAGE))
            batch.append(IndexedMessage(index=i, role="user", text=text, at=now))
            if len(batch) == BATCH:
                await store.index(IndexRequest(run=run, messages=batch))
                batch = []
        if batch:
            await store.index(IndexRequest(run=run, messages=batch))
    return words


async def _searches(messages: int, location: str) -> dict[str, list[float]]:
    """Times searches of each kind over a new index at `location` of `messages` messages."""
    store = await open_store(location)
    try:
        words = await fill(store, messages)
        draw = random.Random(7)
        owner = Readable("user-3", frozenset({"user-3"}))
        kinds: dict[str, Callable[[], SearchQuery]] = {
            "one word, every run": lambda: SearchQuery(draw.choice(words[:500])),
            "two words, every run": lambda: SearchQuery(" ".join(draw.sample(words[:200], 2))),
            "one word, one owner's runs": lambda: SearchQuery(
                draw.choice(words[:500]), readable=owner
            ),
        }
        times: dict[str, list[float]] = {}
        for kind, query in kinds.items():
            times[kind] = []
            for _ in range(SEARCHES):
                started = time.perf_counter()
                await store.search(query())
                times[kind].append(time.perf_counter() - started)
        return times
    finally:
        await store.close()


def render(turns: int, result: Result) -> Table:
    t = table(
        f"Search: {turns}-turn chats (medians of {PAIRS} rounds), then {SEARCHES} searches"
        f" of each kind over {result.messages:,} messages, on each store",
        "what", "ms", "p50 ms", "p99 ms", "x (r) no index",
    )  # fmt: skip
    t.add_row("(r) turn, no index", ms(result.plain), "", "", "1.00x")
    t.add_row(
        "turn, every message indexed",
        ms(result.indexed),
        "",
        "",
        ratio(result.indexed, result.plain),
    )
    for store, kinds in result.lexical.items():
        for kind, times in kinds.items():
            t.add_row(
                f"{store} search: {kind}",
                "",
                ms(_percentile(times, 50)),
                ms(_percentile(times, 99)),
                "",
            )
    return t
