"""`tarry demo`: one human-in-the-loop run, end to end, on the dev stack.

The agent looks through a small workspace of meeting notes, asks the human who should
own an action item, gets the answer through the `user_input` signal, writes a checklist
and finishes. With no model configured the offline scripted model plays the agent (the
tour's conversation, `tarry.cli.tour`, without its approval and budget), and the
human's reply is scripted too, so the demo needs no key, no network and no keyboard.
With a real model the same prompt is sent; the reply is `--reply` or typed at a
prompt, since a real model's question can't be predicted.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console
from rich.text import Text

from tarry.cli import tour
from tarry.cli.devserver import DevStackError
from tarry.cli.devstack import DevStack, dev_stack
from tarry.cli.render import message_text, print_messages, thinking
from tarry.cli.stopping import stop_signals, unless_stopped
from tarry.client import RunHandle
from tarry.config.settings import TarrySettings
from tarry.contracts import ChatMessage, ErrorCode, Phase, RunInput, RunState

SYSTEM = (
    "You are a careful assistant working on the files in a small workspace, through "
    "your tools. When something you need is missing, ask the user one short question "
    "and wait for the answer. Call `finish` once the task is done."
)
PROMPT = (
    "Turn the action items from my meeting notes into a checklist in actions.md, "
    "one line per item with its owner. If an item has no owner, ask me who should take it."
)
SCRIPTED_REPLY = "Priya, please. She wrote the last one."

# What the offline scripted model answers, call by call: the agent's side of the demo,
# the tour's conversation (in the tour, its write waits for an approval).
SCRIPT = tuple(tour.conversation().steps)

NO_REPLY = "the agent asked again and there was no reply to give (--reply, or type one)"
WARNINGS = {
    ErrorCode.LLM_TRUNCATED: " (an answer was cut at the model's length limit: raise max_tokens)",
}
"""What a warning means, for a person watching the demo."""

Replies = Callable[[], Awaitable[str | None]]
"""The human's next reply; None when there is none (the run is then stopped)."""


async def run_demo(
    settings: TarrySettings,
    data_dir: Path,
    *,
    keep: bool,
    reply: str | None,
    model: str = "default",
) -> int:
    """Runs the demo on the dev stack with the model profile `model`; 0 when the run
    completed. Offline, `anthropic` is the scripted model in Anthropic's dialect.

    `reply` answers the agent's first question when a real model is configured (the
    scripted model's question always gets the scripted answer). `keep` leaves the
    stack up after the run until Ctrl-C, to look at the run in the UI.
    """
    console = Console(highlight=False)
    async with stop_signals() as stop:
        try:
            async with dev_stack(settings, data_dir, script=SCRIPT, isolate_on_reuse=True) as stack:
                for line in stack.summary():
                    console.print(line, markup=False, soft_wrap=True)
                demo = _demo_run(stack, console, _replies(stack, reply), model)
                code = await unless_stopped(stop, stack.while_up(demo))
                if code is None:
                    console.print("Interrupted: stopping the stack.")
                    return 130
                if keep:
                    console.print("\nThe stack stays up. Ctrl-C to stop.")
                    await stop.wait()
                return code
        except DevStackError as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            return 1


async def _demo_run(stack: DevStack, console: Console, replies: Replies, model: str) -> int:
    """Starts the run and sees it through; the demo's exit code."""
    run_id = f"demo-{uuid.uuid4().hex[:8]}"
    workspace = stack.workspace_root / run_id
    # The first tool call makes the workspace, a copy of the tour's (`dev_stack`).
    seeded = ", ".join(sorted(path.name for path in tour.WORKSPACE.iterdir()))
    console.print(f"\nWorkspace  {workspace} ({seeded})\n", markup=False, soft_wrap=True)
    run_input = RunInput(prompt=PROMPT, system=SYSTEM, model=model)
    run = await stack.tarry.start(run_input, run_id=run_id)
    printer = _TranscriptPrinter(console)
    state = await printer.follow(run, after=0)
    while state.phase is Phase.WAITING_USER:
        _print_warning(console, state)
        text = await replies()
        if text is None:
            console.print("No reply to give: stopping the run.")
            await run.stop("the demo had no reply to give")
            state = await run.wait_for({Phase.COMPLETED, Phase.FAILED})
            return _print_outcome(console, stack, run_id, state, unfinished=NO_REPLY)
        printer.sent(text)
        await run.reply(text)
        state = await printer.follow(run, after=state.message_count)
    return _print_outcome(console, stack, run_id, state)


