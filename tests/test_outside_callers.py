"""The public contract as outside callers meet it: the real `temporal` CLI, plain JSON,
and the worker as its own process configured from the environment."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from pathlib import Path

from temporalio.client import Client

from tarry.client import Tarry
from tarry.contracts import Phase
from tarry.testing.scripted_model import ScriptedModel, say
from tests.conftest import Agent, temporal_cli, worker_process
from tests.deadline import TIMEOUT, deadline

WAITING = {Phase.WAITING_USER}


async def test_a_run_started_and_answered_with_plain_json_from_the_temporal_cli(
    agent: Agent,
) -> None:
    agent.model.add(say("Hello! Your name?"), say("Nice to meet you, Ada."))
    run_id = f"run-cli-{uuid.uuid4().hex[:6]}"
    client = agent.tarry.client
    await temporal_cli(
        client,
        "workflow", "start", "--type", "AgentRun", "--task-queue", agent.tarry.task_queue,
        "--workflow-id", run_id, "--input", '{"prompt": "hi"}',
    )  # fmt: skip
    run = agent.tarry.get(run_id)
    agent.runs.append(run)
    await run.wait_for(WAITING, TIMEOUT)

    await temporal_cli(
        client,
        "workflow", "signal", "--workflow-id", run_id, "--name", "user_input",
        "--input", '{"text": "Ada"}',
    )  # fmt: skip

    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.turn == 2
    queried = await temporal_cli(
        client, "workflow", "query", "--workflow-id", run_id, "--name", "transcript",
        "--output", "json",
    )  # fmt: skip
    messages = json.loads(queried)["queryResult"][0]["messages"]
    assert [m["content"] for m in messages] == [
        "hi",
        "Hello! Your name?",
        "Ada",
        "Nice to meet you, Ada.",
    ]


async def test_a_signal_of_the_wrong_shape_is_dropped_and_the_run_goes_on(agent: Agent) -> None:
    agent.model.add(say("Your name?"), say("Hi, Bo."))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    await temporal_cli(
        agent.tarry.client,
        "workflow", "signal", "--workflow-id", run.id, "--name", "user_input", "--input", '"Bo"',
    )  # fmt: skip
    await run.reply("Bo")

    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.turn == 2
    assert [m.content for m in await run.transcript() if m.role == "user"] == ["hello", "Bo"]
    events = await agent.event_types(run)
    assert events.count("WORKFLOW_EXECUTION_SIGNALED") == 1  # the client's reply is an update
    assert await agent.updates(run) == ["reply"]
    assert "WORKFLOW_TASK_FAILED" not in events


async def test_the_worker_process_serves_runs_and_stops_cleanly_on_sigterm(
    temporal: Client, tmp_path: Path, payload_store: Path
) -> None:
    task_queue = f"test-{uuid.uuid4().hex[:8]}"
    async with ScriptedModel([say("Hello from the worker process.")]) as model:
        worker = await worker_process(temporal, task_queue, model, tmp_path, payload_store)
        assert worker.stderr is not None

        run = await Tarry(temporal, task_queue).start("hello")
        state = await run.wait_for(WAITING, TIMEOUT)
        worker.send_signal(signal.SIGTERM)
        logs = await asyncio.wait_for(worker.stderr.read(), timeout=deadline(30))
        code = await worker.wait()

    assert state.last_assistant_text == "Hello from the worker process."
    assert model.requests[0].body["model"] == "scripted"
    assert code == 0, logs.decode()
    assert b"shutting down" in logs
