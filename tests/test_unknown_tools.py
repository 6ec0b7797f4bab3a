"""A run that names a tool or a model profile the worker does not have is refused at its
start: a typo in `require_approval` must never switch a gate off without a word, nor one
in `--model` fail the run only at its first model call."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.converter import DataConverter
from temporalio.testing import WorkflowEnvironment

from tarry.client import Tarry, TarryError
from tarry.client.starting import CHECK_ID_PREFIX
from tarry.contracts import (
    CHECKED_CATALOGUE_ACTIVITY,
    SEARCH_ATTRIBUTES,
    WORKFLOW_TYPE,
    ErrorCode,
    Phase,
    RunInput,
    RunResult,
)
from tarry.temporal.servers import dev_server_args, find_binary
from tarry.testing.scripted_model import say
from tests.cli import Cli
from tests.conftest import FAST_TIMEOUTS, Agent
from tests.deadline import TIMEOUT
from tests.http_api import serving
from tests.test_sub_agents import until_cli_listed, until_listed

REFUSED_STARTS = {
    "model": (("--model", "NOSUCH"), "error: LLM_UNKNOWN_PROFILE: no model profile 'NOSUCH'"),
    "tools": (("--tools", "raed_file"), "error: TOOL_NOT_FOUND: no tool named 'raed_file'"),
    "agent": (("--agent", "reseacher"), "error: TOOL_NOT_FOUND: no agent named 'reseacher'"),
}
"""`tarry start` options naming what the worker lacks, and the one line each is refused with."""


async def test_a_typo_in_require_approval_is_refused_at_start(agent: Agent) -> None:
    agent.model.add(say("never asked"))

    with pytest.raises(TarryError) as refused:
        await agent.start("tidy up", require_approval=["write_flie"])

    assert refused.value.code is ErrorCode.TOOL_NOT_FOUND
    assert "'write_flie'" in refused.value.message
    assert "write_file" in refused.value.message.split(";")[1]  # the names there are
    assert agent.model.requests == []


async def test_an_unknown_name_in_tools_is_refused_at_start(agent: Agent) -> None:
    with pytest.raises(TarryError) as refused:
        await agent.start("look around", tools=["list_files", "raed_file"])

    assert refused.value.code is ErrorCode.TOOL_NOT_FOUND
    assert "'raed_file'" in refused.value.message
    assert "'list_files'" not in refused.value.message


async def test_a_raw_start_naming_an_unknown_tool_fails_the_run_before_any_model_call(
    agent: Agent,
) -> None:
    """Started around the client (the `temporal` CLI, the UI): the run refuses itself."""
    client = agent.tarry.client
    input = RunInput(prompt="tidy up", require_approval=["write_flie"], timeouts=FAST_TIMEOUTS)
    handle = await client.start_workflow(
        WORKFLOW_TYPE,
        input,
        id="run-raw-typo",
        task_queue=agent.tarry.task_queue,
        result_type=RunResult,
    )
    agent.runs.append(agent.tarry.get(handle.id))

    result = await handle.result()

    assert result.phase is Phase.FAILED
    assert result.error is not None
    assert result.error.code is ErrorCode.TOOL_NOT_FOUND
    assert "'write_flie'" in result.error.message
    assert agent.model.requests == []


async def test_known_names_and_the_star_start_the_run(agent: Agent) -> None:
    agent.model.add(say("ready"))

    run = await agent.start("go", tools=["read_file", "finish"], require_approval=["*"])

    state = await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    assert state.last_assistant_text == "ready"
    offered = [t["function"]["name"] for t in agent.model.requests[0].body["tools"]]
    assert offered == ["read_file", "finish"]


async def test_an_unknown_model_profile_is_refused_at_start_naming_the_profiles_there_are(
    agent: Agent,
) -> None:
    with pytest.raises(TarryError) as refused:
        await agent.start("hello", model="gpt-9")

    assert refused.value.code is ErrorCode.LLM_UNKNOWN_PROFILE
    assert refused.value.message == "no model profile 'gpt-9' on this worker; configured: default"
    assert agent.model.requests == []


async def test_a_raw_start_naming_an_unknown_profile_fails_the_run_before_any_model_call(
    agent: Agent,
) -> None:
    """Started around the client: the run refuses the profile itself, at its start."""
    client = agent.tarry.client
    input = RunInput(prompt="hello", model="gpt-9", timeouts=FAST_TIMEOUTS)
    handle = await client.start_workflow(
        WORKFLOW_TYPE,
        input,
        id="run-raw-profile",
        task_queue=agent.tarry.task_queue,
        result_type=RunResult,
    )
    agent.runs.append(agent.tarry.get(handle.id))

    result = await handle.result()

    assert result.phase is Phase.FAILED
    assert result.error is not None
    assert result.error.code is ErrorCode.LLM_UNKNOWN_PROFILE
    assert "'gpt-9'" in result.error.message
    assert agent.model.requests == []


async def test_a_start_naming_tools_with_no_worker_says_so_and_leaves_the_check_to_the_run(
    temporal: Client, caplog: pytest.LogCaptureFixture
) -> None:
    tarry = Tarry(temporal, f"nobody-{uuid.uuid4().hex[:8]}")

    run = await tarry.start(RunInput(prompt="look", tools=["raed_file"], timeouts=FAST_TIMEOUTS))

    assert (await run.describe()).status is WorkflowExecutionStatus.RUNNING
    (warning,) = [r.getMessage() for r in caplog.records if r.name.startswith("tarry.")]
    assert f"no worker polls task queue {tarry.task_queue!r}" in warning
    assert warning.endswith("the run checks its tools when a worker takes it")
    await run.stop()


@pytest.mark.parametrize(("options", "error"), REFUSED_STARTS.values(), ids=REFUSED_STARTS.keys())
async def test_a_refused_start_leaves_no_run_and_no_workflow_behind(
    agent: Agent, options: tuple[str, ...], error: str
) -> None:
    """Refused before anything starts: no failed run for a person to find and clear away,
    in `tarry list`, the API or among the task queue's workflows."""
    cli = Cli.of(agent)
    agent.model.add(say("listed"))
    refused_id, listed_id = (f"run-{name}-{uuid.uuid4().hex[:6]}" for name in ("refused", "ok"))

    refused = await cli("start", "--id", refused_id, *options, "hi")
    await cli.start("--id", listed_id, "hi")  # once it is listed, so would the refused be
    await until_cli_listed(cli, listed_id)
    failed = await cli.ok("list", "--phase", "failed", "--limit", "1000")
    async with serving(agent) as api:
        await until_listed(api, "waiting_for=input", listed_id)
        response = await api.http.get(f"/v1/runs?phase={Phase.FAILED.value}&limit=1000")

    queue = f"TaskQueue = '{agent.tarry.task_queue}'"
    workflows = [listed.id async for listed in agent.tarry.client.list_workflows(queue)]

    refused.assert_one_error_line(error)
    assert refused.code == 1
    assert refused_id not in failed
    assert refused_id not in [row["id"] for row in response.json()["runs"]]
    assert workflows == [listed_id]
    with pytest.raises(TarryError) as missing:
        await agent.tarry.get(refused_id).describe()
    assert missing.value.code is ErrorCode.RUN_NOT_FOUND


