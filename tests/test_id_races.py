"""A reply reaches a run only if its sender may change that run, checked on the run that
takes it: not on the id, while no run has it yet.

Bob sends a first message under an id no run has, and alice's run takes the id a moment
later (her schedule fires, her integration opens the thread). A check of bob's right
before his delivery would find no run, and let him through into hers. Here a proxy on
the wire (`tests/grpc_faults.py`) holds bob's delivery until alice's run has started,
so the race is the same every time: at each door that starts a run on a first message
(`?start=true`, AG-UI), bob's words never enter her run, and he is shown nothing of
it. MCP starts no run on a first message: there, bob's start under her id is refused as
taken, and his reply is checked against the run that has the id when it is asked. Ids
anyone can tell in advance (a schedule's, a sub-agent's, an Idempotency-Key's) are
nobody's to take first (`tests/test_owners.py` has the key's)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from mcp import Client as McpClient
from temporalio.client import Client

from tarry.api import ApiServer, create_app
from tarry.client import Tarry
from tarry.config.settings import load_settings
from tarry.contracts import ErrorCode, Phase, RunInput
from tarry.core.identities import Caller
from tarry.testing.scripted_model import say
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.grpc_faults import (
    DESCRIBE_WORKFLOW_EXECUTION,
    EXECUTE_MULTI_OPERATION,
    START_WORKFLOW_EXECUTION,
    HoldingProxy,
    holding_proxy,
)
from tests.http_api import api_client
from tests.test_http_api import error_of
from tests.test_http_api_people import as_
from tests.test_oidc import tarry_mcp_http
from tests.test_owners import ALICE, BOB, CONFIG, people_api, with_people
from tests.test_owners_doors import code_of, mcp_as

SECRET = "alice's private answer 7f3c"
"""What alice's run answers: bob must never see it."""


@dataclass
class Race:
    """A door's Temporal calls through `proxy`; alice's run starts beside it."""

    proxy: HoldingProxy
    agent: Agent

    async def alice_takes(self, run_id: str, *then: str) -> None:
        """Once the raced delivery is held on the wire, alice's run takes `run_id` and
        answers, the model's answers `then` queued after; then the delivery goes on."""
        await self.proxy.held.wait()
        self.agent.model.add(say(SECRET), *(say(text) for text in then))
        run = await self.agent.tarry.acting_as(Caller("alice")).start(
            RunInput(prompt="my plans", timeouts=self.agent.timeouts), run_id=run_id
        )
        self.agent.runs.append(run)
        await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
        self.proxy.released.set()

    async def alice_s_transcript(self, run_id: str) -> str:
        messages = await self.agent.tarry.get(run_id).transcript()
        return json.dumps([m.model_dump(mode="json") for m in messages])


@asynccontextmanager
async def held(agent: Agent, method: str) -> AsyncIterator[Race]:
    """A proxy to `agent`'s server holding its first call of `method`."""
    target = agent.tarry.client.service_client.config.target_host
    async with holding_proxy(target, method) as proxy:
        yield Race(proxy, agent)


@asynccontextmanager
async def race(agent: Agent, method: str) -> AsyncIterator[tuple[Race, httpx.AsyncClient]]:
    """The people's API (`tests.test_owners`), its first call of `method` held."""
    client = agent.tarry.client
    async with held(agent, method) as r:
        through = await Client.connect(
            r.proxy.address, namespace=client.namespace, data_converter=client.data_converter
        )
        tarry = Tarry(through, agent.tarry.task_queue)
        async with (
            ApiServer(create_app(tarry, load_settings()), "127.0.0.1", 0) as server,
            api_client(server.url, timeout=deadline(60)) as http,
        ):
            yield r, http


@asynccontextmanager
async def mcp_race(
    agent: Agent, method: str, payload_store: Path, tmp_path: Path
) -> AsyncIterator[tuple[Race, McpClient]]:
    """`tarry mcp --http` with the people's config, its first call of `method` held;
    a client of it signed in as bob."""
    async with (
        held(agent, method) as r,
        tarry_mcp_http(
            agent, payload_store, tmp_path, CONFIG, TEMPORAL_ADDRESS=r.proxy.address
        ) as url,
        mcp_as(url, BOB) as client,
    ):
        yield r, client


