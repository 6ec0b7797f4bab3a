"""People's doors to memories: `tarry memory list|show|edit|rm` (an operator's: every
scope) and `/v1/memories` (a person's own scope's and their groups'; admins all), and a
run's memory settings, its `memory_scope` checked by the same rule where the API and MCP
start it (the inbox's New run form: `tests/test_inbox_memories.py`). Acceptance 1 of
issue 59 end to end: written with its owner's approval, recalled in their later run and
never in another user's, shown with its provenance, and no longer recalled once deleted."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tarry.contracts import ErrorCode, Phase
from tarry.contracts.memories import NewMemory, Provenance
from tarry.search import open_store
from tarry.testing.scripted_model import call, say
from tests.cli import Cli
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.http_api import Api
from tests.test_http_api_people import as_
from tests.test_mcp_server import error_code, mcp_client, use
from tests.test_memory_tools import memories, recalled, remembered_by_alice
from tests.test_oidc import tarry_mcp_http
from tests.test_owners import ALICE, BOB, CAROL, CONFIG, ERIN, people_api
from tests.test_owners_doors import mcp_as

GROUPS = CONFIG.replace('admins = ["erin"]', 'admins = ["erin"]\nops = ["bob", "carol"]')
"""`CONFIG`'s people, bob and carol in the group ops."""


@pytest.fixture
def index(tmp_path: Path) -> Path:
    return tmp_path / "search.db"


@pytest.fixture
async def agent(agent_factory: Callable[..., Awaitable[Agent]], index: Path) -> Agent:
    made: Agent = await agent_factory(worker_settings={"tarry_search_index": str(index)})
    return made


@pytest.fixture
async def api(
    agent: Agent, index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Api]:
    """The API over `agent`'s memory store with `GROUPS`' people; alice's unless told."""
    config = tmp_path / "tarry.toml"
    config.write_text(GROUPS)
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    monkeypatch.setenv("TARRY_SEARCH_INDEX", str(index))
    async with people_api(agent) as api:
        yield api


async def kept(index: Path, id: str, scope: str, text: str = "Priya owns the blog") -> None:
    store = await open_store(str(index))
    try:
        source = Provenance(run_id="run-1", turn=2, approved_by=scope)
        await store.remember(NewMemory(id=id, text=text, scope=scope, provenance=source))
    finally:
        await store.close()


async def listed(api: Api, token: str | None = None, **params: Any) -> list[str]:
    headers = as_(token) if token else {}
    response = await api.http.get("/v1/memories", params=params, headers=headers)
    assert response.status_code == 200, response.text
    return [m["id"] for m in response.json()["memories"]]


async def test_a_person_lists_their_own_and_their_groups_memories(api: Api, index: Path) -> None:
    await kept(index, "alice's", "alice")
    await kept(index, "bob's", "bob")
    await kept(index, "ops'", "group:ops")
    await kept(index, "writer's", "agent:writer")

    assert await listed(api) == ["alice's"]
    assert await listed(api, BOB) == ["ops'", "bob's"]
    assert await listed(api, CAROL) == ["ops'"]


async def test_an_admin_lists_every_memory(api: Api, index: Path) -> None:
    await kept(index, "alice's", "alice")
    await kept(index, "writer's", "agent:writer")

    assert set(await listed(api, ERIN)) == {"alice's", "writer's"}


async def test_a_query_lists_what_a_recall_finds(api: Api, index: Path) -> None:
    await kept(index, "blog", "alice")
    await kept(index, "office", "alice", text="the office is closed on Fridays")

    assert await listed(api, q="who owns our blog") == ["blog"]


async def test_another_persons_memory_is_not_found(api: Api, index: Path) -> None:
    await kept(index, "alice's", "alice")

    for method in ("GET", "DELETE"):
        response = await api.http.request(method, "/v1/memories/alice's", headers=as_(BOB))
        assert response.status_code == 404
        assert response.json()["error"]["code"] == ErrorCode.MEMORY_NOT_FOUND
    response = await api.http.patch("/v1/memories/alice's", json={"text": "x"}, headers=as_(BOB))
    assert response.status_code == 404
    assert await listed(api) == ["alice's"]


async def test_a_memory_shows_its_provenance(api: Api, index: Path) -> None:
    await kept(index, "m1", "alice")

    memory = (await api.http.get("/v1/memories/m1")).json()

    assert memory["provenance"] == {"run_id": "run-1", "turn": 2, "approved_by": "alice"}


async def test_an_edited_memory_is_recalled_by_its_new_text(api: Api, index: Path) -> None:
    await kept(index, "m1", "alice")

    response = await api.http.patch("/v1/memories/m1", json={"text": "Sam owns the newsletter"})

    assert response.status_code == 200, response.text
    assert (response.json()["text"], response.json()["edited_by"]) == (
        "Sam owns the newsletter",
        "alice",
    )
    assert await listed(api, q="newsletter") == ["m1"]
    assert await listed(api, q="Priya") == []


async def test_an_empty_text_is_refused(api: Api, index: Path) -> None:
    await kept(index, "m1", "alice")

    response = await api.http.patch("/v1/memories/m1", json={"text": ""})

    assert response.status_code == 422


