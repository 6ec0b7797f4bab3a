"""The benchmarks stay runnable: a tiny run of each of the five results goes
end to end on real servers, prints a row for each way, and yields the figures its
targets are read from. Times are printed, never asserted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import (
    cold_replies,
    command_startup,
    guardrails,
    long_run,
    parked_runs,
    parked_steps,
    peers,
    prompt_cache,
    reply_latency,
    search,
    spend_caps,
    stream_stall,
    targets,
    throughput,
    turn_overhead,
)
from bench.__main__ import parse
from bench.rig import CONFIGS, console
from tests.search_stores import empty


async def test_quick_turn_overhead_prints_a_row_for_each_way(tmp_path: Path) -> None:
    with console.capture() as captured:
        results = await turn_overhead.run(2, tmp_path)
    assert set(results) == set(CONFIGS)
    for outcomes in results.values():
        for index, (way, outcome) in enumerate(zip(turn_overhead.ways(), outcomes, strict=True)):
            # The SDK's agent integration is measured only where the `bench` extra is installed.
            if index != turn_overhead.AGENTS:
                assert outcome.seconds is not None, f"{way}: {outcome.note}"
        assert "spans sent" in outcomes[turn_overhead.TRACED].note
    printed = captured.get()
    for way in turn_overhead.ways():
        assert printed.count(way) == len(CONFIGS)
    assert len(targets.turns(results)) == 3 * len(CONFIGS)


async def test_quick_reply_latency_times_every_reply_of_every_way(tmp_path: Path) -> None:
    with console.capture() as captured:
        results = await reply_latency.run(3, tmp_path)
    assert set(results) == set(CONFIGS)
    for rows in results.values():
        for row in rows:
            assert len(row.seconds) == 3, row.label
            assert all(seconds > 0 for seconds in row.seconds), row.label
            assert row.label in captured.get()
    assert all(target.measured is not None for target in targets.reply(results))


async def test_quick_throughput_counts_every_turn_and_the_worker_cpu(tmp_path: Path) -> None:
    with console.capture() as captured:
        results = await throughput.run(runs=3, turns=2, root=tmp_path)
    assert [r.way.label for r in results] == [way.label for way in throughput.ways()]
    for r in results:
        assert r.turns == 6
        assert r.worker_cpu > 0, r.way.label
        assert r.way.label in captured.get()
    [target] = targets.busy(results)
    assert target.measured is not None


async def test_quick_long_run_reaches_its_last_turn_and_samples_worker_memory(
    tmp_path: Path,
) -> None:
    setup = long_run.Setup(None, handover_turns=5)
    with console.capture():
        [result] = await long_run.run(20, 120.0, tmp_path, [setup])
    assert len(result.latencies) == 20, result.stopped
    assert sorted(result.worker_mib) == result.memory_marks
    assert len(result.segments) > 1
    assert sum(segment.turns for segment in result.segments) == 20
    assert all(target.measured is not None for target in targets.long([result]))


async def test_quick_parked_runs_answer_replies_on_every_row(tmp_path: Path) -> None:
    with console.capture() as captured:
        results = await parked_runs.run(10, 3, 0.0, tmp_path)
    assert len(results) == len(parked_runs.variants(10, tail=False))
    for r in results:
        assert len(r.latencies) == 3
        assert r.worker_mib > 0
        assert r.variant.label in captured.get()
    assert all(target.measured is not None for target in targets.parked(10, results))


async def test_quick_parked_steps_print_a_row_of_figures_at_each_checkpoint(
    tmp_path: Path,
) -> None:
    with console.capture() as captured:
        result = await parked_steps.run([20, 40], 3, 0.0, tmp_path, ahead=10)
    assert result.stopped is None
    assert [(p.started, p.waiting, p.step) for p in result.checkpoints] == [
        (20, 20, 20),
        (40, 40, 20),
    ]
    printed = captured.get()
    # A line as each checkpoint is measured, then the table: a row each, in order.
    assert all(f"checkpoint {n} started" in printed for n in (20, 40)), printed
    rows = [r for r in printed.splitlines() if re.match(r"│ \d", r)]
    assert len(rows) == 2, printed
    number, decimal = r"[\d,]+", r"[\d,]+\.\d"
    for row, size in zip(rows, ("20", "40"), strict=True):
        # parked, waiting, step; starts/s, parked/s; worker, server, db MiB; p50, p99,
        # max ms; replies over 1 s, WFT timed out, failed; while parking; load.
        cells = [c.strip() for c in row.split("│")[1:-1]]
        assert len(cells) == 16, row
        assert cells[0] == cells[1] == size, row
        assert all(re.fullmatch(number, c) for c in cells[2:3] + cells[5:8] + cells[11:14]), row
        assert all(re.fullmatch(decimal, c) for c in cells[3:5] + cells[8:11] + cells[15:]), row
        assert re.fullmatch(r"\d+ / \d+", cells[14]), row
    assert [t.measured is not None for t in targets.stepped(result)] == [True, True]


async def test_quick_cold_replies_answer_every_reply_before_and_after_a_restart_and_a_deploy(
    tmp_path: Path,
) -> None:
    with console.capture() as captured:
        result = await cold_replies.run(12, 4, 0.0, tmp_path)
    for line in (result.warm, result.cold, result.deploy):
        assert len(line.latencies) == 4
    # Every run replied to after the deploy answered on v1, then went on on v2.
    assert result.moved == 4
    printed = captured.get()
    for line in (result.warm, result.cold, result.deploy):
        # Its row: the label, then p50, p99, max, p50 and p99 as ratios to warm, the
        # replies over a second, the workflow tasks timed out and failed.
        [row] = [r for r in printed.splitlines() if line.label in r]
        cells = [c.strip() for c in row.split("│")[2:-1]]
        assert len(cells) == 8, row
        assert all(re.fullmatch(r"[\d,]+\.\d", c) for c in cells[:3]), row
        assert all(re.fullmatch(r"\d+\.\d\dx", c) for c in cells[3:5]), row
        assert all(c.isdigit() for c in cells[5:]), row
    assert [t.measured is not None for t in targets.cold(result)] == [True, True]


async def test_quick_prompt_cache_bills_turn_10_and_the_last_turn_the_same_full_price(
    tmp_path: Path,
) -> None:
    with console.capture() as captured:
        rows = await prompt_cache.run(12, tmp_path)
    assert [row.number for row in rows] == [10, 12]
    assert rows[1].sent > rows[0].sent
    assert rows[0].full_price == rows[1].full_price
    assert all(row.cache_read > 0 for row in rows)
    assert "billed at full price" in captured.get()


async def test_quick_stream_stall_times_the_loop_through_each_long_answer(tmp_path: Path) -> None:
    with console.capture() as captured:
        stalls = await stream_stall.run(40_000, 30_000, tmp_path)
    labels = [stall.label for stall in stalls[:-1]]  # the last: the machine's reference
    assert labels == [answer.label for answer in stream_stall.answers(40_000, 30_000)[1:]]
    for stall in stalls:
        assert stall.longest > 0, stall.label
        assert stall.label in captured.get()
    written = tmp_path / "workspaces"
    assert [len(f.read_text()) for f in written.rglob("big.txt")] == [30_000]


async def test_quick_command_startup_times_each_command_beside_its_references(
    tmp_path: Path,
) -> None:
    with console.capture() as captured:
        timed = await command_startup.run(2, tmp_path)

    assert [c.label for c in timed] == [c.label for c in command_startup.commands()]
    assert [c.exit_code for c in timed] == [0, 0, 0, 1]  # `tarry status`: no such run
    for command in timed:
        assert len(command.seconds) == 2, command.label
        assert command.label in captured.get()


async def test_quick_guardrails_times_turns_with_and_without_and_prints_the_ratio(
    tmp_path: Path,
) -> None:
    with console.capture() as captured:
        result = await guardrails.run(2, tmp_path)

    assert min(result.streamed, result.whole, result.with_pii) > 0
    assert "pii on input and output" in captured.get()
    [target] = targets.guardrails(result)
    assert target.measured == result.ratio


async def test_quick_spend_caps_prints_the_capped_turn_against_the_free_one(tmp_path: Path) -> None:
    with console.capture() as captured:
        result = await spend_caps.run(2, tmp_path)
    assert result.free > 0
    assert result.capped > 0
    assert "a daily cap" in captured.get()
    assert targets.spend_caps(result)[0].measured == result.ratio


async def test_quick_search_times_turns_with_and_without_an_index_and_searches_each_store(
    tmp_path: Path, pglite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await empty(pglite_url)
    monkeypatch.setattr(search, "PGLITE_EMBEDDED", 200)  # below the 500: PGlite's own size
    with console.capture() as captured:
        result = await search.run(2, 500, tmp_path, postgres=pglite_url)

    assert min(result.plain, result.indexed) > 0
    assert list(result.lexical) == list(result.hybrid) == list(search.STORES)
    for searches in [*result.lexical.values(), *result.hybrid.values()]:
        assert all(len(times) == search.SEARCHES for times in searches.times.values())
    assert [s.messages for s in result.lexical.values()] == [500, 500]
    assert [s.messages for s in result.hybrid.values()] == [500, 200]
    printed = captured.get()
    assert "turn, every message indexed" in printed
    assert "PostgreSQL search: one word, every run" in printed
    assert "SQLite hybrid search at 500 messages: one word, one owner's runs" in printed
    assert "PostgreSQL hybrid search at 200 messages: one word, every run" in printed
    found = {target.name: target.measured for target in targets.search(result)}
    assert found == {
        "turn with a search index x none": result.ratio,
        "lexical search p99 at 500 (SQLite)": result.lexical["SQLite"].p99 * 1000,
        "hybrid search p99 at 500 (SQLite)": result.hybrid["SQLite"].p99 * 1000,
        "lexical search p99 at 500 (PostgreSQL)": result.lexical["PostgreSQL"].p99 * 1000,
        "hybrid search p99 at 200 (PostgreSQL)": result.hybrid["PostgreSQL"].p99 * 1000,
    }


PEERS = (
    "Tarry",
    "Temporal floor",
    "pydantic-ai on Temporal",
    "LangGraph, interrupt(), SQLite",
    "LangGraph, interrupt(), Postgres",
    "pydantic-ai on DBOS",
)
"""Every way `--only peers` names, at the start of its label."""


async def test_quick_peers_name_every_peer_with_a_ratio_or_a_reason_in_every_row(
    tmp_path: Path,
) -> None:
    args = parse(["--quick", "--only", "peers"])
    with console.capture() as captured:
        results = await peers.run(args.peer_rounds, args.peer_replies, 3, 1, tmp_path)

    labels = [figures.way.label for figures in results]
    assert all(any(label.startswith(peer) for label in labels) for peer in PEERS), labels
    for figures in results:
        way = figures.way
        assert not figures.failure, f"{way.label}: {figures.failure}"
        row = peers.cells(figures, results)
        if way.serve is None:  # not installed here, or PGlite missing: the note says so
            assert way.note, way.label
            assert set(row) == {"n/a"}, way.label
        else:
            assert all(re.fullmatch(r"[\d,]+\.\d", c) for c in row[::2]), (way.label, row)
            assert all(re.fullmatch(r"\d+\.\d\dx", c) for c in row[1::2]), (way.label, row)
        assert way.killed, way.label
        assert way.parked, way.label
    assert {f.way.setting for f in results if f.way.floor} == {peers.DEFAULTS, peers.BEST}
    assert "The peers:" in captured.get()
