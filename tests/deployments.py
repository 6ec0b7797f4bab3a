"""Worker deployments in tests: making a build current as an operator does, and which
build a run is pinned to."""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.api.enums.v1 import VersioningBehavior
from temporalio.client import Client

from tarry.client import RunHandle
from tests.conftest import Agent, temporal_cli
from tests.faults import wait_until


async def make_current(temporal: Client, deployment: str, build: str) -> None:
    """Makes `build` the deployment's current version as an operator does (`temporal
    worker deployment set-current-version`), once the server has seen its workers poll
    every task queue of the current one (it refuses until then)."""

    async def made() -> bool:
        await temporal_cli(
            temporal, "worker", "deployment", "set-current-version",
            "--deployment-name", deployment, "--build-id", build, "--yes",
        )  # fmt: skip
        return True

    await wait_until(made, what=f"build {build} of {deployment} current")


async def build_of(agent: Agent, run: RunHandle) -> str:
    """The build the run's current execution is pinned to, once a worker took its first
    workflow task (before that, Temporal's description has no versioning info)."""
    pinned: list[str] = []

    async def taken() -> bool:
        described = await agent.tarry.client.get_workflow_handle(run.id).describe()
        info = described.raw_description.workflow_execution_info.versioning_info
        if info.behavior == VersioningBehavior.VERSIONING_BEHAVIOR_UNSPECIFIED:
            return False
        assert info.behavior == VersioningBehavior.VERSIONING_BEHAVIOR_PINNED, (run.id, info)
        pinned[:] = [info.deployment_version.build_id]
        return True

    await wait_until(taken, what=f"{run.id} pinned to a build")
    return pinned[0]


async def moved_to(agent: Agent, run: RunHandle, build: str) -> None:
    async def there() -> bool:
        return await build_of(agent, run) == build

    await wait_until(there, what=f"{run.id} on build {build}")


async def versioned_agent(
    agent_factory: Any, temporal: Client, **options: Any
) -> tuple[Agent, str]:
    """An agent whose worker is build v1, made current, of a deployment of its own, and
    the deployment's name; `options` as for `agent_factory`."""
    deployment = f"tarry-{uuid.uuid4().hex[:8]}"
    settings = {"tarry_deployment": deployment, "tarry_build_id": "v1"}
    agent: Agent = await agent_factory(worker_settings=settings, **options)
    await make_current(temporal, deployment, "v1")
    return agent, deployment
