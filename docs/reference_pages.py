"""The docs site's generated reference: the command line from the typer app, the
settings from `TarrySettings`, the error codes from `ErrorCode`, the HTTP API from its
OpenAPI document, the kinds of wait from `tarry.contracts.waits`. Generated at every
build (`mkdocs-gen-files` runs `main`), so the reference cannot fall behind the code;
`tests/test_docs.py` checks it is complete."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path

import griffe
import typer
from pydantic.fields import FieldInfo
from typer.core import TyperGroup
from typer.testing import CliRunner

from tarry.api.errors import status_of
from tarry.config.settings import TarrySettings
from tarry.contracts import ErrorCode
from tarry.contracts.waits import MODULES, Ending, WaitKind

ROOT = Path(__file__).resolve().parent.parent

PAGES = {
    "reference/cli.md": "cli_page",
    "reference/settings.md": "settings_page",
    "reference/errors.md": "errors_page",
    "reference/http-api.md": "http_api_page",
    "reference/waits.md": "waits_page",
}


def cli_page() -> str:
    """Every command's `--help`, as the terminal prints it, grouped as `tarry --help` is."""
    from tarry.cli.app import app

    root = typer.main.get_command(app)
    lines = [
        "# Command line",
        "",
        "Every command of `tarry`, with its `--help` as the terminal prints it.",
        "",
    ]
    runner = CliRunner()
    for path, _ in commands(root):
        name = " ".join(path)
        # As a terminal 80 columns wide shows it, without colour: a box of 80 fits the
        # page's content column (docs/stylesheets/extra.css styles `.cli-help`).
        shown = runner.invoke(app, [*path[1:], "--help"], env={"COLUMNS": "80", "NO_COLOR": "1"})
        if shown.exit_code != 0:
            raise RuntimeError(f"`{name} --help` failed: {shown.output}")
        lines += [f"## `{name}`", "", "``` {.text .cli-help}", shown.output.rstrip(), "```", ""]
    return "\n".join(lines)


def commands(
    command: object, path: tuple[str, ...] = ("tarry",)
) -> Iterator[tuple[tuple[str, ...], object]]:
    """`command` (typer's click command of an app) and every subcommand below it, depth
    first, in the order help lists them."""
    yield path, command
    if isinstance(command, TyperGroup):
        context = typer.Context(command)
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                yield from commands(sub, (*path, name))


def settings_page() -> str:
    """Every environment setting with its type, default and the docstring that says why."""
    lines = [
        "# Settings",
        "",
        "A worker, `tarry dev`, `tarry serve` and the client read these from the environment"
        " (or a `.env` file); model profiles, MCP servers and API users come from the TOML"
        " file `TARRY_CONFIG` names.",
        "",
        "| variable | type | default | what it is |",
        "|---|---|---|---|",
    ]
    docs = _attribute_docstrings("tarry.config.settings", "TarrySettings")
    for name, field in TarrySettings.model_fields.items():
        if field.exclude:
            continue  # set in code, never from the environment
        lines.append(
            f"| `{name.upper()}` | `{_type(field)}` | {_default(field)} |"
            f" {_one_line(docs.get(name, ''))} |"
        )
    return "\n".join(lines) + "\n"


def errors_page() -> str:
    """Every `ErrorCode`, the HTTP status the API answers it with, and what it means."""
    lines = [
        "# Error codes",
        "",
        "Errors, warnings and failed tool results carry one of these codes. The HTTP API"
        ' answers `{"error": {"code", "message"}}` with the status given; codes without'
        " one never reach an HTTP caller as an error.",
        "",
        "| code | HTTP | what it means |",
        "|---|---|---|",
    ]
    docs = _attribute_docstrings("tarry.contracts.names", "ErrorCode")
    for code in ErrorCode:
        status = status_of(code)
        http = "" if status == HTTPStatus.INTERNAL_SERVER_ERROR else str(int(status))
        lines.append(f"| `{code}` | {http} | {_one_line(docs.get(code.name, ''))} |")
    return "\n".join(lines) + "\n"


