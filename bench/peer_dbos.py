"""A peer of `bench.peers`: pydantic-ai's durable agent on DBOS, as pydantic-ai's DBOS guide
shows (an `Agent` with the `DBOSDurability` capability, which `DBOSAgent` wraps in earlier
releases, run inside the app's own `@DBOS.workflow`, its I/O tool a `@DBOS.step`). DBOS keeps
its journal in a SQLite file (its default system database) or in Postgres (`bench.pglite`'s).

A chat is one workflow: it waits for each message with `DBOS.recv_async` (the DBOS way to wait
for a person), runs the agent with the conversation so far and publishes the answer as an
event the reply waits for (`DBOS.get_event_async`). DBOS is one instance per process:
`serve` launches it, and destroys it when the block ends. Needs the `bench` extra: import
this module only where it may be missing and say so.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from dbos import DBOS, DBOSConfig
from openai import AsyncOpenAI
from pydantic_ai import Agent, ModelMessage
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from activities.tool_calls import ToolHost
from bench.peer_chat import Close, OpenChat, Reply, Serve, list_files_in
from bench.rig import Server

_openai = AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="bench")
"""The model's client; `serve` sets its address to the scripted model's."""
_tools: list[ToolHost] = []
"""The tools, which `serve` sets."""

MESSAGE, STOP = "message", "\x00stop"
WAIT_SECONDS = 7 * 24 * 3600.0
"""How long a chat waits for its next message (`recv`'s timeout; its default is 60 s)."""


@DBOS.step()
async def list_files(path: str) -> str:
    """List a directory of the workspace; directory names end with '/'."""
    return await list_files_in(_tools[0], "dbos", path)


agent = Agent(
    OpenAIChatModel("scripted", provider=OpenAIProvider(openai_client=_openai)),
    name="bench_peer_dbos",
    instructions="You list files.",
    tools=[list_files],
    capabilities=[DBOSDurability()],
)


def _answer(n: int) -> str:
    return f"answer-{n}"


@DBOS.workflow()
async def chat() -> None:
    """Answers each message sent to it, the conversation so far kept in the workflow."""
    history: list[ModelMessage] = []
    n = 0
    while (text := await DBOS.recv_async(MESSAGE, timeout_seconds=WAIT_SECONDS)) != STOP:
        result = await agent.run(text, message_history=history)
        history = result.all_messages()
        n += 1
        await DBOS.set_event_async(_answer(n), result.output)


@asynccontextmanager
async def _serve(
    database_url: str, polling: float | None, _server: Server, base_url: str, tools: ToolHost
) -> AsyncIterator[OpenChat]:
    _openai.base_url = base_url
    _tools[:] = [tools]
    config: DBOSConfig = {
        "name": "bench-peer",
        "system_database_url": database_url,
        "log_level": "WARNING",
    }
    if polling is not None:
        config["notification_listener_polling_interval_sec"] = polling
    DBOS(config=config)
    DBOS.launch()
    try:

        async def open_chat() -> tuple[Reply, Close]:
            handle = await DBOS.start_workflow_async(chat)
            sent = 0

            async def reply(text: str) -> Any:
                nonlocal sent
                sent += 1
                await DBOS.send_async(handle.workflow_id, text, MESSAGE)
                return await DBOS.get_event_async(
                    handle.workflow_id, _answer(sent), timeout_seconds=60
                )

            async def close() -> None:
                await DBOS.send_async(handle.workflow_id, STOP, MESSAGE)
                await handle.get_result()

            return reply, close

        yield open_chat
    finally:
        DBOS.destroy(destroy_registry=False)
        # DBOS's launch made its own executor this loop's default one, and destroy shut it
        # down: every later `asyncio.to_thread` here (the next round's Temporal workers
        # storing payloads) would fail with "cannot schedule new futures after shutdown".
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor())


def on(database_url: str, polling: float | None = None) -> Serve:
    """pydantic-ai on DBOS, its system database at `database_url` (`sqlite:///...` or
    `postgresql://...`), polling for messages every `polling` seconds (None: DBOS's 1 s)."""
    return partial(_serve, database_url, polling)