@pytest.fixture(autouse=True)
def people(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_people(tmp_path, monkeypatch)


def free_id() -> str:
    return f"thread-{uuid.uuid4().hex[:8]}"


async def test_a_first_message_raced_by_another_person_s_start_never_enters_their_run(
    agent: Agent,
) -> None:
    run_id = free_id()
    async with race(agent, EXECUTE_MULTI_OPERATION) as (r, http), asyncio.TaskGroup() as group:
        group.create_task(r.alice_takes(run_id))
        response = await http.post(
            f"/v1/runs/{run_id}/messages",
            params={"start": True, "wait": True},
            json={"text": "bob was here"},
            headers=as_(BOB),
        )

    assert error_of(response) == (404, ErrorCode.RUN_NOT_FOUND)
    assert SECRET not in response.text
    transcript = await r.alice_s_transcript(run_id)
    assert SECRET in transcript
    assert "bob was here" not in transcript


async def test_a_first_message_raced_by_the_sender_s_own_start_enters_their_run(
    agent: Agent,
) -> None:
    run_id = free_id()
    async with race(agent, EXECUTE_MULTI_OPERATION) as (r, http), asyncio.TaskGroup() as group:
        group.create_task(r.alice_takes(run_id, "noted"))
        response = await http.post(
            f"/v1/runs/{run_id}/messages",
            params={"start": True, "wait": True},
            json={"text": "and one more thing"},
            headers=as_(ALICE),
        )

    assert response.status_code == 200, response.text
    assert response.json()["last_assistant_text"] == "noted"
    transcript = await r.alice_s_transcript(run_id)
    assert transcript.count("and one more thing") == 1


async def test_an_ag_ui_thread_raced_by_another_person_s_start_streams_nothing_of_their_run(
    agent: Agent,
) -> None:
    thread = free_id()
    body = {
        "threadId": thread,
        "runId": "agui-1",
        "state": {},
        "messages": [{"id": "m1", "role": "user", "content": "bob was here"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    async with race(agent, START_WORKFLOW_EXECUTION) as (r, http), asyncio.TaskGroup() as group:
        group.create_task(r.alice_takes(thread))
        response = await http.post("/v1/agui", json=body, headers=as_(BOB))

    assert response.status_code == 200  # the stream had begun: its error is an event
    events = [json.loads(line[5:]) for line in response.text.splitlines() if line[:5] == "data:"]
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == ErrorCode.RUN_NOT_FOUND
    assert SECRET not in response.text
    assert "bob was here" not in await r.alice_s_transcript(thread)


async def test_an_mcp_start_raced_by_another_person_s_start_is_refused_as_taken(
    agent: Agent, payload_store: Path, tmp_path: Path
) -> None:
    run_id = free_id()
    async with (
        mcp_race(agent, START_WORKFLOW_EXECUTION, payload_store, tmp_path) as (r, mcp),
        asyncio.TaskGroup() as group,
    ):
        group.create_task(r.alice_takes(run_id))
        answer = await mcp.call_tool("start_run", {"prompt": "bob was here", "run_id": run_id})

    assert code_of(answer) == ErrorCode.RUN_EXISTS
    assert SECRET not in answer.model_dump_json()
    assert "bob was here" not in await r.alice_s_transcript(run_id)


async def test_an_mcp_reply_raced_by_another_person_s_start_never_enters_their_run(
    agent: Agent, payload_store: Path, tmp_path: Path
) -> None:
    run_id = free_id()
    async with (
        mcp_race(agent, DESCRIBE_WORKFLOW_EXECUTION, payload_store, tmp_path) as (r, mcp),
        asyncio.TaskGroup() as group,
    ):
        group.create_task(r.alice_takes(run_id))
        answer = await mcp.call_tool("reply", {"run_id": run_id, "text": "bob was here"})

    assert code_of(answer) == ErrorCode.RUN_NOT_FOUND
    assert SECRET not in answer.model_dump_json()
    assert "bob was here" not in await r.alice_s_transcript(run_id)


@pytest.mark.parametrize(
    "run_id",
    ["launch-plan:researcher-1", "standup-2026-12-06T04:58:00Z"],
    ids=["sub-agent", "scheduled"],
)
async def test_an_id_a_lead_or_a_schedule_gives_its_run_is_nobody_s_to_start(
    agent: Agent, run_id: str
) -> None:
    async with people_api(agent) as api:
        started = await api.http.post("/v1/runs", json={"prompt": "mine", "id": run_id})
        first = await api.http.post(
            f"/v1/runs/{run_id}/messages", params={"start": True}, json={"text": "mine"}
        )

    assert error_of(started) == (422, ErrorCode.RUN_ID_INVALID)
    assert error_of(first) == (404, ErrorCode.RUN_NOT_FOUND)
