"""`python -m bench` (`scripts/bench`): runs the benchmarks and prints their tables, then
the targets they show.

scripts/bench                 everything, at full size (over an hour on 2 cores)
scripts/bench --quick         small sizes, a few minutes
scripts/bench --only turns    one benchmark: turns, reply, busy, long, parked, stream,
                              startup, cache, stream-stall, guardrails, caps, search, peers;
                              cold: only the parked runs' cold line
scripts/bench --only parked --steps 10000,25000,50000,100000
                              parked runs in steps on one server and one worker, a row
                              at each checkpoint (issue 62), instead of the parked rows

Tarry's rows use the shipped settings; set `TARRY_WORKFLOW_CACHE` (or any `TARRY_*`
worker setting) in the environment to measure others.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from pathlib import Path

import psutil

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
    startup,
    stream_history,
    stream_stall,
    targets,
    throughput,
    turn_overhead,
)
from bench.rig import console
from tarry.temporal.entrypoint import run_main

SECTIONS = (
    "turns", "reply", "busy", "long", "parked", "cold", "stream", "startup", "cache",
    "stream-stall", "guardrails", "caps", "search", "peers",
)  # fmt: skip
"""The five results in their order (`parked` with its cold line, which `cold` runs
alone), then the stream's history, start-up (`tarry dev`'s, then a command's), the input
a long run pays for with prompt caching, and how long one streamed answer holds the
worker's loop, what guardrails add to a turn, what a daily cap does (its ledger), what
search indexing adds to a turn and how fast a search answers, and the peers a team would
pick instead, side by side."""


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes everywhere")
    parser.add_argument("--only", choices=SECTIONS, action="append", help="run only these")
    parser.add_argument("--turns", type=int, help="turns of the turn-overhead conversation (50)")
    parser.add_argument("--replies", type=int, help="replies timed to a waiting run (100)")
    parser.add_argument("--busy-runs", type=int, help="runs active at once (100)")
    parser.add_argument("--busy-turns", type=int, help="replies to each active run (20)")
    parser.add_argument("--parked", type=int, help="runs parked in WaitingUser (10000)")
    parser.add_argument("--samples", type=int, help="replies timed to parked runs (200)")
    parser.add_argument("--settle", type=float, help="seconds parked runs rest before replies (30)")
    parser.add_argument("--tail", action="store_true", help="add the parked-runs tail experiments")
    parser.add_argument(
        "--steps",
        type=lambda text: [int(n) for n in text.split(",")],
        help="parked runs in steps on one server and one worker, measured at each of these "
        "counts (e.g. 10000,25000,50000,100000), instead of the parked rows and cold line",
    )
    parser.add_argument(
        "--steps-budget", type=float, help="seconds the steps may take; then the last one (none)"
    )
    parser.add_argument(
        "--start-concurrency",
        type=int,
        help=f"start calls at once, for --steps ({parked_runs.START_CONCURRENCY})",
    )
    parser.add_argument(
        "--start-rate", type=float, help="starts a second at most, for --steps (no limit)"
    )
    parser.add_argument(
        "--steps-dir",
        type=Path,
        help="where --steps keeps its server's database and logs, kept after the run "
        "(default: a temporary directory)",
    )
    parser.add_argument(
        "--ahead",
        type=int,
        help=f"runs started and not yet waiting, at most, for --steps ({parked_steps.AHEAD}; "
        "0: no bound)",
    )
    parser.add_argument(
        "--sqlite-pragma",
        action="append",
        help="the dev server's SQLite pragmas, for --steps (repeatable; default: "
        f"{' '.join(parked_steps.SQLITE_PRAGMAS)}; 'none': the server's own)",
    )
    parser.add_argument(
        "--connections",
        type=int,
        help=f"client connections the starts share, for --steps ({parked_steps.CONNECTIONS})",
    )
    parser.add_argument(
        "--cold-replies", type=int, help="replies timed warm, after a restart, a deploy (1000)"
    )
    parser.add_argument("--long-turns", type=int, help="turns of the long run (5000)")
    parser.add_argument("--long-budget", type=float, help="seconds each long run may take (900)")
    parser.add_argument(
        "--big-turns", type=int, help="turns of the long run of 32 KiB messages (2000)"
    )
    parser.add_argument(
        "--long-setup",
        metavar="CACHE:TURNS",
        action="append",
        help="long run with this workflow cache and hand-over every TURNS turns "
        "(default: the shipped settings, then cache 0 with the shipped hand-over)",
    )
    parser.add_argument("--peer-rounds", type=int, help="interleaved rounds of the peers (3)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.turns = args.turns or (5 if quick else 50)
    args.replies = args.replies or (10 if quick else 100)
    args.busy_runs = args.busy_runs or (10 if quick else 100)
    args.busy_turns = args.busy_turns or (3 if quick else 20)
    args.stream_turns = 3 if quick else 10
    args.startup_rounds = 3 if quick else 15
    args.cache_turns = 12 if quick else 100
    args.stall_text_bytes = 400_000 if quick else 4_000_000
    args.stall_file_bytes = 300_000 if quick else 3_000_000
    args.guardrail_turns = 5 if quick else 30
    args.caps_turns = 5 if quick else 30
    args.search_turns = 5 if quick else 30
    args.search_messages = 2_000 if quick else 100_000
    args.peer_rounds = args.peer_rounds or (1 if quick else 3)
    args.peer_replies = 3 if quick else 20
    args.peer_busy_replies = 2 if quick else 3
    args.parked = args.parked or (200 if quick else 10_000)
    args.samples = args.samples or (20 if quick else 200)
    args.cold_replies = args.cold_replies or (50 if quick else 1_000)
    args.settle = args.settle if args.settle is not None else (3.0 if quick else 30.0)
    args.long_turns = args.long_turns or (50 if quick else 5_000)
    args.long_budget = args.long_budget or (60.0 if quick else 900.0)
    args.big_turns = args.big_turns or (40 if quick else 2_000)
    args.only = args.only or list(SECTIONS)
    args.long_setup = [
        long_run.Setup(*map(int, setup.split(":"))) for setup in args.long_setup or []
    ] or list(long_run.SETUPS)
    return args


def pragmas(given: list[str] | None) -> tuple[str, ...]:
    if given is None:
        return parked_steps.SQLITE_PRAGMAS
    return tuple(p for p in given if p != "none")


def machine() -> str:
    memory = psutil.virtual_memory().total / 2**30
    return (
        f"{platform.processor() or platform.machine()}, {psutil.cpu_count()} cores, "
        f"{memory:.0f} GiB, Python {platform.python_version()}, {platform.system()}"
    )


async def main(args: argparse.Namespace) -> int:
    console.print(f"[bold]Tarry benchmarks[/] on {machine()}")
    found: list[targets.Target] = []
    with tempfile.TemporaryDirectory(prefix="tarry-bench-") as tmp:
        root = Path(tmp)
        if "turns" in args.only:
            found += targets.turns(await turn_overhead.run(args.turns, root / "workspaces"))
        if "reply" in args.only:
            found += targets.reply(await reply_latency.run(args.replies, root))
        if "busy" in args.only:
            found += targets.busy(await throughput.run(args.busy_runs, args.busy_turns, root))
        if "long" in args.only:
            runs = await long_run.run(args.long_turns, args.long_budget, root, args.long_setup)
            big = [long_run.BIG_MESSAGES]
            runs += await long_run.run(args.big_turns, args.long_budget, root / "big", big)
            found += targets.long(runs)
        if "parked" in args.only and args.steps:
            stepped = await parked_steps.run(
                args.steps,
                args.samples,
                args.settle,
                args.steps_dir or root / "steps",
                budget=args.steps_budget,
                concurrency=args.start_concurrency or parked_runs.START_CONCURRENCY,
                connections=args.connections or parked_steps.CONNECTIONS,
                rate=args.start_rate or parked_steps.RATE,
                pragmas=pragmas(args.sqlite_pragma),
                ahead=parked_steps.AHEAD if args.ahead is None else args.ahead,
            )
            found += targets.stepped(stepped)
        elif "parked" in args.only:
            parked = await parked_runs.run(
                args.parked, args.samples, args.settle, root, tail=args.tail
            )
            found += targets.parked(args.parked, parked)
        if "cold" in args.only or ("parked" in args.only and not args.steps):
            cold = cold_replies.run(args.parked, args.cold_replies, args.settle, root / "cold")
            found += targets.cold(await cold)
        if "stream" in args.only:
            await stream_history.run(args.stream_turns, root / "workspaces")
        if "startup" in args.only:
            await startup.run(root)
            await command_startup.run(args.startup_rounds, root)
        if "cache" in args.only:
            await prompt_cache.run(args.cache_turns, root / "workspaces")
        if "stream-stall" in args.only:
            await stream_stall.run(args.stall_text_bytes, args.stall_file_bytes, root)
        if "guardrails" in args.only:
            found += targets.guardrails(await guardrails.run(args.guardrail_turns, root))
        if "caps" in args.only:
            found += targets.spend_caps(await spend_caps.run(args.caps_turns, root))
        if "search" in args.only:
            searched = await search.run(args.search_turns, args.search_messages, root)
            found += targets.search(searched)
        if "peers" in args.only:
            await peers.run(
                args.peer_rounds,
                args.peer_replies,
                args.busy_runs,
                args.peer_busy_replies,
                root / "peers",
            )
    if found:
        console.print(targets.render(found))
    return 0


if __name__ == "__main__":
    arguments = parse()
    run_main(lambda: main(arguments))
