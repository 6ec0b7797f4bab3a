"""The chaos soak, small: ten runs while workers are killed and the server restarts.

The full soak is `scripts/soak --runs 100` (see `tests/soak.py`)."""

from __future__ import annotations

from tests.deadline import deadline
from tests.soak import SoakConfig, run_soak


async def test_ten_runs_end_exactly_while_workers_are_killed_and_the_server_restarts() -> None:
    lines: list[str] = []
    # Kills come as often, for the machine's speed, under load as on an idle machine: a
    # worker takes twice as long to come back under load, and at the idle rate the two
    # spent much of the time restarting, so that a tool's three attempts could all land
    # on workers about to die and the run rightly answer the model TOOL_TIMEOUT.
    report = await run_soak(
        SoakConfig(
            runs=10, workers=2, kill_every=deadline(2.0), server_restart_after=2,
            timeout=deadline(150),
        ),
        say=lines.append,
    )  # fmt: skip

    summary = "\n".join(lines)
    assert report.ok, summary
    assert report.exact == 10, summary
    # The server restarts right after the second worker kill: both kinds of fault hit the
    # runs. How many more kills fit depends on how fast this machine ends ten runs.
    assert report.chaos.server_restarts == 1, summary
