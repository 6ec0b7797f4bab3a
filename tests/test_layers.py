"""The house has floors, and imports run one way, down (docs/design/layout.md):

    tarry.contracts      what crosses Temporal: a run's input, state, events, approval rules
    <- tarry.core        the pure core: text, identities, ownership, errors, tool declarations
    <- tarry.config      the settings and the config file's tables
    <- tarry.temporal    the connection to Temporal, the payload codec and store
    <- tarry.search      the search index of the runs' messages, and its stores
    <- tarry.connections people's grants to OAuth servers, and the OAuth flows
    <- tarry.client      the client: `Tarry`, a run's handle, schedules, datasets, evals
    <- tarry             the face (`tarry.*`, each name loaded on first use)
    <- tarry.api

    tarry.contracts, tarry.core    <- workflows
    tarry and the floors under it  <- activities (the two never import each other)
    <- workers
    <- tarry.testing (it starts workers for a user's tests, as `tarry dev` does)
    <- tarry.cli, bench, tests (bench never imports tests)

The faces (`tarry`'s and `tarry.client`'s) load their names with `tarry._lazy`, which
imports nothing of Tarry's.

A workflow imports only the contracts and the pure core: the worker passes `workflows`
through its sandbox (`workers.plugin.workflows_passed_through`), so what a workflow
imports runs unchecked by it, and is safe because it does no I/O, reads no clock and
loads no client. `import tarry` loads nothing (its names load on first use), nor does
`import tarry.client` (the client's face, as lazy), so a worker never loads the client
(`tests/test_startup.py` reads a worker's imports).

What a client and a worker import needs no extra: `pip install tarry` serves runs.
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
from tests.python_source import parsed

ROOT = Path(__file__).resolve().parent.parent

CONTRACTS_AND_CORE = {"tarry.contracts", "tarry.core"}
"""What a workflow may import of `tarry`: pure, loading no client."""
CONFIG = CONTRACTS_AND_CORE | {"tarry.config"}
TEMPORAL = CONFIG | {"tarry.temporal"}
SEARCH = CONFIG | {"tarry.search"}
CONNECTIONS = CONFIG | {"tarry.connections"}
CLIENT = TEMPORAL | {"tarry.client", "tarry._lazy"}
"""The client, and the machinery of its face."""
GROUND = CLIENT | SEARCH | CONNECTIONS | {"tarry"}
"""The ground floor: every floor of `tarry` but its API, testing and command line."""
MAY_IMPORT: dict[str, set[str]] = {
    "tarry._lazy": {"tarry._lazy"},
    "tarry.contracts": {"tarry.contracts"},
    "tarry.core": CONTRACTS_AND_CORE,
    "tarry.config": CONFIG,
    "tarry.temporal": TEMPORAL,
    "tarry.search": SEARCH,
    "tarry.connections": CONNECTIONS,
    "tarry.client": CLIENT,
    "tarry": GROUND,  # the face: `__init__.py` names what the floors under it hold
    "tarry.testing": GROUND | {"workflows", "activities", "workers", "tarry.testing"},
    "tarry.api": GROUND | {"tarry.api"},
    # Not the rest of `tarry`: the sandbox passes `workflows` through (see above).
    "workflows": CONTRACTS_AND_CORE | {"workflows"},
    "activities": GROUND | {"activities"},
    "workers": GROUND | {"workflows", "activities", "workers"},
    "tarry.cli": GROUND
    | {"tarry.testing", "tarry.api", "workflows", "activities", "workers", "tarry.cli"},
    "bench": set(),  # filled in below: what the roof may, and itself
    "tests": set(),  # filled in below: everything
}
MAY_IMPORT["bench"] = MAY_IMPORT["tarry.cli"] | {"bench"}
MAY_IMPORT["tests"] = set(MAY_IMPORT) | {"tests"}
LIBRARY = (*GROUND, "workflows", "activities", "workers")
"""The layers `pip install tarry` installs without extras: a client and a worker."""
OPTIONAL = re.compile(
    r"activities\.mcp_\w+|activities\.guardrail_pii|workers\.tracing|workers\.trace_content"
    r"|tarry\.search\.postgres"
    r"|tarry\.connections\.oauth"
    r"|activities\.a2a_remote|tarry\.core\.a2a_tasks"
)
"""Library modules that need an extra, loaded only by a worker configured to need it (the
PostgreSQL search store: only by a process whose `TARRY_SEARCH_INDEX` is a URL;
`tarry.connections.oauth` loads the `mcp` extra's OAuth models inside the flows that need
them, which only a deployment with an OAuth MCP server runs; the remote A2A agents'
activities and what they read of a task, only by a worker whose config names one)."""
CLI_MODULE_LINES = 350
"""The most lines a module of the command line may have: one module per command group,
not every command in one file."""
MODULE_LINES = 600
"""The most lines any module but a test's may have: past it, a module holds more than
one idea (a client of six concerns, every contract in one file)."""


SUB_PACKAGES = (
    "tarry._lazy",
    "tarry.contracts",
    "tarry.core",
    "tarry.config",
    "tarry.temporal",
    "tarry.search",
    "tarry.connections",
    "tarry.client",
    "tarry.testing",
    "tarry.api",
    "tarry.cli",
)
"""The floors inside `tarry`, and the faces' machinery; the rest of it (`__init__.py`) is
its face."""


def layer_of(module: str) -> str | None:
    """The layer a dotted module name belongs to; None: not the project's."""
    for sub in SUB_PACKAGES:
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
    for node in ast.walk(parsed(path.read_text(), str(path))):
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
    """Top-level modules that only an extra of pyproject.toml installs. A module that a
    core dependency installs too (`temporalio`, which the bench extra's
    `temporalio-openai-agents` adds to) is not one."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_dist(r) for r in project["dependencies"]}
    extras = {_dist(r) for rs in project["optional-dependencies"].values() for r in rs}
    extra_only = extras - core - {"tarry"}
    return {
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if all(_dist(d) in extra_only for d in dists)
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


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "tarry/__init__.py": "from tarry.client.front_door import Tarry\n",
            "tarry/_lazy.py": "from tarry.core import text\n",
            "tarry/client/__init__.py": "from tarry._lazy import lazy_face\n",
            "tarry/client/front_door.py": "from tarry.cli.render import shorten\n",
            "tarry/client/delivery.py": "from tarry import Tarry\n",
            "tarry/client/run_list.py": "from .. import cli\nfrom . import schedules\n",
            "tarry/contracts/run.py": "from tarry.core.text import shorten\n",
            "tarry/core/text.py": "from tarry import client\n",
            "tarry/config/settings.py": "from tarry.temporal import storage\n",
            "tarry/temporal/connection.py": "from tarry.client import Tarry\n",
            "tarry/testing/model.py": "import workers.plugin\nfrom tarry.cli.app import app\n",
            "tarry/api/app.py": "from tarry.cli.app import app\nfrom tarry.client import Tarry\n",
            "activities/tool_calls.py": "from tarry.config.settings import TarrySettings\n",
            "workers/worker.py": "from workflows.run import X\n",
            "bench/rig.py": "def rig():\n    from tests.faults import DevServer\n",
            "tests/test_x.py": "import bench.rig\nfrom tarry.cli import app\n",
        },
    )

    assert upward_imports(tmp_path) == [
        "bench/rig.py:2: bench imports tests.faults.DevServer",
        "tarry/_lazy.py:1: tarry._lazy imports tarry.core.text",
        "tarry/api/app.py:1: tarry.api imports tarry.cli.app.app",
        "tarry/client/delivery.py:1: tarry.client imports tarry.Tarry",
        "tarry/client/front_door.py:1: tarry.client imports tarry.cli.render.shorten",
        "tarry/client/run_list.py:1: tarry.client imports tarry.cli",
        "tarry/config/settings.py:1: tarry.config imports tarry.temporal.storage",
        "tarry/contracts/run.py:1: tarry.contracts imports tarry.core.text.shorten",
        "tarry/core/text.py:1: tarry.core imports tarry.client",
        "tarry/temporal/connection.py:1: tarry.temporal imports tarry.client.Tarry",
        "tarry/testing/model.py:2: tarry.testing imports tarry.cli.app.app",
    ]


def test_a_workflow_that_imports_beyond_the_contracts_and_the_pure_core_is_found(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            "workflows/run.py": "from tarry.contracts import RunInput\n"
            "from tarry.core.text import shorten\n"
            "from workflows import audit\n"
            "from tarry.config.settings import TarrySettings\n"
            "import tarry\n"
            "from tarry import Phase\n"
            "import activities.tool_calls\n",
            "workflows/eval.py": "def score():\n    from tarry.client import Tarry\n",
        },
    )

    assert upward_imports(tmp_path) == [
        "workflows/eval.py:2: workflows imports tarry.client.Tarry",
        "workflows/run.py:4: workflows imports tarry.config.settings.TarrySettings",
        "workflows/run.py:5: workflows imports tarry",
        "workflows/run.py:6: workflows imports tarry.Phase",
        "workflows/run.py:7: workflows imports activities.tool_calls",
    ]


def loaded_by(code: str, cwd: Path) -> list[str]:
    """The modules of Tarry, and Temporal's client, that a fresh Python has loaded after
    running `code`, sorted."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys\n{code}\nprint(*sorted(m for m in sys.modules if m.split('.')[0] =="
            " 'tarry' or m == 'temporalio.client'))",
        ],
        cwd=cwd,  # the installed package, not this checkout's directory on sys.path
        capture_output=True,
        text=True,
        timeout=deadline(60),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_import_tarry_loads_nothing_but_the_package(tmp_path: Path) -> None:
    # `tarry._lazy` is the face's own machinery: it loads each name on first use.
    assert loaded_by("import tarry", tmp_path) == ["tarry", "tarry._lazy"]


