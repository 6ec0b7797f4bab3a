"""`tarry doctor` as a person meets it: the real command against the session's dev
server, reporting what it finds and each problem as one line with its fix.

A refused TLS handshake is `tests/test_connection.py`'s (doctor is one of the commands
its refusal test runs); a version draining to zero open runs in a whole rolling deploy,
`tests/test_rolling_deploy.py`'s."""

from __future__ import annotations

import shlex
import uuid
from typing import Any

from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client

from tarry.contracts import WORKFLOW_TYPE
from tests.cli import agent_env, cli_env
from tests.conftest import Agent, temporal_cli
from tests.deployments import build_of, make_current, moved_to, versioned_agent
from tests.faults import wait_until
from tests.test_connection import tarry


def problems(out: str) -> list[str]:
    return [
        line.removeprefix("problem: ") for line in out.splitlines() if line.startswith("problem: ")
    ]


def line_of(out: str, subject: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"{subject} "))


async def deployment_report(agent: Agent, deployment: str) -> tuple[str, list[str]]:
    """`tarry doctor`'s line of the deployment, and its problems with it."""
    result = await tarry(agent_env(agent), "doctor")
    [line] = [x for x in result.out.splitlines() if x.startswith(f"Deployment   {deployment}: ")]
    return line, [p for p in problems(result.out) if f"deployment {deployment!r}" in p]


async def test_a_healthy_stack_reports_the_server_and_the_pollers_and_exits_0(agent: Agent) -> None:
    result = await tarry(agent_env(agent), "doctor")

    assert (result.code, result.err) == (0, ""), result
    assert problems(result.out) == []
    assert line_of(result.out, "Server").startswith("Server       Temporal 1.")
    assert line_of(result.out, "Namespace") == "Namespace    default"
    assert line_of(result.out, "TLS") == "TLS          off"
    assert line_of(result.out, "Search attrs") == "Search attrs all of Tarry's are there"
    queue = line_of(result.out, "Task queue")
    assert queue.startswith(f"Task queue   {agent.tarry.task_queue} (workflow: ")
    assert "no poller" not in queue


async def test_no_worker_on_the_task_queue_is_a_problem_that_says_how_to_start_one(
    temporal: Client,
) -> None:
    queue = f"unserved-{uuid.uuid4().hex[:8]}"

    result = await tarry(cli_env(temporal.service_client.config.target_host, queue), "doctor")

    assert result.code == 1, result
    assert problems(result.out) == [
        f"no worker polls task queue {queue!r} for {kind} tasks; start one "
        f"(`tarry worker` with TARRY_TASK_QUEUE={queue})"
        for kind in ("workflow", "activity")
    ]


async def test_missing_search_attributes_are_a_problem_whose_command_creates_them(
    agent: Agent, temporal: Client
) -> None:
    namespace = f"bare-{uuid.uuid4().hex[:6]}"
    await temporal.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    env = agent_env(agent) | {"TEMPORAL_NAMESPACE": namespace}

    before = await tarry(env, "doctor")
    [missing] = [p for p in problems(before.out) if "search attributes" in p]
    command = missing.split("create them with: ")[1]
    assert command.startswith(f"temporal operator search-attribute create --namespace {namespace}")
    await temporal_cli(temporal, *shlex.split(command)[1:])
    after = await tarry(env, "doctor")

    assert before.code == 1
    assert missing.startswith(f"namespace {namespace!r} lacks the search attributes Tarry")
    assert line_of(after.out, "Search attrs") == "Search attrs all of Tarry's are there"
    assert not [p for p in problems(after.out) if "search attributes" in p]


async def test_a_version_no_longer_current_holding_runs_is_a_problem_whose_command_moves_them(
    agent_factory: Any, temporal: Client
) -> None:
    agent, deployment = await versioned_agent(agent_factory, temporal)
    parked = await agent.start()  # no prompt: it waits for its first message
    # Pinned once v1 completes its first workflow task, not at its start: a run that v1
    # had not taken yet when v2 is made current would start on v2.
    assert await build_of(agent, parked) == "v1"
    await agent.add_worker(tarry_build_id="v2")
    await make_current(temporal, deployment, "v2")

    line, [problem] = await deployment_report(agent, deployment)
    wake = problem.split("wake them all now with: ")[1]
    await temporal_cli(temporal, *shlex.split(wake)[1:])
    await moved_to(agent, parked, "v2")

    async def drained() -> bool:
        return (await deployment_report(agent, deployment))[1] == []

    await wait_until(drained, what=f"v1 of {deployment} drained")
    after, _ = await deployment_report(agent, deployment)
    assert line == f"Deployment   {deployment}: v2 current (0 open runs), v1 draining (1 open run)"
    assert problem == (
        f"version v1 of deployment {deployment!r} is no longer current and still holds 1 "
        "open run, each moving to the current version at its next reply: keep its workers "
        "until `tarry doctor` counts none, or wake them all now with: "
        f"temporal workflow signal --namespace default --name wake --yes --query "
        f"\"WorkflowType = '{WORKFLOW_TYPE}' AND TemporalWorkerDeploymentVersion = "
        f"'{deployment}:v1' AND ExecutionStatus = 'Running'\""
    )
    assert after == f"Deployment   {deployment}: v2 current (1 open run), v1 draining (0 open runs)"
