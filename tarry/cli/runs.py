"""The "Runs" commands: start a run, talk to it, pause, stop and resume it."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError
from rich.text import Text

from tarry.cli.chat import converse
from tarry.cli.common import (
    AsJson,
    Message,
    Panel,
    RunId,
    check_id,
    console,
    emit,
    fail,
    one_of,
    output,
    read,
    stop_point,
    with_run,
    with_tarry,
)
from tarry.cli.follow import exchange
from tarry.client import RunHandle, Tarry
from tarry.contracts import ApprovalDefault, Budget, Mode, Phase, RunInput, RunState, Sampling
from tarry.text import shorten

commands = typer.Typer()


@commands.command(rich_help_panel=Panel.RUNS)
def start(
    prompt: Annotated[
        str,
        typer.Argument(
            metavar="PROMPT", help="The first message; `-` reads stdin; empty waits for one."
        ),
    ] = "",
    model: Annotated[str, typer.Option(help="The model profile the workers use.")] = "default",
    system: Annotated[str | None, typer.Option(help="A system prompt.")] = None,
    tools: Annotated[
        list[str] | None,
        typer.Option(
            "--tools",
            "--tool",
            metavar="NAMES",
            help="The tools the run may use, comma-separated or repeated; all if not given.",
        ),
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            metavar="chat|task", help="chat waits for you after each answer; task ends on one."
        ),
    ] = Mode.CHAT,
    require_approval: Annotated[
        list[str] | None,
        typer.Option(
            "--require-approval",
            metavar="NAMES",
            help="Tools whose calls wait for your decision (`tarry approve`), comma-separated"
            " or repeated; `*` is every tool.",
        ),
    ] = None,
    approver: Annotated[
        list[str] | None,
        typer.Option(
            "--approver",
            metavar="TOOL=WHO",
            help="Who may decide a tool's calls: users and groups ([api.groups]),"
            " comma-separated (`write_file=ops,alice`); `*=WHO` for the tools not named;"
            " repeated for more tools. Anyone if not given.",
        ),
    ] = None,
    approval_timeout: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="How long a gated call waits for a decision, in seconds or ISO 8601"
            " (`P7D`); forever if not given.",
        ),
    ] = None,
    approval_default: Annotated[
        str,
        typer.Option(
            metavar="reject|approve",
            help="What a gated call nobody decided on gets at its deadline.",
        ),
    ] = ApprovalDefault.REJECT,
    max_turns: Annotated[
        int,
        typer.Option(
            min=1,
            metavar="N",
            help="Model calls since your last reply before the run asks you to go on.",
        ),
    ] = RunInput.model_fields["max_turns"].default,
    max_tokens: Annotated[
        int | None,
        typer.Option(metavar="N", help="A budget: the run waits once it has spent N tokens."),
    ] = None,
    max_cost: Annotated[
        float | None,
        typer.Option(metavar="USD", help="A budget: the run waits once it has cost this much."),
    ] = None,
    run_id: Annotated[
        str | None, typer.Option("--id", help="The run id; a fresh one by default.")
    ] = None,
    tool_choice: Annotated[
        str | None,
        typer.Option(
            metavar="auto|required|none|TOOL",
            help="Whether the model must call a tool (required), one tool (its name), or none;"
            " the profile's setting if not given.",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Start a run and print its id; the run goes on without this command."""
    try:
        input = RunInput(
            prompt=read(prompt),
            model=model,
            system=system,
            tools=_names(tools),
            mode=one_of("--mode", mode, Mode),
            require_approval=_names(require_approval) or [],
            approvers=_approvers(approver or []),
            approval_timeout=_duration(approval_timeout),
            approval_default=one_of("--approval-default", approval_default, ApprovalDefault),
            max_turns=max_turns,
            budget=None
            if max_tokens is None and max_cost is None
            else Budget(max_total_tokens=max_tokens, max_cost_usd=max_cost),
            sampling=None if tool_choice is None else Sampling(tool_choice=tool_choice),
        )
    except ValidationError as e:
        fail(_validation_message(e), exit_code=2)
    check_id(run_id)

    async def begin(tarry: Tarry) -> str:
        return (await tarry.start(input, run_id=run_id)).id

    started = with_tarry(begin)
    output({"run_id": started}, as_json, Text(started))


def _names(values: list[str] | None) -> list[str] | None:
    """`--tools a,b --tools c` as `["a", "b", "c"]`; None when the option is not given."""
    if values is None:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _approvers(entries: list[str]) -> dict[str, list[str]]:
    """`--approver TOOL=WHO,...` options as `RunInput.approvers`."""
    approvers: dict[str, list[str]] = {}
    for entry in entries:
        tool, _, who = entry.partition("=")
        names = _names([who])
        if not tool.strip() or not names:
            fail(f"--approver {entry!r}: give TOOL=USER_OR_GROUP[,...], e.g. write_file=ops", 2)
        approvers.setdefault(tool.strip(), []).extend(names)
    return approvers


