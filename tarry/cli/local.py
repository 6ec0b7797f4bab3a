"""The "Local stack" commands: what runs the runs on this machine — all of it (`dev`), a
worker alone, the offline scripted model alone — the demo on top of it, and `doctor`,
which checks the Temporal any of it connects to.

The stack itself is `devstack`; each command imports what it serves only when it runs,
so the commands that talk to runs start without loading a worker or a model server, and
`tarry --help` without the Temporal client.
"""

from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path
from typing import Annotated

import typer

from tarry.cli import tour
from tarry.cli.common import FLAG, CliError, Panel, connect, fail, run_command
from tarry.config.logs import configure_command_logging, configure_logging
from tarry.temporal.entrypoint import settings_or_exit

DEFAULT_DATA_DIR = Path(".tarry")
DataDir = Annotated[Path, typer.Option(help="Where the local server keeps its data.")]

commands = typer.Typer()


@commands.command(rich_help_panel=Panel.LOCAL)
def dev(
    data_dir: DataDir = DEFAULT_DATA_DIR,
    guide_tour: Annotated[
        str | None,
        typer.Option(
            "--tour",
            metavar="|".join(tour.TOURS),
            help="Also play a guide's offline tour (its commands are in that guide).",
        ),
    ] = None,
    remote: Annotated[
        str | None,
        typer.Option(
            metavar="CARD_URL",
            help="With --tour a2a: the card of the other stack's agent, this stack's researcher.",
        ),
    ] = None,
) -> None:
    """Run all a run needs on this machine until Ctrl-C: Temporal, a model and a worker.

    The model is the offline scripted one unless one is configured; runs survive a
    restart, kept in --data-dir.
    """
    from tarry.cli.devstack import serve_dev

    if guide_tour is not None and guide_tour not in tour.TOURS:
        fail(f"--tour {guide_tour!r}: choose one of {', '.join(tour.TOURS)}", exit_code=2)
    if guide_tour == "oauth":  # its servers start first: its config names their ports
        from tarry.cli.oauth_tour import serve_oauth_tour

        raise typer.Exit(run_command(serve_oauth_tour(data_dir)))
    if remote is not None and guide_tour != "a2a":
        fail("--remote names the A2A tour's remote agent: use it with --tour a2a", exit_code=2)
    if guide_tour == "a2a" and find_spec("a2a") is None:
        fail("--tour a2a needs the a2a extra (a2a-sdk is missing): pip install 'tarry[a2a]'")
    if remote is not None:
        use_tour_config("a2a", tour.remote_config(remote, data_dir))
    elif guide_tour is not None and (path := tour.config(guide_tour)) is not None:
        use_tour_config(guide_tour, path)
    raise typer.Exit(run_command(serve_dev(settings_or_exit(), data_dir, guide_tour)))


def use_tour_config(name: str, path: Path) -> None:
    """Points TARRY_CONFIG at the config file the tour `name` needs (the teams tour's
    sub-agent), before the settings read it. A config of the user's is not overridden
    behind their back: it is refused."""
    for variable in ("TARRY_CONFIG", "TARRY_MODELS_FILE"):
        if os.environ.get(variable):
            fail(f"--tour {name} brings its own config ({path}); unset {variable}", exit_code=2)
    os.environ["TARRY_CONFIG"] = str(path)


@commands.command(rich_help_panel=Panel.LOCAL)
def worker() -> None:
    """Run a worker: it executes runs, model calls and tools until Ctrl-C or SIGTERM.

    Model profiles come from OPENAI_BASE_URL, OPENAI_API_KEY, TARRY_MODEL and the
    TARRY_CONFIG file (or TARRY_MODELS_FILE), which also names its MCP servers.
    """
    from workers.worker import WorkerSetupError, run_worker

    configure_logging()
    settings = settings_or_exit()

    async def serve() -> None:
        await connect(settings)  # a missing server is one line here, not a traceback later
        try:
            await run_worker(settings)
        except WorkerSetupError as e:
            raise CliError(str(e)) from None

    run_command(serve())


@commands.command("scripted-model", rich_help_panel=Panel.LOCAL)
def scripted_model(
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on.")] = 8765,
    script: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help="A JSON script file: steps in order and conversations by their prompt"
            " (docs: Guides, The scripted model).",
        ),
    ] = None,
) -> None:
    """Serve the offline scripted model, an OpenAI-compatible endpoint, until Ctrl-C."""
    from tarry.testing.scripted_model import Script, ScriptedModel, serve

    async def serve_script() -> None:
        played = Script.from_json(script.read_text()) if script else Script()
        await serve(ScriptedModel.of(played, host=host, port=port))

    run_command(serve_script())


@commands.command(rich_help_panel=Panel.LOCAL)
def demo(
    keep: Annotated[
        bool,
        typer.Option(
            "--keep",
            metavar=FLAG,
            help="Keep the stack up afterwards, to look at the run in the UI.",
        ),
    ] = False,
    reply: Annotated[
        str | None,
        typer.Option(help="The answer to the agent's question, when a real model is configured."),
    ] = None,
    model: Annotated[
        str,
        typer.Option(
            help="The model profile the run names; offline, `anthropic` is the scripted "
            "model speaking Anthropic's Messages API."
        ),
    ] = "default",
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Show one human-in-the-loop run end to end on the local stack of `tarry dev`.

    With no model configured, the offline scripted model plays the agent and the
    reply is scripted too: no key, no network, no keyboard.
    """
    from tarry.cli.demo import run_demo

    demo = run_demo(settings_or_exit(), data_dir, keep=keep, reply=reply, model=model)
    raise typer.Exit(run_command(demo))


@commands.command(rich_help_panel=Panel.LOCAL)
def doctor() -> None:
    """Check the Temporal this process connects to: server, namespace, TLS, search
    attributes, workers polling, deployments, stuck runs.

    Connects as every Tarry process does (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
    TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE, TEMPORAL_API_KEY, TEMPORAL_TLS_*) and prints
    what it finds; each problem is one line with its fix, and the exit code is 1 if
    there is any.
    """
    from tarry.cli.doctor import examine

    configure_command_logging()
    found = run_command(examine(settings_or_exit()))
    for line in found.lines:
        print(line)
    for problem in found.problems:
        print(f"problem: {problem}")
    raise typer.Exit(1 if found.problems else 0)
