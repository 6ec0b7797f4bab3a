"""Following a run live, and `tarry chat`: a conversation with a run in the terminal.

A run lives in Temporal, not in this process: the chat only shows what the run does,
from its event stream while it works (the model's words as it writes them), and sends
what the person types. So leaving
the chat leaves the run waiting, and `tarry chat RUN` later picks it up where it was.
A run that waits for a decision on tool calls is asked about each call in turn.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from contextlib import aclosing, asynccontextmanager
from typing import Any

from rich.console import Console
from rich.text import Text
from temporalio.service import RPCError

from tarry.cli.render import LiveView, pending_line, print_stop_line, state_text
from tarry.client import RunHandle, Tarry, TarryError
from tarry.contracts import ErrorCode, PendingApproval, Phase, RunState, WaitingFor
from tarry.events import EventKind, RunEvent

_ANSWER_EVENTS = frozenset(EventKind) - {EventKind.MESSAGE, EventKind.STOP, EventKind.RETRYING}
RETRY_POLL_SECONDS = 1.0
"""How often a followed run's failing calls are looked for: a retry waits a second or more."""
PROMPT = "[bold cyan]you>[/] "
APPROVE_PROMPT = Text("approve? [y]es / [n]o / [e]dit> ", style="bold magenta")
REASON_PROMPT = Text("why not? (told to the agent; Enter for no reason)> ", style="bold magenta")
ARGUMENTS_PROMPT = Text("arguments as JSON (Enter goes back)> ", style="bold magenta")
HELP = (
    "/status shows the run · /pause · /stop [reason] ends it · /quit or Ctrl-D leaves it waiting"
    " · Ctrl-C while the agent works pauses it"
)


async def follow(
    run: RunHandle,
    start: int,
    show: Callable[[RunEvent], None],
    answer: Coroutine[Any, Any, RunState] | None = None,
) -> RunState:
    """Shows the run's messages from index `start`, then its live events, until its next
    stop point: until `answer` (a `send` or `decide` not yet begun) has its answer or,
    without one, until the run is no longer running. Returns the state at that point.

    One `state` query says where the transcript and the event stream stood at the same
    moment: messages before it come from the transcript, everything after from the
    stream (and the answer in flight from its first word), so nothing is shown twice or
    missed."""
    try:
        state = await run.state()
    except BaseException:
        if answer is not None:
            answer.close()  # never begun: no "never awaited" warning
        raise
    # Begun only now, so the stop point it waits for is after `state.events`.
    sending = asyncio.ensure_future(answer) if answer is not None else None
    retries: asyncio.Task[None] | None = None
    try:
        made = max(start, state.message_count)
        for i, message in enumerate((await run.transcript(start=start))[: made - start]):
            show(RunEvent(kind=EventKind.MESSAGE, index=start + i, message=message))
        if sending is None and state.phase is not Phase.RUNNING:
            show(RunEvent(kind=EventKind.STOP, state=state))  # the stop point it is at
            return state
        # From the turn's start, to show the answer in flight from its first word; of
        # what came before this state, only that answer's words are new.
        retries = asyncio.create_task(_report_retries(run, show))
        async with aclosing(_alongside(run.events(state.turn_events), sending)) as events:
            async for event in events:
                if (event.offset or 0) < state.events and not (
                    event.kind in _ANSWER_EVENTS and event.turn > state.turn
                ):
                    continue
                if event.kind is EventKind.MESSAGE and (event.index or 0) < made:
                    continue
                show(event)
                if event.kind is EventKind.STOP and event.state is not None:
                    return await sending if sending is not None else event.state
        # The run ended and its last events are read.
        return await sending if sending is not None else await run.state()
    finally:
        if retries is not None:
            retries.cancel()
        if sending is not None and not sending.done():
            # Left early (a second Ctrl-C): end the send here rather than leave a task
            # behind that fails as the loop closes. The run goes on regardless.
            sending.cancel()
            await asyncio.wait({sending})
            if not sending.cancelled():
                sending.exception()


async def _report_retries(run: RunHandle, show: Callable[[RunEvent], None]) -> None:
    """Shows each new attempt of a failing model or tool call while the run is followed:
    the run's own events say nothing of them, so an outage would look like silence."""
    shown: tuple[str, int] | None = None
    while True:
        await asyncio.sleep(RETRY_POLL_SECONDS)
        try:
            retrying = await run.retrying()
        except (TarryError, RPCError):
            continue  # the event stream reports a run or server that went away
        if retrying is not None and (retrying.call, retrying.attempt) != shown:
            shown = (retrying.call, retrying.attempt)
            show(RunEvent(kind=EventKind.RETRYING, retrying=retrying))


