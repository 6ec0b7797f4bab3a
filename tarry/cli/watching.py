"""The "Watching runs" commands: where a run stands, its transcript, following it live,
the list of runs and the audit trail. None of them changes a run."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic_core import to_jsonable_python
from rich.console import Console, Group
from rich.table import Column, Table
from rich.text import Text

from tarry.cli.common import (
    FLAG,
    AsJson,
    Panel,
    RunId,
    check_id,
    console,
    emit,
    fail,
    fail_if_failed,
    one_of,
    output,
    stop_point,
    with_run,
    with_tarry,
)
from tarry.cli.follow import follow
from tarry.cli.live import LiveView
from tarry.cli.previews import decisions_preview
from tarry.cli.render import label_rows, message_text, state_text, when
from tarry.cli.timeline import timeline_view
from tarry.contracts import (
    AuditRecord,
    AuditTrail,
    ChatMessage,
    ErrorCode,
    Phase,
    RunState,
    WaitingFor,
)
from tarry.contracts.audit import AUDIT_LIMIT
from tarry.contracts.waits import WAIT_KINDS
from tarry.core.errors import TarryError
from tarry.core.text import escaped

if TYPE_CHECKING:
    from tarry.client import RunHandle, Tarry
    from tarry.client.run_list import RunRow

commands = typer.Typer()


@commands.command(rich_help_panel=Panel.WATCHING)
def status(run_id: RunId, as_json: AsJson = False) -> None:
    """Show where the run stands: phase, turn, token usage, warning, error, pending replies,
    the tool calls waiting for approval, and its lead and sub-agents, if it has them.

    With no worker to answer, shows what Temporal itself last recorded of the run (its
    phase, turns, profile) and says which task queue needs one, exiting 1."""
    from tarry.client.run_list import RunRow, child_waited_on, find_children

    check_id(run_id)

    async def where(tarry: Tarry) -> tuple[RunState, list[str]]:
        run = tarry.get(run_id)
        try:
            state = await run.state()
        except TarryError as e:
            if e.code is ErrorCode.RUN_NOT_SERVED:
                row = await RunRow.of(await run.describe())
                children = await find_children(tarry.client, run_id)
                view = row.model_dump(mode="json") | {"children": children}
                output(view, as_json, _row_text(row, children))
            raise
        return state, await find_children(tarry.client, run_id, child_waited_on(state))

    state, children = with_tarry(where)
    if as_json:
        emit(to_jsonable_python(state) | {"children": children})
    else:
        console.print(state_text(run_id, state, children), soft_wrap=True)


def _row_text(row: RunRow, children: list[str]) -> Text:
    """A run as visibility records it (search attributes), for when no worker can answer."""
    rows = {
        "run": row.run_id,
        "phase": row.phase or "- (not recorded yet)",
        "turn": "-" if row.turns is None else str(row.turns),
        "profile": row.model or "-",
        "waiting for": row.waiting_for or "-",
        "started": when(row.started),
        "summary": row.summary or "-",
    }
    if row.parent:
        rows["agent of"] = row.parent
    if children:
        rows["sub-agents"] = "\n".join(children)
    return label_rows(rows)


@commands.command(rich_help_panel=Panel.WATCHING)
def show(
    run_id: RunId,
    start: Annotated[int, typer.Option("--from", min=0, help="The first message to show.")] = 0,
    numbers: Annotated[
        bool,
        typer.Option(
            "--numbers", metavar=FLAG, help="Number the messages, as `tarry fork --at` counts."
        ),
    ] = False,
    timeline: Annotated[
        bool,
        typer.Option(
            "--timeline",
            metavar=FLAG,
            help="Print where the run's time went instead: its model calls, tool calls, waits"
            " for people and sub-agents, each with its start, duration, tokens and cost.",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Print the run's transcript, and the reason it was stopped with, if it was."""
    if timeline:
        if start or numbers:
            fail("--timeline shows no messages: --from and --numbers are for the transcript", 2)
        spans = with_run(run_id, lambda run: run.timeline())
        output(spans, as_json, timeline_view(spans, console.width))
        return

    async def read(run: RunHandle) -> tuple[list[ChatMessage], RunState]:
        return await run.transcript(start=start), await run.state()

    messages, state = with_run(run_id, read)
    lines = [message_text(m) for m in messages]
    if numbers:
        lines = [Text.assemble((f"{n:>4} ", "dim"), line) for n, line in enumerate(lines, start)]
    view = Group(*lines)
    if state.stop_reason:
        view.renderables.append(Text(f"stopped: {state.stop_reason}", style="bold"))
    view.renderables.extend(decisions_preview(state))  # what a person decides on, whole
    output(messages, as_json, view)


