"""`[limits]` at every door (issue 58, acceptance 4): a start, a `set_model`, a schedule,
a sub-agent, a fork and an eval that name a model profile outside the caller's `models`
are refused with 403 `MODEL_NOT_ALLOWED` (exit 2 from the command line, the same code
from the MCP tools), and nothing starts; a run's budget stays within `max_run_budget`,
which is also the budget of a run that names none. Without `[limits]`, nothing changes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tarry.api import ApiServer, create_app
from tarry.config.settings import load_settings
from tarry.config.tables import ModelProfile
from tarry.contracts import AgentSpec, Budget, ErrorCode, Mode, Phase
from tarry.testing.scripted_model import say
from tests.cli import Cli
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.eval_dataset import write_dataset
from tests.http_api import Api, api_client
from tests.test_http_api import error_of
from tests.test_mcp_server import error_code, mcp_client

ALICE = "alice-token-0123456789"
ERIN = "erin-token-0123456789a"
PEOPLE = f"""
[api.users]
alice = "{ALICE}"
erin = "{ERIN}"
"""
LIMITS = """
[limits.default]
models = ["cheap"]
max_run_budget = { max_total_tokens = 5000 }

[limits.user.erin]
models = ["*"]
"""
"""Alice may use the profile `cheap` alone (not `default`, the profile of a run that
names none), each run of hers with 5000 tokens at most; erin may use any."""
NOT_ALLOWED = (403, ErrorCode.MODEL_NOT_ALLOWED)


@pytest.fixture
async def agent(agent_factory: Any) -> Agent:
    """A worker with the profiles `default` and `cheap`, and a sub-agent on `default`."""
    cheap = ModelProfile(base_url="http://127.0.0.1:1/v1", model="cheap")
    helper = AgentSpec(description="Helps.", tools=[], mode=Mode.TASK, model="default")
    made: Agent = await agent_factory(more_profiles={"cheap": cheap}, agents={"helper": helper})
    return made


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The config file of `PEOPLE` under `LIMITS`, as `TARRY_CONFIG`."""
    path = tmp_path / "tarry.toml"
    path.write_text(PEOPLE + LIMITS)
    monkeypatch.setenv("TARRY_CONFIG", str(path))
    return path


@asynccontextmanager
async def people(agent: Agent, token: str = ALICE) -> AsyncIterator[Api]:
    """The API of the `TARRY_CONFIG` file's people, each request sending `token`."""
    async with (
        ApiServer(create_app(agent.tarry, load_settings()), "127.0.0.1", 0) as server,
        api_client(server.url, token, timeout=deadline(60)) as http,
    ):
        yield Api(http, agent, server.url)


@pytest.fixture
async def api(agent: Agent, config: Path) -> AsyncIterator[Api]:
    """The API under `LIMITS`; its requests are alice's."""
    async with people(agent) as api:
        yield api


async def absent(api: Api, run_id: str) -> bool:
    return (await api.http.get(f"/v1/runs/{run_id}")).status_code == 404


async def erins_run_shared_with_alice(agent: Agent) -> str:
    """A run of erin's on `default`, shared with alice to change: answered once."""
    agent.model.add(say("Hello."))
    async with people(agent, ERIN) as erin:
        run_id = await erin.start("hi", share={"alice": "write"})
        await erin.run(run_id).wait_for({Phase.WAITING_USER}, TIMEOUT)
    return run_id


# --- Starts -------------------------------------------------------------------------


async def test_a_start_on_a_profile_outside_the_caller_s_models_is_403_and_starts_nothing(
    api: Api,
) -> None:
    response = await api.http.post(
        "/v1/runs", json={"prompt": "hi", "model": "default", "id": "run-limits-start"}
    )

    assert error_of(response) == NOT_ALLOWED
    assert "'default'" in response.json()["error"]["message"]
    assert await absent(api, "run-limits-start")


async def test_a_start_that_names_no_profile_counts_as_one_on_the_default_profile(
    api: Api,
) -> None:
    response = await api.http.post("/v1/runs", json={"prompt": "hi", "id": "run-limits-unnamed"})

    assert error_of(response) == NOT_ALLOWED
    assert await absent(api, "run-limits-unnamed")


async def test_a_start_on_an_allowed_profile_has_the_largest_budget_when_it_names_none(
    api: Api,
) -> None:
    run_id = await api.start(model="cheap")

    assert (await api.state(run_id)).budget == Budget(max_total_tokens=5000)


async def test_a_start_asking_for_more_than_max_run_budget_is_403_budget_not_allowed(
    api: Api,
) -> None:
    body = {"model": "cheap", "budget": {"max_total_tokens": 6000}, "id": "run-limits-budget"}

    response = await api.http.post("/v1/runs", json=body)

    assert error_of(response) == (403, ErrorCode.BUDGET_NOT_ALLOWED)
    assert "max_total_tokens 6000 (at most 5000)" in response.json()["error"]["message"]
    assert await absent(api, "run-limits-budget")


async def test_a_raise_past_max_run_budget_is_403_and_leaves_the_budget_as_it_was(
    api: Api,
) -> None:
    run_id = await api.start(model="cheap")

    response = await api.http.post(f"/v1/runs/{run_id}/budget", json={"max_total_tokens": 9000})

    assert error_of(response) == (403, ErrorCode.BUDGET_NOT_ALLOWED)
    assert (await api.state(run_id)).budget == Budget(max_total_tokens=5000)


