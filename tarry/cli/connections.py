"""`tarry connections`: people's grants to OAuth MCP servers (`auth = "oauth"`), listed
and revoked in the connections store (`TARRY_CONNECTIONS_DB`, sealed with
`TARRY_CONNECTIONS_KEY`).

The command line reads the store as an operator, as it reaches Temporal: everyone's. The
HTTP API's `/v1/connections` is a person's own door (an admin's: anyone's).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.table import Table

from tarry.cli.common import AsJson, Panel, console, emit, fail, run_command
from tarry.temporal.entrypoint import settings_or_exit

if TYPE_CHECKING:
    from tarry.connections.store import ConnectionStore

__all__ = ["commands"]

T = TypeVar("T")

commands = typer.Typer()
connection_commands = typer.Typer(
    name="connections",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    help='People\'s grants to OAuth MCP servers (`auth = "oauth"`): list and revoke them.',
)
commands.add_typer(connection_commands, rich_help_panel=Panel.APPROVALS)


def _with_store(action: Callable[[ConnectionStore], Awaitable[T]]) -> T:
    from tarry.connections.store import ConnectionStore  # loaded by these commands alone

    settings = settings_or_exit()
    key = settings.tarry_connections_key
    if key is None:
        fail("this deployment keeps no connections: TARRY_CONNECTIONS_KEY is not set")
    store = ConnectionStore(settings.tarry_connections_db, key.get_secret_value())

    async def use() -> T:
        try:
            return await action(store)
        finally:
            store.close()

    return run_command(use())


@connection_commands.command("list")
def list_connections(
    person: Annotated[
        str | None, typer.Option("--person", metavar="USER", help="Only this person's.")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Who connected which server, with which scopes, when, and when the grant was last
    refreshed; never a token."""
    found = _with_store(lambda store: store.connections(person))
    if as_json:
        emit([c.__dict__ for c in found])
        return
    if not found:
        console.print("Nobody has connected an OAuth server.")
        return
    table = Table("person", "server", "scopes", "connected", "refreshed", box=None)
    for c in found:
        table.add_row(
            c.person, c.server, c.scope or "-", _when(c.connected_at), _when(c.refreshed_at)
        )
    console.print(table)


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


@connection_commands.command("revoke")
def revoke(
    server: Annotated[str, typer.Argument(metavar="SERVER", help="The MCP server's name.")],
    person: Annotated[
        str | None,
        typer.Option(
            "--person", metavar="USER", help="Whose grant; yours (TARRY_USER) if not given."
        ),
    ] = None,
) -> None:
    """Forget a person's grant to a server: no call uses it again, not even one already
    scheduled; their next call waits for them to connect again."""
    person = person or settings_or_exit().local_caller().user
    if not _with_store(lambda store: store.revoke(person, server)):
        fail(f"CONNECTION_NOT_FOUND: {person} has no connection to {server!r}")
    console.print(f"Revoked {person}'s connection to {server}.")
