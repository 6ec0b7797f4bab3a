"""How a transcript reads in a terminal: roles told apart, tool calls on one line.

Shared by `tarry show`, `tarry watch`, `tarry chat` and the demo, so a run looks the
same wherever a person meets it. Colour comes from rich, which drops it when the
output is not a terminal or `NO_COLOR` is set.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.text import Text

from tarry.contracts import ChatMessage, ToolCall

_ROLE_STYLE = {"user": ("you", "bold cyan"), "assistant": ("agent", "bold green")}
_SHORT = 80


def shorten(text: str, limit: int = _SHORT) -> str:
    """One line of at most `limit` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def call_line(call: ToolCall) -> str:
    """`read_file(path="notes.md")`: a tool call as a person reads it."""
    try:
        arguments: Any = json.loads(call.function.arguments)
    except ValueError:
        arguments = call.function.arguments
    if isinstance(arguments, dict):
        shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in arguments.items())
    else:
        shown = str(arguments)
    return f"{call.function.name}({shorten(shown, 60)})"


def result_line(content: str) -> Text:
    """A tool result: its data shortened, or its error code and message."""
    try:
        result = json.loads(content)
    except ValueError:
        return Text(shorten(content), style="dim")
    if result.get("ok"):
        data = result.get("data")
        shown = data if isinstance(data, str) else json.dumps(data)
        return Text(shorten(shown), style="dim")
    error = result.get("error") or {}
    return Text(f"{error.get('code')}: {shorten(str(error.get('message')))}", style="yellow")


def message_text(message: ChatMessage) -> Text:
    """One message as rich text; an assistant message with tool calls lists them."""
    if message.role == "tool":
        return Text("    ← ", style="dim") + result_line(message.content or "")
    if message.role == "system":
        return Text(f"system: {shorten(message.content or '')}", style="dim")
    label, style = _ROLE_STYLE[message.role]
    text = Text()
    if message.content:
        text.append(f"{label}: ", style=style).append(message.content)
    for call in message.tool_calls or []:
        if text:
            text.append("\n")
        text.append("    → ", style="dim").append(call_line(call), style="magenta")
    return text


def print_messages(console: Console, messages: list[ChatMessage]) -> None:
    for message in messages:
        console.print(message_text(message))
