"""What a long run pays for its input: the input tokens of one turn billed at
full price, at turn 10 and at the last turn of one chat with an Anthropic profile, against
a model server that caches what requests mark (the scripted model's prompt cache, which
counts `TOKENS_PER_BLOCK` per content block).

Without caching a turn pays full price for the whole conversation, which grows with every
turn; with Tarry's cache breakpoints it pays full price only for its news (the model's
last answer and the reply), reads the rest from the cache and writes what was new the
turn before. Token counts are the scripted model's, so the figures are exact, not timed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from bench.rig import CONFIGS, LOW_LATENCY, console, dev_server, table, tarry_worker
from tarry.contracts import Phase, RunInput, Usage
from tarry.testing.scripted_model import ScriptedModel, say

FIRST_CHECKPOINT = 10


@dataclass(frozen=True)
class Turn:
    number: int
    sent: int
    """Input tokens the turn sent: what it would pay at full price without caching."""
    full_price: int
    cache_read: int
    cache_write: int


async def run(turns: int, root: Path) -> list[Turn]:
    """One chat of `turns` turns; the figures of turn 10 and of the last turn."""
    async with (
        dev_server(CONFIGS[LOW_LATENCY]) as server,
        ScriptedModel(say(f"answer {n}") for n in range(turns)) as model,
        tarry_worker(server, model.root_url, root, provider="anthropic") as worker,
    ):
        run = await worker.tarry.start(RunInput(prompt="hello", system="You are concise."))
        usages = [(await run.wait_for({Phase.WAITING_USER})).usage]
        for n in range(1, turns):
            usages.append((await run.send(f"reply {n}")).usage)
        await run.stop()
        await run.result()
    checkpoints = sorted({min(FIRST_CHECKPOINT, turns), turns})
    rows = [_turn(n, usages[n - 1], usages[n - 2] if n > 1 else Usage()) for n in checkpoints]
    console.print(render(turns, rows))
    return rows


def _turn(number: int, after: Usage, before: Usage) -> Turn:
    read = after.cache_read_tokens - before.cache_read_tokens
    write = after.cache_write_tokens - before.cache_write_tokens
    sent = after.prompt_tokens - before.prompt_tokens
    return Turn(number, sent, sent - read - write, read, write)


def render(turns: int, rows: list[Turn]) -> Table:
    t = table(
        f"Input tokens per turn of one {turns}-turn chat, Anthropic profile, scripted prompt cache",
        "turn", "sent", "billed at full price", "cache reads (~0.1x)", "cache writes (~1.25x)",
    )  # fmt: skip
    for row in rows:
        t.add_row(
            str(row.number),
            f"{row.sent:,}",
            f"{row.full_price:,}",
            f"{row.cache_read:,}",
            f"{row.cache_write:,}",
        )
    return t
