"""`tarry chat`: a conversation with a run in the terminal.

A run lives in Temporal, not in this process: the chat only shows what the run does,
from its event stream while it works (the model's words as it writes them, `follow`),
and sends what the person types. So leaving the chat leaves the run waiting, and
`tarry chat RUN` later picks it up where it was. A run that waits for a decision on
tool calls is asked about each call in turn.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from tarry.cli.follow import exchange, judge, on_screen
from tarry.cli.previews import pending_preview
from tarry.cli.render import pending_line, print_stop_line, state_text
from tarry.contracts import DECIDED_WAITS, ErrorCode, PendingApproval, Phase, RunState
from tarry.core.errors import TarryError

if TYPE_CHECKING:
    from tarry.client import RunHandle, Tarry

PROMPT = "[bold cyan]you>[/] "
APPROVE_PROMPT = Text("approve? [y]es / [n]o / [e]dit> ", style="bold magenta")
REASON_PROMPT = Text("why not? (told to the agent; Enter for no reason)> ", style="bold magenta")
ARGUMENTS_PROMPT = Text("arguments as JSON (Enter goes back)> ", style="bold magenta")
HELP = (
    "/status shows the run · /pause · /stop [reason] ends it · /quit or Ctrl-D leaves it waiting"
    " · Ctrl-C while the agent works pauses it"
)


async def converse(tarry: Tarry, run_id: str | None, console: Console) -> None:
    """Converses over run `run_id`, or over a new run begun with the first message typed;
    returns when the person leaves or the run ends."""
    if run_id is None:
        first = _ask(console, "What should the agent do? (Ctrl-D leaves)")
        if first is None:
            return
        run = await tarry.start(first)
        console.print(Text(f"run {run.id}", style="dim"))
        state = await on_screen(run, 0, console, typed=first)
    else:
        run = tarry.get(run_id)
        state = await on_screen(run, 0, console)
    await _talk(run, state, console)


async def _talk(run: RunHandle, state: RunState, console: Console) -> None:
    if _ended(state, console):
        return
    console.print(Text(HELP, style="dim"))
    shown: str | None = None
    """The pending call last shown, so a mistyped answer does not show it again."""
    while True:
        pending = _next_pending(state)
        if pending is not None and pending.call_id != shown:
            _show_pending(console, pending)
            shown = pending.call_id
        line = _ask(console, prompt=PROMPT if pending is None else APPROVE_PROMPT)
        if line is None or line == "/quit":
            what = "waiting for approval" if pending else "waiting"
            console.print(
                Text(f"left {run.id} {what}; `tarry chat {run.id}` picks it up", style="dim")
            )
            return
        try:
            if line.startswith("/"):
                state = await _command(run, line, console)
            elif pending is not None:
                state = await _answer(run, pending, line, console)
            else:
                state = await exchange(run, line, console)
        except TarryError as e:
            # Too long a reply, say, or the run was ended elsewhere (perhaps terminated,
            # which leaves its last phase in the state).
            console.print(Text(f"error: {e.code}: {e.message}", style="red"))
            if e.code is ErrorCode.RUN_ENDED:
                return
            state = await run.state()
        if _ended(state, console):
            return


def _ended(state: RunState, console: Console) -> bool:
    """Says what a person should know at a stop point; True once the run has ended.
    Calls waiting for approval are left out: the chat asks about each in full."""
    print_stop_line(console, state, approvals=False)
    return state.phase.ended


def _next_pending(state: RunState) -> PendingApproval | None:
    """The first call waiting for a decision, if the run waits for one."""
    if state.waiting_for in DECIDED_WAITS and state.pending_approvals:
        return state.pending_approvals[0]
    return None


def _show_pending(console: Console, pending: PendingApproval) -> None:
    """A call waiting for approval, with its arguments in full, as JSON to edit; a text
    a guardrail holds likewise (`{"text": ...}`)."""
    held = pending.guardrail is not None
    line = f"waiting for {'guardrail' if held else 'approval'}: {pending_line(pending)}"
    console.print(Text(line, style="yellow"), soft_wrap=True)
    console.print(pending_preview(pending), soft_wrap=True)
    try:
        arguments = json.dumps(json.loads(pending.arguments), ensure_ascii=False)
    except ValueError:
        arguments = pending.arguments
    console.print(Text("  arguments: ", style="dim") + Text(arguments))
    verbs = ("allows", "blocks") if held else ("runs", "rejects")
    console.print(
        Text(f"y {verbs[0]} it · n {verbs[1]} it (you may say why) · e edits its arguments")
    )


async def _answer(
    run: RunHandle, pending: PendingApproval, line: str, console: Console
) -> RunState:
    """Acts on the answer to `approve?`; the state at the run's next stop point, or
    the state as it is when the person took the answer back or mistyped it."""
    answer = line.lower()
    if answer in ("y", "yes"):
        return await judge(run, console, pending.call_id)
    if answer in ("n", "no"):
        reason = _read_line(console, REASON_PROMPT)
        if reason is None:
            return await run.state()
        return await judge(run, console, pending.call_id, approved=False, reason=reason or None)
    if answer in ("e", "edit"):
        while (arguments := _ask_arguments(console)) is not None:
            try:
                return await judge(run, console, pending.call_id, arguments=arguments)
            except TarryError as e:
                if e.code is not ErrorCode.APPROVAL_INVALID_ARGUMENTS:
                    raise
                console.print(Text(f"error: {e.code}: {e.message}", style="red"))
        return await run.state()
    console.print(Text("answer y, n or e; /quit leaves the call waiting", style="yellow"))
    return await run.state()


def _ask_arguments(console: Console) -> dict[str, Any] | None:
    """Edited arguments, a JSON object; None when the person goes back (Enter, Ctrl-D)."""
    while line := _read_line(console, ARGUMENTS_PROMPT):
        try:
            arguments = json.loads(line)
        except ValueError as e:
            console.print(Text(f"not JSON: {e}", style="red"))
            continue
        if isinstance(arguments, dict):
            return arguments
        console.print(Text('not a JSON object; write it like {"path": "notes.md"}', style="red"))
    return None


async def _command(run: RunHandle, line: str, console: Console) -> RunState:
    name, _, argument = line.partition(" ")
    if name == "/stop":
        await run.stop(argument.strip() or None)
        return await run.wait_for({Phase.COMPLETED, Phase.FAILED})
    if name == "/pause":
        # At the prompt the run normally waits already; pausing is for one that another
        # client set running meanwhile.
        if (await run.state()).phase is Phase.RUNNING:
            await run.pause()
            console.print(Text("the run stops at its next turn boundary", style="dim"))
        else:
            console.print(Text("the run is already waiting for you; nothing to pause", "dim"))
    state = await run.state()
    if name == "/status":
        console.print(state_text(run.id, state), soft_wrap=True)
    elif name != "/pause":
        console.print(Text(f"unknown command {name}; {HELP}", style="yellow"))
    return state


def _ask(console: Console, hint: str | None = None, prompt: str | Text = PROMPT) -> str | None:
    """The next non-empty line the person types; None when they leave (Ctrl-D, Ctrl-C)."""
    if hint:
        console.print(Text(hint, style="dim"))
    while (line := _read_line(console, prompt)) is not None:
        if line:
            return line
    return None


def _read_line(console: Console, prompt: str | Text) -> str | None:
    """The next line the person types, stripped, perhaps empty; None at Ctrl-D or Ctrl-C."""
    try:
        return console.input(prompt).strip()
    except (EOFError, KeyboardInterrupt):
        console.print()
        return None
