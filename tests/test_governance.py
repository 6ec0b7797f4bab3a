"""Governance that uses Temporal: a model profile with its own task queue has its calls
scheduled there, so the workers serving that queue (their number, their concurrency and
the queue's rate limit) govern that provider."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from temporalio.client import Client
from temporalio.worker import Worker

from tarry.config.settings import ModelProfile, TarrySettings
from tarry.contracts import Phase
from tarry.testing.scripted_model import ScriptedModel, call, say
from tests.conftest import CANARY_KEY, Agent
from tests.deadline import TIMEOUT
from tests.faults import local_activities
from workers.plugin import TarryPlugin


async def scheduled_queues(agent: Agent, run_id: str) -> list[tuple[str, str]]:
    """(activity type, task queue) of every activity the run scheduled, in order."""
    history = await agent.tarry.client.get_workflow_handle(run_id).fetch_history()
    return [
        (a.activity_type.name, a.task_queue.name)
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        for a in [e.activity_task_scheduled_event_attributes]
    ]


async def test_a_profiles_model_calls_go_to_its_own_task_queue(
    agent_factory: Any, temporal: Client, tmp_path: Path
) -> None:
    models = f"models-{uuid.uuid4().hex[:8]}"
    agent: Agent = await agent_factory(task_queue=models)
    profile = ModelProfile(
        base_url=agent.model.base_url,
        model="scripted",
        api_key=SecretStr(CANARY_KEY),
        task_queue=models,
    )
    # The worker of the profile's queue: the one an operator rate-limits.
    settings = TarrySettings.model_construct(
        tarry_storage_dir=tmp_path / "payloads",
        tarry_workspace_root=tmp_path / "workspaces",
        tarry_task_queue_activities_per_second=20.0,
    )
    plugin = TarryPlugin(settings, tools=[], profiles={"default": profile})
    agent.model.add(call("list_files"), say("Nothing here."))
    try:
        async with Worker(temporal, task_queue=models, plugins=[plugin]):
            run = await agent.start("look around")
            state = await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    finally:
        await plugin.aclose()

    assert state.last_assistant_text == "Nothing here."
    own = agent.tarry.task_queue
    assert await scheduled_queues(agent, run.id) == [
        ("tool_catalogue", own),
        ("call_llm", models),
        ("call_llm", models),
    ]
    # A quick tool runs inside the run's own workflow task, on its own worker.
    assert await local_activities(temporal, run.id) == ["list_files"]


async def test_switching_a_run_to_a_profile_with_its_own_queue_moves_its_calls_there(
    agent_factory: Any, temporal: Client, tmp_path: Path
) -> None:
    models = f"models-{uuid.uuid4().hex[:8]}"
    async with ScriptedModel() as remote_model:
        remote = ModelProfile(
            base_url=remote_model.base_url,
            model="remote",
            api_key=SecretStr(CANARY_KEY),
            task_queue=models,
        )
        agent: Agent = await agent_factory(more_profiles={"remote": remote})
        settings = TarrySettings.model_construct(
            tarry_storage_dir=tmp_path / "payloads", tarry_workspace_root=tmp_path / "workspaces"
        )
        plugin = TarryPlugin(settings, tools=[], profiles={"remote": remote})
        agent.model.add(say("Hello from the run's own queue."))
        remote_model.add(say("Hello from the remote queue."))
        try:
            async with Worker(temporal, task_queue=models, plugins=[plugin]):
                run = await agent.start("hello")
                await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
                await run.set_model("remote")
                state = await run.send("and now?")
        finally:
            await plugin.aclose()

    assert state.last_assistant_text == "Hello from the remote queue."
    own = agent.tarry.task_queue
    calls = [queue for name, queue in await scheduled_queues(agent, run.id) if name == "call_llm"]
    assert calls == [own, models]
