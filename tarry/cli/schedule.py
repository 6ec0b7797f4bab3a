"""`tarry schedule`: runs that start on their own, at the times of a cron expression or
an interval, on Temporal Schedules (`tarry.client.schedules`).

`create` takes `tarry start`'s run options (`run_options`), so a scheduled run is
started with what a person would type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, TypeVar
from zoneinfo import ZoneInfo

import typer
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from tarry.cli.common import AsJson, console, emit, fail, one_of, output, with_tarry
from tarry.cli.run_options import (
    DEFAULT_MAX_TURNS,
    AgentsOption,
    ApprovalDefaultOption,
    ApprovalTimeoutOption,
    ApproverOption,
    MaxCostOption,
    MaxTokensOption,
    MaxTurnsOption,
    ModelOption,
    ModeOption,
    Prompt,
    ReplyPolicyOption,
    RequireApprovalOption,
    RuleOption,
    RulesOption,
    SystemOption,
    ToolChoiceOption,
    ToolsOption,
    run_input,
)
from tarry.client.schedules import Overlap, ScheduleSummary, ScheduleView, schedule_name_problem
from tarry.contracts import ApprovalDefault, ErrorCode, Mode, ReplyPolicy

if TYPE_CHECKING:
    from tarry.client import ScheduleHandle, Tarry

__all__ = ["commands"]

T = TypeVar("T")

commands = typer.Typer(
    name="schedule",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    help="Runs that start on their own: create, list, show, pause, unpause, trigger and"
    " delete schedules.",
)

Name = Annotated[
    str,
    typer.Argument(
        metavar="NAME",
        help="The schedule's name; its runs' ids are `NAME-<time>`, the time in UTC.",
    ),
]
Note = Annotated[
    str | None, typer.Option(help="Why; `tarry schedule show` shows it.", show_default=False)
]


def _check_name(name: str) -> None:
    """A name checked before anything connects, so a bad one is its own error even with
    no server to reach."""
    if problem := schedule_name_problem(name):
        fail(f"{ErrorCode.SCHEDULE_INVALID}: {problem}", exit_code=2)


@commands.command()
def create(
    name: Name,
    prompt: Prompt = "",
    cron: Annotated[
        str | None,
        typer.Option(
            metavar="EXPRESSION",
            help="When to start a run, as cron reads it: `0 9 * * 1-5` is 9:00 on weekdays.",
            show_default=False,
        ),
    ] = None,
    every: Annotated[
        str | None,
        typer.Option(
            metavar="INTERVAL",
            help="Start a run at this interval instead: 90s, 15m, 1h, 1d, 1h30m.",
            show_default=False,
        ),
    ] = None,
    time_zone: Annotated[
        str | None,
        typer.Option(
            "--time-zone",
            metavar="ZONE",
            help="The IANA time zone --cron reads in (`Europe/Berlin`); UTC if not given.",
            show_default=False,
        ),
    ] = None,
    overlap: Annotated[
        str,
        typer.Option(
            metavar="|".join(Overlap),
            help="What to do when a run's time comes while the last run is still open"
            " (working, or waiting for a person): skip starts nothing; buffer-one starts"
            " one run once it ends, buffer-all one for every time missed; allow-all"
            " starts one beside it.",
        ),
    ] = Overlap.SKIP,
    model: ModelOption = "default",
    system: SystemOption = None,
    tools: ToolsOption = None,
    agents: AgentsOption = None,
    mode: ModeOption = Mode.CHAT,
    require_approval: RequireApprovalOption = None,
    approver: ApproverOption = None,
    rule: RuleOption = None,
    rules: RulesOption = None,
    approval_timeout: ApprovalTimeoutOption = None,
    approval_default: ApprovalDefaultOption = ApprovalDefault.REJECT,
    max_turns: MaxTurnsOption = DEFAULT_MAX_TURNS,
    max_tokens: MaxTokensOption = None,
    max_cost: MaxCostOption = None,
    tool_choice: ToolChoiceOption = None,
    on_reply_while_running: ReplyPolicyOption = ReplyPolicy.QUEUE,
    as_json: AsJson = False,
) -> None:
    """Create a schedule that starts a run with PROMPT at the times of --cron or --every.

    Takes the run options of `tarry start`. While the last run it started is open, which
    a run waiting for your reply or decision is, it starts none (--overlap skip).
    """
    input = run_input(
        prompt,
        model=model,
        system=system,
        tools=tools,
        agents=agents,
        mode=mode,
        require_approval=require_approval,
        approver=approver,
        approval_timeout=approval_timeout,
        approval_default=approval_default,
        max_turns=max_turns,
        max_tokens=max_tokens,
        max_cost=max_cost,
        tool_choice=tool_choice,
        on_reply_while_running=on_reply_while_running,
        rule=rule,
        rules=rules,
    )
    policy = one_of("--overlap", overlap, Overlap)
    _check_name(name)

    async def make(tarry: Tarry) -> ScheduleView:
        schedule = await tarry.create_schedule(
            name, input, cron=cron, every=every, time_zone=time_zone, overlap=policy
        )
        return await schedule.describe()

    view = with_tarry(make)
    next_run = f"; next run at {_at(view.next_runs[0], view)}" if view.next_runs else ""
    if as_json:
        emit(view)
    else:  # one line however long, as a script that greps it expects
        console.print(Text(f"schedule {view.name} created{next_run}"), soft_wrap=True)


@commands.command("list")
def list_schedules(as_json: AsJson = False) -> None:
    """List the schedules: when they start runs, whether they are paused, their next and
    last run, and the first line of their prompt."""
    schedules = with_tarry(lambda tarry: tarry.list_schedules())
    if as_json:
        emit(schedules)
        return
    names = ("schedule", "when", "paused", "next run", "last run")
    table = Table(*(Column(n, no_wrap=True) for n in names), "summary", box=None)
    for s in schedules:
        table.add_row(
            s.name,
            _timing(s),
            "paused" if s.paused else "-",
            _at(s.next_runs[0], s) if s.next_runs and not s.paused else "-",
            s.recent_runs[-1] if s.recent_runs else "-",
            s.summary or "-",
        )
    # Piped, one schedule is one line however long (for grep), as `tarry list` prints runs.
    out = console if console.is_terminal else Console(highlight=False, width=100_000)
    out.print(table)


@commands.command()
def show(name: Name, as_json: AsJson = False) -> None:
    """Show a schedule: when it starts runs, what with, whether it is paused and why, its
    next times, and its runs, the recent ones and those still open."""
    view = _on(name, lambda schedule: schedule.describe())
    rows = {
        "schedule": view.name,
        "when": _timing(view),
        "overlap": view.overlap,
        "paused": f"yes: {view.note}" if view.paused else "no",
        "next runs": ", ".join(_at(t, view) for t in view.next_runs[:3]) or "-",
        "open runs": ", ".join(view.running) or "-",
        "recent runs": ", ".join(view.recent_runs[-3:]) or "-",
        "started": str(view.runs_started),
        "skipped": str(view.runs_skipped),
        "profile": view.input.model,
        "prompt": view.summary or "-",
    }
    width = max(map(len, rows)) + 2
    text = Text("\n").join(Text.assemble((k.ljust(width), "bold"), v) for k, v in rows.items())
    output(view, as_json, text)


@commands.command()
def pause(name: Name, note: Note = None) -> None:
    """Stop the schedule starting runs until `tarry schedule unpause`; its runs go on."""
    _on(name, lambda schedule: schedule.pause(note))
    console.print(Text(f"paused schedule {name}"), soft_wrap=True)


@commands.command()
def unpause(name: Name, note: Note = None) -> None:
    """Let the schedule start runs again, from its next time on."""
    _on(name, lambda schedule: schedule.unpause(note))
    console.print(Text(f"unpaused schedule {name}"), soft_wrap=True)


@commands.command()
def trigger(name: Name) -> None:
    """Start a run now, as if its time had come (by its overlap policy: with `skip`,
    nothing starts while its last run is open)."""
    _on(name, lambda schedule: schedule.trigger())
    console.print(Text(f"triggered schedule {name}"), soft_wrap=True)


@commands.command()
def delete(name: Name) -> None:
    """Delete the schedule: it starts no more runs; the runs it started go on."""
    _on(name, lambda schedule: schedule.delete())
    console.print(Text(f"deleted schedule {name}"), soft_wrap=True)


def _on(name: str, action: Callable[[ScheduleHandle], Awaitable[T]]) -> T:
    _check_name(name)
    return with_tarry(lambda tarry: action(tarry.schedule(name)))


def _at(moment: datetime, schedule: ScheduleSummary) -> str:
    """A time of the schedule's, in its time zone (`--time-zone`), named: a cron's times
    are read there, so `0 9 * * *` in Europe/Berlin shows as 09:00, not as this machine's
    clock has it; a schedule without one, in this machine's zone."""
    zoned = moment.astimezone(ZoneInfo(schedule.time_zone) if schedule.time_zone else None)
    return f"{zoned:%Y-%m-%d %H:%M:%S} {schedule.time_zone or zoned.tzname()}"


def _timing(schedule: ScheduleSummary) -> str:
    if schedule.every is not None:
        return f"every {schedule.every}"
    zone = f" ({schedule.time_zone})" if schedule.time_zone else ""
    return f"{schedule.cron}{zone}" if schedule.cron else "-"
