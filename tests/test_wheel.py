"""Tarry as a user gets it without a clone: the wheel `scripts/build` makes, installed with
its `cli` extra into a fresh venv of its own, runs the demo and the README's tour. A build
and an install into a new venv take a while (seconds with uv, which installs here as pip
would, from PyPI), so one build and one venv serve every test here."""

from __future__ import annotations

import asyncio
import fcntl
import shutil
import subprocess
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from uv import find_uv_bin

from tarry.cli import tour
from tarry.contracts import Phase
from tests.deadline import deadline
from tests.test_demo import in_order, run_id_in
from tests.test_devstack import STARTUP_TIMEOUT, Ports, assert_nothing_left, stack_env
from tests.test_tour import play_readme_tour, tool_calls

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tarry", "workflows", "activities", "workers")
"""pyproject.toml's packages: every layer of the design ships."""
INSTALL_TIMEOUT = deadline(600)


@dataclass(frozen=True)
class Installed:
    wheel: Path
    bin: Path
    """The fresh venv's `bin/`, where the wheel's `tarry` is."""
    home: Path
    """A directory outside the clone, so nothing can import the clone's sources."""


def _run(*command: str | Path, cwd: Path) -> str:
    done = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Installed:
    """The wheel `scripts/build` writes, installed with its `cli` extra into a new venv.
    Built once for the whole session: pytest-xdist's workers share the directory above
    their own temporary ones, and the first to take the lock builds while the others
    wait for it."""
    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        shared = shared.parent
    work, done = shared / "wheel", shared / "wheel.built"
    with (shared / "wheel.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(work, ignore_errors=True)  # a build that failed half-way
            work.mkdir()
            built = _run(ROOT / "scripts" / "build", work / "dist", cwd=ROOT)
            venv.create(work / "venv")
            python = work / "venv" / "bin" / "python"
            wheel = Path(built.strip().splitlines()[-1])
            install = ("pip", "install", "--quiet", "--python", python, f"{wheel}[cli]")
            _run(find_uv_bin(), *install, cwd=work)
            done.write_text(str(wheel))
    return Installed(Path(done.read_text()), work / "venv" / "bin", work)


def test_the_wheel_ships_every_layer_and_its_types(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())

    assert "tarry/py.typed" in names
    assert {f"{package}/__init__.py" for package in PACKAGES} <= names
    # The tours' scripts, the teams tour's config and the tour's workspace are data files,
    # not modules: they ship too, or `tarry dev` and its tours break in a wheel.
    tours = {f"tarry/cli/tour/{name}.json" for name in tour.TOURS}
    assert tours <= names
    assert {"tarry/cli/tour/tour-script.json", "tarry/cli/tour/teams.toml"} <= names
    assert "tarry/cli/tour/workspace/notes.md" in names
    assert not [name for name in names if name.startswith("tests/")]


def test_the_installed_tarry_is_the_wheel_not_the_clone(installed: Installed) -> None:
    where = _run(
        installed.bin / "python", "-c", "import tarry, workers; print(tarry.__file__)",
        cwd=installed.home,
    )  # fmt: skip

    assert Path(where.strip()).is_relative_to(installed.bin.parent)


async def test_the_installed_wheel_runs_the_demo_end_to_end(installed: Installed) -> None:
    ports, data_dir = Ports(), installed.home / "demo-data"
    process = await asyncio.create_subprocess_exec(
        installed.bin / "tarry", "demo", "--data-dir", str(data_dir),
        env=stack_env(ports), cwd=installed.home,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), STARTUP_TIMEOUT + deadline(60))
    printed = out.decode()

    assert process.returncode == 0, printed
    run_id = run_id_in(printed)
    assert in_order(
        printed, "→ list_files()", "→ write_file(", "→ finish(", f"Completed run {run_id}"
    )
    assert (data_dir / "workspaces" / run_id / "actions.md").is_file()
    await assert_nothing_left(ports, data_dir, set())


async def test_the_installed_wheel_plays_the_readme_tour(installed: Installed) -> None:
    home = installed.home / "tour"
    home.mkdir()

    tour = await play_readme_tour(home, installed.bin)

    assert tour.after("budget").phase is Phase.COMPLETED
    assert tool_calls(tour.transcript)[-1] == "finish"
    assert (tour.workspace / "actions.md").is_file()