class _TranscriptPrinter:
    """Prints a run's new messages as they appear, each once."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._printed = 0
        self._sent: deque[str] = deque()
        """Replies already printed when sent; the transcript's copies are skipped."""

    def sent(self, text: str) -> None:
        self._console.print(message_text(ChatMessage(role="user", content=text)))
        self._sent.append(text)

    async def follow(self, run: RunHandle, *, after: int) -> RunState:
        """Prints messages until the run stops with more than `after` messages.

        `after` guards against the state from before a reply arrived: until the
        workflow takes the signal in, the run still reads as waiting for it.
        """
        with thinking(self._console):
            while True:
                # The state first: a transcript read after it holds every message up to it.
                state = await run.state()
                self._print(await run.transcript(start=self._printed))
                if state.phase is not Phase.RUNNING and state.message_count > after:
                    return state
                await asyncio.sleep(0.1)

    def _print(self, messages: list[ChatMessage]) -> None:
        self._printed += len(messages)
        for message in messages:
            if message.role == "user" and self._sent and message.content == self._sent[0]:
                self._sent.popleft()
                continue
            print_messages(self._console, [message])


def _print_warning(console: Console, state: RunState) -> None:
    """A warning the run stopped with, e.g. an answer cut at the model's length limit."""
    if state.warning is not None:
        why = WARNINGS.get(state.warning, "")
        console.print(Text(f"warning: {state.warning}{why}", style="yellow"), soft_wrap=True)


def _print_outcome(
    console: Console, stack: DevStack, run_id: str, state: RunState, unfinished: str | None = None
) -> int:
    """Prints how the run ended, its last line saying whether the demo did its job;
    the demo's exit code, which agrees: 0 only for a run that completed on its own."""
    if unfinished is None and state.phase is not Phase.COMPLETED:
        unfinished = "the run failed"
    style = "bold red" if unfinished else "bold green"
    console.print()
    console.print(Text(f"{state.phase} ", style=style) + Text(f"run {run_id}"))
    lines = [f"UI         {stack.run_url(run_id)}", f"Files      {stack.workspace_root / run_id}"]
    if state.error is not None:
        lines.insert(0, f"Error      {state.error.code}: {state.error.message}")
    if state.warning is not None:
        lines.insert(0, f"Warning    {state.warning}{WARNINGS.get(state.warning, '')}")
    for line in lines:
        console.print(line, markup=False, soft_wrap=True)
    if unfinished:
        console.print(Text(f"Demo not finished: {unfinished}.", style=style), soft_wrap=True)
        return 1
    console.print(Text("Demo finished.", style=style))
    return 0


def _replies(stack: DevStack, reply: str | None) -> Replies:
    """The scripted reply for the scripted model; else `reply`, then the keyboard."""
    queued = deque([SCRIPTED_REPLY] if stack.scripted is not None else [reply] if reply else [])
    interactive = stack.scripted is None

    async def next_reply() -> str | None:
        if queued:
            return queued.popleft()
        while interactive and (line := await _read_line("your reply> ")) is not None:
            if line.strip():
                return line
        return None

    return next_reply


async def _read_line(prompt: str) -> str | None:
    """A line from stdin without blocking the event loop; None at end of input.

    The read runs on a daemon thread, not the loop's executor: a person who presses
    Ctrl-C instead of answering leaves `input()` blocked, and the executor's shutdown
    would wait for that line forever. The process leaves through `exit_now`, which does
    not wait for daemon threads.
    """
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str | None] = loop.create_future()

    def settle(value: str | None) -> None:
        if not answer.done():
            answer.set_result(value)

    def read() -> None:
        try:
            line: str | None = input(prompt)
        except EOFError:
            line = None
        # The loop may have closed while we waited: then nobody wants the line.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, line)

    threading.Thread(target=read, name="tarry-demo-input", daemon=True).start()
    return await answer