async def summary_of_check(temporal: Client, run_id: str) -> str:
    """The summary of the catalogue check a client asked before it started `run_id`, once
    listed: the Temporal UI shows it."""
    query = f"ActivityType = '{CHECKED_CATALOGUE_ACTIVITY}'"
    async with asyncio.timeout(TIMEOUT):
        while True:
            async for listed in temporal.list_activities(query):
                if not listed.activity_id.startswith(CHECK_ID_PREFIX):
                    continue
                described = await temporal.get_activity_handle(listed.activity_id).describe()
                summary = described.raw_info.user_metadata.summary
                texts: list[str] = await temporal.data_converter.decode([summary], [str])
                if repr(run_id) in texts[0]:
                    return texts[0]
            await asyncio.sleep(0.1)


async def test_the_check_before_a_start_says_in_the_temporal_ui_that_it_is_not_a_run(
    agent: Agent, temporal: Client
) -> None:
    agent.model.add(say("hi"))
    run = await agent.start("hello", require_approval=["write_file"])  # names a tool: checked

    summary = await summary_of_check(temporal, run.id)

    assert summary == f"Tarry's internal check, not a run: may {run.id!r} start?"


@pytest.fixture
async def no_standalone_activities(converter: DataConverter) -> AsyncIterator[Client]:
    """A dev server that runs no standalone activities, as an older server does."""
    async with await WorkflowEnvironment.start_local(
        data_converter=converter,
        dev_server_existing_path=str(find_binary("temporal")),
        dev_server_extra_args=[
            *dev_server_args(),
            *("--dynamic-config-value", "activity.enableStandalone=false"),
        ],
        search_attributes=SEARCH_ATTRIBUTES,
    ) as env:
        yield env.client


async def test_a_server_without_standalone_activities_checks_in_a_workflow_that_is_no_run(
    no_standalone_activities: Client, agent_factory: Any
) -> None:
    # The server is started first, so that it stops after the agent's worker.
    agent: Agent = await agent_factory(client=no_standalone_activities)
    agent.model.add(say("hi"))

    with pytest.raises(TarryError) as refused:
        await agent.start("hello", tools=["raed_file"])
    run = await agent.start("hello", tools=["read_file"])

    assert refused.value.code is ErrorCode.TOOL_NOT_FOUND
    assert (await run.wait_for({Phase.WAITING_USER}, TIMEOUT)).phase is Phase.WAITING_USER
    queue = f"TaskQueue = '{agent.tarry.task_queue}' AND WorkflowType = 'CatalogueCheck'"
    async with asyncio.timeout(TIMEOUT):
        while len(checks := [c async for c in no_standalone_activities.list_workflows(queue)]) < 2:
            await asyncio.sleep(0.1)
    assert all(check.id.startswith(CHECK_ID_PREFIX) for check in checks)
