"""The house has floors, and imports run one way, down (docs/design/layout.md):

    tarry (ground)  <-  tarry.api
    tarry           <-  workflows, activities (which never import each other)
                    <-  workers
                    <-  tarry.testing (it starts workers for a user's tests, as `tarry dev` does)
                    <-  tarry.cli, bench, tests (bench never imports tests)

and what a client and a worker import needs no extra: `pip install tarry` serves runs.
The one exception is what only a worker configured for it loads: its MCP servers' tools
(`activities/mcp_*.py`, the `mcp` extra), which `workers.plugin` imports only then.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

from tests.deadline import deadline

ROOT = Path(__file__).resolve().parent.parent

MAY_IMPORT: dict[str, set[str]] = {
    "tarry": {"tarry"},
    "tarry.api": {"tarry", "tarry.api"},
    "workflows": {"tarry", "workflows"},
    "activities": {"tarry", "activities"},
    "workers": {"tarry", "workflows", "activities", "workers"},
    "tarry.testing": {"tarry", "workflows", "activities", "workers", "tarry.testing"},
    "tarry.cli": {
        "tarry",
        "tarry.testing",
        "tarry.api",
        "workflows",
        "activities",
        "workers",
        "tarry.cli",
    },
    "bench": set(),  # filled in below: what the roof may, and itself
    "tests": set(),  # filled in below: everything
}
MAY_IMPORT["bench"] = MAY_IMPORT["tarry.cli"] | {"bench"}
MAY_IMPORT["tests"] = set(MAY_IMPORT) | {"tests"}
LIBRARY = ("tarry", "workflows", "activities", "workers")
"""The layers `pip install tarry` installs without extras: a client and a worker."""
OPTIONAL = re.compile(r"activities\.mcp_\w+|workers\.tracing|workers\.trace_content")
"""Library modules that need an extra, loaded only by a worker configured to need it."""
CLI_MODULE_LINES = 350
"""The most lines a module of the command line may have: one module per command group,
not every command in one file."""
MODULE_LINES = 600
"""The most lines any module but a test's may have: past it, a module holds more than
one idea (a client of six concerns, every contract in one file)."""


def layer_of(module: str) -> str | None:
    """The layer a dotted module name belongs to; None: not the project's."""
    for sub in ("tarry.cli", "tarry.testing", "tarry.api"):
        if module == sub or module.startswith(sub + "."):
            return sub
    top = module.split(".")[0]
    return top if top in MAY_IMPORT else None


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(root: Path, path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every import in the file, wherever it sits: at the top, in a
    function (a lazy import is an import too) or under `TYPE_CHECKING`."""
    module = _module_name(root, path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                # `from tarry import cli` imports the sub-package `tarry.cli`.
                yield node.lineno, f"{base}.{alias.name}"


def python_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0].startswith(".") or relative.parts[0] in {"build", "dist"}:
            continue
        yield path


def upward_imports(root: Path) -> list[str]:
    """Every import of the project's code that runs against the layers, one line each."""
    found = []
    for path in python_files(root):
        layer = layer_of(_module_name(root, path))
        if layer is None:
            continue
        for line, name in imports(root, path):
            target = layer_of(name)
            if target is not None and target not in MAY_IMPORT[layer]:
                found.append(f"{path.relative_to(root)}:{line}: {layer} imports {name}")
    return found


def long_cli_modules(root: Path) -> list[str]:
    """Every module under `tarry/cli` over `CLI_MODULE_LINES` lines, with its length."""
    return [
        f"{path.relative_to(root)}: {lines} lines"
        for path in sorted((root / "tarry" / "cli").rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > CLI_MODULE_LINES
    ]


def long_modules(root: Path) -> list[str]:
    """Every module outside `tests/` over `MODULE_LINES` lines, with its length."""
    return [
        f"{path.relative_to(root)}: {lines} lines"
        for path in python_files(root)
        if path.relative_to(root).parts[0] != "tests"
        and (lines := len(path.read_text().splitlines())) > MODULE_LINES
    ]


def _dist(requirement: str) -> str:
    """The normalised distribution name of a requirement like `typer>=0.15,<1`."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group()).lower()


def extra_only_modules() -> set[str]:
    """Top-level modules that only an extra of pyproject.toml installs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_dist(r) for r in project["dependencies"]}
    extras = {_dist(r) for rs in project["optional-dependencies"].values() for r in rs}
    extra_only = extras - core - {"tarry"}
    return {
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if any(_dist(d) in extra_only for d in dists)
    }


def imports_of_extras(root: Path, blocked: set[str]) -> list[str]:
    """Every import, in a library layer, of a module that only an extra installs."""
    found = []
    for path in python_files(root):
        module = _module_name(root, path)
        layer = layer_of(module)
        if layer not in LIBRARY or OPTIONAL.fullmatch(module):
            continue
        for line, name in imports(root, path):
            if name.split(".")[0] in blocked:
                found.append(f"{path.relative_to(root)}:{line}: {layer} imports {name}")
    return found


def test_no_module_imports_from_a_layer_above_it() -> None:
    assert upward_imports(ROOT) == []


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    files = {
        "tarry/__init__.py": "",
        "tarry/client.py": "from tarry.cli.render import shorten\n",
        "tarry/events.py": "from tarry import contracts\n",
        "tarry/contracts.py": "from . import cli\n",
        "tarry/testing/model.py": "import workers.plugin\nfrom tarry.cli.app import app\n",
        "tarry/api/routes.py": "from tarry.cli.app import app\nfrom tarry.client import Tarry\n",
        "workflows/run.py": "from tarry.contracts import RunInput\nimport activities.tools\n",
        "workers/worker.py": "from workflows.run import X\n",
        "bench/rig.py": "def rig():\n    from tests.faults import DevServer\n",
        "tests/test_x.py": "import bench.rig\nfrom tarry.cli import app\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    assert upward_imports(tmp_path) == [
        "bench/rig.py:2: bench imports tests.faults.DevServer",
        "tarry/api/routes.py:1: tarry.api imports tarry.cli.app.app",
        "tarry/client.py:1: tarry imports tarry.cli.render.shorten",
        "tarry/contracts.py:1: tarry imports tarry.cli",
        "tarry/testing/model.py:2: tarry.testing imports tarry.cli.app.app",
        "workflows/run.py:2: workflows imports activities.tools",
    ]


def test_no_module_of_the_command_line_is_over_350_lines() -> None:
    assert long_cli_modules(ROOT) == []


def test_a_long_command_line_module_is_found(tmp_path: Path) -> None:
    (tmp_path / "tarry" / "cli" / "groups").mkdir(parents=True)
    (tmp_path / "tarry" / "cli" / "runs.py").write_text("x = 1\n" * CLI_MODULE_LINES)
    (tmp_path / "tarry" / "cli" / "groups" / "app.py").write_text("x = 1\n" * 351)

    assert long_cli_modules(tmp_path) == ["tarry/cli/groups/app.py: 351 lines"]


def test_no_module_outside_the_tests_is_over_600_lines() -> None:
    assert long_modules(ROOT) == []


def test_a_long_module_is_found(tmp_path: Path) -> None:
    for name, lines in {"tarry/client.py": 601, "workflows/run.py": 600, "tests/t.py": 900}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n" * lines)

    assert long_modules(tmp_path) == ["tarry/client.py: 601 lines"]


def test_a_client_and_a_worker_import_nothing_an_extra_installs() -> None:
    blocked = extra_only_modules()
    assert {"typer", "rich", "aiohttp", "fastapi"} <= blocked  # what the check looks for

    assert imports_of_extras(ROOT, blocked) == []


_REFUSING_EXTRAS = """
import importlib.abc, json, sys

blocked = set(json.loads(sys.argv[1]))

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
"""


def without_extras(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a Python where no module that only an extra installs can be imported,
    as after `pip install tarry`."""
    return subprocess.run(
        [sys.executable, "-c", _REFUSING_EXTRAS + code, json.dumps(sorted(extra_only_modules()))],
        cwd=cwd,  # the installed package, not this checkout's directory on sys.path
        capture_output=True,
        text=True,
        timeout=deadline(60),
    )


def test_a_client_and_a_worker_load_without_any_extra(tmp_path: Path) -> None:
    done = without_extras(
        "from tarry import Phase, RunInput, Tarry, TarryError, tool\n"
        "from tarry.settings import TarrySettings\n"
        "from workers.plugin import TarryPlugin\n"
        "import workers.__main__\n"
        "plugin = TarryPlugin(TarrySettings.model_construct(), tools=[])\n"
        "print(plugin.tools.names, sorted(m for m in sys.modules if m.split('.')[0] in blocked))\n",
        tmp_path,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout == "['finish'] []\n"


def test_the_tarry_command_without_its_extra_says_how_to_install_it(tmp_path: Path) -> None:
    done = without_extras("from tarry.cli import main\nmain()\n", tmp_path)

    assert done.returncode == 1
    assert re.fullmatch(
        r"error: the tarry command needs the cli extra \((typer|rich|aiohttp) is missing\); "
        r"install it with: pip install 'tarry\[cli\]'\n",
        done.stderr,
    ), done.stderr
