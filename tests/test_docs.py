"""The docs site: it builds with warnings as errors, and its reference, generated
from the code at every build, leaves out no command, setting, error code or documented
Python name, nor a docstring of one."""

from __future__ import annotations

import functools
import importlib.util
import re
import subprocess
from pathlib import Path
from types import ModuleType

import griffe
import pytest
import typer
import yaml

import tarry
from tarry.cli.app import app
from tarry.config.settings import TarrySettings
from tarry.contracts import ErrorCode, WaitingFor
from tests.browser import chromium, needs_chromium, static_site
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
    """The dotted names the Python API page renders (`::: tarry.Tarry`)."""
    return re.findall(r"^::: ([\w.]+)$", PYTHON_REFERENCE.read_text(), flags=re.MULTILINE)


@functools.cache
def _griffe() -> griffe.GriffeLoader:
    return griffe.GriffeLoader(search_paths=[str(ROOT)])


def griffe_module(name: str) -> griffe.Object | griffe.Alias:
    """The module `name` as griffe reads it for the site. `griffe.load` of one module
    reads its whole package (3 s for `tarry`), so each package is read once per process
    and its modules are looked up in it."""
    loader = _griffe()
    package = name.partition(".")[0]
    if package not in loader.modules_collection:
        loader.load(package)
    found: griffe.Object | griffe.Alias = loader.modules_collection[name]
    return found


def documented_object(obj: griffe.Object | griffe.Alias) -> griffe.Object | griffe.Alias:
    """What the site renders for a documented name: for a name of `tarry`'s face (an
    import there), the object it names."""
    return obj.final_target if isinstance(obj, griffe.Alias) else obj


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The site `scripts/docs` builds, and how the build went."""
    directory = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [ROOT / "scripts" / "docs", "--site-dir", str(directory)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=deadline(300),
    )
    return directory, built


def test_scripts_docs_builds_the_site_with_warnings_as_errors_and_says_where(
    site: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    directory, built = site

    assert built.returncode == 0, built.stderr[-3000:]
    assert built.stdout == f"built the docs site in {directory}\n"
    assert (directory / "reference" / "errors" / "index.html").exists()
    assert "RUN_ID_INVALID" in (directory / "reference" / "errors" / "index.html").read_text()


OVERFLOWING = """return [...document.querySelectorAll('.md-typeset pre > code')]
    .filter(code => code.scrollWidth > code.clientWidth)
    .map(code => code.textContent.split('\\n')[0]);"""
"""The first line of each code block whose text is wider than its box (it scrolls)."""


@needs_chromium
@pytest.mark.parametrize("width", [1280, 1000])
def test_the_command_reference_boxes_fit_the_page_in_a_browser(
    site: tuple[Path, subprocess.CompletedProcess[str]], width: int
) -> None:
    directory, built = site
    assert built.returncode == 0, built.stderr[-3000:]

    with static_site(directory) as url, chromium(width) as browser:
        browser.get(f"{url}/reference/cli/")
        overflowing = browser.execute_script(OVERFLOWING)
        blocks = browser.execute_script("return document.querySelectorAll('.cli-help').length")

    assert blocks > 30  # every command's help, each in its box
    assert overflowing == []


BROKEN_NAMES = """return [...document.querySelectorAll('.md-typeset table td:first-child code')]
    .filter(code => code.getClientRects().length > 1)
    .map(code => code.textContent);"""
"""The names in a table's first column that the page breaks over two lines or more."""


@needs_chromium
@pytest.mark.parametrize("page", ["reference/settings", "reference/errors"])
def test_the_reference_tables_keep_each_name_on_one_line(
    site: tuple[Path, subprocess.CompletedProcess[str]], page: str
) -> None:
    directory, built = site
    assert built.returncode == 0, built.stderr[-3000:]

    with static_site(directory) as url, chromium(1000) as browser:
        browser.get(f"{url}/{page}/")
        broken = browser.execute_script(BROKEN_NAMES)
        names = browser.execute_script(
            "return document.querySelectorAll('.md-typeset table td:first-child code').length"
        )

    assert names > 20
    assert broken == []


def test_the_nav_lists_each_page_once() -> None:
    pages = re.findall(r"^\s*- [^:]+: (\S+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE)

    assert pages
    assert [page for page in set(pages) if pages.count(page) > 1] == []


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


def test_every_kind_of_wait_is_in_the_waits_reference_with_what_ends_it() -> None:
    rows = {
        line.split("|")[1].strip(" `"): line.split("|")[4].strip()
        for line in reference_pages.waits_page().splitlines()
        if line.startswith("| `")
    }

    assert list(rows) == list(WaitingFor)
    assert all(rows.values())


def test_everything_tarry_exports_is_in_the_python_reference_by_its_name_in_tarry() -> None:
    # `tarry.Tarry`, not the module it lives in: a module moved behind the face (a floor
    # split, say) breaks no name the reference shows.
    documented = set(documented_names())

    assert {f"tarry.{name}" for name in tarry.__all__} <= documented


@pytest.mark.parametrize("name", documented_names())
def test_a_documented_name_and_its_public_methods_have_docstrings(name: str) -> None:
    module, _, member = name.rpartition(".")
    loaded = griffe_module(module)
    obj = documented_object(loaded if not member else loaded[member])

    undocumented = [obj.path] if obj.docstring is None else []
    if obj.is_class:
        undocumented += [
            m.path
            for n, m in obj.members.items()
            if not n.startswith("_") and not m.is_alias and m.is_function and m.docstring is None
        ]

    assert undocumented == []


def test_the_documented_docstrings_are_prose_as_the_site_renders_them() -> None:
    options = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["plugins"]
    [python] = [p["mkdocstrings"]["handlers"]["python"] for p in options if "mkdocstrings" in p]
    modules = {name.rpartition(".")[0] for name in documented_names()}
    loaded = {m: griffe_module(m) for m in modules}
    documented: list[griffe.Object | griffe.Alias] = []
    for name in documented_names():
        module, _, member = name.rpartition(".")
        obj = documented_object(loaded[module][member] if member else loaded[module])
        documented += [obj, *(m for n, m in obj.members.items() if not n.startswith("_"))]
    sectioned = {
        (obj.path, style.value, section.kind.value)
        for obj in documented
        if not obj.is_alias and obj.docstring is not None
        for style in (griffe.Parser.google, griffe.Parser.numpy, griffe.Parser.sphinx)
        for section in obj.docstring.parse(style)
        if section.kind is not griffe.DocstringSectionKind.text
    }

    assert python["options"]["docstring_style"] is None  # rendered as the Markdown it is
    assert sectioned == set()  # no Args:/Returns: block that would show as raw text


def test_the_readme_is_a_landing_page_of_at_most_250_lines() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()

    assert len(lines) <= 250


def test_every_page_the_readme_links_to_is_in_the_repository() -> None:
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())

    assert "docs/guides/approvals.md" in links
    assert [link for link in links if not (ROOT / link).exists()] == []
