"""`tarry`: start agent runs, talk to them and watch them from a shell.

Every command that prints data takes `--json` for scripts: plain JSON on stdout, never
colour. Errors are one line on stderr (`error: CODE: message`) and a non-zero exit,
never a traceback. Connection settings come from the environment (`TEMPORAL_ADDRESS`,
`TEMPORAL_NAMESPACE`, `TARRY_TASK_QUEUE`), as for every Tarry process; a bad setting or
config file is refused before anything starts, with exit code 2 (`settings_or_exit`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Coroutine
from enum import StrEnum
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python
from rich.console import Console, Group, RenderableType
from rich.table import Column, Table
from rich.text import Text
from temporalio.service import RPCError

from tarry.cli.chat import converse, exchange, follow, judge
from tarry.cli.render import (
    LiveView,
    budget_text,
    message_text,
    print_stop_line,
    state_text,
    when,
)
from tarry.client import RunHandle, Tarry, TarryError
from tarry.codec import EncryptionKeyError
from tarry.contracts import (
    ApprovalDefault,
    Budget,
    ChatMessage,
    ErrorCode,
    Mode,
    Phase,
    RunInput,
    RunState,
    Sampling,
    WaitingFor,
    run_id_problem,
)
from tarry.entrypoint import exit_now, settings_or_exit
from tarry.logs import configure_command_logging, configure_logging
from tarry.runs import RunRow, find_runs
from tarry.settings import TarrySettings
from tarry.text import shorten

T = TypeVar("T")

CONNECT_TIMEOUT_SECONDS = 5.0
"""A refused connection fails at once; this bounds one that hangs (a firewall)."""
DEFAULT_DATA_DIR = Path(".tarry")

console = Console(highlight=False)

app = typer.Typer(
    name="tarry",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)

RunId = Annotated[
    str, typer.Argument(metavar="RUN", help="The run id, as `tarry start` printed it.")
]
Message = Annotated[
    str, typer.Argument(metavar="TEXT", help="The message; `-` reads it from standard input.")
]
FLAG = ""
"""The metavar of an on/off option: typer would show `<bool>`, as if it took a value."""
AsJson = Annotated[
    bool, typer.Option("--json", metavar=FLAG, help="Print plain JSON instead of text.")
]
DataDir = Annotated[Path, typer.Option(help="Where the local server keeps its data.")]


class CliError(Exception):
    """A failure this command line diagnoses itself, with what to do about it."""


# --- Running a command: connect, run, turn errors into one line ---------------------


def _fail(message: str, exit_code: int = 1) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(exit_code)


def _run(main: Coroutine[Any, Any, T]) -> T:
    """Runs a command's async body; every error a person can act on becomes one line."""
    try:
        return asyncio.run(main)
    except TarryError as e:
        _fail(f"{e.code}: {e.message}")
    except (CliError, EncryptionKeyError) as e:
        _fail(str(e))
    except RPCError as e:
        _fail(f"{e.status.name}: {e.message}")
    except ValidationError as e:
        _fail(shorten(str(e), 300))
    except TimeoutError:
        _fail("timed out waiting for the run")
    except OSError as e:
        _fail(str(e))


async def _connect(settings: TarrySettings) -> Tarry:
    address = settings.temporal_address
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
            return await Tarry.connect(settings)
    except EncryptionKeyError:
        raise  # a ValueError too, with its own message
    # The SDK reports an address it cannot parse as a ValueError ("invalid target URL").
    except ValueError as e:
        raise CliError(
            f"TEMPORAL_ADDRESS={address!r} is not an address ({e}); give host:port, "
            "e.g. 127.0.0.1:7233"
        ) from e
    # The SDK reports a failed connection as a bare RuntimeError.
    except (RuntimeError, TimeoutError) as e:
        raise CliError(
            f"cannot reach Temporal at {address}; start it with `tarry dev` or set TEMPORAL_ADDRESS"
        ) from e


def _with_tarry(action: Callable[[Tarry], Awaitable[T]]) -> T:
    configure_command_logging()
    settings = settings_or_exit()

    async def connected() -> T:
        return await action(await _connect(settings))

    return _run(connected())


def _with_run(run_id: str, action: Callable[[RunHandle], Awaitable[T]]) -> T:
    _check_id(run_id)
    return _with_tarry(lambda tarry: action(tarry.get(run_id)))


