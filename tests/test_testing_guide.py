"""The testing guide's example passes as the guide says it does: `pytest` on the example
file, in a project of the user's own (nothing of Tarry's tests in reach), against the dev
server its fixtures start. The guide shows the file itself, so the two cannot drift."""

from __future__ import annotations

import itertools
import shlex
import shutil
import subprocess
import sys
import tomllib
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
    return [option for name in names for option in ("-p", name)]


def test_the_guide_shows_the_example_file_whole() -> None:
    assert f'--8<-- "{EXAMPLE.relative_to(ROOT)}"' in GUIDE.read_text()


@pytest.mark.timeout(deadline(600))
def test_the_guides_example_passes_under_pytest_in_a_project_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the user's project: its rootdir
    shutil.copy(EXAMPLE, tmp_path / EXAMPLE.name)

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *unused_plugins(), "-v"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=deadline(540),
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count(" PASSED") == 2, done.stdout
