"""The suite's own processes import as a worker does: a pytest plugin that a dependency
installs must not slow what the tests measure and wait on."""

from __future__ import annotations

import sys


def test_the_suite_loads_source_files_through_python_s_own_path_hooks_alone() -> None:
    # The workflow sandbox imports a run's modules afresh for every run it loads, so an import
    # hook runs hundreds of times a test. arize-phoenix-client's pytest plugin imported
    # Phoenix's server, whose MCP client installs beartype's hook on every source file: replay
    # at the suite's teardowns took five times as long (pyproject.toml's addopts turn it off).
    path_hooks = [getattr(hook, "__qualname__", "") for hook in sys.path_hooks]

    assert path_hooks == ["zipimporter", "FileFinder.path_hook.<locals>.path_hook_for_FileFinder"]
