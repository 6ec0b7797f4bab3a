"""What `tarry doctor` does (its command is in `local`, which imports this module only when
it runs): connect as every Tarry process does and say what it finds there.

The server and its version, the namespace, TLS and who this process is to the server,
Tarry's search attributes, the task queues' pollers, the worker deployments the server
knows with the open runs each of their builds holds, and the open runs whose workflow
task keeps failing. Each problem is one line with its fix, and makes the exit code 1; a
connection refused (TLS) or impossible ends it as any command's does (`common`).
`tarry dev` prints the same report at its start (`report`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from temporalio.api.enums.v1 import TaskQueueType, WorkerDeploymentVersionStatus
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeNamespaceRequest,
    DescribeTaskQueueRequest,
    DescribeWorkerDeploymentRequest,
    GetSystemInfoRequest,
    ListWorkerDeploymentsRequest,
    ListWorkerDeploymentsResponse,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from tarry.client.delivery import task_failing
from tarry.config.settings import TarrySettings
from tarry.contracts import WORKFLOW_TYPE
from tarry.core.errors import TarryError
from tarry.temporal.connection import TemporalConnection, connect_temporal, temporal_connection
from tarry.temporal.servers import missing_search_attributes, search_attribute_command

__all__ = ["Report", "examine", "report"]

_KINDS = {
    "workflow": TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    "activity": TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
}


@dataclass
class Report:
    """What `tarry doctor` found: `lines` to show, one per subject, and `problems`, each
    one line with its fix."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, subject: str, text: str) -> None:
        self.lines.append(f"{subject:<13}{text}")


async def report(
    client: Client,
    connection: TemporalConnection,
    settings: TarrySettings,
    *,
    pollers: bool = True,
) -> Report:
    """Asks the server `client` is connected to about everything a Tarry deployment needs
    of it; without `pollers` (`tarry dev`, whose worker is only starting) who polls the
    task queues is left out. Never shows the API key: only that there is one."""
    found = Report()
    namespace = client.namespace
    info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
    source = f"profile {connection.profile} of {connection.config_file}"
    found.add(
        "Server",
        f"Temporal {info.server_version or '(version unknown)'} at {connection.address} "
        f"({source if connection.config_file else 'no profile file'})",
    )
    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=namespace)
        )
        found.add("Namespace", namespace)
    except RPCError as e:
        found.add("Namespace", f"{namespace} ({e.status.name})")
        if e.status is RPCStatusCode.NOT_FOUND:
            found.problems.append(
                f"namespace {namespace!r} does not exist; create it with "
                f"`temporal operator namespace create {namespace}` or set TEMPORAL_NAMESPACE"
            )
            return found  # nothing else can be asked of a namespace that is not there
        found.problems.append(f"cannot describe namespace {namespace!r}: {e.message}")
    found.add("TLS", connection.tls_summary())
    found.add("Identity", client.identity)
    await _search_attributes(client, found)
    if pollers:
        await _pollers(client, settings, found)
    await _deployments(client, settings, found)
    await _stuck_runs(client, found)
    return found


async def _search_attributes(client: Client, found: Report) -> None:
    namespace = client.namespace
    try:
        missing = await missing_search_attributes(client, namespace)
    except RPCError as e:
        found.add("Search attrs", f"cannot list them ({e.status.name}: {e.message})")
        return
    if not missing:
        found.add("Search attrs", "all of Tarry's are there")
        return
    found.add("Search attrs", f"missing: {', '.join(missing)}")
    found.problems.append(
        f"namespace {namespace!r} lacks the search attributes {', '.join(missing)}; create "
        f"them with: {search_attribute_command(namespace, missing)}"
    )


async def _pollers(client: Client, settings: TarrySettings, found: Report) -> None:
    """Who polls the task queue of runs (workflows and activities) and each model
    profile's own queue (its activities)."""
    queues: dict[str, tuple[str, ...]] = {settings.tarry_task_queue: ("workflow", "activity")}
    for profile in settings.model_profiles().values():
        if profile.task_queue:
            queues.setdefault(profile.task_queue, ("activity",))
    for queue, kinds in queues.items():
        counts = []
        for kind in kinds:
            try:
                described = await client.workflow_service.describe_task_queue(
                    DescribeTaskQueueRequest(
                        namespace=client.namespace,
                        task_queue=TaskQueue(name=queue),
                        task_queue_type=_KINDS[kind],
                    )
                )
            except RPCError as e:
                counts.append(f"{kind}: cannot tell ({e.status.name})")
                continue
            pollers = sorted({poller.identity for poller in described.pollers})
            counts.append(f"{kind}: {', '.join(pollers) if pollers else 'no poller'}")
            if not pollers:
                found.problems.append(
                    f"no worker polls task queue {queue!r} for {kind} tasks; start one "
                    f"(`tarry worker` with TARRY_TASK_QUEUE={queue})"
                )
        found.add("Task queue", f"{queue} ({'; '.join(counts)})")


