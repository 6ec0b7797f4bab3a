"""Tarry as an A2A agent (`/a2a`): the `a2a-sdk`'s own client, not Tarry's code, drives
runs over real HTTP to `tarry serve`'s app, as alice and bob, the API's users. A task is
a run; it streams until it asks its person (`input-required`), takes their answer, and
ends with the run's output as its artifact; a gated call is asked and decided over A2A;
another user's task is "task not found" to every method; the card names the sign-in."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, get_data_parts, get_message_text
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    InvalidParamsError,
    InvalidRequestError,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskNotFoundError,
    TaskState,
)
from google.protobuf.struct_pb2 import Value

from tarry.contracts import Act, Door
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent
from tests.deadline import deadline
from tests.http_api import Api
from tests.test_http_api import WRITE
from tests.test_http_api_people import as_
from tests.test_owners import ALICE, BOB, CAROL, CONFIG, DAVE, alices_run, people_api

AGENTS = """
[agents.writer]
description = "Writes plans to files, each write approved by a person."
tools = ["write_file"]
require_approval = ["write_file"]
mode = "task"
"""
"""An agent definition of the config file: served at `/a2a/writer`."""


@pytest.fixture
async def api(agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Api]:
    """The API with `CONFIG`'s people (alice, bob, ...) and the `writer` agent, on the
    machine of the worker's workspaces."""
    config = tmp_path / "tarry.toml"
    config.write_text(CONFIG + AGENTS)
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    monkeypatch.setenv("TARRY_WORKSPACE_ROOT", str(agent.workspace_root))
    async with people_api(agent) as api:
        yield api


@asynccontextmanager
async def a2a_as(api: Api, token: str, agent: str = "") -> AsyncIterator[Client]:
    """The SDK's client of the agent at `/a2a{agent}`, found from its card, sending `token`."""
    http = httpx.AsyncClient(headers=as_(token), timeout=deadline(60))
    async with http:
        client = await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(
            f"{api.url}/a2a{agent}"
        )
        async with client:
            yield client


def text_message(text: str, task_id: str = "") -> SendMessageRequest:
    message = Message(
        role=Role.ROLE_USER,
        message_id=uuid.uuid4().hex,
        task_id=task_id,
        parts=[Part(text=text)],
    )
    return SendMessageRequest(message=message)


def decision(task_id: str, **data: Any) -> SendMessageRequest:
    """A decision as a data part, sent to wait for the task's next stop point."""
    value = Value()
    value.struct_value.update(data)
    message = Message(
        role=Role.ROLE_USER, message_id=uuid.uuid4().hex, task_id=task_id, parts=[Part(data=value)]
    )
    return SendMessageRequest(message=message, configuration=SendMessageConfiguration())


