"""The "Model" commands: what to do with a run whose model keeps failing (it waits for
model) — ask again, or switch it to another profile first."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from tarry.cli.common import AsJson, Panel, RunId, console, output, stop_point, with_run
from tarry.cli.render import message_text
from tarry.contracts import ChatMessage, WaitingFor

commands = typer.Typer()


@commands.command(rich_help_panel=Panel.MODEL)
def retry(run_id: RunId, as_json: AsJson = False) -> None:
    """Ask the model again, for a run waiting because it kept failing (waiting for model),
    and show its answer."""
    state = with_run(run_id, lambda run: run.retry())
    answer = state.last_assistant_text
    if not as_json and state.waiting_for is not WaitingFor.MODEL and answer:
        console.print(message_text(ChatMessage(role="assistant", content=answer)))
    stop_point(state, run_id, as_json=as_json)


@commands.command(rich_help_panel=Panel.MODEL)
def model(
    run_id: RunId,
    name: Annotated[str, typer.Argument(metavar="PROFILE", help="A model profile.")],
    as_json: AsJson = False,
) -> None:
    """Switch the run's next model calls to another profile; then `tarry retry` or reply."""
    state = with_run(run_id, lambda run: run.set_model(name))
    output(state, as_json, Text(f"run {run_id} now asks model profile {state.model or name}"))
