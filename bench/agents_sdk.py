"""(d) of the turn-overhead benchmark: the SDK's own agent integration.

`temporalio.contrib.openai_agents` forwards to the `temporalio-openai-agents` package
(`temporalio.openai_agents`), installed with the `bench` extra: import this module only
where that extra may be missing and say so. The agent calls the
same scripted model server over chat completions, and its one tool is an activity
that runs Tarry's real `list_files` tool.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta

from agents.models.openai_provider import OpenAIProvider
from openai import AsyncOpenAI
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner, set_tracing_disabled
    from temporalio.openai_agents.workflow import activity_as_tool

    from activities.tool_calls import ToolHost
    from tarry.contracts import ToolInvocation

_TIMEOUT = timedelta(seconds=30)


class AgentTools:
    def __init__(self, tools: ToolHost) -> None:
        self._tools = tools

    @activity.defn(name="list_files")
    async def list_files(self, path: str) -> str:
        """List a directory of the workspace; directory names end with '/'."""
        invocation = ToolInvocation(
            run_id=activity.info().workflow_id,
            call_id=activity.info().activity_id,
            arguments=f'{{"path": "{path}"}}',
        )
        result = await self._tools.invoke("list_files", invocation)
        return result.to_content()


@workflow.defn(name="BenchAgentsSdk")
class AgentsSdkWorkflow:
    @workflow.run
    async def run(self, prompt: str, max_turns: int) -> str:
        agent: Agent[None] = Agent(
            name="bench",
            instructions="You list files.",
            model="scripted",
            tools=[activity_as_tool(AgentTools.list_files, start_to_close_timeout=_TIMEOUT)],
        )
        result = await Runner.run(agent, prompt, max_turns=max_turns)
        return str(result.final_output)


@asynccontextmanager
async def agents_worker(
    address: str, base_url: str, tools: ToolHost
) -> AsyncIterator[Callable[[str, int], Awaitable[str]]]:
    """A worker with the integration's plugin; yields a function that runs one
    conversation (prompt, max turns) to its end."""
    # Traces would be exported to OpenAI's servers, which are not reachable here.
    set_tracing_disabled(True)
    logging.getLogger("openai.agents").setLevel(logging.ERROR)
    provider = OpenAIProvider(
        openai_client=AsyncOpenAI(base_url=base_url, api_key="bench"), use_responses=False
    )
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=_TIMEOUT),
        model_provider=provider,
    )
    client = await Client.connect(address, plugins=[plugin])
    queue = f"bench-agents-{uuid.uuid4().hex[:8]}"

    async def converse(prompt: str, max_turns: int) -> str:
        return await client.execute_workflow(
            AgentsSdkWorkflow.run,
            args=[prompt, max_turns],
            id=f"agents-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )

    worker = Worker(
        client,
        task_queue=queue,
        workflows=[AgentsSdkWorkflow],
        activities=[AgentTools(tools).list_files],
    )
    async with worker:
        yield converse
