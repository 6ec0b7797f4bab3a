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
- Hybrid searches (by words and by meaning): the index's first messages are written with
  their embeddings, the scripted model's (`embedding_of`, what `tarry dev` and the tests
  use), and once they are in, searches of one word with its embedding, as an operator and
  as one owner. On SQLite, all `messages`; on PGlite, `PGLITE_EMBEDDED` at most.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
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
from tarry.testing.scripted_embeddings import embedding_of
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
OWNER = Readable("user-3", frozenset({"user-3"}))
"""The caller of the searches over one owner's runs: one of the 20 owners."""
PGLITE_EMBEDDED = 5_000
"""The most messages PGlite's hybrid searches are timed over: writing a message's vector
there takes about 26 ms (pgvector's HNSW inserts, in WebAssembly), two minutes for these
and 45 for 100,000."""
REPLY = "Please look at the pricing page again and tell me what changed since last week."
ANSWER = "The pricing page now lists three plans; the team plan lost its annual discount."


@dataclass
class Searches:
    """One store's searches of one way (lexical or hybrid)."""

    messages: int
    """The messages in the index they searched."""
    times: dict[str, list[float]]
    """Seconds per search, by the kind of search."""

    @property
    def p99(self) -> float:
        """The slowest kind's 99th percentile."""
        return max(_percentile(times, 99) for times in self.times.values())


@dataclass
class Result:
    plain: float
    """Seconds per turn, no index (median of `PAIRS` chats)."""
    indexed: float
    """Seconds per turn, every message indexed."""
    messages: int
    lexical: dict[str, Searches]
    """By store (`STORES`), over `messages` messages."""
    hybrid: dict[str, Searches]
    """By store, over the messages each names."""

    @property
    def ratio(self) -> float:
        return self.indexed / self.plain


STORES = ("SQLite", "PostgreSQL")
PGLITE_STARTS_WITHIN = 120.0
"""Seconds PGlite may take to answer (a few on an idle machine)."""


def _percentile(times: list[float], n: int) -> float:
    return quantiles(times, n=100, method="inclusive")[n - 1] if len(times) > 1 else times[0]


async def run(turns: int, messages: int, root: Path, postgres: str | None = None) -> Result:
    """The turns, then the searches on each store; `postgres`: the URL of an empty
    PostgreSQL database to fill (None: a PGlite server of the bench's own)."""
    plain, indexed = await _turns(turns, root)
    searched = {"SQLite": await _searches(str(root / "search-bench.db"), messages, messages)}
    embedded = min(messages, PGLITE_EMBEDDED)
    if postgres is None:
        async with pglite(free_port(), PGLITE_STARTS_WITHIN) as url:
            searched["PostgreSQL"] = await _searches(url, messages, embedded)
    else:
        searched["PostgreSQL"] = await _searches(postgres, messages, embedded)
    lexical = {store: found[0] for store, found in searched.items()}
    hybrid = {store: found[1] for store, found in searched.items()}
    result = Result(plain, indexed, messages, lexical, hybrid)
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


def _requests(words: list[str], messages: int) -> Iterator[IndexRequest]:
    """`messages` messages of `RUNS` runs, `BATCH` a request, made of `words`."""
    draw = random.Random(6)
    # Zipf-like: a few words are common, most are rare, as in conversation.
    weights = [1 / (rank + 1) for rank in range(VOCABULARY)]
    now = datetime.now(UTC)
    per_run = max(1, messages // RUNS)
    for r in range(0, messages, per_run):
        number = r // per_run
        run = IndexedRun(run_id=f"run-{number}", owner=f"user-{number % OWNERS}")
        texts = [
            " ".join(draw.choices(words, weights, k=WORDS_PER_MESSAGE))
            for _ in range(min(per_run, messages - r))
        ]
        for first in range(0, len(texts), BATCH):
            batch = [
                IndexedMessage(index=i, role="user", text=text, at=now)
                for i, text in enumerate(texts[first : first + BATCH], start=first)
            ]
            yield IndexRequest(run=run, messages=batch)


async def _fill(
    store: SearchStore, requests: Iterator[IndexRequest], messages: int, with_embeddings: bool
) -> int:
    """Indexes `requests` until `messages` more are in (or none are left), with their
    embeddings if `with_embeddings`; answers how many it indexed."""
    filled = 0
    while filled < messages and (request := next(requests, None)) is not None:
        texts = [m.text for m in request.messages]
        vectors = [embedding_of(t) for t in texts] if with_embeddings else None
        await store.index(request, vectors)
        filled += len(texts)
    return filled


def _queries(words: list[str], hybrid: bool) -> dict[str, Callable[[], SearchQuery]]:
    """Each kind of search, as the maker of its next query: lexical, one word or two over
    every run and one word over `OWNER`'s runs; hybrid (with the text's embedding), the
    one-word kinds, with the same words as the lexical ones, so the two differ by the
    search by meaning alone."""
    draw = random.Random(7)

    def query(text: str, readable: Readable | None = None) -> SearchQuery:
        embedding = embedding_of(text) if hybrid else None
        return SearchQuery(text, readable=readable, embedding=embedding)

    one_word: dict[str, Callable[[], SearchQuery]] = {
        "one word, every run": lambda: query(draw.choice(words[:500])),
        "one word, one owner's runs": lambda: query(draw.choice(words[:500]), OWNER),
    }
    if hybrid:
        return one_word
    return {
        **one_word,
        "two words, every run": lambda: query(" ".join(draw.sample(words[:200], 2))),
    }


async def _timed(
    store: SearchStore, queries: dict[str, Callable[[], SearchQuery]]
) -> dict[str, list[float]]:
    """Seconds per search of each kind, `SEARCHES` of each (the query made before the clock
    starts: its embedding is the embedder's time, not the store's)."""
    times: dict[str, list[float]] = {}
    for kind, query in queries.items():
        times[kind] = []
        for _ in range(SEARCHES):
            made = query()
            started = time.perf_counter()
            await store.search(made)
            times[kind].append(time.perf_counter() - started)
    return times


async def _searches(location: str, messages: int, embedded: int) -> tuple[Searches, Searches]:
    """Lexical and hybrid searches over a new index at `location`: the hybrid ones once
    its first `embedded` messages are in, with their embeddings; the lexical ones once
    all `messages` are (the rest without: a lexical search reads no vector)."""
    store = await open_store(location)
    try:
        words = _vocabulary()
        requests = _requests(words, messages)
        filled = await _fill(store, requests, embedded, with_embeddings=True)
        hybrid = Searches(filled, await _timed(store, _queries(words, hybrid=True)))
        filled += await _fill(store, requests, messages - filled, with_embeddings=False)
        lexical = Searches(filled, await _timed(store, _queries(words, hybrid=False)))
        return lexical, hybrid
    finally:
        await store.close()


def render(turns: int, result: Result) -> Table:
    t = table(
        f"Search: {turns}-turn chats (medians of {PAIRS} rounds), then {SEARCHES} searches"
        f" of each kind over {result.messages:,} messages (hybrid: over those its rows"
        " name), on each store",
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
    for store in result.lexical:
        hybrid = result.hybrid[store]
        for way, searches in [
            (f"{store} search", result.lexical[store]),
            (f"{store} hybrid search at {hybrid.messages:,} messages", hybrid),
        ]:
            for kind, times in searches.times.items():
                t.add_row(
                    f"{way}: {kind}",
                    "",
                    ms(_percentile(times, 50)),
                    ms(_percentile(times, 99)),
                    "",
                )
    return t
