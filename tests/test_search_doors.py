"""`tarry search`, `GET /v1/search`, MCP's `search_messages` and `tarry index rebuild`:
the runs' messages by their words, at every door, and only in the runs the caller may
read; the index rebuilt from the runs finds what live indexing found."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tarry.contracts import ErrorCode, Phase
from tarry.testing.scripted_model import say
from tests.cli import Cli
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.http_api import Api
from tests.search_stores import until_found
from tests.test_http_api_people import as_
from tests.test_oidc import tarry_mcp_http
from tests.test_owners import BOB, CAROL, CONFIG, ERIN, people_api, with_people
from tests.test_owners_doors import mcp_as

WAITING = {Phase.WAITING_USER}
WORD = "zanzibar"
"""A word only the test's run says."""


@pytest.fixture
def index(tmp_path: Path) -> Path:
    return tmp_path / "search.db"


@pytest.fixture
async def indexed(agent_factory: Callable[..., Awaitable[Agent]], index: Path) -> Agent:
    """An agent whose worker indexes every message into `index`."""
    made: Agent = await agent_factory(worker_settings={"tarry_search_index": str(index)})
    return made


@pytest.fixture
async def api(
    indexed: Agent, index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Api]:
    """The API over `indexed`'s index with `CONFIG`'s people; alice's unless told."""
    with_people(tmp_path, monkeypatch)
    monkeypatch.setenv("TARRY_SEARCH_INDEX", str(index))
    async with people_api(indexed) as api:
        yield api


async def alices_run(agent: Agent, api: Api, index: Path) -> str:
    """Alice's run, shared with carol to read, which has said `WORD` (and it is indexed)."""
    agent.model.add(say(f"The trip to {WORD.title()} is booked."))
    run_id = await api.start("book the trip", share={"carol": "read"})
    await agent.tarry.get(run_id).wait_for(WAITING, TIMEOUT)
    await until_found(index, WORD)
    return run_id


async def found_by(api: Api, token: str, q: str = WORD) -> list[dict[str, Any]]:
    response = await api.http.get("/v1/search", params={"q": q}, headers=as_(token))
    assert response.status_code == 200, response.text
    hits: list[dict[str, Any]] = response.json()["hits"]
    return hits


async def test_the_api_finds_a_message_by_a_word_for_its_owner(
    indexed: Agent, api: Api, index: Path
) -> None:
    run_id = await alices_run(indexed, api, index)

    response = await api.http.get("/v1/search", params={"q": WORD})

    [hit] = response.json()["hits"]
    assert (hit["run_id"], hit["index"], hit["role"]) == (run_id, 1, "assistant")
    assert f"[{WORD.title()}]" in hit["snippet"]


async def test_the_api_finds_it_for_a_reader_and_an_admin_but_never_for_another_user(
    indexed: Agent, api: Api, index: Path
) -> None:
    run_id = await alices_run(indexed, api, index)

    assert [h["run_id"] for h in await found_by(api, CAROL)] == [run_id]
    assert [h["run_id"] for h in await found_by(api, ERIN)] == [run_id]
    assert await found_by(api, BOB) == []
    assert await found_by(api, BOB, "trip booked") == []