def _check_id(run_id: str | None) -> None:
    """A run id checked before anything connects (`run_id_problem`, the one rule), so a
    bad one is its own error even with no server to reach."""
    if run_id is not None and (problem := run_id_problem(run_id)):
        _fail(f"{ErrorCode.RUN_ID_INVALID}: {problem}", exit_code=2)


# --- Output -------------------------------------------------------------------------


def _emit(data: Any) -> None:
    """One JSON document on its own line: no colour, no wrapping, flushed at once so a
    reader of `watch --json` sees each message as it comes."""
    sys.stdout.write(json.dumps(to_jsonable_python(data)) + "\n")
    sys.stdout.flush()


def _output(data: Any, as_json: bool, view: RenderableType) -> None:
    """`data` as JSON for scripts, or its rich `view` for people."""
    if as_json:
        _emit(data)
    else:
        console.print(view)


def _messages_view(messages: list[ChatMessage]) -> Group:
    return Group(*(message_text(m) for m in messages))


def _read(text: str) -> str:
    """The text itself, or standard input for `-` (without its final newline)."""
    return sys.stdin.read().rstrip("\r\n") if text == "-" else text


# --- Commands -----------------------------------------------------------------------


def _show_version(show: bool) -> None:
    if show:
        print(f"tarry {version('tarry')}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            metavar=FLAG,
            callback=_show_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Durable, human-in-the-loop LLM agent runs on Temporal.

    Connection settings come from TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE and
    TARRY_TASK_QUEUE.
    """


@app.command()
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
            prompt=_read(prompt),
            model=model,
            system=system,
            tools=_names(tools),
            mode=_choice("--mode", mode, Mode),
            require_approval=_names(require_approval) or [],
            approval_timeout=_duration(approval_timeout),
            approval_default=_choice("--approval-default", approval_default, ApprovalDefault),
            max_turns=max_turns,
            budget=None
            if max_tokens is None and max_cost is None
            else Budget(max_total_tokens=max_tokens, max_cost_usd=max_cost),
            sampling=None if tool_choice is None else Sampling(tool_choice=tool_choice),
        )
    except ValidationError as e:
        _fail(_validation_message(e), exit_code=2)
    _check_id(run_id)

    async def begin(tarry: Tarry) -> str:
        return (await tarry.start(input, run_id=run_id)).id

    started = _with_tarry(begin)
    _output({"run_id": started}, as_json, Text(started))


def _names(values: list[str] | None) -> list[str] | None:
    """`--tools a,b --tools c` as `["a", "b", "c"]`; None when the option is not given."""
    if values is None:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


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


@app.command()
def reply(run_id: RunId, text: Message) -> None:
    """Queue a reply; the run reads it at its next turn boundary. Does not wait."""
    message = _read(text)
    _with_run(run_id, lambda run: run.reply(message))


@app.command()
def send(run_id: RunId, text: Message, as_json: AsJson = False) -> None:
    """Send a reply and wait for the agent's answer, showing its tool calls as they happen.

    Ctrl-C meanwhile pauses the run at its next turn boundary (a reply it has already
    received still gets its answer first). With --json, prints the run's state at the
    answer instead.
    """
    message = _read(text)
    if as_json:
        _stop_point(_with_run(run_id, lambda run: run.send(message)), as_json=True)
        return
    _stop_point(_with_run(run_id, lambda run: exchange(run, message, console)))


@app.command()
def approve(
    run_id: RunId,
    call_id: Annotated[
        str | None,
        typer.Argument(
            metavar="CALL_ID",
            help="The call to decide on, as `tarry status` shows it; all pending calls if none.",
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
    as_json: AsJson = False,
) -> None:
    """Decide on tool calls waiting for approval, then show what the run does next.

    Approved calls run; a rejected call does not, and the agent is told so, with the
    reason. Shows the tool results and the agent's answer as they happen, like `send`;
    with --json, prints the run's state at its next stop point instead. A decision the
    run cannot take (an unknown or already decided call, nothing pending, arguments
    that do not fit the tool) changes nothing and is one error line.
    """
    arguments = _edited_arguments(args)
    if arguments is not None and reject:
        _fail("--args gives the arguments to run a call with; it cannot go with --reject", 2)

    async def decide(run: RunHandle) -> RunState:
        options: dict[str, Any] = {"approved": not reject, "reason": reason, "arguments": arguments}
        if as_json:
            return await run.decide(call_id, **options)
        return await judge(run, console, call_id, **options)

    _stop_point(_with_run(run_id, decide), as_json=as_json)


def _stop_point(state: RunState, *, as_json: bool = False) -> None:
    """Where `send`, `approve` and `watch` leave a run: its state as JSON or its stop
    line; a failed run is an error, on stderr with a non-zero exit, as for any error."""
    if as_json:
        _emit(state)
    elif state.phase is not Phase.FAILED:
        print_stop_line(console, state)
    _fail_if_failed(state)


def _fail_if_failed(state: RunState) -> None:
    if state.phase is Phase.FAILED:
        error = state.error
        _fail(f"run failed: {error.code}: {error.message}" if error else "run failed")


def _edited_arguments(text: str | None) -> dict[str, Any] | None:
    """`--args`, parsed here so a typo is one line and nothing reaches the run."""
    if text is None:
        return None
    code = ErrorCode.APPROVAL_INVALID_ARGUMENTS
    try:
        arguments = json.loads(_read(text))
    except ValueError as e:
        _fail(f"{code}: --args is not JSON: {e}", exit_code=2)
    if not isinstance(arguments, dict):
        _fail(f"""{code}: --args must be a JSON object, like '{{"path": "notes.md"}}'""", 2)
    return arguments


@app.command()
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
        _fail(f"{ErrorCode.BUDGET_INVALID}: give --tokens, --cost or both", exit_code=2)

    async def raise_it(run: RunHandle) -> RunState:
        return await run.raise_budget(max_total_tokens=tokens, max_cost_usd=cost)

    state = _with_run(run_id, raise_it)
    if as_json:
        _emit(state)
    else:
        _print_next_stop(run_id, state)
    _fail_if_failed(state)


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
    if state.waiting_for is WaitingFor.INPUT:
        console.print(f"the run waits for your reply: `tarry send {run_id} TEXT`")
    elif state.phase is not Phase.FAILED:
        print_stop_line(console, state)


@app.command()
def retry(run_id: RunId, as_json: AsJson = False) -> None:
    """Ask the model again, for a run waiting because it kept failing (waiting for model),
    and show its answer."""
    state = _with_run(run_id, lambda run: run.retry())
    answer = state.last_assistant_text
    if not as_json and state.waiting_for is not WaitingFor.MODEL and answer:
        console.print(message_text(ChatMessage(role="assistant", content=answer)))
    _stop_point(state, as_json=as_json)


@app.command()
def model(
    run_id: RunId,
    name: Annotated[str, typer.Argument(metavar="PROFILE", help="A model profile.")],
    as_json: AsJson = False,
) -> None:
    """Switch the run's next model calls to another profile; then `tarry retry` or reply."""
    state = _with_run(run_id, lambda run: run.set_model(name))
    _output(state, as_json, Text(f"run {run_id} now asks model profile {state.model or name}"))


@app.command()
def pause(run_id: RunId) -> None:
    """Ask the run to stop at its next turn boundary and wait for a reply."""
    _with_run(run_id, lambda run: run.pause())


@app.command()
def stop(
    run_id: RunId,
    reason: Annotated[
        str | None, typer.Option(help="Why; `status`, `show` and the result keep it.")
    ] = None,
) -> None:
    """End the run: a waiting run completes, a working one is aborted at once.
    `tarry resume` goes on with it later."""
    _with_run(run_id, lambda run: run.stop(reason))


@app.command()
def resume(run_id: RunId, as_json: AsJson = False) -> None:
    """Go on with an ended run: one that failed (a model error once its retries were
    spent, a profile to fix) or was stopped. A new run under the same id takes its whole
    conversation and waits for your reply; the error that ended it stays shown until then.
    """

    async def go_on(run: RunHandle) -> RunState:
        return await (await run.resume()).wait_for({Phase.WAITING_USER, Phase.RUNNING})

    state = _with_run(run_id, go_on)
    if as_json:
        _emit(state)
    else:
        console.print(f"run {run_id} goes on: it waits for your reply (`tarry send {run_id} ...`)")
        if state.error:
            console.print(f"it ended with {state.error.code}: {state.error.message}")


@app.command()
def status(run_id: RunId, as_json: AsJson = False) -> None:
    """Show where the run stands: phase, turn, token usage, warning, error, pending replies,
    and the tool calls waiting for approval.

    With no worker to answer, shows what Temporal itself last recorded of the run (its
    phase, turns, profile) and says which task queue needs one, exiting 1."""

    async def where(run: RunHandle) -> RunState:
        try:
            return await run.state()
        except TarryError as e:
            if e.code is ErrorCode.RUN_NOT_SERVED:
                row = await RunRow.of(await run.describe())
                _output(row, as_json, _row_text(row))
            raise

    state = _with_run(run_id, where)
    if as_json:
        _emit(state)
    else:
        console.print(state_text(run_id, state), soft_wrap=True)


@app.command()
def show(
    run_id: RunId,
    start: Annotated[int, typer.Option("--from", min=0, help="The first message to show.")] = 0,
    as_json: AsJson = False,
) -> None:
    """Print the run's transcript, and the reason it was stopped with, if it was."""

    async def read(run: RunHandle) -> tuple[list[ChatMessage], RunState]:
        return await run.transcript(start=start), await run.state()

    messages, state = _with_run(run_id, read)
    view = _messages_view(messages)
    if state.stop_reason:
        view.renderables.append(Text(f"stopped: {state.stop_reason}", style="bold"))
    _output(messages, as_json, view)


@app.command()
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
                run, start, lambda e: _emit(e.model_dump(mode="json", exclude_none=True))
            )
        with LiveView(console) as view:
            return await follow(run, start, view.show)

    state = _with_run(run_id, follow_live)
    if as_json:
        _fail_if_failed(state)
    else:
        _stop_point(state)


