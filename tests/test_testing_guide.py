"""The testing guide's example passes as the guide says it does: `pytest` on the example
file, in a project of the user's own (nothing of Tarry's tests in reach), against the dev
server its fixtures start. The guide shows the file itself, so the two cannot drift; and a
test set up otherwise than the guide says is told what to change."""

from __future__ import annotations

import itertools
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.deadline import deadline

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guides" / "testing.md"
EXAMPLE = ROOT / "docs" / "examples" / "test_refunds.py"


def unused_plugins() -> list[str]:
    """The `-p no:NAME` options of this project's pytest configuration: the plugins the
    dev extra installs that no test here uses, and a user's environment lacks (importing
    Phoenix's alone takes a minute on a busy machine)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    options = shlex.split(pyproject["tool"]["pytest"]["ini_options"]["addopts"])
    names = [name for flag, name in itertools.pairwise(options) if flag == "-p"]
    return [option for name in names if name.startswith("no:") for option in ("-p", name)]


def test_the_guide_shows_the_example_file_whole() -> None:
    assert f'--8<-- "{EXAMPLE.relative_to(ROOT)}"' in GUIDE.read_text()


def user_pytest(project: Path, tests: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """`pytest -v` in `project`, its rootdir, as a user runs it, on `tests` (file name:
    its text)."""
    (project / "pytest.ini").write_text("[pytest]\n")
    for name, text in tests.items():
        (project / name).write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *unused_plugins(), "-v"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=deadline(540),
    )


@pytest.mark.timeout(deadline(600))
def test_the_guides_example_passes_under_pytest_in_a_project_of_its_own(tmp_path: Path) -> None:
    done = user_pytest(tmp_path, {EXAMPLE.name: EXAMPLE.read_text()})

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count(" PASSED") == 2, done.stdout


@pytest.mark.timeout(deadline(600))
def test_a_test_on_its_own_event_loop_is_told_to_run_on_the_session_loop(tmp_path: Path) -> None:
    test = (
        "import pytest\n"
        'pytest_plugins = ["tarry.testing.fixtures"]\n'
        "@pytest.mark.asyncio\n"
        "async def test_greeting(start_agent):\n"
        "    await start_agent()\n"
    )

    done = user_pytest(tmp_path, {"test_loop.py": test})

    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert (
        "RuntimeError: start_agent runs on pytest-asyncio's session event loop and this test"
        ' on another: add `pytestmark = pytest.mark.asyncio(loop_scope="session")`'
    ) in " ".join(done.stdout.split())