def waits_page() -> str:
    """Every kind of wait for a person (`RunState.waiting_for`): what it is (its module's
    docstring), its tag, what ends it and who may send that, its notification, and what
    the CLI says at its stop point."""
    lines = [
        "# Waiting for a person",
        "",
        "A run in phase `WaitingUser` says what it waits for in `waiting_for`, one of these"
        " kinds (`tarry list --waiting-for`, `GET /v1/runs?waiting_for=`, `GET"
        " /v1/wait-kinds`, the inbox's filter). Who may send what ends a wait: `write`, the"
        " run's writers (its owner, an admin, a `write` share); `decide`, also the approvers"
        " a call names. Each ending is recorded in the audit trail as the act named. A wait"
        " shows in the run's timeline as a `wait` span named after its kind, and in its"
        " trace as the span `wait KIND`.",
        "",
        "| kind | tag | waits for | ended by | notification | the CLI says | what it is |",
        "|---|---|---|---|---|---|---|",
    ]
    for module in MODULES:
        kind: WaitKind = module.KIND
        ended = ", ".join(map(_ending, kind.ends)) or (
            "what ends the wait of the run `waiting_on` names"
            if kind.delegated
            else "the end of one of its owner's other runs"
        )
        notify = f"`{kind.notify}`" if kind.notify else "none"
        said = _one_line(kind.hint.format_map(_HINT_FIELDS))
        lines.append(
            f"| `{kind.kind}` | {kind.label} | {kind.waits_for} | {ended} | {notify} |"
            f" {said} | {_one_line(module.__doc__ or '')} |"
        )
    return "\n".join(lines) + "\n"


_HINT_FIELDS = {
    "run": "RUN",
    "waiting_on": "SUB_AGENT",
    "paused_by": "WHO",
    "error": "CODE: message",
}
"""What a hint's fields read as on the page: the CLI fills them in from the run."""


def _ending(ending: Ending) -> str:
    """`` `raise_budget` (write; audit: budget) ``."""
    how = "signal " if ending.signal else ""
    return f"{how}`{ending.message}` ({ending.who}; audit: {ending.act})"


def http_api_page() -> str:
    """Every route of the HTTP API from its OpenAPI document: method, path, summary,
    the statuses it answers; the document itself is served at `/openapi.json`."""
    from tarry.api.app import create_app
    from tarry.client import Tarry

    app = create_app(Tarry.__new__(Tarry), TarrySettings(), inbox_dir=None)
    document = app.openapi()
    lines = [
        "# HTTP API",
        "",
        "`tarry serve` (and `tarry dev`) serve this API; `/openapi.json` is its OpenAPI"
        " document and `/docs` shows it in Swagger UI.",
        "",
    ]
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            statuses = ", ".join(sorted(operation.get("responses", {})))
            lines += [
                f"## `{method.upper()} {path}`",
                "",
                operation.get("description") or operation.get("summary", ""),
                "",
                f"Answers: {statuses}.",
                "",
            ]
    lines += [
        "## The OpenAPI document",
        "",
        "```json",
        json.dumps(document["info"], indent=2),
        "```",
    ]
    return "\n".join(lines) + "\n"


def _attribute_docstrings(module: str, cls: str) -> dict[str, str]:
    """The docstrings under a class's attributes, read from the source (runtime Python
    keeps none for attributes)."""
    loaded = griffe.load(module, search_paths=[str(ROOT)])
    members = loaded[cls].members
    return {
        name: member.docstring.value
        for name, member in members.items()
        if member.docstring is not None
    }


def _type(field: FieldInfo) -> str:
    """`list[SecretStr]`, `Path | None`: the annotation without module prefixes."""
    annotation = field.annotation
    shown = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    # " | " would split the table's cell.
    return re.sub(r"\b(?:[a-z_]+\.)+(?=[A-Za-z])", "", shown).replace(" | ", " or ")


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None or field.default is None:
        return ""
    return f"`{field.default}`"


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def main() -> None:
    import mkdocs_gen_files

    for page, builder in PAGES.items():
        with mkdocs_gen_files.open(page, "w") as out:
            out.write(globals()[builder]())


if __name__ in {"__main__", "<run_path>"}:
    main()
