"""`tarry dataset`: evaluation datasets made of the decisions people took in recorded runs
(`tarry.client.datasets`): create one from a query, list them, show one, export its JSON lines.

Only `create` reaches Temporal (and the workers, which answer for the runs' transcripts);
the others read the datasets directory (`TARRY_DATASETS_DIR`) alone.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from tarry.cli.common import AsJson, console, emit, output, run_command, with_tarry
from tarry.client.dataset_store import DatasetStore
from tarry.contracts.datasets import QUERY_KEYS, DatasetManifest
from tarry.temporal.entrypoint import settings_or_exit

__all__ = ["commands"]

T = TypeVar("T")

commands = typer.Typer(
    name="dataset",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    help="Evaluation datasets made of recorded runs' decisions: create, list, show and"
    " export them.",
)

Name = Annotated[
    str,
    typer.Argument(metavar="NAME", help="The dataset's name: letters, digits, `_`, `.` and `-`."),
]
Version = Annotated[
    int | None,
    typer.Option(
        "--version",
        metavar="N",
        min=1,
        help="Which version; the latest if not given.",
        show_default=False,
    ),
]


def _read(action: Callable[[DatasetStore], T]) -> T:
    """`action` on the environment's datasets directory, its errors one line each."""
    store = DatasetStore.of(settings_or_exit())

    async def read() -> T:
        return action(store)

    return run_command(read())


def _facts(manifest: DatasetManifest) -> dict[str, str]:
    skipped = ", ".join(f"{s.run_id} ({s.code}: {s.message})" for s in manifest.skipped)
    return {
        "dataset": manifest.name,
        "version": str(manifest.version),
        "from": manifest.query or "(every run)",
        "runs": str(manifest.runs),
        "points": str(manifest.points),
        "created": f"{manifest.created_at:%Y-%m-%d %H:%M:%S} UTC"
        + (f" by {manifest.created_by}" if manifest.created_by else ""),
    } | ({"skipped": skipped} if skipped else {})


def _text(rows: dict[str, str]) -> Text:
    width = max(map(len, rows)) + 2
    return Text("\n").join(Text.assemble((k.ljust(width), "bold"), v) for k, v in rows.items())


@commands.command()
def create(
    name: Name,
    query: Annotated[
        str,
        typer.Option(
            "--from",
            metavar="QUERY",
            help="Which runs: `KEY=VALUE` terms a run must all match, keys "
            + ", ".join(QUERY_KEYS)
            + " (`phase=Completed tool=write_file since=2026-11-01`); empty: every run.",
        ),
    ] = "",
    as_json: AsJson = False,
) -> None:
    """Create a dataset, or its next version, from the runs --from selects: each call a
    person approved, rejected or edited, and each final answer with its reply.

    Each run's transcript is read from its worker; a run that cannot be read (no worker
    answers for it, its workflow task fails) is left out and named under `skipped`.
    """
    manifest = with_tarry(lambda tarry: tarry.datasets.create(name, query))
    output(manifest, as_json, _text(_facts(manifest)))


@commands.command("list")
def list_datasets(as_json: AsJson = False) -> None:
    """List the datasets: the latest version of each, its runs and points."""
    manifests = _read(lambda store: store.latest())
    if as_json:
        emit(manifests)
        return
    names = ("dataset", "version", "runs", "points", "created")
    table = Table(*(Column(n, no_wrap=True) for n in names), "from", box=None)
    for m in manifests:
        facts = _facts(m)
        table.add_row(*(facts[n] for n in names), facts["from"])
    out = console if console.is_terminal else Console(highlight=False, width=100_000)
    out.print(table)


@commands.command()
def show(name: Name, version: Version = None, as_json: AsJson = False) -> None:
    """Show a dataset's version: what selected it, who made it, and its points by label."""
    manifest, points, versions = _read(
        lambda store: (
            store.manifest(name, version),
            store.points(name, version),
            store.versions(name),
        )
    )
    labels = Counter(p.label.verdict.value for p in points)
    rows = _facts(manifest) | {
        "labels": ", ".join(f"{n} {v}" for v, n in sorted(labels.items())) or "-",
        "versions": ", ".join(map(str, versions)),
    }
    output(manifest, as_json, _text(rows))


@commands.command()
def export(name: Name, version: Version = None) -> None:
    """Print a dataset's version as JSON lines, one decision point a line, as stored:
    what `tarry eval` reads."""
    sys.stdout.writelines(_read(lambda store: store.lines(name, version)))