async def streamed(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    """Every event of a streamed message, until the stream ends at the run's stop point."""
    async with asyncio.timeout(deadline(30)):
        return [event async for event in client.send_message(request)]


def last_state(events: list[StreamResponse]) -> TaskState:
    updates = [e.status_update for e in events if e.HasField("status_update")]
    return updates[-1].status.state


async def waiting_task(api: Api, client: Client) -> str:
    """Alice's task, its run asking her which launch date, then finishing with her answer."""
    api.agent.model.add(say("Which launch date?"), call("finish", {"result": "launch on Friday"}))
    events = await streamed(client, text_message("plan the launch"))
    task_id = events[0].task.id
    api.run(task_id)
    assert last_state(events) == TaskState.TASK_STATE_INPUT_REQUIRED
    return task_id


async def test_a_task_streams_until_its_run_asks_takes_the_answer_and_ends_with_the_output(
    api: Api,
) -> None:
    async with a2a_as(api, ALICE) as alice:
        api.agent.model.add(
            say("Which launch date?"), call("finish", {"result": "launch on Friday"})
        )
        asked = await streamed(alice, text_message("plan the launch"))
        task_id = asked[0].task.id
        api.run(task_id)
        answered = await streamed(alice, text_message("Friday", task_id=task_id))
        task = await alice.get_task(GetTaskRequest(id=task_id))

    question = asked[-1].status_update.status
    assert (question.state, get_message_text(question.message)) == (
        TaskState.TASK_STATE_INPUT_REQUIRED,
        "Which launch date?",
    )
    artifacts = [e.artifact_update.artifact for e in answered if e.HasField("artifact_update")]
    assert [get_artifact_text(a) for a in artifacts] == ["launch on Friday"]
    assert last_state(answered) == TaskState.TASK_STATE_COMPLETED
    assert (task.id, task.context_id, task.status.state) == (
        task_id,
        task_id,
        TaskState.TASK_STATE_COMPLETED,
    )
    assert [get_artifact_text(a) for a in task.artifacts] == ["launch on Friday"]
    assert [get_message_text(m) for m in task.history if m.role == Role.ROLE_USER] == [
        "plan the launch",
        "Friday",
    ]


async def test_a_gated_call_is_asked_over_a2a_with_its_arguments_and_approved_with_a_data_part(
    api: Api,
) -> None:
    api.agent.model.add(call("write_file", WRITE, id="w1"), say("written"))
    async with a2a_as(api, ALICE, "/writer") as alice:
        asked = await streamed(alice, text_message("write the plan"))
        task_id = asked[0].task.id
        api.run(task_id)
        decided = await streamed(alice, decision(task_id, decision="approve", call_id="w1"))
        task = await alice.get_task(GetTaskRequest(id=task_id))

    question = asked[-1].status_update.status
    assert question.state == TaskState.TASK_STATE_INPUT_REQUIRED
    [asking] = get_data_parts(question.message.parts)
    assert asking["calls"] == [{"call_id": "w1", "tool": "write_file", "arguments": WRITE}]
    assert last_state(decided) == TaskState.TASK_STATE_COMPLETED
    output, files = task.artifacts
    assert (output.name, get_artifact_text(output)) == ("output", "written")
    assert [(f.filename, f.media_type, f.raw) for f in files.parts] == [
        ("plan.md", "text/markdown", b"ship it")
    ]
    trail = await api.agent.tarry.audit(run=task_id)
    decisions = [(r.by, r.door) for r in trail.records if r.act is Act.DECISION]
    assert decisions == [("alice", Door.A2A)]


async def test_bob_cannot_get_stream_cancel_or_resubscribe_to_alices_task(api: Api) -> None:
    async with a2a_as(api, ALICE) as alice, a2a_as(api, BOB) as bob:
        task_id = await waiting_task(api, alice)
        with pytest.raises(TaskNotFoundError):
            await bob.get_task(GetTaskRequest(id=task_id))
        with pytest.raises(TaskNotFoundError):
            await streamed(bob, text_message("let me in", task_id=task_id))
        with pytest.raises(TaskNotFoundError):
            await bob.cancel_task(CancelTaskRequest(id=task_id))
        with pytest.raises(TaskNotFoundError):
            async with asyncio.timeout(deadline(30)):
                [event async for event in bob.subscribe(SubscribeToTaskRequest(id=task_id))]
        listed = await bob.list_tasks(ListTasksRequest())
        task = await alice.get_task(GetTaskRequest(id=task_id))

    assert task_id not in [t.id for t in listed.tasks]
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert [get_message_text(m) for m in task.history if m.role == Role.ROLE_USER] == [
        "plan the launch"
    ]


async def test_a_reader_cannot_answer_a_task_and_a_named_approver_decides_its_call(
    api: Api,
) -> None:
    run_id = await alices_run(api)  # shared with carol to read; dave approves call w1
    async with a2a_as(api, CAROL) as carol, a2a_as(api, DAVE) as dave:
        seen = await carol.get_task(GetTaskRequest(id=run_id))
        with pytest.raises(InvalidRequestError, match="may read run"):
            await streamed(carol, text_message("go on", task_id=run_id))
        decided = await streamed(dave, decision(run_id, decision="approve", call_id="w1"))

    assert seen.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert get_message_text(decided[-1].status_update.status.message) == "written"
    trail = await api.agent.tarry.audit(run=run_id)
    assert [(r.act, r.by, r.door) for r in trail.records if r.act is not Act.START] == [
        (Act.DECISION, "dave", Door.A2A)
    ]


async def test_a_task_its_owner_cancels_is_canceled(api: Api) -> None:
    async with a2a_as(api, ALICE) as alice:
        task_id = await waiting_task(api, alice)
        canceled: Task = await alice.cancel_task(CancelTaskRequest(id=task_id))
        listed = await alice.list_tasks(ListTasksRequest())

    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert "stopped by alice" in get_message_text(canceled.status.message)
    assert task_id in [t.id for t in listed.tasks]


async def test_a_list_filtered_by_status_is_refused_rather_than_answered_unfiltered(
    api: Api,
) -> None:
    async with a2a_as(api, ALICE) as alice:
        with pytest.raises(InvalidParamsError, match="context_id only"):
            await alice.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED))


async def test_the_card_names_the_sign_in_the_server_requires_and_is_read_without_it(
    api: Api,
) -> None:
    async with httpx.AsyncClient(base_url=api.url, timeout=deadline(30)) as anyone:
        card = (await anyone.get("/a2a/writer/.well-known/agent-card.json")).json()
        unsigned = await anyone.post("/a2a/writer", json={"jsonrpc": "2.0", "id": 1})
        unknown = await anyone.get("/a2a/nobody/.well-known/agent-card.json")

    assert list(card["securitySchemes"]) == ["bearer"]
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
    assert card["supportedInterfaces"][0]["url"] == f"{api.url}/a2a/writer"
    assert [skill["id"] for skill in card["skills"]] == ["writer", "tool:write_file"]
    assert unsigned.status_code == 401
    assert unknown.status_code == 404


async def test_a_subscriber_follows_its_task_to_the_stop_point_the_answer_leads_to(
    api: Api,
) -> None:
    async with a2a_as(api, ALICE) as alice:
        task_id = await waiting_task(api, alice)
        subscription = alice.subscribe(SubscribeToTaskRequest(id=task_id))
        first = await anext(subscription)
        await streamed(alice, text_message("Friday", task_id=task_id))
        async with asyncio.timeout(deadline(30)):
            rest = [event async for event in subscription]

    assert first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert last_state(rest) == TaskState.TASK_STATE_COMPLETED


async def test_a_message_sent_again_with_its_id_starts_no_second_task_and_enters_once(
    api: Api,
) -> None:
    api.agent.model.add(say("Which launch date?"))
    request = text_message("plan the launch")
    async with a2a_as(api, ALICE) as alice:
        first = await streamed(alice, request)
        again = await streamed(alice, request)
        task = await alice.get_task(GetTaskRequest(id=first[0].task.id))
    api.run(task.id)

    assert again[0].task.id == task.id
    assert last_state(again) == TaskState.TASK_STATE_INPUT_REQUIRED
    assert [get_message_text(m) for m in task.history if m.role == Role.ROLE_USER] == [
        "plan the launch"
    ]
