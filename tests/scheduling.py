"""How scripts/test hands tests to its pytest-xdist workers (`--dist loadgroup`): one at
a time as workers free up, in collection order, but each file of `HELD` whole.

pytest-xdist's own `loadgroup` reads `xdist_group` marks into test ids, which pytest 9
no longer lets it rewrite, so its groups fall apart. This scheduler is also where the
suite survives a worker that crashes (a segfault in an extension, say): pytest-xdist
3.8 would then wait forever at the end of the run instead of reporting the crash."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

HELD = {
    path.name
    for path in Path(__file__).parent.glob("test_*.py")
    if re.search(r"""fixture\(scope=["']module["']""", path.read_text())
}
"""The files with a fixture of their module's (a built wheel, a docs site, a browser, a
model server): scripts/test runs each on one worker, so that the fixture is made once,
not once per worker. The scheduler decides from test ids alone, before any worker has
collected, so the files are found by their text."""

Workload = dict[str, dict[str, bool]]
"""A worker's work units: scope -> test id -> whether it has finished."""


class HeldTogether(LoadScopeScheduling):  # type: ignore[misc]
    def _split_scope(self, nodeid: str) -> str:
        file = nodeid.split("::", 1)[0]
        return file if Path(file).name in HELD else nodeid

    def remove_node(self, node: Any) -> str | None:
        """The test a crashed worker was running (None: it had none left), which the
        session reports as failed; the tests it had not reached go back on the queue.
        pytest-xdist 3.8 puts back every unit the worker was ever given: each finished
        one became an empty batch that no worker reports on, and the run waited forever
        at its end (pytest-xdist #1323, #1378). It also ran the crashed test again, on
        the replacement, which that test may crash too (#1371)."""
        workload: Workload = self.assigned_work.pop(node)
        unfinished = {scope: unit for scope, unit in workload.items() if not all(unit.values())}
        if not unfinished:
            return None
        # A worker runs its tests in the order it was given them: the first not finished.
        crashed = next(t for unit in unfinished.values() for t, done in unit.items() if not done)
        unfinished[self._split_scope(crashed)][crashed] = True
        self.workqueue.update({s: unit for s, unit in unfinished.items() if not all(unit.values())})
        for other in self.assigned_work:
            self._reschedule(other)
        return crashed

    def _reschedule(self, node: Any) -> None:
        """Tops `node` up to three tests while there are any, as pytest-xdist does after
        each test, and shuts it down once the queue is empty. pytest-xdist gives one unit
        at a time, and a worker starts a test only once it holds the one after it, or its
        shutdown: a crashed worker's replacement, given a single test, waited for a
        second forever (pytest-xdist #1327)."""
        if node.shutting_down:
            return
        while self.workqueue and self._pending_of(self.assigned_work[node]) < 3:
            self._assign_work_unit(node)
        if not self.workqueue:
            node.shutdown()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`HeldTogether` for `--dist loadgroup`; pytest-xdist's own for any other mode."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return HeldTogether(config, log)