@commands.command(rich_help_panel=Panel.WATCHING)
def watch(
    run_id: RunId,
    start: Annotated[int, typer.Option("--from", min=0, help="The first message to show.")] = 0,
    as_json: AsJson = False,
) -> None:
    """Follow the run live until it waits for a reply or a decision, or ends.

    Prints the agent's words as it writes them, then its tool calls and their results;
    with --json, one event per line (`kind`: message, answer, text, tool_call,
    tool_arguments, answer_end, reset, stop).
    """

    async def follow_live(run: RunHandle) -> RunState:
        if as_json:
            return await follow(
                run, start, lambda e: emit(e.model_dump(mode="json", exclude_none=True))
            )
        with LiveView(console) as view:
            return await follow(run, start, view.show)

    state = with_run(run_id, follow_live)
    if as_json:
        fail_if_failed(state)
    else:
        stop_point(state, run_id)


@commands.command("list", rich_help_panel=Panel.WATCHING)
def list_runs(
    phase: Annotated[
        str | None, typer.Option(help="Only runs in this phase: " + ", ".join(Phase) + ".")
    ] = None,
    waiting_for: Annotated[
        str | None,
        typer.Option(
            "--waiting-for",
            help="Only runs waiting for this: "
            + ", ".join(f"{kind.kind} ({kind.waits_for})" for kind in WAIT_KINDS.values())
            + ".",
        ),
    ] = None,
    schedule: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="Only runs the schedule NAME started."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many runs.")] = 20,
    as_json: AsJson = False,
) -> None:
    """List runs with their phase, turns, model profile, what they wait for and the first
    line of their prompt; open runs first, newest first."""
    from tarry.client.run_list import find_runs

    wanted = None if phase is None else one_of("--phase", phase, Phase)
    awaited = None if waiting_for is None else one_of("--waiting-for", waiting_for, WaitingFor)

    async def find(tarry: Tarry) -> list[RunRow]:
        page = await find_runs(
            tarry.client, phase=wanted, waiting_for=awaited, schedule=schedule, limit=limit
        )
        return page.rows

    rows = with_tarry(find)
    if as_json:
        emit(rows)
    else:
        # Piped, a line is as long as it needs to be; a terminal cuts the summary to fit.
        if console.is_terminal:
            console.print(_runs_table(rows, console.width))
        else:
            Console(highlight=False, width=100_000).print(_runs_table(rows, None))


