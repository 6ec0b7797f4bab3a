"""The compatibility ledger (`tarry.contracts.compatibility`): nothing in it outlives its
date, every patch id the workflows ask for is one of its entries and every entry is
asked for, its shims are where it says, and the upgrading guide's tables are its own.

The date tests compare with today's date: they are meant to fail the day after an
entry's `retire`, so that the step it names is taken, or the date moved with a reason."""

from __future__ import annotations

import ast
import runpy
from datetime import UTC, date, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from tarry.contracts import compatibility
from tarry.contracts.compatibility import PATCHES, SHIMS, Patch, Shim
from tests.python_source import parsed
from workflows.waits import WAITS

ROOT = Path(__file__).resolve().parent.parent
upgrading_tables = SimpleNamespace(**runpy.run_path(str(ROOT / "docs" / "upgrading_tables.py")))
"""The guide's table writer: a script of the docs, not a module of the package."""
LEDGER = "tarry/contracts/compatibility.py"
THEN = f"then `{upgrading_tables.COMMAND}`"


def _entry_name(patch: Patch) -> str:
    """The ledger's constant a workflow asks for `patch` by."""
    return next(name for name, value in vars(compatibility).items() if value is patch)


def _overdue_patch(patch: Patch, today: date) -> str:
    name = _entry_name(patch)
    if patch.deprecated:
        step = (
            f"delete its `workflow.deprecate_patch({name}.id)` call and its entry in {LEDGER}, "
            "and the recorded histories that test_replay.py then fails (they left the window)"
        )
    else:
        step = (
            f"make its `workflow.patched({name}.id)` a `workflow.deprecate_patch({name}.id)`, "
            "delete the old branch and the recorded histories that took it (tests/histories), "
            f"and set `deprecated=True, retire={patch.deleted}` in {LEDGER}"
        )
    return (
        f"patch {patch.id!r} was due on {patch.retire} (today is {today}): {step}; or move "
        f"`retire` and say why in `why`; {THEN}"
    )


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.id)
def test_no_patch_is_kept_past_its_retire_date(patch: Patch) -> None:
    today = datetime.now(UTC).date()

    assert today <= patch.retire, _overdue_patch(patch, today)


@pytest.mark.parametrize("shim", SHIMS, ids=lambda s: s.name)
def test_no_shim_is_kept_past_its_retire_date(shim: Shim) -> None:
    today = datetime.now(UTC).date()

    assert today <= shim.retire, (
        f"shim {shim.name!r} was due on {shim.retire} (today is {today}): remove its code "
        f"({'; '.join(shim.where)}), the tests of the shape it kept, and its entry in {LEDGER}; "
        f"or move `retire` and say why in `why`; {THEN}"
    )


def test_a_retire_date_off_the_rule_says_why() -> None:
    unexplained = [p.id for p in PATCHES if not p.on_schedule and not p.why] + [
        s.name for s in SHIMS if not s.on_schedule and not s.why
    ]

    assert unexplained == []


def test_each_patch_id_and_shim_name_is_in_the_ledger_once() -> None:
    names = [p.id for p in PATCHES] + [s.name for s in SHIMS]

    assert sorted(names) == sorted(set(names))


def _asked_id(argument: ast.expr, where: str) -> str:
    """The patch id `argument` names, when it is a ledger entry's `.id`; else its source."""
    if (
        isinstance(argument, ast.Attribute)
        and argument.attr == "id"
        and isinstance(argument.value, ast.Name)
        and (entry := getattr(compatibility, argument.value.id, None)) in PATCHES
    ):
        assert isinstance(entry, Patch)
        return entry.id
    return f"{where}: {ast.unparse(argument)}"


def asked_patches() -> dict[str, set[str]]:
    """What the workflows ask `workflow.patched` and `workflow.deprecate_patch` for: ledger
    ids, and the source of any argument that is not an entry's `.id`."""
    asked: dict[str, set[str]] = {"patched": set(), "deprecate_patch": set()}
    for path in sorted((ROOT / "workflows").rglob("*.py")):
        for node in ast.walk(parsed(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in asked:
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                arguments = [*node.args, *(k.value for k in node.keywords)]
                if [ast.unparse(a) for a in arguments] == ["wait.patch.id"]:
                    # `workflows.waits` asks for the patch of each kind of wait that has one.
                    asked[called].update(w.patch.id for w in WAITS if w.patch is not None)
                    continue
                asked[called].update(_asked_id(a, where) for a in arguments)
    return asked


def test_every_patch_the_workflows_ask_for_is_a_ledger_entry() -> None:
    asked = asked_patches()

    assert asked["patched"] | asked["deprecate_patch"] <= {p.id for p in PATCHES}, (
        f"ask for a patch by its entry in {LEDGER}: `workflow.patched(ENTRY.id)`; {THEN}"
    )


def test_every_patch_of_the_ledger_is_asked_for_as_it_says() -> None:
    asked = asked_patches()

    assert asked["patched"] == {p.id for p in PATCHES if not p.deprecated}
    assert asked["deprecate_patch"] == {p.id for p in PATCHES if p.deprecated}


@pytest.mark.parametrize("shim", SHIMS, ids=lambda s: s.name)
def test_a_shims_code_is_where_the_ledger_says(shim: Shim) -> None:
    missing = []
    for place in shim.where:
        path, _, text = place.partition(": ")
        if not (ROOT / path).is_file() or text not in (ROOT / path).read_text():
            missing.append(place)

    assert missing == [], (
        f"not where {LEDGER} says: say where {shim.name!r} is now, or remove its entry"
    )


def test_the_upgrading_guides_tables_are_the_ledgers() -> None:
    written = upgrading_tables.GUIDE.read_text()

    assert written == upgrading_tables.with_tables(written), f"run {upgrading_tables.COMMAND}"


def test_the_guides_tables_list_every_patch_id_and_shim() -> None:
    guide = upgrading_tables.with_tables(upgrading_tables.GUIDE.read_text())

    for name in [p.id for p in PATCHES] + [s.name for s in SHIMS]:
        assert f"\n| `{name}` | " in guide
