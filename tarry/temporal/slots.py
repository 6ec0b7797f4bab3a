"""Asking an owner's slots for one (`tarry.contracts.slots`), shared by the worker's
slot activities (`activities.slots`) and the door that refuses a start past the cap
(`tarry.client.starting`): on this floor, so a worker loads none of the client."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from tarry.contracts.slots import (
    ACQUIRE_UPDATE,
    RELEASE_UPDATE,
    SLOTS_WORKFLOW,
    SlotAnswer,
    SlotRelease,
    SlotRequest,
    SlotsState,
    slots_id,
)

__all__ = ["SLOTS_SUMMARY", "acquire_slot", "release_slot"]

T = TypeVar("T")
SLOTS_SUMMARY = "Tarry's concurrent-run slots of {owner}, not a run"
NOT_STARTED_GRACE = timedelta(minutes=1)
"""A holder with no workflow yet is a run its door is starting: past this, its door
gave up (or crashed) and the slot is freed."""
BUSY = frozenset({RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE})
"""The server's refusals of an update while the workflow has others in flight."""


async def acquire_slot(client: Client, asked: SlotRequest, task_queue: str) -> SlotAnswer:
    """`asked`'s answer from its owner's slots, started if they are not running
    (update-with-start: whoever comes first starts them). At a full cap, the holders
    whose runs have closed are named and the ask is made again once, freeing them."""
    answer = await _ask(client, asked, task_queue)
    if answer.granted or asked.gone:
        return answer
    gone = await _closed(client, answer.holders)
    if not gone:
        return answer
    return await _ask(client, asked.model_copy(update={"gone": gone}), task_queue)


async def release_slot(client: Client, released: SlotRelease) -> None:
    """Frees `released`'s slot; slots that have ended hold nothing to free."""
    handle = client.get_workflow_handle(slots_id(released.owner))
    try:
        await _patiently(lambda: handle.execute_update(RELEASE_UPDATE, released))
    except RPCError as e:
        if e.status is not RPCStatusCode.NOT_FOUND:
            raise


async def _ask(client: Client, asked: SlotRequest, task_queue: str) -> SlotAnswer:
    owner = asked.cap.owner
    start: WithStartWorkflowOperation[Any, SlotsState] = WithStartWorkflowOperation(
        SLOTS_WORKFLOW,
        SlotsState(owner=owner, max_runs=asked.cap.max_runs),
        id=slots_id(owner),
        task_queue=task_queue,
        result_type=SlotsState,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        static_summary=SLOTS_SUMMARY.format(owner=owner),
    )
    return await _patiently(
        lambda: client.execute_update_with_start_workflow(
            ACQUIRE_UPDATE, asked, start_workflow_operation=start, result_type=SlotAnswer
        )
    )


async def _closed(client: Client, holders: dict[str, datetime]) -> list[str]:
    """The holders whose runs have closed, or never started within the grace."""
    now = datetime.now(UTC)

    async def closed(run_id: str, since: datetime) -> bool:
        try:
            description = await client.get_workflow_handle(run_id).describe()
        except RPCError as e:
            if e.status is not RPCStatusCode.NOT_FOUND:
                raise
            return now - since > NOT_STARTED_GRACE
        return description.status is not WorkflowExecutionStatus.RUNNING

    found = await asyncio.gather(*(closed(run_id, since) for run_id, since in holders.items()))
    return [run_id for run_id, is_closed in zip(holders, found, strict=True) if is_closed]


async def _patiently(send: Callable[[], Awaitable[T]]) -> T:
    """`send()`, sent again after a short, random pause while the server refuses it for
    the updates in flight (ten at once per workflow): many starts of one owner at once
    queue here."""
    while True:
        try:
            return await send()
        except RPCError as e:
            if e.status not in BUSY:
                raise
        await asyncio.sleep(random.uniform(0.01, 0.1))
