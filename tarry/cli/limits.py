"""`tarry limits raise`: an admin raises a person's daily caps for the rest of the day
(`[limits] max_cost_usd_per_day`, `max_tokens_per_day`): their runs waiting at the cap
(`SPEND_CAP_REACHED`) go on where they stopped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tarry.cli.common import AsJson, emit, fail, with_tarry
from tarry.contracts.ledger import CapRaise, LedgerState
from tarry.temporal.entrypoint import settings_or_exit

if TYPE_CHECKING:
    from tarry.client import Tarry

__all__ = ["commands"]

commands = typer.Typer(
    name="limits",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    help="Daily spend caps: raise a person's for the rest of the day (admins only).",
)


@commands.command("raise")
def raise_cap(
    user: Annotated[str, typer.Argument(help="Whose caps: the name their runs record.")],
    cost: Annotated[
        float | None, typer.Option(help="The new cap in US dollars.", show_default=False)
    ] = None,
    tokens: Annotated[
        int | None, typer.Option(help="The new cap in tokens.", show_default=False)
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Raises USER's daily caps until the day ends (`[limits] time_zone`); their runs
    waiting at the cap ask their ledger again and go on where they stopped."""
    from tarry.client.ledger import raise_cap, raise_problem

    settings = settings_or_exit()
    me = settings.local_caller()
    raised = CapRaise(max_cost_usd=cost, max_tokens=tokens, by=me.user)
    if problem := raise_problem(me, settings.policy(), raised):
        fail(f"{problem.code}: {problem.message}", exit_code=2)

    async def act(tarry: Tarry) -> LedgerState:
        zone = settings.day_time_zone()
        return await raise_cap(tarry.client, tarry.task_queue, user, zone, raised)

    state = with_tarry(act)
    if as_json:
        emit(state.model_dump(mode="json"))
    else:
        print(
            f"{user}'s caps on {state.day} raised; spent so far: {state.spent.tokens} tokens,"
            f" ${state.spent.cost_usd:.4f}"
        )
