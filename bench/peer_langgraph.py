"""Peers of `bench.peers`: LangGraph with a checkpointer, a chat as its docs show human
input: a graph whose `human` node calls `interrupt()` for the next message, a `model` node
that asks the model (the OpenAI client, on the benchmark's scripted model) and a `tools` node
that runs its calls, each thread's state saved by the checkpointer after every step
(`durability="async"`, the default) or only where the graph stops (`"exit"`, the fastest its
docs name). A reply resumes the thread with `Command(resume=...)` and returns at the next
interrupt.

Checkpointers: SQLite (`langgraph-checkpoint-sqlite`, a file of its own) and Postgres
(`langgraph-checkpoint-postgres`, on `bench.pglite`'s server). Needs the `bench` extra:
import this module only where it may be missing and say so.
"""

from __future__ import annotations

import json
import operator
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.types import Command, Durability, interrupt
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from psycopg import AsyncConnection

from activities.tool_calls import ToolHost
from bench.peer_chat import Close, OpenChat, Reply, Serve, list_files_in
from bench.rig import Server

TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "List a directory of the workspace; directory names end with '/'.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


class ChatState(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]


def _graph(openai: AsyncOpenAI, tools: ToolHost) -> StateGraph[ChatState]:
    def human(state: ChatState) -> dict[str, Any]:
        text = interrupt("your message")
        return {"messages": [{"role": "user", "content": text}]}

    async def model(state: ChatState) -> dict[str, Any]:
        answer = await openai.chat.completions.create(
            model="scripted",
            messages=cast("list[ChatCompletionMessageParam]", state["messages"]),
            tools=TOOLS,
        )
        return {"messages": [answer.choices[0].message.model_dump(exclude_none=True)]}

    async def run_tools(state: ChatState) -> dict[str, Any]:
        results = []
        for c in state["messages"][-1]["tool_calls"]:
            path = json.loads(c["function"]["arguments"])["path"]
            content = await list_files_in(tools, "langgraph", path)
            results.append({"role": "tool", "tool_call_id": c["id"], "content": content})
        return {"messages": results}

    def after_model(state: ChatState) -> Literal["tools", "human"]:
        return "tools" if state["messages"][-1].get("tool_calls") else "human"

    graph = StateGraph(ChatState)
    graph.add_node("human", human)
    graph.add_node("model", model)
    graph.add_node("tools", run_tools)
    graph.add_edge(START, "human")
    graph.add_edge("human", "model")
    graph.add_conditional_edges("model", after_model)
    graph.add_edge("tools", "model")
    return graph


@asynccontextmanager
async def _serve(
    saver: Callable[[], AbstractAsyncContextManager[BaseCheckpointSaver[Any]]],
    durability: Durability,
    _server: Server,
    base_url: str,
    tools: ToolHost,
) -> AsyncIterator[OpenChat]:
    openai = AsyncOpenAI(base_url=base_url, api_key="bench")
    async with saver() as checkpointer:
        app = _graph(openai, tools).compile(checkpointer=checkpointer)

        async def open_chat() -> tuple[Reply, Close]:
            config: RunnableConfig = {"configurable": {"thread_id": uuid.uuid4().hex}}
            await app.ainvoke(ChatState(messages=[]), config, durability=durability)

            async def reply(text: str) -> object:
                return await app.ainvoke(Command(resume=text), config, durability=durability)

            async def close() -> None:
                pass

            return reply, close

        yield open_chat
    await openai.close()


@asynccontextmanager
async def _sqlite(path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        yield saver


@asynccontextmanager
async def _postgres(url: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    async with AsyncPostgresSaver.from_conn_string(url) as saver:
        # PGlite serves every connection from its one backend, which keeps the statements an
        # earlier connection prepared; psycopg names each connection's alike (`_pg3_0`), so a
        # later round's collided (DuplicatePreparedStatement). Reset the session first, as a
        # pooler does between its clients.
        assert isinstance(saver.conn, AsyncConnection)  # from_conn_string's own
        await saver.conn.execute("DISCARD ALL", prepare=False)
        await saver.setup()
        yield saver


def sqlite(path: Path, durability: Durability = "async") -> Serve:
    """LangGraph checkpointing to the SQLite file `path`."""
    return partial(_serve, partial(_sqlite, path), durability)


def postgres(url: str, durability: Durability = "async") -> Serve:
    """LangGraph checkpointing to the Postgres server at `url`."""
    return partial(_serve, partial(_postgres, url), durability)
