"""The "Servers" commands: Tarry for other programs — the HTTP API (`serve`) and an MCP
server (`mcp`). Each imports its server only when it runs, so a missing extra is one
line, not an import error at every command."""

from __future__ import annotations

from typing import Annotated

import typer

from tarry.cli.common import FLAG, CliError, Panel, connect, fail, run_command
from tarry.cli.stopping import stop_signals, unless_stopped
from tarry.search import StoreOpener
from tarry.temporal.entrypoint import settings_or_exit

commands = typer.Typer()


@commands.command(rich_help_panel=Panel.SERVERS)
def serve(
    host: Annotated[
        str,
        typer.Option(
            help="The address to listen on; beyond loopback only with TARRY_API_TOKENS (or"
            " the config's [api.oidc] or [api] trusted_proxy) set."
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="The port; TARRY_API_PORT (8234) if not given."),
    ] = None,
) -> None:
    """Serve the HTTP API until Ctrl-C: REST routes, the runs' events as server-sent
    events, and AG-UI; docs at /docs.

    Clients send `Authorization: Bearer TOKEN` with a token of TARRY_API_TOKENS
    (comma-separated) or a JWT of the config's [api.oidc] identity provider, or come
    through the sign-in gateway of [api] trusted_proxy; with none set, the API serves
    only this machine (loopback).
    Browsers of other origins may call it when TARRY_API_CORS_ORIGINS names them.
    """
    from tarry.api import ApiServer, ApiSetupError, check_exposure, create_app

    settings = settings_or_exit()

    async def serve_api() -> None:
        try:
            check_exposure(host, settings)
            server = ApiServer(
                create_app(await connect(settings), settings),
                host,
                settings.tarry_api_port if port is None else port,
                settings.api_table().limits,
            )
            async with stop_signals() as stop:
                await server.start()
                print(f"HTTP API on {server.url} (docs {server.url}/docs); Ctrl-C to stop.")
                try:
                    await unless_stopped(stop, server.wait())
                finally:
                    await server.stop()
        except ApiSetupError as e:
            raise CliError(str(e)) from None

    run_command(serve_api())


@commands.command("mcp", rich_help_panel=Panel.SERVERS)
def mcp_command(
    http: Annotated[
        int | None,
        typer.Option(
            "--http",
            metavar="PORT",
            min=1,
            max=65535,
            help="Serve streamable HTTP on http://127.0.0.1:PORT/mcp instead of stdio; with"
            " the API's tokens, identity provider or gateway configured, each request needs"
            " the same sign-in.",
        ),
    ] = None,
    read_only: Annotated[
        bool,
        typer.Option(
            "--read-only",
            metavar=FLAG,
            help="Offer only the tools that change nothing: a run's state and transcript,"
            " and the runs waiting for a person.",
        ),
    ] = False,
) -> None:
    """Serve Tarry as an MCP server, on standard input and output unless `--http`.

    Its tools start runs, read their state and transcript, reply, decide pending tool
    calls and list the runs waiting for a person, so an MCP client can hand durable work
    to Tarry and come back for it. `decide` is marked destructive, so a host asks its
    user first, and the run records a decision as taken through MCP. Needs the mcp extra.
    """
    try:
        from tarry.cli.mcp_server import build_server
    except ModuleNotFoundError as e:
        fail(f"tarry mcp needs the mcp extra ({e.name} is missing): pip install 'tarry[mcp]'")
    settings = settings_or_exit()  # refused now, not at the first tool call
    server = build_server(
        lambda: connect(settings),
        read_only=read_only,
        policy=settings.policy(),
        search=StoreOpener(settings.tarry_search_index, settings.embedding_profile()),
    )
    if http is None:
        run_command(server.run_stdio_async())
    else:
        from tarry.cli.mcp_http import serve_http

        run_command(serve_http(server, settings, http))