def test_import_tarry_client_loads_nothing_but_its_face(tmp_path: Path) -> None:
    assert loaded_by("import tarry.client", tmp_path) == ["tarry", "tarry._lazy", "tarry.client"]


def test_the_contracts_and_the_pure_core_load_no_client(tmp_path: Path) -> None:
    loaded = loaded_by(
        "import importlib, pkgutil, tarry.contracts, tarry.core\n"
        "for package in (tarry.contracts, tarry.core):\n"
        "    for module in pkgutil.iter_modules(package.__path__):\n"
        "        importlib.import_module(f'{package.__name__}.{module.name}')",
        tmp_path,
    )

    assert "tarry.core.ownership" in loaded  # every module of both was loaded
    face = ["tarry", "tarry._lazy"]
    assert [m for m in loaded if layer_of(m) not in {"tarry.contracts", "tarry.core"}] == face


def modules_without_all(root: Path) -> list[str]:
    """Every module of `tarry`'s ground floors that neither is private (`_name.py`) nor
    names what it exports in `__all__`: what a caller may import of it is the face's
    (`tarry.*`, `tarry.contracts`) and its `__all__`, nothing else, so a later split
    breaks no name anyone was offered."""
    return [
        str(path.relative_to(root))
        for path in python_files(root)
        if layer_of(_module_name(root, path)) in GROUND
        and not path.name.startswith("_")
        and not any(
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            for node in parsed(path.read_text()).body
        )
    ]


def test_every_module_of_the_ground_floors_is_private_or_names_its_exports() -> None:
    assert modules_without_all(ROOT) == []


def test_a_module_that_names_no_exports_is_found(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "tarry/__init__.py": "",
            "tarry/client/front_door.py": "class Tarry: ...\n",
            "tarry/client/delivery.py": '__all__ = ["deliver"]\n',
            "tarry/core/_omit.py": "x = 1\n",
            "tarry/cli/app.py": "app = 1\n",
            "workflows/run.py": "x = 1\n",
        },
    )

    assert modules_without_all(tmp_path) == ["tarry/client/front_door.py"]


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
    lines = {"tarry/client/front_door.py": 601, "workflows/run.py": 600, "tests/t.py": 900}
    write(tmp_path, {name: "x = 1\n" * n for name, n in lines.items()})

    assert long_modules(tmp_path) == ["tarry/client/front_door.py: 601 lines"]


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
        "from tarry.config.settings import TarrySettings\n"
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
