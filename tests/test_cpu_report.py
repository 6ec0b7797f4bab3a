"""`--cpu-report FILE` (tests/cpu_report.py) says what each test cost in CPU: in its own
process and in the processes it started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.deadline import deadline

ROOT = Path(__file__).resolve().parent.parent
BURN = """\
import time
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
"""
TESTS = f"""\
import subprocess
import sys

BURN = {BURN!r}


def test_burns_here_and_in_a_child():
    exec(BURN)
    subprocess.run([sys.executable, "-c", BURN], check=True)


def test_burns_nothing():
    pass
"""


def test_the_report_holds_each_tests_cpu_in_its_process_and_in_its_children(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_burning.py").write_text(TESTS)
    report = tmp_path / "cpu.tsv"

    # The project's own configuration, which loads the plugin; not the suite's conftest.
    pytest = [sys.executable, "-m", "pytest", "-q", "-c", "pyproject.toml"]
    tests = ["--cpu-report", str(report), str(tmp_path / "test_burning.py")]
    subprocess.run(
        [*pytest, "-p", "no:cacheprovider", *tests],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=deadline(60),
    )

    lines = [line.split("\t") for line in report.read_text().splitlines()]
    rows = {test.split("::")[1]: (float(own), float(children)) for test, own, children, _ in lines}
    assert min(rows["test_burns_here_and_in_a_child"]) >= 0.3, rows
    own, children = rows["test_burns_nothing"]
    assert own < 0.3, rows
    assert children == 0, rows
