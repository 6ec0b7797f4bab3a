"""The "Approvals and budget" commands: what a run holds out for a person on, a decision
on its gated tool calls or more budget, and what it does once it has them."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.prompt import Prompt
from rich.text import Text

from tarry.cli.common import (
    FLAG,
    AsJson,
    Panel,
    RunId,
    console,
    emit,
    fail,
    fail_if_failed,
    read,
    stop_point,
    with_run,
)
from tarry.cli.follow import judge
from tarry.cli.previews import pending_preview
from tarry.cli.render import budget_text, pending_line, print_stop_line
from tarry.contracts import ErrorCode, Phase, RunState

if TYPE_CHECKING:
    from tarry.client import RunHandle

commands = typer.Typer()


@commands.command(rich_help_panel=Panel.APPROVALS)
def approve(
    run_id: RunId,
    call_id: Annotated[
        str | None,
        typer.Argument(
            metavar="CALL_ID",
            help="The call to decide on, as `tarry status` shows it; none: the one pending"
            " call (with several, a terminal asks which; --all decides them all).",
            show_default=False,
        ),
    ] = None,
    reject: Annotated[
        bool,
        typer.Option(
            "--reject", metavar=FLAG, help="Reject the call instead: the tool does not run."
        ),
    ] = False,
    reason: Annotated[
        str | None,
        typer.Option(help="Why; the agent is told it when the call is rejected."),
    ] = None,
    args: Annotated[
        str | None,
        typer.Option(
            "--args",
            metavar="JSON",
            help="Run the call with these arguments instead, a JSON object, checked against"
            " the tool's schema.",
        ),
    ] = None,
    remember: Annotated[
        bool,
        typer.Option(
            "--remember",
            metavar=FLAG,
            help="Decide the like calls after it the same way for the rest of the run, without"
            " asking: those the same rule asks about, or, with no rule, the same arguments.",
        ),
    ] = False,
    every: Annotated[
        bool,
        typer.Option("--all", metavar=FLAG, help="Decide every pending call the same way, unseen."),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Decide on tool calls waiting for approval, then show what the run does next.

    Approved calls run; a rejected call does not, and the agent is told so, with the
    reason. A text a guardrail holds (`waiting for guardrail`) is decided the same way:
    approving allows it, --args '{"text": "..."}' edits it, --reject blocks it; --all
    decides it only when no call is pending. Shows the tool results and the agent's
    answer as they happen, like `send`; with --json, prints the run's state at its next
    stop point instead. A decision the run cannot take (an unknown or already decided
    call, nothing pending, arguments that do not fit the tool) changes nothing and is
    one error line. With several calls pending and none named, a terminal lists them,
    each with what it would do, and asks which one; elsewhere, name one or give --all.
    """
    arguments = _edited_arguments(args)
    if arguments is not None and reject:
        fail("--args gives the arguments to run a call with; it cannot go with --reject", 2)
    if arguments is not None and remember:
        fail("--args belong to one call; a decision with them cannot be remembered", 2)
    if every and call_id is not None:
        fail(f"--all decides every pending call; it cannot go with CALL_ID {call_id}", 2)

    async def decide(run: RunHandle) -> RunState:
        chosen = call_id if call_id is not None or every else await _which(run, as_json)
        options: dict[str, Any] = {
            "approved": not reject,
            "reason": reason,
            "arguments": arguments,
            "remember": "run" if remember else None,
        }
        if as_json:
            return await run.decide(chosen, **options)
        return await judge(run, console, chosen, **options)

    stop_point(with_run(run_id, decide), run_id, as_json=as_json)


async def _which(run: RunHandle, as_json: bool) -> str | None:
    """The call a decision naming none is about: the only one pending (None: the run
    says if there is none), or, of several, the one a person at a terminal picks after
    seeing them all; elsewhere, several are an error that says what to give."""
    pending = (await run.state()).pending_approvals
    if len(pending) <= 1:
        return None
    ids = [p.call_id for p in pending]
    if as_json or not sys.stdin.isatty():
        fail(
            f"{len(ids)} calls wait for a decision ({', '.join(ids)}): name one, `tarry approve"
            f" {run.id} CALL_ID`, or decide them all the same way with --all",
            exit_code=2,
        )
    for p in pending:
        console.print(Text(pending_line(p), style="yellow"), soft_wrap=True)
        console.print(pending_preview(p), soft_wrap=True)
    return await asyncio.to_thread(Prompt.ask, "Which call?", choices=ids, console=console)


def _edited_arguments(text: str | None) -> dict[str, Any] | None:
    """`--args`, parsed here so a typo is one line and nothing reaches the run."""
    if text is None:
        return None
    code = ErrorCode.APPROVAL_INVALID_ARGUMENTS
    try:
        arguments = json.loads(read(text))
    except ValueError as e:
        fail(f"{code}: --args is not JSON: {e}", exit_code=2)
    if not isinstance(arguments, dict):
        fail(f"""{code}: --args must be a JSON object, like '{{"path": "notes.md"}}'""", 2)
    return arguments


@commands.command(rich_help_panel=Panel.APPROVALS)
def budget(
    run_id: RunId,
    tokens: Annotated[
        int | None, typer.Option(metavar="N", help="The run's new total token limit.")
    ] = None,
    cost: Annotated[
        float | None, typer.Option(metavar="USD", help="The run's new total cost limit.")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Raise the run's budget: a run waiting for it goes on, and this shows where it
    stops next. Each limit given must be above what the run has spent (`tarry status`)."""
    if tokens is None and cost is None:
        fail(f"{ErrorCode.BUDGET_INVALID}: give --tokens, --cost or both", exit_code=2)

    async def raise_it(run: RunHandle) -> RunState:
        return await run.raise_budget(max_total_tokens=tokens, max_cost_usd=cost)

    state = with_run(run_id, raise_it)
    if as_json:
        emit(state)
    else:
        _print_next_stop(run_id, state)
    fail_if_failed(state)


def _print_next_stop(run_id: str, state: RunState) -> None:
    """`tarry budget`'s answer: the budget now, then where the run stopped next (its
    answer and that it waits for a reply, a decision or more budget, or that it ended),
    or that it works on when it was not waiting for its budget."""
    if state.budget:
        console.print(f"budget: {budget_text(state.budget)}")
    if state.phase is Phase.RUNNING:
        console.print(f"the run works on; `tarry watch {run_id}` follows it")
        return
    if state.last_assistant_text and state.phase is not Phase.FAILED:
        console.print(Text.assemble(("agent: ", "bold"), state.last_assistant_text))
    if state.phase is not Phase.FAILED:
        print_stop_line(console, state, run_id=run_id, reply=True)
