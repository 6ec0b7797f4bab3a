"""How `stop` ends a run, even one that cannot read it.

`stop` is a signal: the run reads it at its next workflow task, and ends (a waiting run
completes, a working one is aborted) with its reason in its state and result. A run whose
workflow task fails at every attempt never reads it: code that raises, or runs past the
SDK's deadlock detector (2 s), or a payload its workers cannot decode, fails the task
again and again, the signal waits in history behind it, and the run holds a worker's
core for as long as it lasts. A stop that only asked would change nothing.

So a stop sent while the run's workflow task is failing gives the run `STOP_GRACE` to
end on its own (a worker that has just been mended does), and terminates it if it is
still open then. The termination's reason and identity name who stopped it and through
which door, and its details hold the stop (its reason too, a payload, encrypted as the
signal is): Temporal records them in the run's history (its `WorkflowExecutionTerminated`
event), which needs no worker to read. A run that is only slow, or that no worker serves
now (its last attempt timed out, none failed), is never terminated: it reads the stop
when a worker gets to it.
"""

from __future__ import annotations

import asyncio

from temporalio.api.common.v1 import Payloads, WorkflowExecution
from temporalio.api.workflowservice.v1 import TerminateWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from tarry.client.delivery import polling_pauses, task_failing
from tarry.client.temporal_errors import translated_errors
from tarry.contracts import RunResult, StopRequest

__all__ = ["STOP_GRACE", "stop_run"]

STOP_GRACE = 5.0
"""Seconds a run whose workflow task was failing when it was stopped has to end on its
own before the stop terminates it."""

_TERMINATE_ATTEMPTS = 3
"""How often a stop asks to terminate: a busy dev server has answered the call with
`CANCELLED` ("operation was canceled"), which says neither that the run ended nor that
it did not. Asking again is safe: once the run has ended, the server answers
`NOT_FOUND`."""

_NOBODY = "temporal-ui"
"""Who and which door a stop names when it names none (the audit trail's word)."""


async def stop_run(
    client: Client, handle: WorkflowHandle[object, RunResult], request: StopRequest
) -> None:
    """Sends the `stop` signal; terminates the run if its workflow task was failing
    and it has not ended within `STOP_GRACE`."""
    async with translated_errors(handle.id):
        failing = await _task_failing(client, handle)
        await handle.signal("stop", request)
        if not failing or await _ended_within(handle, STOP_GRACE):
            return
    request_to_end = TerminateWorkflowExecutionRequest(
        namespace=client.namespace,
        workflow_execution=WorkflowExecution(workflow_id=handle.id),
        reason=termination_reason(request),
        identity=stopper(request),
        # The stop itself, its reason with it, as a payload: encrypted like the signal.
        details=Payloads(payloads=await client.data_converter.encode([request])),
    )
    for attempt in range(1, _TERMINATE_ATTEMPTS + 1):
        try:
            await client.workflow_service.terminate_workflow_execution(request_to_end)
            return
        except RPCError as e:
            if e.status is RPCStatusCode.NOT_FOUND:
                return  # It ended (by itself, or by the call before this one), as asked.
            if e.status is not RPCStatusCode.CANCELLED or attempt == _TERMINATE_ATTEMPTS:
                raise


def stopper(request: StopRequest) -> str:
    """Who stopped a run and through which door, as a termination's identity."""
    door = request.door.value if request.door else _NOBODY
    return f"{request.by or _NOBODY} ({door})"


def termination_reason(request: StopRequest) -> str:
    """The reason a stop that terminates the run records in its history: plain text,
    which payload encryption does not cover, so who and why, not the stop's own reason
    (in the termination's details)."""
    return (
        f"stopped by {stopper(request)}. The run's workflow task kept failing, so it could"
        " not read the stop: see its last WorkflowTaskFailed event and the workers' log"
    )


async def _task_failing(client: Client, handle: WorkflowHandle[object, RunResult]) -> bool:
    """Whether the run is open and an attempt of its workflow task failed (not only
    timed out: a worker that restarted mends that)."""
    description = await handle.describe()
    if description.status is not WorkflowExecutionStatus.RUNNING:
        return False
    return await task_failing(client, description.raw_description, failed_only=True) is not None


async def _ended_within(handle: WorkflowHandle[object, RunResult], seconds: float) -> bool:
    """Whether the run's latest execution closes within `seconds`."""
    pauses = polling_pauses()
    try:
        async with asyncio.timeout(seconds):
            while True:
                if (await handle.describe()).status is not WorkflowExecutionStatus.RUNNING:
                    return True
                await asyncio.sleep(next(pauses))
    except TimeoutError:
        return False
