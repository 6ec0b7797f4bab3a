"""`tarry doctor` as a person meets it: the real command against the session's dev
server, reporting what it finds and each problem as one line with its fix.

A refused TLS handshake is `tests/test_connection.py`'s (doctor is one of the commands
its refusal test runs). A worker deployment version still holding runs is not tested:
Tarry's workers are not versioned yet, and doctor only lists the
deployments the server reports, without counting their runs."""

from __future__ import annotations

import shlex
import uuid

from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client

from tests.cli import agent_env, cli_env
from tests.conftest import Agent, temporal_cli
from tests.test_connection import tarry


def problems(out: str) -> list[str]:
    return [
        line.removeprefix("problem: ") for line in out.splitlines() if line.startswith("problem: ")
    ]


def line_of(out: str, subject: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"{subject} "))


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
