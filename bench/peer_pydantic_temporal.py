"""A peer of `bench.peers`: pydantic-ai's durable agent on Temporal, on the benchmark's own
dev server, written as pydantic-ai's Temporal guide shows (an `Agent` with the
`TemporalDurability` capability, listed in the workflow's `__pydantic_ai_agents__`, a client
with `PydanticAIPlugin`). A chat waits for each message in an update; the agent runs the
exchange with the conversation so far, its model requests and its tool calls as activities.

Needs the `bench` extra (`pydantic-ai-slim[openai,temporal]`): import this module only where
that extra may be missing and say so. The agent is built when this module is imported, as the
guide requires; `serve` points its model and tool at the benchmark's scripted model and
workspaces before any worker runs.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from openai import AsyncOpenAI
    from pydantic_ai import Agent, ModelMessage
    from pydantic_ai.durable_exec.temporal import (
        PydanticAIPlugin,
        PydanticAIWorkflow,
        TemporalDurability,
    )
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from activities.tool_calls import ToolHost
    from bench.peer_chat import Close, OpenChat, Reply, list_files_in
    from bench.rig import Server

_openai = AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="bench")
"""The model's client; `serve` sets its address to the scripted model's."""
_tools: list[ToolHost] = []
"""The worker's tools, which `serve` sets: the tool runs in an activity, in this process."""


async def list_files(path: str) -> str:
    """List a directory of the workspace; directory names end with '/'."""
    return await list_files_in(_tools[0], "pydantic-temporal", path)


agent = Agent(
    OpenAIChatModel("scripted", provider=OpenAIProvider(openai_client=_openai)),
    name="bench_peer",
    instructions="You list files.",
    tools=[list_files],
    capabilities=[TemporalDurability()],
)


@workflow.defn(name="BenchPydanticAiChat")
class PydanticAiChatWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (agent,)

    def __init__(self) -> None:
        self._history: list[ModelMessage] = []
        self._done = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._done and workflow.all_handlers_finished())

    @workflow.update
    async def send(self, text: str) -> str:
        """Runs the agent on `text` after the conversation so far; answers its output."""
        result = await agent.run(text, message_history=self._history)
        self._history = result.all_messages()
        return result.output

    @workflow.signal
    def finish(self) -> None:
        self._done = True


@asynccontextmanager
async def serve(server: Server, base_url: str, tools: ToolHost) -> AsyncIterator[OpenChat]:
    """A worker with pydantic-ai's plugin on `server`; yields a function
    that opens a chat waiting for its first message."""
    _openai.base_url = base_url
    _tools[:] = [tools]
    client = await Client.connect(server.process.address, plugins=[PydanticAIPlugin()])
    queue = f"bench-pydantic-{uuid.uuid4().hex[:8]}"

    async def open_chat() -> tuple[Reply, Close]:
        handle = await client.start_workflow(
            PydanticAiChatWorkflow.run, id=f"pydantic-{uuid.uuid4().hex[:8]}", task_queue=queue
        )

        async def reply(text: str) -> str:
            return await handle.execute_update(PydanticAiChatWorkflow.send, text)

        async def close() -> None:
            await handle.signal(PydanticAiChatWorkflow.finish)
            await handle.result()

        return reply, close

    async with Worker(client, task_queue=queue, workflows=[PydanticAiChatWorkflow]):
        yield open_chat
