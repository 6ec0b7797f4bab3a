"""No test bounds a wait with a bare number of seconds: every bound comes from the one
deadline (`tests/deadline.py`), so the whole suite gives a loaded machine more time at
once (`TARRY_TEST_TIMEOUT_SCALE`, `scripts/test --under-load`).

Read from the syntax of every module under tests/, a bound is:

- a `timeout=` or `attempt_timeout=` argument, of any call;
- the positional bound of the waits that take one: `asyncio.timeout(s)`,
  `asyncio.wait_for(aw, s)`, `RunHandle.wait_for(phases, s)`, `httpx.Timeout(s, ...)`,
  `pytest.mark.timeout(s)`, the scripted model's `wait_for_requests(n, s)`;
- the default of a parameter named `timeout`, and a name ending in `timeout` or
  `patience` that is given a value.

A bound may hold no number but inside `deadline(...)`: `deadline(30)`, `TIMEOUT`,
`STARTUP_TIMEOUT + deadline(60)`. Waits whose own default is a bare number
(`RunHandle.wait_for`'s 60 s, `wait_for_requests`'s 10 s, both the product's) must be
given a bound. Poll intervals (`asyncio.sleep(0.05)`) bound nothing and are not read;
neither are the run's own `Timeouts`, whose firing is what some tests assert.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.python_source import parsed

TESTS = Path(__file__).resolve().parent
SCALER = "deadline"

BOUND_KEYWORDS = frozenset({"timeout", "attempt_timeout"})
POSITIONAL_BOUND = {
    # name of the called function or method: index of its bound among positionals
    "timeout": 0,  # asyncio.timeout, pytest.mark.timeout
    "Timeout": 0,  # httpx.Timeout
    "wait_for": 1,  # asyncio.wait_for, RunHandle.wait_for
    "wait_for_requests": 1,
}
BOUND_REQUIRED = frozenset({"wait_for", "wait_for_requests"})
BOUND_NAME = re.compile(r"(?i)(timeout|patience)$")


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _bare_number(bound: ast.AST) -> bool:
    """Whether a number shows in `bound` outside a `deadline(...)` call."""
    if isinstance(bound, ast.Call) and _name(bound.func) == SCALER:
        return False
    if isinstance(bound, ast.Constant):
        return isinstance(bound.value, int | float) and not isinstance(bound.value, bool)
    return any(_bare_number(child) for child in ast.iter_child_nodes(bound))


def _call_bounds(call: ast.Call) -> Iterator[ast.expr | None]:
    """The bounds a call gives its wait; None: a wait that needs one got none."""
    name = _name(call.func)
    given = [k.value for k in call.keywords if k.arg in BOUND_KEYWORDS]
    if name in POSITIONAL_BOUND and len(call.args) > POSITIONAL_BOUND[name]:
        given.append(call.args[POSITIONAL_BOUND[name]])
    if name == "Timeout":  # httpx.Timeout(s, connect=5, ...): every phase's bound
        given += [k.value for k in call.keywords]
    yield from given
    if name in BOUND_REQUIRED and not given:
        yield None


def _default_bounds(arguments: ast.arguments) -> Iterator[ast.expr]:
    """The defaults of parameters named like a bound."""
    positional = [*arguments.posonlyargs, *arguments.args]
    with_default = positional[len(positional) - len(arguments.defaults) :]
    pairs = [
        *zip(with_default, arguments.defaults, strict=True),
        *zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True),
    ]
    yield from (default for arg, default in pairs if default and arg.arg in BOUND_KEYWORDS)


def bare_bounds(source: str) -> list[int]:
    """The lines of `source` where a wait is bounded by a bare number, or by none."""
    bare: set[int] = set()
    for node in ast.walk(parsed(source)):
        bounds: list[ast.expr | None] = []
        if isinstance(node, ast.Call):
            bounds = list(_call_bounds(node))
        elif isinstance(node, ast.arguments):
            bounds = list(_default_bounds(node))
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and BOUND_NAME.search(t.id) for t in targets):
                bounds = [node.value]
        bare |= {
            bound.lineno if bound is not None else getattr(node, "lineno", 0)  # the call
            for bound in bounds
            if bound is None or _bare_number(bound)
        }
    return sorted(bare)


def test_no_test_bounds_a_wait_with_a_bare_number_of_seconds() -> None:
    found = {
        f"{path.relative_to(TESTS.parent)}:{line}"
        for path in sorted(TESTS.glob("*.py"))
        if path.name != "deadline.py"
        for line in bare_bounds(path.read_text())
    }

    assert sorted(found) == []


def test_the_check_finds_each_kind_of_bare_bound() -> None:
    source = """
async def f(run, model, proc, timeout=5.0):
    async with asyncio.timeout(10):
        pass
    await asyncio.wait_for(proc.wait(), timeout=30)
    await run.wait_for(WAITING)
    await model.wait_for_requests(1)
    await eventually(run.pause, attempt_timeout=15)
    client = httpx.AsyncClient(timeout=httpx.Timeout(deadline(60), connect=5))
    STARTUP_TIMEOUT = 90.0
    await asyncio.wait_for(proc.wait(), STARTUP_TIMEOUT + 60)
"""
    assert bare_bounds(source) == [2, 3, 5, 6, 7, 8, 9, 10, 11]


def test_the_check_passes_bounds_from_the_deadline() -> None:
    source = """
async def f(run, model, proc, timeout=TIMEOUT):
    async with asyncio.timeout(deadline(10)):
        await asyncio.sleep(0.05)
    await asyncio.wait_for(proc.wait(), timeout=deadline(30))
    await run.wait_for(WAITING, TIMEOUT)
    await model.wait_for_requests(1, timeout=TIMEOUT)
    client = httpx.AsyncClient(timeout=httpx.Timeout(deadline(60), connect=deadline(5)))
    STARTUP_TIMEOUT = deadline(90)
    await asyncio.wait_for(proc.wait(), STARTUP_TIMEOUT + deadline(60))
    run = await agent.start("hi", timeouts=Timeouts(tool=1), request_timeout=0.5)
"""
    assert bare_bounds(source) == []
