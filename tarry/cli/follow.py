"""Following a run live: its messages, then its events as they come, until its next
stop point. `tarry watch` follows a run as it is; `send`, `approve` and the chat
follow what the run does with a reply or a decision they send, and Ctrl-C meanwhile
pauses the run rather than leaving it.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from contextlib import aclosing, asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

from rich.console import Console
from rich.text import Text
from temporalio.service import RPCError

from tarry.cli.live import LiveView
from tarry.contracts import Phase, RunState
from tarry.contracts.events import EventKind, RunEvent
from tarry.core.errors import TarryError

if TYPE_CHECKING:
    from tarry.client import RunHandle

_ANSWER_EVENTS = frozenset(EventKind) - {
    EventKind.MESSAGE,
    EventKind.STOP,
    EventKind.RETRYING,
    EventKind.GUARDRAIL,
}
RETRY_POLL_SECONDS = 1.0
"""How often a followed run's failing calls are looked for: a retry waits a second or more."""


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
    return await on_screen(run, start, console, typed=text, answer=run.send(text))


async def judge(
    run: RunHandle,
    console: Console,
    call_id: str | None = None,
    *,
    approved: bool = True,
    reason: str | None = None,
    arguments: dict[str, Any] | None = None,
    remember: Literal["run"] | None = None,
) -> RunState:
    """Decides on gated calls with the `decide` update (see `decision`) and shows what
    the run does next (the tool results, the answer) as it happens. Ctrl-C meanwhile
    pauses the run."""
    start = (await run.state()).message_count
    answer = run.decide(
        call_id, approved=approved, reason=reason, arguments=arguments, remember=remember
    )
    return await on_screen(run, start, console, answer=answer)


async def on_screen(
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


@asynccontextmanager
async def _pause_on_ctrl_c(run: RunHandle, say: Callable[[Text], None]) -> AsyncIterator[None]:
    """The first Ctrl-C pauses the run at its next turn boundary and keeps showing it
    until then; a second one interrupts as usual, and the run goes on without us. What
    it does is told with `say`, on a line of its own, not in the middle of a word.
    Signals reach only a process's main thread: a command run in another (inside a
    process that goes on, as the tests run most) has no Ctrl-C of its own to take."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
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
