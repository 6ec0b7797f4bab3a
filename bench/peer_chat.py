"""What the peers of `bench.peers` share: how a chat is opened, replied to and closed, the
exchange every one of them plays, and the real tool they all call."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

from activities.tool_calls import ToolHost
from tarry.contracts import ToolInvocation
from tarry.testing.scripted_model import ScriptStep, call, say

if TYPE_CHECKING:
    from bench.rig import Server

Reply = Callable[[str], Awaitable[object]]
"""Sends a person's message to a waiting chat and returns once the chat waits again."""
Close = Callable[[], Awaitable[None]]
"""Ends a chat."""
OpenChat = Callable[[], Awaitable[tuple[Reply, Close]]]
"""Opens a chat, waiting for its first message."""
Serve = Callable[["Server", str, ToolHost], AbstractAsyncContextManager[OpenChat]]
"""A way's worker: (its dev server, the model's base URL, the tools) -> its chats."""

OPENING = "List the workspace, please."
"""Every chat's first message: the scripted model plays each chat by it (`exchanges`)."""


def exchanges(n: int) -> list[ScriptStep]:
    """The model's answers to `n` messages of a chat: per message, a `list_files` call,
    then a text answer once the tool's result is back (model -> tool -> model)."""
    return [step for _ in range(n) for step in (call("list_files", {"path": "."}), say("done"))]


async def list_files_in(tools: ToolHost, run_id: str, path: str) -> str:
    """Tarry's real `list_files` tool, as the floor and Tarry run it."""
    invocation = ToolInvocation(run_id=run_id, call_id="peer", arguments=json.dumps({"path": path}))
    return (await tools.invoke("list_files", invocation)).to_content()


__all__ = ["OPENING", "Close", "OpenChat", "Reply", "Serve", "exchanges", "list_files_in"]