E = TypeVar("E", bound=StrEnum)


def _row_text(row: RunRow) -> Text:
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
    width = max(map(len, rows)) + 2
    return Text("\n").join(Text.assemble((k.ljust(width), "bold"), v) for k, v in rows.items())


def _choice(option: str, value: str, choices: type[E]) -> E:
    """An option's value among `choices`, any case, checked here rather than by typer so
    a typo is one plain line, like every error."""
    by_name = {choice.lower(): choice for choice in choices}
    if (chosen := by_name.get(value.lower())) is None:
        _fail(f"unknown {option} {value!r}; use one of {', '.join(choices)}", exit_code=2)
    return chosen


def _runs_table(rows: list[RunRow], width: int | None) -> Table:
    """The runs, one line each; the summary is cut to fit `width`, if given."""
    cells = [
        [
            row.run_id,
            row.phase or "-",
            "-" if row.turns is None else str(row.turns),
            row.model or "-",
            row.waiting_for or "-",
            when(row.started),
        ]
        for row in rows
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
    for row, values in zip(rows, cells, strict=True):
        table.add_row(*values, row.summary or "-")
    return table


@app.command("list")
def list_runs(
    phase: Annotated[
        str | None, typer.Option(help="Only runs in this phase: " + ", ".join(Phase) + ".")
    ] = None,
    waiting_for: Annotated[
        str | None,
        typer.Option(
            "--waiting-for",
            help=f"Only runs waiting for this: {WaitingFor.INPUT} (a reply), "
            f"{WaitingFor.APPROVAL} (a decision on tool calls) or {WaitingFor.BUDGET} "
            "(a raised budget: `tarry budget`).",
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many runs.")] = 20,
    as_json: AsJson = False,
) -> None:
    """List runs with their phase, turns, model profile, what they wait for and the first
    line of their prompt; open runs first, newest first."""
    wanted = None if phase is None else _choice("--phase", phase, Phase)
    awaited = None if waiting_for is None else _choice("--waiting-for", waiting_for, WaitingFor)

    async def find(tarry: Tarry) -> list[RunRow]:
        page = await find_runs(tarry.client, phase=wanted, waiting_for=awaited, limit=limit)
        return page.rows

    rows = _with_tarry(find)
    if as_json:
        _emit(rows)
    else:
        # Piped, a line is as long as it needs to be; a terminal cuts the summary to fit.
        if console.is_terminal:
            console.print(_runs_table(rows, console.width))
        else:
            Console(highlight=False, width=100_000).print(_runs_table(rows, None))


@app.command("mcp")
def mcp_command(
    http: Annotated[
        int | None,
        typer.Option(
            "--http",
            metavar="PORT",
            min=1,
            max=65535,
            help="Serve streamable HTTP on http://127.0.0.1:PORT/mcp instead of stdio.",
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
        _fail(f"tarry mcp needs the mcp extra ({e.name} is missing): pip install 'tarry[mcp]'")
    settings = settings_or_exit()  # refused now, not at the first tool call
    server = build_server(lambda: _connect(settings), read_only=read_only)
    if http is None:
        _run(server.run_stdio_async())
    else:
        _run(server.run_streamable_http_async(host="127.0.0.1", port=http))


@app.command("chat")
def chat_command(
    run_id: Annotated[
        str | None, typer.Argument(metavar="RUN", help="A run to pick up; a new one if none.")
    ] = None,
) -> None:
    """Talk with a run in the terminal: a new one, or RUN where it was left.

    Tool calls waiting for approval are shown one by one to approve, reject or edit.
    Leaving the chat (/quit, Ctrl-D) leaves the run waiting for the next message.
    """
    _check_id(run_id)
    _with_tarry(lambda tarry: converse(tarry, run_id, console))


@app.command()
def worker() -> None:
    """Run a worker: it executes runs, model calls and tools until Ctrl-C or SIGTERM.

    Model profiles come from OPENAI_BASE_URL, OPENAI_API_KEY, TARRY_MODEL and the
    TARRY_CONFIG file (or TARRY_MODELS_FILE), which also names its MCP servers.
    """
    from workers.worker import WorkerSetupError, run_worker

    configure_logging()
    settings = settings_or_exit()

    async def serve() -> None:
        await _connect(settings)  # a missing server is one line here, not a traceback later
        try:
            await run_worker(settings)
        except WorkerSetupError as e:
            raise CliError(str(e)) from None

    _run(serve())


@app.command("scripted-model")
def scripted_model(
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on.")] = 8765,
    script: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="A JSON file: a list of script steps."),
    ] = None,
) -> None:
    """Serve the offline scripted model, an OpenAI-compatible endpoint, until Ctrl-C."""
    from tarry.testing.scripted_model import ScriptedModel, ScriptStep, serve

    async def serve_script() -> None:
        steps = TypeAdapter(list[ScriptStep]).validate_json(script.read_text()) if script else []
        await serve(ScriptedModel(steps, host=host, port=port))

    _run(serve_script())


@app.command()
def dev(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Run all a run needs on this machine until Ctrl-C: Temporal, a model and a worker.

    The model is the offline scripted one unless one is configured; runs survive a
    restart, kept in --data-dir.
    """
    from tarry.cli.devstack import serve_dev

    raise typer.Exit(_run(serve_dev(settings_or_exit(), data_dir)))


@app.command()
def serve(
    host: Annotated[
        str,
        typer.Option(
            help="The address to listen on; beyond loopback only with TARRY_API_TOKENS set."
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
    (comma-separated); with none set, the API serves only this machine (loopback).
    Browsers of other origins may call it when TARRY_API_CORS_ORIGINS names them.
    """
    from tarry.api import ApiServer, ApiSetupError, check_exposure, create_app
    from tarry.cli.devstack import stop_signals, unless_stopped

    settings = settings_or_exit()

    async def serve_api() -> None:
        try:
            check_exposure(host, settings)
            server = ApiServer(
                create_app(await _connect(settings), settings),
                host,
                settings.tarry_api_port if port is None else port,
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

    _run(serve_api())


@app.command()
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
    raise typer.Exit(_run(demo))


def main() -> NoReturn:
    """The `tarry` script. It leaves through `exit_now`, as every entry point must, because
    the Temporal SDK can abort the interpreter at exit (sdk-python #300)."""
    try:
        app(prog_name="tarry")
        code = 0
    except SystemExit as e:
        # typer ends with SystemExit, also on success; usage errors keep click's message.
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except Exception as e:
        sys.stderr.write(f"error: unexpected {type(e).__name__}: {shorten(str(e), 300)}\n")
        code = 1
    exit_now(code)
