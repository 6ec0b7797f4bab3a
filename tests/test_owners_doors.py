"""The sweeps of `tests/test_owners.py` at the API's other doors: MCP over HTTP (`tarry
mcp --http`) and AG-UI. Each door answers a run its caller may not read as one that does
not exist, refuses a change its caller may not make, and lets a call's approver decide
that call alone, whether the caller is one of the config's users or a user the identity
provider signs in. The MCP sweeps take the tools that name a run from the server's own
tool list, so a tool added tomorrow is swept without a new test."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, Tool

from tarry.contracts import ErrorCode, WaitingFor
from tarry.testing.scripted_model import say
from tests.conftest import Agent
from tests.deadline import deadline
from tests.http_api import Api
from tests.test_http_api import error_of, until_stopped
from tests.test_http_api_people import as_
from tests.test_oidc import IdentityProvider, oidc_config, tarry_mcp_http
from tests.test_owners import (
    BOB,
    CAROL,
    CONFIG,
    DAVE,
    ERIN,
    agui_body,
    alices_run,
    people_api,
    two_gated_calls,
)

OUTSIDER: dict[str, Any] = {"sub": "mallory", "groups": ["strangers"]}
"""The claims of a user the identity provider signs in who is nobody to any run here."""


@pytest.fixture
def identity_provider() -> Iterator[IdentityProvider]:
    with IdentityProvider() as provider:
        provider.new_key("k1")
        yield provider


@pytest.fixture
async def api(
    agent: Agent,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    identity_provider: IdentityProvider,
) -> AsyncIterator[Api]:
    """The API with `CONFIG`'s people and the identity provider's users."""
    config = tmp_path / "tarry.toml"
    config.write_text(CONFIG + oidc_config(identity_provider))
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    async with people_api(agent) as api:
        yield api


@asynccontextmanager
async def mcp_server(
    api: Api, payload_store: Path, tmp_path: Path, provider: IdentityProvider
) -> AsyncIterator[str]:
    """`tarry mcp --http` with the API's config, serving; its endpoint."""
    config = CONFIG + oidc_config(provider)
    (tmp_path / "mcp").mkdir()
    async with tarry_mcp_http(api.agent, payload_store, tmp_path / "mcp", config) as url:
        yield url


@asynccontextmanager
async def mcp_as(url: str, token: str) -> AsyncIterator[Client]:
    """An MCP client of `url` signed in with `token` (a static token or a JWT)."""
    http = httpx2.AsyncClient(headers=as_(token), timeout=httpx2.Timeout(deadline(60)))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


async def tools_naming_a_run(client: Client) -> list[Tool]:
    """The server's tools that take a run id they must be given."""
    tools = (await client.list_tools()).tools
    named = [tool for tool in tools if "run_id" in tool.input_schema.get("required", [])]
    assert {"run_state", "run_transcript", "reply", "decide"} <= {t.name for t in named}
    return named


FILLERS: dict[str, Any] = {"string": "x", "boolean": True, "number": 0, "integer": 0}


def arguments(tool: Tool, run_id: str) -> dict[str, Any]:
    """The least a call of `tool` on run `run_id` takes: its required arguments."""
    properties = tool.input_schema["properties"]
    return {
        name: run_id if name == "run_id" else FILLERS[properties[name]["type"]]
        for name in tool.input_schema["required"]
    }


def reads(tool: Tool) -> bool:
    return bool(tool.annotations and tool.annotations.read_only_hint)


def code_of(result: CallToolResult) -> str | None:
    """The error code of a tool's answer; None for one that is not an error."""
    if not result.is_error:
        return None
    assert result.structured_content is not None, result.content
    code: str = result.structured_content["code"]
    return code


async def listed_by(client: Client) -> set[str]:
    """The run ids `list_runs` and `waiting_runs` show the signed-in caller."""
    ids: set[str] = set()
    for tool in ("list_runs", "waiting_runs"):
        answer = await client.call_tool(tool, {})
        assert not answer.is_error, answer.content
        assert answer.structured_content is not None
        ids |= {row["run_id"] for row in answer.structured_content["result"]}
    return ids


async def test_every_mcp_tool_answers_another_user_s_run_as_one_that_does_not_exist(
    api: Api, payload_store: Path, tmp_path: Path, identity_provider: IdentityProvider
) -> None:
    run_id = await alices_run(api)

    async with mcp_server(api, payload_store, tmp_path, identity_provider) as url:
        for token in (BOB, identity_provider.token(**OUTSIDER)):
            async with mcp_as(url, token) as client:
                for tool in await tools_naming_a_run(client):
                    answer = await client.call_tool(tool.name, arguments(tool, run_id))
                    unknown = await client.call_tool(tool.name, arguments(tool, "run-nobody-has"))
                    assert code_of(answer) == ErrorCode.RUN_NOT_FOUND, tool.name
                    assert answer.structured_content == json.loads(
                        json.dumps(unknown.structured_content).replace("run-nobody-has", run_id)
                    ), "a hidden run answers as one that does not exist"
                assert run_id not in await listed_by(client)

    state = await api.state(run_id)
    assert (state.waiting_for, state.message_count) == (WaitingFor.APPROVAL, 2)


