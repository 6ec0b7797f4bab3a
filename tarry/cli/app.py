"""`tarry`: start agent runs, talk to them and watch them from a shell.

This is only the app: the commands live one module per group (`runs`, `watching`,
`approvals`, `model`, `local`, `serve`), each shown in its own panel of `tarry
--help`, and share one layer of connecting, errors and output (`common`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.metadata import version
from typing import Annotated, NoReturn

import typer

from tarry.cli import (
    approvals,
    connections,
    dataset,
    evals,
    limits,
    local,
    memory,
    model,
    runs,
    schedule,
    search,
    serve,
    usage,
    watching,
)
from tarry.cli.common import FLAG, Panel
from tarry.core.text import shorten
from tarry.temporal.entrypoint import exit_now

app = typer.Typer(
    name="tarry",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)
# In the order `tarry --help` shows their panels.
for group in (runs, search, watching, approvals, usage, model, local, serve):
    app.add_typer(group.commands)
app.add_typer(schedule.commands, rich_help_panel=Panel.SCHEDULES)  # `tarry schedule ...`
app.add_typer(dataset.commands, rich_help_panel=Panel.EVALUATION)  # `tarry dataset ...`
app.add_typer(evals.commands, rich_help_panel=Panel.EVALUATION)  # `tarry eval ...`
app.add_typer(limits.commands, rich_help_panel=Panel.APPROVALS)  # `tarry limits raise`
app.add_typer(memory.commands)  # `tarry memory ...`
app.add_typer(connections.commands)  # `tarry connections list|revoke`


def _show_version(show: bool) -> None:
    if show:
        print(f"tarry {version('tarry')}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            metavar=FLAG,
            callback=_show_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Durable, human-in-the-loop LLM agent runs on Temporal.

    Connection settings come from TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE and
    TARRY_TASK_QUEUE, and a Temporal profile as the `temporal` CLI reads it
    (TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE, TEMPORAL_API_KEY, TEMPORAL_TLS_*); `tarry
    doctor` checks them.
    """


def main() -> NoReturn:
    """The `tarry` script. It leaves through `exit_now`, as every entry point must, because
    the Temporal SDK can abort the interpreter at exit (sdk-python #300)."""
    exit_now(run())


def run(args: Sequence[str] | None = None) -> int:
    """Runs one `tarry` command line (`args`, by default the process's own) to its exit
    code, an unexpected error being one line too. Apart from `main` so that a command can
    run inside a process that goes on: the tests run most commands so."""
    try:
        app(args=None if args is None else list(args), prog_name="tarry")
        return 0
    except SystemExit as e:
        # typer ends with SystemExit, also on success; usage errors keep click's message.
        return e.code if isinstance(e.code, int) else int(e.code is not None)
    except Exception as e:
        sys.stderr.write(f"error: unexpected {type(e).__name__}: {shorten(str(e), 300)}\n")
        return 1