@commands.command(rich_help_panel=Panel.WATCHING)
def audit(
    run: Annotated[str | None, typer.Option(metavar="RUN", help="Only this run's acts.")] = None,
    user: Annotated[
        str | None,
        typer.Option(metavar="USER", help="Only the acts of USER (`cli:ann`, `rule 1`)."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            metavar="TIME",
            help="Only acts at or after TIME, ISO 8601 (`2026-11-27T09:00:00Z`; UTC if no zone).",
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many records.")] = AUDIT_LIMIT,
    as_json: AsJson = False,
) -> None:
    """The audit trail: every act that changed a run (start, reply, decision, budget, model,
    pause, stop, fork...) with who, when, the door it came through and what, oldest
    first. `--json` prints one record per line (JSON lines), for a SIEM. A run whose
    records cannot be read now (no worker serves it, it is stuck) is left out with a
    warning on stderr naming it."""
    if run is not None:
        check_id(run)
    after = _moment("--since", since) if since is not None else None

    async def read(tarry: Tarry) -> AuditTrail:
        return await tarry.audit(run=run, user=user, since=after, limit=limit)

    trail = with_tarry(read)
    for unread in trail.unread:
        sys.stderr.write(escaped(f"warning: run {unread.run} left out: {unread.reason}") + "\n")
    if as_json:
        for record in trail.records:
            emit(record.model_dump(mode="json", exclude_none=True))
        return
    table = Table("at", "of", "act", "by", "door", "what", box=None, pad_edge=False)
    for r in trail.records:
        # Text, not markup, escaped: a name or a reason is shown as written, on its line.
        cells = (r.at.isoformat(), _subject(r), r.act, r.by, r.door, r.what)
        table.add_row(*(Text(escaped(cell)) for cell in cells))
    Console(highlight=False, width=None if console.is_terminal else 100_000).print(table)


def _subject(record: AuditRecord) -> str:
    """What a record's act changed: its run, or a schedule or an eval."""
    if record.schedule is not None:
        return f"schedule {record.schedule}"
    if record.eval is not None:
        return f"eval {record.eval}"
    return record.run or "-"


def _moment(option: str, text: str) -> datetime:
    """`text` as a moment, UTC when it names no zone; a usage error otherwise."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not an ISO 8601 time (2026-11-27T09:00:00Z)", param_hint=option
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _tree(rows: list[RunRow]) -> list[tuple[RunRow, int]]:
    """The rows in the list's order, each with its depth in a tree of sub-agents: a
    sub-agent whose lead is listed comes right under it (oldest first), one level in."""
    listed = {row.run_id for row in rows}
    children: dict[str, list[RunRow]] = {}
    for row in rows:
        if row.parent in listed:
            children.setdefault(row.parent, []).append(row)
    placed: list[tuple[RunRow, int]] = []

    def place(row: RunRow, depth: int) -> None:
        placed.append((row, depth))
        # Under the lead's first row only (visibility may list a run twice).
        for child in sorted(children.pop(row.run_id, []), key=lambda child: child.started):
            place(child, depth + 1)

    for row in rows:
        if row.parent not in listed:
            place(row, 0)
    return placed


def _run_cell(row: RunRow, depth: int) -> str:
    """The run column: a sub-agent's id under its lead's, set in by its depth."""
    return row.run_id if depth == 0 else "  " * (depth - 1) + "└ " + row.run_id


def _summary(row: RunRow, depth: int) -> str:
    """The summary column: a sub-agent listed without its lead names the run it works for."""
    summary = row.summary or "-"
    return f"(agent of {row.parent}) {summary}" if row.parent and depth == 0 else summary


def _runs_table(rows: list[RunRow], width: int | None) -> Table:
    """The runs, one line each, sub-agents under their leads; the summary is cut to fit
    `width`, if given."""
    tree = _tree(rows)
    cells = [
        [
            _run_cell(row, depth),
            row.phase or "-",
            "-" if row.turns is None else str(row.turns),
            row.model or "-",
            row.waiting_for or "-",
            when(row.started),
        ]
        for row, depth in tree
    ]
    # One run, one line, for people and for grep: only the summary gives way to the width.
    names = ("run", "phase", "turns", "profile", "waiting for", "started")
    columns = list(zip(*cells, strict=True)) or [()] * len(names)
    fixed = [
        Column(name, no_wrap=True, min_width=max(map(len, [name, *column])))
        for name, column in zip(names, columns, strict=True)
    ]
    room = None
    if width is not None:
        room = max(10, width - sum(column.min_width or 0 for column in fixed) - 2 * len(fixed))
    summary = Column("summary", no_wrap=True, overflow="ellipsis", max_width=room)
    table = Table(*fixed, summary, box=None, pad_edge=False, padding=(0, 2, 0, 0))
    for (row, depth), values in zip(tree, cells, strict=True):
        table.add_row(*values, _summary(row, depth))
    return table
