"""The upgrading guide's tables of patch ids and shims, generated from the compatibility
ledger (`tarry.contracts.compatibility`), so that the guide says what the code keeps.

`python docs/upgrading_tables.py` writes them into docs/guides/upgrading.md, each between
its two marker comments; with `--check` it only says whether they are current.
`tests/test_compatibility.py` fails while they are not."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from tarry.contracts.compatibility import PATCHES, SHIMS, Patch, Shim

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guides" / "upgrading.md"
COMMAND = "python docs/upgrading_tables.py"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _goes(patch: Patch) -> str:
    if patch.deprecated:
        return f"Deprecated (`deprecate_patch`). {patch.why} Delete the call on {patch.retire}."
    goes = f"Deprecate on {patch.retire}, delete on {patch.deleted}."
    return f"{goes} {patch.why}" if patch.why else goes


def patch_table() -> str:
    """One row for each patch id: what it guards, since when, and when it goes."""
    rows = [
        "| Id | What it guards | Since | When it goes |",
        "| --- | --- | --- | --- |",
        *(f"| `{p.id}` | {_cell(p.guards)} | {p.since} | {_cell(_goes(p))} |" for p in PATCHES),
    ]
    return "\n".join(rows) + "\n"


def _where(shim: Shim) -> str:
    paths = dict.fromkeys(place.partition(":")[0] for place in shim.where)
    return ", ".join(f"`{path}`" for path in paths)


def shim_table() -> str:
    """One row for each shim: what it keeps working, where its code is, and when it goes."""
    rows = [
        "| Shim | What it keeps working | Where | Since | When it goes |",
        "| --- | --- | --- | --- | --- |",
        *(
            f"| `{s.name}` | {_cell(s.keeps)} | {_where(s)} | {s.since} | "
            f"{_cell(' '.join(filter(None, [f'Remove on {s.retire}.', s.why])))} |"
            for s in SHIMS
        ),
    ]
    return "\n".join(rows) + "\n"


TABLES: dict[str, Callable[[], str]] = {"patch ids": patch_table, "shims": shim_table}


def markers(name: str) -> tuple[str, str]:
    """The comments a generated table sits between."""
    return (
        f"<!-- {name}: generated from tarry/contracts/compatibility.py by {COMMAND} -->",
        f"<!-- end of {name} -->",
    )


def with_tables(guide: str) -> str:
    """`guide` with each table between its markers as the ledger has it now."""
    for name, table in TABLES.items():
        start, end = markers(name)
        before, found, rest = guide.partition(start)
        _, closed, after = rest.partition(end)
        if not found or not closed:
            raise ValueError(f"the guide lacks the markers of the {name} table: {start} {end}")
        guide = f"{before}{start}\n{table()}{end}{after}"
    return guide


def main(args: list[str]) -> int:
    written = GUIDE.read_text()
    wanted = with_tables(written)
    if "--check" in args:
        if wanted != written:
            print(f"{GUIDE.relative_to(ROOT)} is not the ledger's: run {COMMAND}")
            return 1
        return 0
    GUIDE.write_text(wanted)
    print(f"wrote the ledger's tables into {GUIDE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
