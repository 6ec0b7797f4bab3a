"""A start that the client checked with the workers carries the catalogue they answered:
the run resolves nothing of its own, one activity fewer between a start and its first
answer (issue 62). What the run may use is the workers' as before. A client keeps an answer
that let a run start, and asks the same workers the same again only after a while."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from activities.tool_calls import BUILTIN_TOOLS, ToolHost, tool
from tarry.client.delivery import await_poller
from tarry.client.starting import asked_the_workers
from tarry.contracts import (
    CHECKED_CATALOGUE_ACTIVITY,
    TOOL_CATALOGUE_ACTIVITY,
    CatalogueRequest,
    CheckedCatalogue,
    ErrorCode,
    Phase,
)
from tarry.contracts.activities import FOLDED_CATALOGUE_LIMIT
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.test_approvals import scheduled
from workflows.catalogue_check import CatalogueCheckWorkflow


def offered(agent: Agent) -> list[str]:
    """The tools the model was offered at its first call."""
    return [t["function"]["name"] for t in agent.model.requests[0].body["tools"]]


async def test_a_checked_start_runs_on_the_catalogue_its_check_answered(agent: Agent) -> None:
    agent.model.add(call("read_file", {"path": "notes.txt"}), say("No notes yet."))

    run = await agent.start("Read my notes", tools=["read_file"])  # names a tool: checked
    state = await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    assert state.phase is Phase.WAITING_USER
    assert offered(agent) == ["read_file", "finish"]
    assert await scheduled(agent, run, "read_file") == 1
    assert await scheduled(agent, run, TOOL_CATALOGUE_ACTIVITY) == 0


@tool(description="The whole manual, to be read first. " + "x" * FOLDED_CATALOGUE_LIMIT)
def manual() -> str:
    """A tool whose description alone is over what a worker answers a check with."""
    return "See the manual."


async def test_a_catalogue_too_large_to_carry_in_a_start_is_resolved_by_the_run(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(tools=[manual])
    agent.model.add(say("Read it."))

    run = await agent.start("What does the manual say?", tools=["manual"])
    state = await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    assert state.phase is Phase.WAITING_USER
    assert offered(agent) == ["manual", "finish"]
    assert await scheduled(agent, run, TOOL_CATALOGUE_ACTIVITY) == 1


async def test_a_worker_older_than_the_client_still_answers_its_check(
    temporal: Client, tmp_path: Path
) -> None:
    """A worker from before `checked_catalogue` answers with `catalogue_check`: the start is
    still refused or allowed by its workers, and the run then resolves its tools itself."""
    host = ToolHost(tmp_path)
    older = [
        fn
        for fn in host.activities()
        if getattr(activity._Definition.from_callable(fn), "name", None)
        != CHECKED_CATALOGUE_ACTIVITY
    ]
    queue = f"older-{uuid.uuid4().hex[:8]}"

    async with Worker(
        temporal, task_queue=queue, activities=older, workflows=[CatalogueCheckWorkflow]
    ):
        refused = await asked_the_workers(
            temporal, queue, CatalogueRequest(tools=["raed_file"]), "run-refused"
        )
        allowed = await asked_the_workers(
            temporal, queue, CatalogueRequest(tools=["read_file"]), "run-allowed"
        )

    assert refused.refusal is not None
    assert refused.refusal.code is ErrorCode.TOOL_NOT_FOUND
    assert allowed == CheckedCatalogue()


# --- Answers kept for the next start ----------------------------------------------------

READ_FILE = CatalogueRequest(tools=["read_file"])


def worker(
    temporal: Client, queue: str, identity: str, root: Path, lacks: Sequence[str] = ()
) -> Worker:
    """A worker of `queue` answering checks as `identity`, without the built-in tools `lacks`."""
    host = ToolHost(root, tools=[t for t in BUILTIN_TOOLS if t.name not in lacks])
    return Worker(
        temporal,
        task_queue=queue,
        activities=host.activities(),
        workflows=[CatalogueCheckWorkflow],
        identity=identity,
        build_id="checked-starts",
    )


async def polling(temporal: Client, queue: str, identity: str) -> None:
    """Once the server lists `identity` among `queue`'s pollers."""
    async with asyncio.timeout(TIMEOUT):
        while not any(
            w.startswith(f"{identity}@") for w in await await_poller(temporal, queue, "")
        ):
            await asyncio.sleep(0.1)


async def test_a_start_the_same_workers_allowed_is_not_asked_of_them_again(
    temporal: Client, tmp_path: Path
) -> None:
    """Shown by a worker that lost `read_file` but polls under the same identity and
    build: the answer the worker gave before stands."""
    queue = f"kept-{uuid.uuid4().hex[:8]}"
    async with worker(temporal, queue, "worker-1", tmp_path):
        first = await asked_the_workers(temporal, queue, READ_FILE, "run-1")
    async with worker(temporal, queue, "worker-1", tmp_path, lacks=["read_file"]):
        second = await asked_the_workers(temporal, queue, READ_FILE, "run-2")

    assert first.refusal is None
    assert second == first


async def test_a_start_is_asked_again_once_another_worker_polls(
    temporal: Client, tmp_path: Path
) -> None:
    queue = f"kept-{uuid.uuid4().hex[:8]}"
    async with worker(temporal, queue, "worker-1", tmp_path):
        first = await asked_the_workers(temporal, queue, READ_FILE, "run-1")
    async with worker(temporal, queue, "worker-2", tmp_path, lacks=["read_file"]):
        await polling(temporal, queue, "worker-2")
        second = await asked_the_workers(temporal, queue, READ_FILE, "run-2")

    assert first.refusal is None
    assert second.refusal is not None
    assert second.refusal.code is ErrorCode.TOOL_NOT_FOUND


async def test_a_refused_start_is_asked_again(temporal: Client, tmp_path: Path) -> None:
    queue = f"kept-{uuid.uuid4().hex[:8]}"
    async with worker(temporal, queue, "worker-1", tmp_path, lacks=["read_file"]):
        refused = await asked_the_workers(temporal, queue, READ_FILE, "run-1")
    async with worker(temporal, queue, "worker-1", tmp_path):
        allowed = await asked_the_workers(temporal, queue, READ_FILE, "run-2")

    assert refused.refusal is not None
    assert allowed.refusal is None
    assert allowed.catalogue is not None
