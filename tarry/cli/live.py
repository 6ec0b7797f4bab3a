"""A run's events as a person reads them while it works: `tarry watch`, `send`,
`approve` and the chat show a run live through `LiveView`, its messages as
`render` draws them everywhere else."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.text import Text

from tarry.cli.render import INTERRUPTED, guardrail_text, message_text, retrying_text
from tarry.contracts import ChatMessage
from tarry.contracts.events import EventKind, RunEvent

CURSOR = "▌"
"""After the arguments of a tool call the model is still writing."""


class LiveView:
    """A run's events as a person reads them (use as `with`): the answer's words as they
    come, flushed, a tool call's arguments growing behind a cursor (on a terminal that can
    redraw a line), then each message of the transcript, a spinner while nothing comes.

    The words of an answer are not shown twice: its message shows only its tool calls.
    Words of an answer the model starts over (a retried or repeated call) stay on screen,
    followed by a line that says so, then the new answer's words.
    """

    def __init__(self, console: Console, *, typed: str | None = None) -> None:
        """`typed`: a message the person typed, already on their screen; not shown again."""
        self._console = console
        self._typed = typed
        self._fancy = console.is_terminal and not console.is_dumb_terminal
        self._status = console.status("thinking…") if self._fancy else None
        self._line_open = False
        self._streamed = ""
        """The words of the current answer on screen."""
        self._call = ""
        """The tool call whose arguments are on the open line: its start, then arguments."""

    def __enter__(self) -> LiveView:
        if self._status is not None:
            self._status.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._end_line()
        if self._status is not None:
            self._status.stop()

    def show(self, event: RunEvent) -> None:
        kind = event.kind
        if kind in (EventKind.ANSWER, EventKind.RESET):
            if self._streamed:
                self._end_line()
                again = "broke off" if kind is EventKind.RESET else "was asked again"
                self._console.print(Text(f"↻ the model {again}; its answer starts over", "dim"))
            self._streamed = ""
        elif kind is EventKind.TEXT and event.text:
            if not self._line_open:
                self._open_line()
                # After a notice (`notice`), the answer goes on from where it was.
                label = "… " if self._streamed else "agent: "
                self._console.print(Text(label, style="bold green"), end="")
            self._console.print(Text(event.text), end="", soft_wrap=True)
            self._streamed += event.text
        elif kind is EventKind.RETRYING and event.retrying is not None:
            self.notice(Text(f"↻ {retrying_text(event.retrying)}", style="yellow"))
        elif kind is EventKind.GUARDRAIL and (hit := event.guardrail) is not None:
            self.notice(Text(f"⛨ {guardrail_text(hit)}", style="yellow"))
        elif kind is EventKind.TOOL_CALL:
            self._end_line()
            if self._fancy:
                self._open_line()
                self._call = f"    → {event.name}("
                self._redraw_call()
        elif kind is EventKind.TOOL_ARGUMENTS and self._call:
            self._call += event.text or ""
            self._redraw_call()
        elif kind is EventKind.MESSAGE and event.message is not None:
            self._message(event.message)
        elif kind is EventKind.STOP or (kind is EventKind.ANSWER_END and self._call):
            # The answer's words stay open for its message, which may mark them interrupted.
            self._end_line()

    def notice(self, text: Text) -> None:
        """A line for the person (Ctrl-C's "pausing…") between the run's events: after
        the words on screen, never in the middle of one."""
        self._end_line()
        self._console.print(text)

    def _message(self, message: ChatMessage) -> None:
        if message.role == "user" and message.content == self._typed:
            return
        content = message.content or ""
        streamed = message.role == "assistant" and bool(self._streamed)
        streamed = streamed and content.startswith(self._streamed)
        # A long answer publishes only its first words (`PUBLISH_LIMIT`): the rest follows
        # them on their line, or, once a tool call closed it, the message is shown whole.
        rest = content[len(self._streamed) :] if streamed else ""
        streamed = streamed and (self._line_open or not rest)
        if streamed and rest:
            self._console.print(Text(rest), end="", soft_wrap=True)
        if streamed and message.interrupted and self._line_open:
            self._console.print(Text(INTERRUPTED, style="yellow"), end="")
        self._end_line()
        self._streamed = ""
        if streamed:
            message = message.model_copy(update={"content": None})
        if message.content or message.tool_calls or message.role == "tool":
            self._console.print(message_text(message))

    def _open_line(self) -> None:
        if self._status is not None:
            self._status.stop()
        self._line_open = True

    def _end_line(self) -> None:
        if not self._line_open:
            return
        if self._call:
            # The call's line is drawn again in full with its message.
            self._console.file.write("\r\x1b[2K")
            self._call = ""
        else:
            self._console.print()
        self._console.file.flush()
        self._line_open = False
        if self._status is not None:
            self._status.start()

    def _redraw_call(self) -> None:
        width = max(20, self._console.width - 1)
        shown = self._call if len(self._call) < width else "…" + self._call[-width + 2 :]
        self._console.file.write("\r\x1b[2K")
        self._console.print(Text(shown + CURSOR, style="magenta"), end="", soft_wrap=True)
