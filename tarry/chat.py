"""Following a run live, and `tarry chat`: a conversation with a run in the terminal.

A run lives in Temporal, not in this process: the chat only shows what the run does,
by polling its transcript while it works, and sends what the person types. So leaving
the chat leaves the run waiting, and `tarry chat RUN` later picks it up where it was.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from rich.console import Console
from rich.text import Text

from tarry.client import RunHandle, Tarry, TarryError
from tarry.contracts import ChatMessage, ErrorCode, Phase, RunState
from tarry.render import message_text, print_stop_line, state_text, thinking

POLL_SECONDS = 0.1
"""How often a working run's transcript is read: often enough to feel live, and a
query costs the server no history."""
PROMPT = "[bold cyan]you>[/] "
HELP = (
    "/status shows the run · /pause · /stop [reason] ends it · /quit or Ctrl-D leaves it waiting"
    " · Ctrl-C while the agent works pauses it"
)


async def follow(
    run: RunHandle,
    start: int,
    show: Callable[[ChatMessage], None],
    answer: Awaitable[RunState] | None = None,
) -> RunState:
    """Shows the run's messages from index `start` as they appear, until its next stop
    point: until `answer` (a `send` in flight) arrives or, without one, until the run
    is no longer running. Returns the state at that stop point."""
    sending = asyncio.ensure_future(answer) if answer is not None else None
    try:
        n = start
        while True:
            # Asked before reading, so the last read holds every message of the stop point.
            reached = await _stop_point(run, sending)
            messages = await run.transcript(start=n)
            for message in messages:
                show(message)
            n += len(messages)
            if reached is not None:
                return reached
            if sending is None:
                await asyncio.sleep(POLL_SECONDS)
            else:
                await asyncio.wait({sending}, timeout=POLL_SECONDS)
    finally:
        if sending is not None and not sending.done():
            # Left early (a second Ctrl-C): end the send here rather than leave a task
            # behind that fails as the loop closes. The run goes on regardless.
            sending.cancel()
            await asyncio.wait({sending})
            if not sending.cancelled():
                sending.exception()


async def _stop_point(run: RunHandle, sending: asyncio.Future[RunState] | None) -> RunState | None:
    """The run's state if it has reached its stop point, else None. The queries go one at
    a time: the server can hold back a query that arrives beside another for a second."""
    if sending is not None:
        return sending.result() if sending.done() else None
    state = await run.state()
    return None if state.phase is Phase.RUNNING else state


async def exchange(run: RunHandle, text: str, console: Console) -> RunState:
    """Sends `text` with the `send` update and shows what the run does with it (tool
    calls, results, the answer) as it happens. Ctrl-C meanwhile pauses the run."""
    start = (await run.state()).message_count
    return await _on_screen(run, start, console, typed=text, answer=run.send(text))


async def _on_screen(
    run: RunHandle,
    start: int,
    console: Console,
    *,
    typed: str | None = None,
    answer: Awaitable[RunState] | None = None,
) -> RunState:
    """`follow` for a person: a spinner while the run works, Ctrl-C pauses it, and the
    message they `typed` is not shown again, as it is already on their screen."""

    def show(message: ChatMessage) -> None:
        if not (message.role == "user" and message.content == typed):
            console.print(message_text(message))

    async with _pause_on_ctrl_c(run, console):
        with thinking(console):
            return await follow(run, start, show, answer)


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
    while True:
        line = _ask(console)
        if line is None or line == "/quit":
            console.print(
                Text(f"left {run.id} waiting; `tarry chat {run.id}` picks it up", style="dim")
            )
            return
        try:
            if line.startswith("/"):
                state = await _command(run, line, console)
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
    """Says what a person should know at a stop point; True once the run has ended."""
    print_stop_line(console, state)
    return state.phase.ended


async def _command(run: RunHandle, line: str, console: Console) -> RunState:
    name, _, argument = line.partition(" ")
    if name == "/stop":
        await run.stop(argument.strip() or None)
        return await run.wait_for({Phase.COMPLETED, Phase.FAILED})
    if name == "/pause":
        # At the prompt the run normally waits already; this is for one that another
        # client set running meanwhile.
        await run.pause()
        console.print(Text("the run stops at its next turn boundary", style="dim"))
    state = await run.state()
    if name == "/status":
        console.print(state_text(run.id, state))
    elif name != "/pause":
        console.print(Text(f"unknown command {name}; {HELP}", style="yellow"))
    return state


def _ask(console: Console, hint: str | None = None) -> str | None:
    """The next non-empty line the person types; None when they leave (Ctrl-D, Ctrl-C)."""
    if hint:
        console.print(Text(hint, style="dim"))
    while True:
        try:
            line = console.input(PROMPT).strip()
        except (EOFError, KeyboardInterrupt):
            console.print()
            return None
        if line:
            return line


@asynccontextmanager
async def _pause_on_ctrl_c(run: RunHandle, console: Console) -> AsyncIterator[None]:
    """The first Ctrl-C pauses the run at its next turn boundary and keeps showing it
    until then; a second one interrupts as usual, and the run goes on without us."""
    loop = asyncio.get_running_loop()
    usual = signal.getsignal(signal.SIGINT) or signal.default_int_handler
    pausing: asyncio.Task[None] | None = None

    def restore() -> None:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, usual)

    async def pause() -> None:
        await run.pause()
        console.print(
            Text("pausing at the next turn boundary… (Ctrl-C again leaves)", style="yellow")
        )

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
