"""The docs site: it builds with warnings as errors, and its reference, generated
from the code at every build, leaves out no command, setting, error code or documented
Python name, nor a docstring of one."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path
from types import ModuleType

import griffe
import pytest
import typer

import tarry
from tarry.cli.app import app
from tarry.contracts import ErrorCode
from tarry.settings import TarrySettings
from tests.deadline import deadline

ROOT = Path(__file__).resolve().parent.parent
PYTHON_REFERENCE = ROOT / "docs" / "reference" / "python.md"


def _load(path: Path) -> ModuleType:
    """The site's page generator: a script of the docs, not a module of the package."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference_pages = _load(ROOT / "docs" / "reference_pages.py")


def documented_names() -> list[str]:
    """The dotted names the Python API page renders (`::: tarry.client.Tarry`)."""
    return re.findall(r"^::: ([\w.]+)$", PYTHON_REFERENCE.read_text(), flags=re.MULTILINE)


def test_scripts_docs_builds_the_site_with_warnings_as_errors_and_says_where(
    tmp_path: Path,
) -> None:
    built = subprocess.run(
        [ROOT / "scripts" / "docs", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=deadline(300),
    )

    assert built.returncode == 0, built.stderr[-3000:]
    assert built.stdout == f"built the docs site in {tmp_path}\n"
    assert (tmp_path / "reference" / "errors" / "index.html").exists()
    assert "RUN_ID_INVALID" in (tmp_path / "reference" / "errors" / "index.html").read_text()


def test_every_command_is_in_the_command_line_reference() -> None:
    page = reference_pages.cli_page()

    paths = [" ".join(path) for path, _ in reference_pages.commands(typer.main.get_command(app))]

    assert "tarry start" in paths
    for path in paths:
        assert f"## `{path}`" in page


def test_every_setting_is_in_the_settings_reference_with_what_it_is() -> None:
    rows = {
        line.split("|")[1].strip(" `"): line.split("|")[4].strip()
        for line in reference_pages.settings_page().splitlines()
        if line.startswith("| `")
    }

    for name, field in TarrySettings.model_fields.items():
        if field.exclude:
            continue
        assert rows.get(name.upper()), f"{name.upper()} has no row, or no description"


def test_every_error_code_is_in_the_errors_reference_with_what_it_means() -> None:
    rows = {
        line.split("|")[1].strip(" `"): line.split("|")[3].strip()
        for line in reference_pages.errors_page().splitlines()
        if line.startswith("| `")
    }

    for code in ErrorCode:
        assert rows.get(code.value), f"{code} has no row, or no description"


def test_every_route_is_in_the_http_api_reference() -> None:
    page = reference_pages.http_api_page()

    for route in ("POST /v1/runs", "GET /v1/runs/{run_id}", "POST /v1/runs/{run_id}/stop"):
        assert f"## `{route}`" in page


def test_everything_tarry_exports_is_in_the_python_reference() -> None:
    documented = {name.rsplit(".", 1)[1] for name in documented_names()}

    assert set(tarry.__all__) <= documented


@pytest.mark.parametrize("name", documented_names())
def test_a_documented_name_and_its_public_methods_have_docstrings(name: str) -> None:
    module, _, member = name.rpartition(".")
    loaded = griffe.load(module, search_paths=[str(ROOT)])
    obj = loaded if not member else loaded[member]

    undocumented = [obj.path] if obj.docstring is None else []
    if obj.is_class:
        undocumented += [
            m.path
            for n, m in obj.members.items()
            if not n.startswith("_") and not m.is_alias and m.is_function and m.docstring is None
        ]

    assert undocumented == []


def test_the_readme_is_a_landing_page_of_at_most_250_lines() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()

    assert len(lines) <= 250


def test_every_page_the_readme_links_to_is_in_the_repository() -> None:
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())

    assert "docs/guides/approvals.md" in links
    assert [link for link in links if not (ROOT / link).exists()] == []
