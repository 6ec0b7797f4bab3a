"""The cost of guardrails on a turn (issue 56, item 7): a chat whose every reply holds an
email and a card number and whose every answer holds an email, with a `pii` guardrail
redacting input and output, against the same chat with none, its answers asked for
whole as an output guardrail asks for them (and, for the record, streamed). The chats
alternate on one dev server and one scripted model, so the ratios are of the same
minute's machine."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from rich.table import Table

from bench.rig import InProcessTarry, console, dev_server, ms, ratio, table, tarry_worker
from tarry.contracts import Phase, RunInput
from tarry.contracts.guardrails import Guardrail
from tarry.testing.scripted_model import ScriptedModel, say

PAIRS = 3
"""Rounds of the three chats, one after another: the load drifts minute to minute."""
PII_BOTH_WAYS = [
    Guardrail(name=f"pii-{on}", on=on, check="pii", verdict="redact") for on in ("input", "output")
]
REPLY = "Mail the receipt to jane.doe@example.com, card 4111 1111 1111 1111, please."
ANSWER = "Done: I will write to <EMAIL_1> at ops@example.com."


@dataclass
class Result:
    streamed: float
    """Seconds per turn, no guardrails, the answer streamed (median of `PAIRS` chats)."""
    whole: float
    """Seconds per turn, no guardrails, the answer asked for whole: what an output
    guardrail does (it holds the words until it has checked them)."""
    with_pii: float
    """Seconds per turn, a `pii` guardrail on input and output (median of `PAIRS`)."""

    @property
    def ratio(self) -> float:
        """The guardrails' own cost: against the same turn asked for whole."""
        return self.with_pii / self.whole


async def run(turns: int, root: Path) -> Result:
    """Times `turns`-turn chats without guardrails (streamed, and whole) and with them,
    `PAIRS` rounds of the three."""
    times: dict[str, list[float]] = {"streamed": [], "whole": [], "pii": []}
    async with (
        dev_server(()) as server,
        ScriptedModel() as model,
        tarry_worker(server, model.base_url, root) as streaming,
        tarry_worker(server, model.base_url, root, stream=False) as whole,
    ):

        async def chat(worker: InProcessTarry, guardrails: list[Guardrail]) -> float:
            model.add(*(say(ANSWER) for _ in range(turns)))
            run = await worker.tarry.start(RunInput(prompt=REPLY, guardrails=guardrails))
            started = time.perf_counter()
            await run.wait_for({Phase.WAITING_USER})
            for _ in range(turns - 1):
                await run.send(REPLY)
            elapsed = time.perf_counter() - started
            last_reply = (await run.transcript())[-2].content or ""
            if guardrails and "<CARD_1>" not in last_reply:
                raise RuntimeError(f"the guardrails redacted nothing: {last_reply!r}")
            await run.stop()
            return elapsed / turns

        await chat(streaming, PII_BOTH_WAYS)  # warm-up: the worker loads Presidio
        for _ in range(PAIRS):
            times["streamed"].append(await chat(streaming, []))
            times["whole"].append(await chat(whole, []))
            times["pii"].append(await chat(streaming, PII_BOTH_WAYS))
    result = Result(median(times["streamed"]), median(times["whole"]), median(times["pii"]))
    console.print(render(turns, result))
    return result


def render(turns: int, result: Result) -> Table:
    t = table(
        f"Guardrails: {turns}-turn chats, medians of {PAIRS} rounds",
        "way", "ms/turn", "x (r) whole", "note",
    )  # fmt: skip
    t.add_row("no guardrails, streamed", ms(result.streamed), ratio(result.streamed, result.whole))
    t.add_row("(r) no guardrails, whole", ms(result.whole), "1.00x", "as an output guardrail asks")
    t.add_row(
        "pii on input and output",
        ms(result.with_pii),
        ratio(result.with_pii, result.whole),
        "redacts an email and a card in each reply, an email in each answer",
    )
    return t