def _duration(text: str | None) -> float | str | None:
    """`--approval-timeout`: seconds (`90`, `0.5`) as a number, anything else (`P7D`) as
    ISO 8601 text for pydantic to read."""
    try:
        return float(text) if text is not None else None
    except ValueError:
        return text


def _validation_message(error: ValidationError) -> str:
    """The first problem of `error` as one line: `--approval-timeout: ...`."""
    first = error.errors()[0]
    option = "--" + "-".join(str(part) for part in first["loc"][:1]).replace("_", "-")
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{option}: {message} (got {shorten(repr(first.get('input')), 60)})"


@commands.command(rich_help_panel=Panel.RUNS)
def reply(run_id: RunId, text: Message) -> None:
    """Queue a reply; the run reads it at its next turn boundary. Does not wait."""
    message = read(text)
    with_run(run_id, lambda run: run.reply(message))


@commands.command(rich_help_panel=Panel.RUNS)
def send(run_id: RunId, text: Message, as_json: AsJson = False) -> None:
    """Send a reply and wait for the agent's answer, showing its tool calls as they happen.

    Ctrl-C meanwhile pauses the run at its next turn boundary (a reply it has already
    received still gets its answer first). With --json, prints the run's state at the
    answer instead.
    """
    message = read(text)
    if as_json:
        stop_point(with_run(run_id, lambda run: run.send(message)), as_json=True)
        return
    stop_point(with_run(run_id, lambda run: exchange(run, message, console)))


@commands.command("chat", rich_help_panel=Panel.RUNS)
def chat_command(
    run_id: Annotated[
        str | None, typer.Argument(metavar="RUN", help="A run to pick up; a new one if none.")
    ] = None,
) -> None:
    """Talk with a run in the terminal: a new one, or RUN where it was left.

    Tool calls waiting for approval are shown one by one to approve, reject or edit.
    Leaving the chat (/quit, Ctrl-D) leaves the run waiting for the next message.
    """
    check_id(run_id)
    with_tarry(lambda tarry: converse(tarry, run_id, console))


@commands.command(rich_help_panel=Panel.RUNS)
def pause(run_id: RunId) -> None:
    """Ask the run to stop at its next turn boundary and wait for a reply."""
    with_run(run_id, lambda run: run.pause())


@commands.command(rich_help_panel=Panel.RUNS)
def stop(
    run_id: RunId,
    reason: Annotated[
        str | None, typer.Option(help="Why; `status`, `show` and the result keep it.")
    ] = None,
) -> None:
    """End the run: a waiting run completes, a working one is aborted at once.
    `tarry resume` goes on with it later."""
    with_run(run_id, lambda run: run.stop(reason))


@commands.command(rich_help_panel=Panel.RUNS)
def fork(
    run_id: RunId,
    at: Annotated[
        int,
        typer.Option(
            min=0,
            metavar="N",
            help="The user message to branch at, by its number in `tarry show --numbers`.",
        ),
    ],
    text: Annotated[
        str | None,
        typer.Option(
            metavar="TEXT", help="Its new text (`-` reads stdin); as it was if not given."
        ),
    ] = None,
    fork_id: Annotated[
        str | None,
        typer.Option("--id", help="The fork's run id; `RUN-fork-<short uuid>` by default."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Start a new run from RUN's conversation before user message N, with that message
    again or TEXT in its place, and print its id. RUN itself is untouched and goes on."""
    check_id(fork_id)
    new_text = None if text is None else read(text)

    async def branch(run: RunHandle) -> str:
        return (await run.fork(at, new_text, run_id=fork_id)).id

    forked = with_run(run_id, branch)
    output({"run_id": forked}, as_json, Text(forked))


@commands.command(rich_help_panel=Panel.RUNS)
def resume(run_id: RunId, as_json: AsJson = False) -> None:
    """Go on with an ended run: one that failed (a model error once its retries were
    spent, a profile to fix) or was stopped. A new run under the same id takes its whole
    conversation and waits for your reply; the error that ended it stays shown until then.
    """

    async def go_on(run: RunHandle) -> RunState:
        return await (await run.resume()).wait_for({Phase.WAITING_USER, Phase.RUNNING})

    state = with_run(run_id, go_on)
    if as_json:
        emit(state)
    else:
        console.print(f"run {run_id} goes on: it waits for your reply (`tarry send {run_id} ...`)")
        if state.error:
            console.print(f"it ended with {state.error.code}: {state.error.message}")
