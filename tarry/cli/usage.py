"""`tarry usage`: what the runs spent, per person, model profile or day
(`tarry.client.usage`). From a shell a person is who `TARRY_USER` names: they see their own
usage, an admin (`[api] admins`, or anyone on a deployment without sign-in) everyone's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Column, Table

from tarry.cli.common import AsJson, Panel, console, emit, fail, with_tarry
from tarry.client.usage import DEFAULT_SINCE, UsageBy, UsageReport, usage_report, whose_usage
from tarry.core.errors import TarryError
from tarry.search import since_of
from tarry.temporal.entrypoint import settings_or_exit

if TYPE_CHECKING:
    from tarry.client import Tarry

__all__ = ["commands"]

commands = typer.Typer()


@commands.command(rich_help_panel=Panel.APPROVALS)
def usage(
    user: Annotated[
        str | None, typer.Option("--user", metavar="NAME", help="Only this person's runs.")
    ] = None,
    group: Annotated[
        str | None,
        typer.Option("--group", metavar="NAME", help="Only the runs of this group's members."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="WHEN",
            help="Runs started since: a time ago (30m, 12h, 7d, 2w) or an ISO 8601 date or"
            " time; by default the last 7 days.",
        ),
    ] = None,
    by: Annotated[UsageBy, typer.Option("--by", help="A row per person, model or day.")] = (
        UsageBy.USER
    ),
    as_json: AsJson = False,
) -> None:
    """What the runs spent: runs, turns and estimated cost per person, model profile or
    day (in `[limits] time_zone`). A person sees their own; an admin everyone's."""
    settings = settings_or_exit()
    try:
        since_at = since_of(since) if since else datetime.now(UTC) - DEFAULT_SINCE
        users = whose_usage(
            settings.local_caller(), settings.policy(), settings.api_table().groups, user, group
        )
    except TarryError as e:
        fail(f"{e.code}: {e.message}", exit_code=2)

    async def act(tarry: Tarry) -> UsageReport:
        zone = settings.day_time_zone()
        return await usage_report(
            tarry.client, tarry.task_queue, by=by, since=since_at, time_zone=zone, users=users
        )

    report = with_tarry(act)
    if as_json:
        emit(report.model_dump(mode="json"))
        return
    table = Table(
        by.value,
        Column("runs", justify="right"),
        Column("turns", justify="right"),
        Column("cost (USD)", justify="right"),
        title=f"Usage since {report.since:%Y-%m-%d %H:%M} UTC",
    )
    for row in [*report.rows, report.total]:
        table.add_row(row.key, str(row.runs), str(row.turns), f"{row.cost_usd:.4f}")
    console.print(table)