async def test_a_run_an_identity_provider_s_user_starts_over_mcp_is_theirs_alone(
    api: Api, payload_store: Path, tmp_path: Path, identity_provider: IdentityProvider
) -> None:
    api.agent.model.add(say("Hello, mallory."))

    async with mcp_server(api, payload_store, tmp_path, identity_provider) as url:
        async with mcp_as(url, identity_provider.token(**OUTSIDER)) as client:
            started = await client.call_tool("start_run", {"prompt": "hi"})
            assert started.structured_content is not None, started.content
            run_id = started.structured_content["run_id"]
            owned = await client.call_tool("run_transcript", {"run_id": run_id})
        async with mcp_as(url, BOB) as client:
            refusals = {
                tool.name: code_of(await client.call_tool(tool.name, arguments(tool, run_id)))
                for tool in await tools_naming_a_run(client)
            }

    assert code_of(owned) is None
    assert set(refusals.values()) == {ErrorCode.RUN_NOT_FOUND}


async def test_a_read_share_reads_over_mcp_and_is_refused_every_change(
    api: Api, payload_store: Path, tmp_path: Path, identity_provider: IdentityProvider
) -> None:
    run_id = await alices_run(api)

    async with (
        mcp_server(api, payload_store, tmp_path, identity_provider) as url,
        mcp_as(url, CAROL) as client,
    ):
        answers = {
            tool.name: (
                reads(tool),
                code_of(await client.call_tool(tool.name, arguments(tool, run_id))),
            )
            for tool in await tools_naming_a_run(client)
        }
        assert run_id in await listed_by(client)

    read_codes = {name: code for name, (read, code) in answers.items() if read}
    assert {"run_state", "run_transcript"} <= set(read_codes)
    assert set(read_codes.values()) == {None}
    assert {code for read, code in answers.values() if not read} == {ErrorCode.NOT_ALLOWED}
    state = await api.state(run_id)
    assert (state.waiting_for, state.message_count) == (WaitingFor.APPROVAL, 2)


async def test_an_admin_is_refused_by_no_mcp_tool(
    api: Api, payload_store: Path, tmp_path: Path, identity_provider: IdentityProvider
) -> None:
    run_id = await alices_run(api)
    stopped = await api.http.post(f"/v1/runs/{run_id}/stop", json={}, headers=as_(ERIN))
    assert stopped.status_code == 202
    await until_stopped(api, run_id)  # what the changes meet is the run's end, not a refusal

    async with (
        mcp_server(api, payload_store, tmp_path, identity_provider) as url,
        mcp_as(url, ERIN) as client,
    ):
        codes = {
            tool.name: code_of(await client.call_tool(tool.name, arguments(tool, run_id)))
            for tool in await tools_naming_a_run(client)
        }

    refused = {ErrorCode.RUN_NOT_FOUND, ErrorCode.NOT_ALLOWED, ErrorCode.APPROVAL_NOT_ALLOWED}
    assert {name: code for name, code in codes.items() if code in refused} == {}


async def test_an_approver_of_one_call_may_not_decide_another_over_mcp(
    api: Api, payload_store: Path, tmp_path: Path, identity_provider: IdentityProvider
) -> None:
    run_id = await two_gated_calls(api)

    async with (
        mcp_server(api, payload_store, tmp_path, identity_provider) as url,
        mcp_as(url, DAVE) as client,
    ):
        refused = {
            call_id: code_of(
                await client.call_tool(
                    "decide", {"run_id": run_id, "call_id": call_id, "approved": False}
                )
            )
            for call_id in ("l2", None)
        }
        decided = await client.call_tool(
            "decide", {"run_id": run_id, "call_id": "w1", "approved": True}
        )

    assert refused == {"l2": ErrorCode.NOT_ALLOWED, None: ErrorCode.NOT_ALLOWED}
    assert code_of(decided) is None
    state = await api.state(run_id)
    assert [p.call_id for p in state.pending_approvals] == ["l2"]


async def test_ag_ui_and_the_event_stream_refuse_an_identity_provider_s_user_another_s_run(
    api: Api, identity_provider: IdentityProvider
) -> None:
    run_id = await alices_run(api)
    outsider = as_(identity_provider.token(**OUTSIDER))

    agui = await api.http.post("/v1/agui", json=agui_body(run_id), headers=outsider)
    events = await api.http.get(f"/v1/runs/{run_id}/events", headers=outsider)

    assert error_of(agui) == (404, ErrorCode.RUN_NOT_FOUND)
    assert error_of(events) == (404, ErrorCode.RUN_NOT_FOUND)
    state = await api.state(run_id)
    assert (state.waiting_for, state.message_count) == (WaitingFor.APPROVAL, 2)
