"""The benchmarks stay runnable: the quick turn-overhead benchmark runs end to end on
real servers and prints a row for each way. Times are printed, never asserted."""

from __future__ import annotations

from pathlib import Path

from bench import turn_overhead
from bench.rig import CONFIGS, console


async def test_quick_turn_overhead_prints_a_row_for_each_way(tmp_path: Path) -> None:
    with console.capture() as captured:
        results = await turn_overhead.run(2, tmp_path)
    assert set(results) == set(CONFIGS)
    for outcomes in results.values():
        # The SDK's agent integration is measured only where the `bench` extra is installed.
        *measured, _agents = outcomes
        for way, outcome in zip(turn_overhead.WAYS, measured, strict=False):
            assert outcome.seconds is not None, f"{way}: {outcome.note}"
    printed = captured.get()
    for way in turn_overhead.WAYS:
        assert printed.count(way) == len(CONFIGS)
