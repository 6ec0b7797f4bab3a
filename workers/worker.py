"""The worker: runs `AgentRun` workflows, the `call_llm` activity and every tool."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from datetime import timedelta

from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.context import ContextStore
from activities.llm import ModelClient
from activities.tools import BUILTIN_TOOLS, Tool, ToolHost
from tarry.client import connect_temporal
from tarry.servers import missing_search_attributes, search_attribute_command
from tarry.settings import (
    DEFAULT_STICKY_TIMEOUT,
    DEFAULT_WORKFLOW_CACHE,
    DEFAULT_WORKFLOW_TASK_POLLERS,
    TarrySettings,
)
from tarry.storage import storage_driver
from workers import legacy_query
from workers.memory import keep_memory_flat
from workflows.agent_run import AgentRunWorkflow

log = logging.getLogger("tarry.worker")


def build_worker(
    client: Client,
    task_queue: str,
    models: ModelClient,
    tools: ToolHost,
    *,
    workflow_cache: int = DEFAULT_WORKFLOW_CACHE,
    workflow_task_pollers: int = DEFAULT_WORKFLOW_TASK_POLLERS,
    sticky_timeout: float = DEFAULT_STICKY_TIMEOUT,
) -> Worker:
    """Raises `legacy_query.LegacyQueryHookMissing` when a cache is asked for and the SDK
    lacks what its workaround needs."""
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentRunWorkflow],
        activities=[models.call_llm, *tools.activities()],
        # A run not in the cache replays its history (one continue-as-new segment) on
        # its next workflow task; a run in it resumes where it left off.
        max_cached_workflows=workflow_cache,
        max_concurrent_workflow_task_polls=workflow_task_pollers,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=sticky_timeout),
    )
    if workflow_cache > 0:
        # Without a cache core evicts every run after each task: nothing to work around.
        legacy_query.install(worker)
    return worker


class WorkerSetupError(Exception):
    """The worker cannot serve runs as configured; the message says what to do."""


async def check_search_attributes(client: Client, namespace: str) -> None:
    """Refuses to start where runs could not record their phase: on such a namespace
    every workflow task would fail (`search attribute ... is not defined`) forever."""
    try:
        missing = await missing_search_attributes(client, namespace)
    except RPCError as e:
        # Some deployments do not let workers read the namespace's schema; carry on.
        log.warning("cannot check Tarry's search attributes (%s); runs need them", e.message)
        return
    if missing:
        raise WorkerSetupError(
            f"namespace {namespace!r} lacks the search attributes {', '.join(missing)}; "
            f"create them with: {search_attribute_command(namespace)}"
        )


async def run_worker(settings: TarrySettings, tools: Sequence[Tool] = BUILTIN_TOOLS) -> None:
    """Serves `tools` until SIGINT or SIGTERM, then lets in-flight tasks finish and returns."""
    client = await connect_temporal(settings)
    await check_search_attributes(client, settings.temporal_namespace)
    host = ToolHost(settings.tarry_workspace_root, tools)
    contexts = ContextStore(storage_driver(settings), client.data_converter)
    models = ModelClient(settings.model_profiles(), host, contexts)
    worker = build_worker(
        client,
        settings.tarry_task_queue,
        models,
        host,
        workflow_cache=settings.tarry_workflow_cache,
        workflow_task_pollers=settings.tarry_workflow_task_pollers,
        sticky_timeout=settings.tarry_sticky_timeout,
    )
    keep_memory_flat()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        log.info(
            "worker ready: task queue %r on %s, tools: %s",
            settings.tarry_task_queue,
            settings.temporal_address,
            ", ".join(host.names),
        )
        await stop.wait()
        log.info("shutting down")
    await models.aclose()
