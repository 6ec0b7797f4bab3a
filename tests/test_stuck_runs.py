"""A run whose workflow task fails at every attempt cannot answer or move: every door
says so, with the failure Temporal recorded, instead of "Temporal unavailable, try
again" (a retry mends nothing until a worker can complete the task)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from temporalio.client import Client, WorkflowExecutionStatus

from tarry.client import RunHandle, Tarry, TarryError
from tarry.client.delivery import task_failing
from tarry.contracts import ErrorCode, RunInput, StopRequest
from tarry.temporal.codec import new_key
from tests.cli import Cli, until_listed
from tests.conftest import Agent
from tests.deadline import deadline
from tests.grpc_faults import TERMINATE_WORKFLOW_EXECUTION, failing_proxy
from tests.http_api import serving
from tests.test_http_api_auth import routes
from tests.test_large_payloads import storing_client

REASON = "Failed decoding arguments"


@pytest.fixture
async def stuck(
    agent_factory: Any, temporal: Client, tmp_path: Path
) -> AsyncIterator[tuple[Agent, RunHandle]]:
    """A run started with an encryption key its worker lacks: the worker cannot read its
    input, so its first workflow task fails again and again."""
    agent: Agent = await agent_factory()
    keyed = await storing_client(
        temporal, tarry_encryption_key=SecretStr(new_key()), tarry_storage_dir=tmp_path
    )
    started = await Tarry(keyed, agent.tarry.task_queue).start(RunInput(prompt="hello"))
    # Stuck once its task has failed, and visible to a listing (`tarry doctor` lists the
    # open runs): a command in this process asks at once, sooner than a process could.
    handle = temporal.get_workflow_handle(started.id)
    async with asyncio.timeout(deadline(30)):
        while await task_failing(temporal, (await handle.describe()).raw_description) is None:
            await asyncio.sleep(0.1)
    await until_listed(temporal, "ExecutionStatus = 'Running'", started.id)
    yield agent, agent.tarry.get(started.id)
    if (await handle.describe()).status is WorkflowExecutionStatus.RUNNING:  # not ended by the test
        await handle.terminate("the test is over")


async def test_the_client_says_the_run_is_stuck_and_why(stuck: tuple[Agent, RunHandle]) -> None:
    _, run = stuck

    with pytest.raises(TarryError) as raised:
        await run.state()

    assert raised.value.code is ErrorCode.RUN_TASK_FAILING
    assert REASON in raised.value.message


async def test_tarry_status_says_the_run_is_stuck_and_why(stuck: tuple[Agent, RunHandle]) -> None:
    agent, run = stuck

    result = await Cli.of(agent)("status", run.id)

    result.assert_one_error_line("error: RUN_TASK_FAILING:")
    assert REASON in result.err


async def test_the_api_answers_502_run_task_failing_with_the_reason(
    stuck: tuple[Agent, RunHandle],
) -> None:
    agent, run = stuck

    async with serving(agent) as api:
        answer = await api.http.get(f"/v1/runs/{run.id}")

    assert answer.status_code == 502, answer.text
    error = answer.json()["error"]
    assert error["code"] == ErrorCode.RUN_TASK_FAILING
    assert REASON in error["message"]


async def test_tarry_doctor_names_the_stuck_run_and_why(stuck: tuple[Agent, RunHandle]) -> None:
    agent, run = stuck

    result = await Cli.of(agent)("doctor")

    assert result.code == 1, result
    problems = [line for line in result.out.splitlines() if line.startswith("problem: ")]
    assert [p for p in problems if f"run {run.id!r} is stuck" in p and REASON in p], problems


STUCK_BODIES = {
    "messages": {"text": "are you there?"},
    "reply-policy": {"on_reply_while_running": "queue"},
    "approvals": {"approved": True},
    "budget": {"max_cost_usd": 1},
    "model": {"profile": "default"},
    "fork": {"at": 0},
}
"""A valid body for each route of a run that needs one; the others take `{}`."""


async def test_no_route_of_a_stuck_run_answers_try_again(stuck: tuple[Agent, RunHandle]) -> None:
    """Each route that names a run (but its endless event stream) says what is wrong:
    503 `TEMPORAL_UNAVAILABLE` "try again" would be asked again forever."""
    agent, run = stuck
    named = [
        (method, path.replace("run-x", run.id))
        for method, path in routes()
        if "/run-x" in path and not path.endswith("/events")
    ]

    async with serving(agent) as api:
        answers = {
            (method, path): await api.http.request(
                method, path, json=STUCK_BODIES.get(path.rsplit("/", 1)[-1], {})
            )
            for method, path in named
        }

    assert len(answers) >= 12
    for route, answer in answers.items():
        assert answer.status_code != 503, (route, answer.text)


async def terminated_event(temporal: Client, run: RunHandle) -> Any:
    """The `WorkflowExecutionTerminated` event of the run's history."""
    history = await temporal.get_workflow_handle(run.id).fetch_history()
    (event,) = [
        e.workflow_execution_terminated_event_attributes
        for e in history.events
        if e.HasField("workflow_execution_terminated_event_attributes")
    ]
    return event


async def test_stop_ends_a_run_whose_task_keeps_failing_and_names_who_stopped_it(
    stuck: tuple[Agent, RunHandle], temporal: Client
) -> None:
    _, run = stuck

    await run.stop("it keeps failing")

    described = await temporal.get_workflow_handle(run.id).describe()
    assert described.status is WorkflowExecutionStatus.TERMINATED
    terminated = await terminated_event(temporal, run)
    stopper = f"{run.caller.user} (cli)"
    assert terminated.identity == stopper
    assert terminated.reason.startswith(f"stopped by {stopper}. ")
    [stop] = await temporal.data_converter.decode(terminated.details.payloads, [StopRequest])
    assert (stop.by, stop.door, stop.reason) == (run.caller.user, "cli", "it keeps failing")


async def test_a_stop_whose_termination_the_server_cancelled_asks_again_and_ends_the_run(
    stuck: tuple[Agent, RunHandle], temporal: Client
) -> None:
    agent, run = stuck
    target = temporal.service_client.config.target_host

    async with failing_proxy(target, TERMINATE_WORKFLOW_EXECUTION, times=1) as proxy:
        through = await Client.connect(
            proxy.address, namespace=temporal.namespace, data_converter=temporal.data_converter
        )
        await Tarry(through, agent.tarry.task_queue).get(run.id).stop("it keeps failing")

    assert proxy.failed == 1
    described = await temporal.get_workflow_handle(run.id).describe()
    assert described.status is WorkflowExecutionStatus.TERMINATED


async def test_over_http_a_stop_ends_a_run_whose_task_keeps_failing(
    stuck: tuple[Agent, RunHandle], temporal: Client
) -> None:
    agent, run = stuck

    async with serving(agent) as api:
        answer = await api.http.post(f"/v1/runs/{run.id}/stop", json={"reason": "stuck"})
        await until_listed(temporal, "ExecutionStatus = 'Terminated'", run.id)
        # Among the phase's runs, not the newest page of all: other tests start runs too.
        listed = await api.http.get("/v1/runs?phase=Failed&limit=1000")

    assert answer.status_code == 202, answer.text
    terminated = await terminated_event(temporal, run)
    assert terminated.identity.endswith(" (api)")
    assert terminated.reason.startswith(f"stopped by {terminated.identity}. ")
    assert {r["id"]: r["phase"] for r in listed.json()["runs"]}[run.id] == "Failed"
