"""The benchmarks' targets, read off the results of one `scripts/bench` invocation:
each with the figure measured, the limit, and whether it was met or by how much it
was missed. They are shown, never asserted: the lead reads them on a quiet machine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.table import Table

from bench import (
    cold_replies,
    long_run,
    parked_runs,
    parked_steps,
    reply_latency,
    throughput,
    turn_overhead,
)
from bench import guardrails as guardrails_bench
from bench import search as search_bench
from bench import spend_caps as spend_caps_bench
from bench.rig import percentile, table

GB_IN_MIB = 1e9 / 2**20


@dataclass(frozen=True)
class Target:
    name: str
    measured: float | None
    limit: float
    unit: str = "x"
    at_least: bool = False
    """The figure must reach the limit, rather than stay within it."""

    @property
    def met(self) -> bool | None:
        if self.measured is None:
            return None
        return self.measured >= self.limit if self.at_least else self.measured <= self.limit

    def verdict(self) -> str:
        if self.met is None:
            return "not measured"
        if self.met:
            return "met"
        assert self.measured is not None
        off = (
            self.measured / self.limit - 1 if not self.at_least else 1 - self.measured / self.limit
        )
        return f"missed by {abs(off):.0%}"

    def form(self, value: float) -> str:
        return f"{value:,.2f}x" if self.unit == "x" else f"{value:,.0f} {self.unit}"


def _over(value: float | None, reference: float | None) -> float | None:
    return None if value is None or not reference else value / reference


def turns(results: Mapping[str, Sequence[turn_overhead.Outcome]]) -> list[Target]:
    found = []
    for config, outcomes in results.items():
        shipped = outcomes[turn_overhead.SHIPPED].seconds
        floor = outcomes[turn_overhead.FLOOR].seconds
        agents = outcomes[turn_overhead.AGENTS].seconds
        traced = outcomes[turn_overhead.TRACED]
        found += [
            Target(
                f"per turn, tracing on x off ({config} config)",
                _over(traced.seconds, traced.untraced),
                1.05,
            ),
            # The turn's read-only tool is a local activity, the floor's is not.
            Target(f"per turn x Temporal's floor ({config} config)", _over(shipped, floor), 0.7),
            Target(
                f"per turn x SDK agent integration ({config} config)", _over(shipped, agents), 0.8
            ),
        ]
    return found


def long(results: Sequence[long_run.LongRun]) -> list[Target]:
    found = []
    for r in results:
        if r.setup.big:
            found += _big_messages(r)
            continue
        if not r.setup.shipped:
            continue  # a comparison
        last = r.turns
        found += [
            Target(
                f"turn {last:,} x turn {long_run.WINDOW}",
                _over(r.at(last), r.at(long_run.WINDOW)),
                1.2,
            ),
            Target(
                f"worker memory at turn {last:,} x turn {r.memory_reference:,}",
                _over(r.worker_mib.get(last), r.worker_mib.get(r.memory_reference)),
                1.2,
            ),
        ]
    return found


def _big_messages(r: long_run.LongRun) -> list[Target]:
    """A long chat of 32 KiB turns stays flat and hands over little."""
    last, reference = r.turns, r.memory_reference
    size = r.setup.message_bytes // 1024
    largest = r.largest_hand_over
    return [
        Target(
            f"{size} KiB turns: worker memory at turn {last:,} x turn {reference:,}",
            _over(r.worker_mib.get(last), r.worker_mib.get(reference)),
            1.3,
        ),
        Target(
            f"{size} KiB turns: worker memory at turn {last:,}", r.worker_mib.get(last), 300, "MiB"
        ),
        Target(
            f"{size} KiB turns: largest continue-as-new input",
            None if largest is None else largest / 1024,
            2 * 1024,
            "KiB",
        ),
        Target(
            f"{size} KiB turns: time per turn at turn {last:,} x turn {reference:,}",
            _over(r.at(last), r.at(reference)),
            1.2,
        ),
    ]


def parked(count: int, results: Sequence[parked_runs.Result]) -> list[Target]:
    shipped = results[0]
    return [
        Target(f"worker memory with {count:,} parked runs", shipped.worker_mib, GB_IN_MIB, "MiB"),
        Target(
            f"reply p99 with {count:,} parked runs",
            percentile(shipped.latencies, 99) * 1000,
            500,
            "ms",
        ),
    ]


def stepped(result: parked_steps.Result) -> list[Target]:
    """The parked-runs targets at the last checkpoint the steps reached."""
    if not result.checkpoints:
        return []
    last = result.checkpoints[-1]
    return [
        Target(
            f"worker memory with {last.started:,} parked runs", last.worker_mib, GB_IN_MIB, "MiB"
        ),
        Target(
            f"reply p99 with {last.started:,} parked runs",
            percentile(last.latencies, 99) * 1000,
            500,
            "ms",
        ),
    ]


def cold(result: cold_replies.Result) -> list[Target]:
    return [
        Target(
            f"cold reply p99 with {result.parked:,} parked runs, {after}",
            percentile(line.latencies, 99) * 1000,
            500,
            "ms",
        )
        for line, after in [
            (result.cold, "after a worker restart"),
            (result.deploy, "after a rolling deploy"),
        ]
    ]


def reply(results: Mapping[str, Sequence[reply_latency.Latencies]]) -> list[Target]:
    return [
        Target(
            f"reply-to-model p50 x floor's update → activity start ({config} config)",
            _over(rows[0].p50, rows[reply_latency.REFERENCE].p50),
            1.2,
        )
        for config, rows in results.items()
    ]


def busy(results: Sequence[throughput.Throughput]) -> list[Target]:
    floor = throughput.floor_of(results)
    return [
        Target(
            "throughput x Temporal's floor",
            _over(results[0].per_second, floor.per_second),
            0.8,
            at_least=True,
        )
    ]


def guardrails(result: guardrails_bench.Result) -> list[Target]:
    """Issue 56's: a turn with a `pii` guardrail on input and output costs at most 1.15x
    a turn with none."""
    return [Target("turn with pii guardrails x none", result.ratio, 1.15)]


def spend_caps(result: spend_caps_bench.Result) -> list[Target]:
    """Issue 58's: a turn of an owner with a daily cap costs at most 1.10x a turn
    without one."""
    return [Target("turn with a daily cap x none", result.ratio, 1.10)]


def search(result: search_bench.Result) -> list[Target]:
    """Issue 59's: indexing costs a turn at most 1.05x, and at 100,000 messages a search's
    p99 stays under 50 ms lexical and under 150 ms hybrid, on each store (PGlite's hybrid
    at the smaller size the bench can fill, `search_bench.PGLITE_EMBEDDED`)."""
    return [
        Target("turn with a search index x none", result.ratio, 1.05),
        *(
            Target(f"{way} search p99 at {s.messages:,} ({store})", s.p99 * 1000, limit, "ms")
            for store in search_bench.STORES
            for way, s, limit in [
                ("lexical", result.lexical[store], 50),
                ("hybrid", result.hybrid[store], 150),
            ]
        ),
    ]


def render(targets: Sequence[Target]) -> Table:
    t = table(
        "Targets (Tarry with the shipped settings)",
        "target", "measured", "limit", "verdict",
    )  # fmt: skip
    for target in targets:
        limit = ("≥ " if target.at_least else "≤ ") + target.form(target.limit)
        measured = "n/a" if target.measured is None else target.form(target.measured)
        t.add_row(target.name, measured, limit, target.verdict())
    return t
