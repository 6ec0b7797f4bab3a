"""The suite's tiers (tests/conftest.py's `TIERS`): each is a marker pyproject.toml
describes, and every test the tables name as end to end or replay exists, so that a
renamed test does not fall silently into another tier."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from tests.conftest import END_TO_END, REPLAY, TIERS
from tests.python_source import parsed

TESTS = Path(__file__).parent


def test_every_tier_is_a_marker_pyproject_describes() -> None:
    pyproject = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())
    options = pyproject["tool"]["pytest"]["ini_options"]
    described = [line.split(":", 1)[0] for line in options["markers"]]

    assert described == list(TIERS)
    assert "--strict-markers" in options["addopts"].split()


def test_every_file_and_test_the_tier_tables_name_exists() -> None:
    missing = [entry for entry in sorted(END_TO_END | REPLAY) if not _exists(*entry.split("::"))]

    assert missing == []


def _exists(file: str, name: str = "") -> bool:
    """The test file exists, and defines the test `name` if one is given."""
    path = TESTS / file
    if not path.is_file():
        return False
    tree = parsed(path.read_text())
    defined = {
        node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    return not name or name in defined
