"""A run as an operator meets it in the Temporal UI and the `temporal` CLI: findable
by phase, every step summarised, and saying how it ended."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import uuid
from typing import Any

from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client

from tarry.contracts import PHASE_ATTRIBUTE, TURNS_ATTRIBUTE, Phase
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent, temporal_cli
from tests.deadline import TIMEOUT, deadline

WAITING = {Phase.WAITING_USER}


def decoded(payload: dict[str, Any]) -> Any:
    return json.loads(base64.b64decode(payload["data"]))


async def listed(client: Client, query: str) -> set[str]:
    """Run ids `temporal workflow list --query` finds; visibility may lag a moment."""
    out = await temporal_cli(client, "workflow", "list", "--query", query, "--output", "json")
    return {row["execution"]["workflowId"] for row in json.loads(out or "[]")}


async def eventually_listed(client: Client, query: str, run_id: str) -> set[str]:
    async with asyncio.timeout(deadline(15)):
        while run_id not in (found := await listed(client, query)):
            await asyncio.sleep(0.2)
    return found


async def test_the_temporal_cli_finds_runs_waiting_for_a_human(agent: Agent) -> None:
    agent.model.add(say("Which colour?"), say("Done.", finish_reason="stop"))
    waiting = await agent.start("paint the shed")
    await waiting.wait_for(WAITING, TIMEOUT)
    client = agent.tarry.client
    queue = f"TaskQueue = '{agent.tarry.task_queue}'"

    found = await eventually_listed(client, f"TarryPhase = 'WaitingUser' AND {queue}", waiting.id)

    assert found == {waiting.id}
    assert await listed(client, f"TarryPhase = 'Running' AND {queue}") == set()


async def test_history_names_every_step_and_summarises_it(agent: Agent) -> None:
    agent.model.add(call("list_files", {}), call("read_file", {"path": "notes.md"}), say("Hm?"))
    run = await agent.start("read my notes")
    await run.wait_for(WAITING, TIMEOUT)

    out = await temporal_cli(
        agent.tarry.client, "workflow", "show", "--workflow-id", run.id, "--output", "json"
    )

    steps = [step(e) for e in json.loads(out)["events"] if step(e) is not None]
    # The quick read-only tools ran as local activities: a marker each, summarised alike.
    assert steps == [
        ("activity", "tool_catalogue", "the run's tools"),
        ("activity", "call_llm", "turn 1 · default"),
        ("local activity", "list_files", "list_files"),
        ("activity", "call_llm", "turn 2 · default"),
        ("local activity", "read_file", "read_file notes.md"),
        ("activity", "call_llm", "turn 3 · default"),
    ]


def step(event: dict[str, Any]) -> tuple[str, str, str] | None:
    """An activity or local activity event as (kind, activity type, summary)."""
    summary = event.get("userMetadata", {}).get("summary")
    if event["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED":
        name = event["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        return "activity", name, decoded(summary)
    marker = event.get("markerRecordedEventAttributes", {})
    if marker.get("markerName") == "core_local_activity":
        name = decoded(marker["details"]["data"]["payloads"][0])["activity_type"]
        return "local activity", name, decoded(summary)
    return None


async def test_the_run_list_tells_runs_apart_by_the_first_line_of_the_prompt(
    agent: Agent,
) -> None:
    agent.model.add(say("ok"))
    run = await agent.start("Plan the offsite\nwith these constraints: ...")

    out = await temporal_cli(
        agent.tarry.client, "workflow", "describe", "--workflow-id", run.id, "--output", "json"
    )

    # `describe` decodes the summary for the reader, as the UI's run list does.
    assert json.loads(out)["executionConfig"]["userMetadata"]["summary"] == "Plan the offsite"


async def test_an_ended_run_keeps_its_final_phase_and_says_how_it_ended(agent: Agent) -> None:
    agent.model.add(say("What name?"), call("finish", {"result": "Named it Rex."}))
    run = await agent.start("name the dog")
    await run.wait_for(WAITING, TIMEOUT)
    await run.reply("Rex")
    await run.result()
    handle = agent.tarry.client.get_workflow_handle(run.id)

    attributes = (await handle.describe()).typed_search_attributes
    metadata = await handle.query("__temporal_workflow_metadata")

    assert attributes.get(PHASE_ATTRIBUTE) == "Completed"
    assert attributes.get(TURNS_ATTRIBUTE) == 2
    assert metadata.current_details.startswith("**Completed**")
    assert "Named it Rex." in metadata.current_details


async def test_the_worker_refuses_a_namespace_without_the_search_attributes(
    temporal: Client,
) -> None:
    namespace = f"bare-{uuid.uuid4().hex[:6]}"
    await temporal.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "workers",
        env={
            "TEMPORAL_ADDRESS": temporal.service_client.config.target_host,
            "TEMPORAL_NAMESPACE": namespace,
        },
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(worker.communicate(), timeout=deadline(30))

    assert worker.returncode == 1
    last_line = err.decode().strip().splitlines()[-1]
    assert last_line.startswith(f"error: namespace '{namespace}' lacks the search attributes")
    assert "temporal operator search-attribute create" in last_line