async def test_a_deleted_memory_is_listed_no_more_but_shown_deleted(api: Api, index: Path) -> None:
    await kept(index, "m1", "alice")

    response = await api.http.delete("/v1/memories/m1")

    assert response.status_code == 200, response.text
    assert await listed(api) == []
    assert await listed(api, deleted="true") == ["m1"]
    shown = (await api.http.get("/v1/memories/m1")).json()
    assert shown["deleted_by"] == "alice"


async def test_a_run_in_another_persons_memory_scope_is_refused(api: Api) -> None:
    body = {"prompt": "hi", "memory_access": "read", "memory_scope": "bob"}

    response = await api.http.post("/v1/runs", json=body)

    assert response.status_code == 403
    assert response.json()["error"]["code"] == ErrorCode.NOT_ALLOWED


async def test_a_schedule_of_runs_in_another_persons_memory_scope_is_refused(api: Api) -> None:
    input = {"prompt": "hi", "memory_access": "read", "memory_scope": "bob"}

    response = await api.http.post(
        "/v1/schedules", json={"name": "nightly", "every": "1d", "input": input}
    )

    assert response.status_code == 403
    assert response.json()["error"]["code"] == ErrorCode.NOT_ALLOWED


async def test_a_fork_of_a_run_in_another_persons_memory_scope_is_refused(api: Api) -> None:
    api.agent.model.add(say("Hello."))
    body = {"prompt": "hi", "memory_access": "read", "share": {"bob": "write"}}
    started = await api.http.post("/v1/runs", json=body | {"memory_scope": "alice"})
    run_id = started.json()["id"]
    await api.agent.tarry.get(run_id).wait_for({Phase.WAITING_USER}, TIMEOUT)

    response = await api.http.post(f"/v1/runs/{run_id}/fork", json={"at": 0}, headers=as_(BOB))

    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == ErrorCode.NOT_ALLOWED


async def test_a_run_in_the_callers_groups_memory_scope_starts(api: Api) -> None:
    body = {"prompt": "", "memory_access": "read", "memory_scope": "group:ops"}

    response = await api.http.post("/v1/runs", json=body, headers=as_(BOB))

    assert response.status_code == 201, response.text


async def test_an_mcp_client_starts_a_run_that_remembers_in_the_memory_scope_it_names(
    agent: Agent, index: Path, payload_store: Path
) -> None:
    agent.model.add(call("remember", {"text": "Priya owns the blog"}, id="m1"), say("Noted."))

    async with mcp_client(agent, payload_store) as client:
        started = await use(
            client,
            "start_run",
            prompt="remember the owner",
            memory_access="read-write",
            memory_scope="group:ops",
        )
        agent.runs.append(agent.tarry.get(started["run_id"]))
        await use(client, "run_state", run_id=started["run_id"], wait_seconds=TIMEOUT)

    [memory] = await memories(index)
    assert (memory.text, memory.scope) == ("Priya owns the blog", "group:ops")


@pytest.mark.parametrize(
    ("settings", "code"),
    [
        ({"memory_access": "read", "memory_scope": "bob"}, ErrorCode.NOT_ALLOWED),
        ({"memory_access": "write"}, ErrorCode.INPUT_INVALID),
        ({"memory_access": "read", "memory_scope": "group:"}, ErrorCode.INPUT_INVALID),
    ],
)
async def test_mcp_refuses_memory_settings_with_the_apis_codes_and_starts_nothing(
    api: Api, payload_store: Path, tmp_path: Path, settings: dict[str, str], code: ErrorCode
) -> None:
    (tmp_path / "mcp").mkdir()
    async with (
        tarry_mcp_http(api.agent, payload_store, tmp_path / "mcp", GROUPS) as url,
        mcp_as(url, ALICE) as client,
    ):
        refused = await client.call_tool("start_run", {"prompt": "hi", **settings})
        answered = await api.http.post("/v1/runs", json={"prompt": "hi", **settings})

    assert error_code(refused) == code
    assert answered.json()["error"]["code"] == code
    assert api.agent.model.requests == []


async def test_the_command_line_shows_edits_and_deletes_any_memory(
    agent: Agent, index: Path
) -> None:
    await kept(index, "m1", "bob")
    cli = Cli.of(agent, TARRY_SEARCH_INDEX=str(index), TARRY_USER="operator")

    shown = await cli.ok("memory", "show", "m1")
    edited = json.loads(await cli.ok("memory", "edit", "m1", "--tags", "people,blog", "--json"))
    await cli.ok("memory", "rm", "m1")

    assert "run run-1, turn 2" in shown
    assert "approved by  bob" in shown
    assert (edited["tags"], edited["edited_by"]) == (["people", "blog"], "operator")
    assert json.loads(await cli.ok("memory", "list", "--json")) == []
    assert "deleted" in await cli.ok("memory", "show", "m1")


async def test_a_memory_is_recalled_by_its_owner_only_until_deleted_with_its_provenance_shown(
    agent: Agent, index: Path
) -> None:
    run = await remembered_by_alice(agent)
    cli = Cli.of(agent, TARRY_SEARCH_INDEX=str(index))
    [memory] = json.loads(await cli.ok("memory", "list", "--json"))

    assert [m["text"] for m in await recalled(agent, "alice")] == ["Priya owns the blog"]
    assert await recalled(agent, "bob") == []
    shown = await cli.ok("memory", "show", memory["id"])
    assert f"run {run.id}, turn 1" in shown
    assert "approved by  alice" in shown

    await cli.ok("memory", "rm", memory["id"])

    assert await recalled(agent, "alice") == []