async def test_the_api_without_an_index_answers_search_unavailable(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_people(tmp_path, monkeypatch)
    monkeypatch.delenv("TARRY_SEARCH_INDEX", raising=False)
    async with people_api(agent) as api:
        response = await api.http.get("/v1/search", params={"q": WORD})

    assert response.status_code == 503
    assert response.json()["error"]["code"] == ErrorCode.SEARCH_UNAVAILABLE


async def test_the_command_line_finds_the_message_and_rebuild_finds_the_same(
    indexed: Agent, index: Path
) -> None:
    indexed.model.add(say(f"The trip to {WORD} is booked."), say("And the hotel."))
    run = await indexed.start("book the trip")
    await run.wait_for(WAITING, TIMEOUT)
    await run.reply(f"and a hotel in {WORD}")
    await run.wait_for(WAITING, TIMEOUT)
    await until_found(index, "hotel", 2)
    cli = Cli.of(indexed, TARRY_SEARCH_INDEX=str(index))

    live = json.loads(await cli.ok("search", WORD, "--json"))
    rebuilt = json.loads(await cli.ok("index", "rebuild", "--json"))
    again = json.loads(await cli.ok("search", WORD, "--json"))

    assert {(h["run_id"], h["index"]) for h in live} == {(run.id, 1), (run.id, 2)}
    assert rebuilt["messages"] >= 4
    assert [(h["run_id"], h["index"], h["snippet"]) for h in again] == [
        (h["run_id"], h["index"], h["snippet"]) for h in live
    ]


async def test_the_command_line_pointed_at_the_api_finds_only_what_its_person_may_read(
    indexed: Agent, api: Api, index: Path
) -> None:
    run_id = await alices_run(indexed, api, index)

    def over_api(token: str) -> Cli:
        return Cli.of(indexed, TARRY_API_URL=api.url, TARRY_API_TOKEN=token)

    carols = json.loads(await over_api(CAROL).ok("search", WORD, "--json"))
    bobs = json.loads(await over_api(BOB).ok("search", WORD, "--json"))

    assert [h["run_id"] for h in carols] == [run_id]
    assert bobs == []


async def test_the_command_line_with_a_token_the_api_refuses_says_so(
    indexed: Agent, api: Api
) -> None:
    cli = Cli.of(indexed, TARRY_API_URL=api.url, TARRY_API_TOKEN="not-a-token-of-anyone")

    result = await cli("search", WORD)

    result.assert_one_error_line("error: UNAUTHORIZED: the API answered:")


async def test_the_command_line_shows_the_hits_as_a_table(indexed: Agent, index: Path) -> None:
    indexed.model.add(say(f"The trip to {WORD} is booked."))
    run = await indexed.start("book the trip")
    await run.wait_for(WAITING, TIMEOUT)
    await until_found(index, WORD)

    out = await Cli.of(indexed, TARRY_SEARCH_INDEX=str(index)).ok("search", WORD, "--since", "1h")

    assert run.id in out
    assert f"The trip to {WORD} is booked." in out


async def test_a_since_the_command_line_cannot_read_is_one_error_line(
    indexed: Agent, index: Path
) -> None:
    result = await Cli.of(indexed, TARRY_SEARCH_INDEX=str(index))("search", WORD, "--since", "soon")

    result.assert_one_error_line("error: INPUT_INVALID: --since 'soon'")


async def test_the_command_line_without_an_index_says_how_to_keep_one(agent: Agent) -> None:
    result = await Cli.of(agent)("search", WORD)

    result.assert_one_error_line("error: SEARCH_UNAVAILABLE")


@asynccontextmanager
async def mcp_http(
    api: Api, index: Path, payload_store: Path, tmp_path: Path
) -> AsyncIterator[str]:
    (tmp_path / "mcp").mkdir()
    async with tarry_mcp_http(
        api.agent, payload_store, tmp_path / "mcp", CONFIG, TARRY_SEARCH_INDEX=str(index)
    ) as url:
        yield url


async def test_mcp_finds_the_message_for_a_reader_and_nothing_for_another_user(
    indexed: Agent, api: Api, index: Path, payload_store: Path, tmp_path: Path
) -> None:
    run_id = await alices_run(indexed, api, index)

    async with mcp_http(api, index, payload_store, tmp_path) as url:
        async with mcp_as(url, CAROL) as client:
            carol = await client.call_tool("search_messages", {"text": WORD})
        async with mcp_as(url, BOB) as client:
            bob = await client.call_tool("search_messages", {"text": WORD})

    assert carol.structured_content is not None, carol.content
    assert [h["run_id"] for h in carol.structured_content["result"]] == [run_id]
    assert bob.structured_content == {"result": []}