async def _deployments(client: Client, settings: TarrySettings, found: Report) -> None:
    """The worker deployments, each version that serves runs (current or ramping) or
    still holds some (draining), and how many open runs of the task queue each holds.
    An old version's runs move to the current one at their next hand-over: until they
    have, its workers must keep serving them."""
    try:
        listed = await client.workflow_service.list_worker_deployments(
            ListWorkerDeploymentsRequest(namespace=client.namespace)
        )
    except RPCError as e:
        found.add("Deployments", f"not reported by this server ({e.status.name})")
        return
    if not listed.worker_deployments:
        found.add("Deployments", "none (workers are unversioned)")
    for deployment in listed.worker_deployments:
        try:
            await _deployment(client, settings, deployment, found)
        except RPCError as e:
            found.add("Deployment", f"{deployment.name}: cannot tell ({e.status.name})")


async def _deployment(
    client: Client,
    settings: TarrySettings,
    deployment: ListWorkerDeploymentsResponse.WorkerDeploymentSummary,
    found: Report,
) -> None:
    """The deployment's line, and a problem for each old version still holding runs."""
    described = await client.workflow_service.describe_worker_deployment(
        DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployment.name)
    )
    routing = deployment.routing_config
    versions = []
    for summary in described.worker_deployment_info.version_summaries:
        if (status := _STATUSES.get(summary.status)) is None:
            continue  # never current, or drained: it holds no runs
        build = summary.deployment_version.build_id
        held = await _open_runs(client, settings, deployment.name, build)
        if status == "ramping":
            status += f" at {routing.ramping_version_percentage:g}%"
        runs = f"{held} open run{'' if held == 1 else 's'}"
        versions.append(f"{build} {status} ({runs})")
        if held and status == "draining":
            found.problems.append(
                f"version {build} of deployment {deployment.name!r} is no longer current "
                f"and still holds {runs}, each moving to the current version "
                "at its next reply: keep its workers until `tarry doctor` counts none, or "
                f"wake them all now with: "
                f"{_wake_command(client.namespace, deployment.name, build)}"
            )
    if routing.current_deployment_version.build_id == "":
        versions.insert(0, "current: unversioned workers")
    found.add("Deployment", f"{deployment.name}: {', '.join(versions) or 'no versions'}")


_STATUSES = {
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_CURRENT: "current",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_RAMPING: "ramping",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_DRAINING: "draining",
}
"""The statuses of the versions `tarry doctor` counts the runs of."""


def _version_query(deployment: str, build: str) -> str:
    """The visibility query of a version's open workflows."""
    return (
        f"TemporalWorkerDeploymentVersion = '{deployment}:{build}' AND ExecutionStatus = 'Running'"
    )


async def _open_runs(client: Client, settings: TarrySettings, deployment: str, build: str) -> int:
    """The open runs (and catalogue checks) of the task queue the version holds."""
    query = f"{_version_query(deployment, build)} AND TaskQueue = '{settings.tarry_task_queue}'"
    return (await client.count_workflows(query)).count


def _wake_command(namespace: str, deployment: str, build: str) -> str:
    """Wakes every open run of the version (`AgentRun.wake`, which changes nothing): a
    parked run learns only when woken that its build is no longer current."""
    query = f"WorkflowType = '{WORKFLOW_TYPE}' AND {_version_query(deployment, build)}"
    return f'temporal workflow signal --namespace {namespace} --name wake --yes --query "{query}"'


STUCK_RUNS_CHECKED = 200
"""The newest open runs `tarry doctor` asks whether their workflow task keeps failing:
Temporal's visibility does not tell, so each is described."""


async def _stuck_runs(client: Client, found: Report) -> None:
    """Open runs whose workflow task keeps failing: they answer no query and take no
    reply until a worker can complete it (`RUN_TASK_FAILING`)."""
    query = f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'"
    try:
        ids = [e.id async for e in client.list_workflows(query, limit=STUCK_RUNS_CHECKED)]
    except RPCError as e:
        found.add("Stuck runs", f"cannot list the open runs ({e.status.name})")
        return
    checks = asyncio.Semaphore(10)

    async def stuck(run_id: str) -> TarryError | None:
        async with checks:
            try:
                description = await client.get_workflow_handle(run_id).describe()
            except RPCError:
                return None  # closed meanwhile
            return await task_failing(client, description.raw_description)

    failing = [e for e in await asyncio.gather(*map(stuck, ids)) if e is not None]
    found.add("Stuck runs", f"{len(failing)} of the {len(ids)} newest open runs")
    found.problems += [e.message for e in failing]


async def examine(settings: TarrySettings) -> Report:
    """Connects as the process would and reports."""
    client = await connect_temporal(settings)
    return await report(client, temporal_connection(settings), settings)
