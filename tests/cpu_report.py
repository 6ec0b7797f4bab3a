"""`--cpu-report FILE`: the CPU each test cost the machine, a line a test appended to FILE.

On two cores the suite keeps the CPU busy from its first test to its last, so the
suite's wall time is its CPU time over the cores: this report says which tests that time
goes to, where `--durations` says only how long each took on a machine shared with three
other workers. A line holds, tab-separated: the test's id, the CPU seconds of the test's
own process (its code, its in-process workers and servers), those of the processes it
started or shares (the worker's dev server, the commands, stacks and servers it ran,
each counted once it exits or as far as it got), and the test's wall-clock seconds.

A pytest plugin, loaded by pyproject.toml's `addopts`: it reads nothing unless asked."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["CpuReading", "pytest_addoption", "pytest_runtest_protocol"]

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuReading:
    """CPU seconds so far: of this process, and of its children, ended or running."""

    own: float
    children: float
    wall: float

    @classmethod
    def now(cls) -> CpuReading:
        ended = resource.getrusage(resource.RUSAGE_CHILDREN)
        return cls(
            own=time.process_time(),
            children=ended.ru_utime + ended.ru_stime + _running_children(),
            wall=time.monotonic(),
        )

    def line(self, test: str, before: CpuReading) -> str:
        return (
            f"{test}\t{self.own - before.own:.2f}\t{self.children - before.children:.2f}"
            f"\t{self.wall - before.wall:.2f}\n"
        )


def _running_children() -> float:
    """The CPU seconds of this process's running children, with their own ended ones."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        # After the command's name, in parentheses, which may hold anything.
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == os.getpid():
            total += sum(int(f) for f in fields[11:15]) / _TICKS  # utime stime cutime cstime
    return total


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-report",
        metavar="FILE",
        type=Path,
        help="append each test's CPU seconds (its process, its child processes) to FILE",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    report: Path | None = item.config.getoption("cpu_report")
    if report is None:
        return (yield)
    before = CpuReading.now()
    try:
        return (yield)
    finally:
        # One write a line, appended: the workers of a run share the file.
        with report.open("a") as lines:
            lines.write(CpuReading.now().line(item.nodeid, before))
