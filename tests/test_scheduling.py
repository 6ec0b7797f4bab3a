"""scripts/test's scheduler (tests/scheduling.py) when a worker crashes: the run reports
the crash and ends, and runs every other test once."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.deadline import deadline

ROOT = Path(__file__).parent.parent

PASSING = "".join(f"def test_{n}():\n    pass\n\n\n" for n in range(20))
CRASHING = """import os


def test_crashes_its_worker():
    os._exit(1)  # as a segfault in an extension takes its process down


def test_after_the_crash():
    pass
"""


def test_a_crashed_worker_fails_its_test_and_the_run_ends_having_run_every_other_once(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_first.py").write_text(PASSING)
    (tmp_path / "test_then.py").write_text(CRASHING)
    (tmp_path / "test_last.py").write_text(PASSING)
    # The project's own addopts, without its conftest: only the scheduler is under test.
    pytest_options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    addopts = pytest_options["ini_options"]["addopts"]
    (tmp_path / "pytest.ini").write_text(f"[pytest]\naddopts = {addopts}\n")

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup",
         "--no-loadscope-reorder", "-p", "tests.scheduling", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=deadline(120),  # pytest-xdist 3.8's own scheduler never ended this run
    )  # fmt: skip

    summary = done.stdout.splitlines()[-1]
    assert done.returncode == 1, done.stdout
    assert "1 failed, 41 passed" in summary, done.stdout
    assert "crashed while running 'test_then.py::test_crashes_its_worker'" in done.stdout