async def _alongside(
    events: AsyncGenerator[RunEvent], sending: asyncio.Future[RunState] | None
) -> AsyncGenerator[RunEvent]:
    """`events`, ended by the error of `sending` (a refused `send`, say) if it fails."""
    coming: asyncio.Future[RunEvent] | None = None
    try:
        while True:
            coming = asyncio.ensure_future(anext(events))
            if sending is not None:
                both: list[asyncio.Future[Any]] = [coming, sending]
                await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
                if sending.done():
                    sending.result()  # raises its error, if it failed
                    sending = None
            try:
                yield await coming
            except StopAsyncIteration:
                return
    finally:
        # A read still in flight (an error, Ctrl-C) holds the generator: end it first.
        if coming is not None and not coming.done():
            coming.cancel()
            await asyncio.wait([coming])
        await events.aclose()


async def exchange(run: RunHandle, text: str, console: Console) -> RunState:
    """Sends `text` with the `send` update and shows what the run does with it (tool
    calls, results, the answer) as it happens. Ctrl-C meanwhile pauses the run."""
    start = (await run.state()).message_count
    return await _on_screen(run, start, console, typed=text, answer=run.send(text))


async def judge(
    run: RunHandle,
    console: Console,
    call_id: str | None = None,
    *,
    approved: bool = True,
    reason: str | None = None,
    arguments: dict[str, Any] | None = None,
) -> RunState:
    """Decides on gated calls with the `decide` update (see `decision`) and shows what
    the run does next (the tool results, the answer) as it happens. Ctrl-C meanwhile
    pauses the run."""
    start = (await run.state()).message_count
    answer = run.decide(call_id, approved=approved, reason=reason, arguments=arguments)
    return await _on_screen(run, start, console, answer=answer)


async def _on_screen(
    run: RunHandle,
    start: int,
    console: Console,
    *,
    typed: str | None = None,
    answer: Coroutine[Any, Any, RunState] | None = None,
) -> RunState:
    """`follow` for a person: the words as they come, a spinner while the run works,
    Ctrl-C pauses it, and the message they `typed` is not shown again, as it is already
    on their screen."""
    with LiveView(console, typed=typed) as view:
        async with _pause_on_ctrl_c(run, view.notice):
            return await follow(run, start, view.show, answer)


async def converse(tarry: Tarry, run_id: str | None, console: Console) -> None:
    """Converses over run `run_id`, or over a new run begun with the first message typed;
    returns when the person leaves or the run ends."""
    if run_id is None:
        first = _ask(console, "What should the agent do? (Ctrl-D leaves)")
        if first is None:
            return
        run = await tarry.start(first)
        console.print(Text(f"run {run.id}", style="dim"))
        state = await _on_screen(run, 0, console, typed=first)
    else:
        run = tarry.get(run_id)
        state = await _on_screen(run, 0, console)
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
    if state.waiting_for is WaitingFor.APPROVAL and state.pending_approvals:
        return state.pending_approvals[0]
    return None


def _show_pending(console: Console, pending: PendingApproval) -> None:
    """A call waiting for approval, with its arguments in full, as JSON to edit."""
    line = f"waiting for approval: {pending_line(pending)}"
    console.print(Text(line, style="yellow"), soft_wrap=True)
    try:
        arguments = json.dumps(json.loads(pending.arguments), ensure_ascii=False)
    except ValueError:
        arguments = pending.arguments
    console.print(Text("  arguments: ", style="dim") + Text(arguments))
    console.print(
        Text("y runs it · n rejects it (you may say why) · e edits its arguments", style="dim")
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


@asynccontextmanager
async def _pause_on_ctrl_c(run: RunHandle, say: Callable[[Text], None]) -> AsyncIterator[None]:
    """The first Ctrl-C pauses the run at its next turn boundary and keeps showing it
    until then; a second one interrupts as usual, and the run goes on without us. What
    it does is told with `say`, on a line of its own, not in the middle of a word."""
    loop = asyncio.get_running_loop()
    usual = signal.getsignal(signal.SIGINT) or signal.default_int_handler
    pausing: asyncio.Task[None] | None = None

    def restore() -> None:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, usual)

    async def pause() -> None:
        await run.pause()
        say(Text("pausing at the next turn boundary… (Ctrl-C again leaves)", style="yellow"))

    def on_ctrl_c() -> None:
        nonlocal pausing
        restore()
        pausing = loop.create_task(pause())

    loop.add_signal_handler(signal.SIGINT, on_ctrl_c)
    try:
        yield
    finally:
        restore()
        if pausing is not None:
            # Also when leaving at once: the pause asked for must reach the run.
            await pausing