async def test_a_budget_within_max_run_budget_keeps_its_own_limits_and_gets_the_rest(
    api: Api,
) -> None:
    run_id = await api.start(model="cheap", budget={"max_cost_usd": 0.5})

    assert (await api.state(run_id)).budget == Budget(max_total_tokens=5000, max_cost_usd=0.5)


async def test_a_first_message_that_starts_a_run_on_a_profile_outside_them_is_refused(
    api: Api,
) -> None:
    response = await api.http.post(
        "/v1/runs/run-limits-thread/messages?start=true",
        json={"text": "hi", "input": {"model": "default"}},
    )

    assert error_of(response) == NOT_ALLOWED
    assert await absent(api, "run-limits-thread")


async def test_a_start_with_a_sub_agent_on_a_profile_outside_them_is_refused(
    api: Api,
) -> None:
    body = {"prompt": "hi", "model": "cheap", "agents": ["helper"], "id": "run-limits-agent"}

    response = await api.http.post("/v1/runs", json=body)

    assert error_of(response) == NOT_ALLOWED
    assert "agent 'helper'" in response.json()["error"]["message"]
    assert await absent(api, "run-limits-agent")


# --- The other doors ------------------------------------------------------------------


async def test_a_switch_to_a_profile_outside_them_is_refused_by_the_run(
    api: Api, agent: Agent
) -> None:
    run_id = await api.start(model="cheap")

    response = await api.http.post(f"/v1/runs/{run_id}/model", json={"profile": "default"})

    assert error_of(response) == NOT_ALLOWED
    assert (await api.state(run_id)).model is None
    assert "set_model" not in await agent.updates(api.run(run_id))


async def test_a_switch_from_temporal_itself_is_an_operator_s_and_never_refused(
    api: Api, agent: Agent
) -> None:
    run_id = await api.start(model="cheap")
    workflow = agent.tarry.client.get_workflow_handle(run_id)

    await workflow.execute_update("set_model", "default")

    assert (await api.state(run_id)).model == "default"


async def test_a_schedule_of_runs_on_a_profile_outside_them_is_refused_and_not_created(
    api: Api,
) -> None:
    body = {"name": "limits-nightly", "every": "1h", "input": {"prompt": "hi"}}

    response = await api.http.post("/v1/schedules", json=body)

    assert error_of(response) == NOT_ALLOWED
    assert (await api.http.get("/v1/schedules/limits-nightly")).status_code == 404


async def test_a_fork_of_a_run_on_a_profile_outside_them_is_refused(api: Api, agent: Agent) -> None:
    run_id = await erins_run_shared_with_alice(agent)

    response = await api.http.post(
        f"/v1/runs/{run_id}/fork", json={"at": 0, "id": "run-limits-fork"}
    )

    assert error_of(response) == NOT_ALLOWED
    assert await absent(api, "run-limits-fork")


# --- The command line and the MCP tools ------------------------------------------------


@pytest.fixture
def alices_cli(agent: Agent, config: Path) -> Cli:
    return Cli.of(agent, TARRY_USER="alice", TARRY_CONFIG=str(config))


async def test_the_command_line_exits_2_for_a_start_outside_them(alices_cli: Cli) -> None:
    result = await alices_cli("start", "--model", "default", "hi")

    assert result.code == 2
    result.assert_one_error_line("error: MODEL_NOT_ALLOWED: ")


async def test_the_command_line_exits_2_for_a_switch_outside_them(
    alices_cli: Cli, api: Api
) -> None:
    run_id = await api.start(model="cheap")

    result = await alices_cli("model", run_id, "default")

    assert result.code == 2
    result.assert_one_error_line("error: MODEL_NOT_ALLOWED: ")


async def test_an_eval_on_a_profile_outside_them_exits_2_and_starts_nothing(
    alices_cli: Cli, agent: Agent, tmp_path: Path
) -> None:
    dataset = write_dataset(tmp_path / "points.jsonl")

    result = await alices_cli("eval", str(dataset), "--model", "default")

    assert result.code == 2
    result.assert_one_error_line("error: MODEL_NOT_ALLOWED: the eval names")
    assert agent.model.requests == []


async def test_an_eval_over_their_max_run_budget_exits_2_and_starts_nothing(
    alices_cli: Cli, agent: Agent, tmp_path: Path
) -> None:
    dataset = write_dataset(tmp_path / "points.jsonl")

    result = await alices_cli("eval", str(dataset), "--model", "cheap", "--max-tokens", "6000")

    assert result.code == 2
    result.assert_one_error_line("error: BUDGET_NOT_ALLOWED: the eval asks for a budget")
    assert agent.model.requests == []


async def test_an_mcp_start_outside_them_is_a_model_not_allowed_tool_error(
    agent: Agent, config: Path, payload_store: Path
) -> None:
    env = {"TARRY_USER": "alice", "TARRY_CONFIG": str(config)}
    async with mcp_client(agent, payload_store, env=env) as client:
        refused = await client.call_tool("start_run", {"prompt": "hi", "model": "default"})

    assert error_code(refused) == ErrorCode.MODEL_NOT_ALLOWED


# --- Without [limits] -------------------------------------------------------------------


async def test_without_limits_anyone_starts_on_any_profile_with_no_budget_added(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tarry.toml"
    path.write_text(PEOPLE)
    monkeypatch.setenv("TARRY_CONFIG", str(path))
    agent.model.add(say("Hello."))

    async with people(agent) as api:
        run_id = await api.start("hi")
        switched = await api.http.post(f"/v1/runs/{run_id}/model", json={"profile": "cheap"})

    assert switched.status_code == 200, switched.text
    assert "budget" not in json.loads(switched.text)
