"""What a process loads before it does anything: a worker loads no module of Tarry's
client (`import tarry` loads nothing at all: `tests/test_layers.py`), and the command
line's help and argument errors load neither Tarry's client nor Temporal's, the heaviest
of its imports (issue 55). Each process is the real one, its imports read from `python -v`,
which names every module as it is loaded, also one that `importlib` loads (`tarry`'s
names load so), which `-X importtime` leaves out."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import tarry
import tarry.client
from tests.cli import CLOSED_PORT, TARRY, cli_env
from tests.deadline import deadline

CLIENTS = {"tarry.client.front_door", "temporalio.client"}
"""Tarry's client (`Tarry`) and Temporal's. Every room of `tarry.client` that talks to
Temporal imports Temporal's client; what the command line's help shows of datasets and
schedules (`tarry.client.dataset_store`, `tarry.client.schedules`) loads without it."""
LOADED = re.compile(r"^import '([^']+)' # ", re.MULTILINE)
"""`python -v`'s line for a module it loaded."""
VERBOSE = re.compile(r"^(#|import |Processing |Adding |Python 3|Type \"help\").*\n", re.MULTILINE)
"""Every line of `python -v`'s own: its imports, its notes, its banner."""


def imported_by(*argv: str, **settings: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """The finished Python process of `argv` (its arguments after `python`), with no
    Temporal server to reach and `settings` in its environment, its standard error
    without `python -v`'s lines, and every module it imported on its way."""
    done = subprocess.run(
        [sys.executable, "-v", *argv],
        env=cli_env(CLOSED_PORT, "startup") | settings,
        capture_output=True,
        text=True,
        timeout=deadline(60),
    )
    modules = set(LOADED.findall(done.stderr))
    done.stderr = VERBOSE.sub("", done.stderr)
    return done, modules


def test_a_name_of_tarry_loads_its_module_on_first_use() -> None:
    done, modules = imported_by("-c", "import tarry; tarry.Tarry")

    assert done.returncode == 0, done.stderr
    assert modules >= CLIENTS


def test_every_name_tarry_exports_is_there() -> None:
    for name in tarry.__all__:
        assert getattr(tarry, name).__name__ == name


def test_every_name_the_client_exports_is_there() -> None:
    assert [name for name in tarry.client.__all__ if not hasattr(tarry.client, name)] == []


def test_tarry_help_loads_no_client() -> None:
    done, modules = imported_by(str(TARRY), "--help")

    assert done.returncode == 0, done.stderr
    assert "Usage: tarry [OPTIONS] COMMAND [ARGS]..." in done.stdout
    assert modules & CLIENTS == set()


def test_an_argument_error_loads_no_client() -> None:
    done, modules = imported_by(str(TARRY), "status")

    assert done.returncode == 2
    assert "Missing argument 'RUN'" in done.stderr
    assert modules & CLIENTS == set()


def test_a_command_that_needs_no_server_loads_no_client(tmp_path: Path) -> None:
    done, modules = imported_by(str(TARRY), "dataset", "list", TARRY_DATASETS_DIR=str(tmp_path))

    assert done.returncode == 0, done.stderr
    assert modules & CLIENTS == set()


def test_a_command_that_connects_loads_the_client() -> None:
    done, modules = imported_by(str(TARRY), "status", "some-run")

    assert f"cannot reach Temporal at {CLOSED_PORT}" in done.stderr
    assert modules >= CLIENTS


def test_a_worker_process_loads_no_module_of_tarrys_client() -> None:
    done, modules = imported_by("-m", "workers")

    assert f"cannot reach Temporal at {CLOSED_PORT}" in done.stderr
    assert [m for m in modules if m == "tarry.client" or m.startswith("tarry.client.")] == []
