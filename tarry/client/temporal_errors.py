"""How the client turns Temporal's errors into `TarryError`s: a caller meets a Tarry code,
never a raw RPC or update error. It loads no client: `temporalio.client`, whose update
error it translates, is imported where that error is met.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from temporalio.api.errordetails.v1 import MultiOperationExecutionFailure, WorkflowNotReadyFailure
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from tarry.contracts import ErrorCode
from tarry.core.errors import TarryError

if TYPE_CHECKING:
    from temporalio.client import WorkflowUpdateFailedError

__all__ = ["translated_errors", "unadmitted"]

_UNPROCESSED_UPDATE = "UnprocessedUpdate"
"""The server's failure type for an update a worker completed a task without taking in
(Temporal's `unprocessedUpdateFailure`): rejected, never entered, safe to send again."""
_UPDATE_OUTLIVED_RUN = "AcceptedUpdateCompletedWorkflow"
"""The server's failure type for an accepted update whose run ended before it did."""


_NEVER_STARTED = "closed before WorkflowTaskStarted"
"""Temporal's refusal of a query to a run closed before any workflow task of it started."""


@asynccontextmanager
async def translated_errors(run_id: str) -> AsyncIterator[None]:
    """Turns the RPC and update errors a caller can act on into `TarryError`s."""
    from temporalio.client import WorkflowUpdateFailedError

    try:
        yield
    except RPCError as e:
        if e.status is RPCStatusCode.FAILED_PRECONDITION and "no poller" in e.message:
            # A query to a run whose task queue no worker has polled for a while.
            raise TarryError(
                ErrorCode.RUN_NOT_SERVED,
                f"no worker polls the task queue of run {run_id!r}, so it cannot answer;"
                " start one with `tarry worker` or `tarry dev`",
            ) from e
        if e.status is RPCStatusCode.FAILED_PRECONDITION and _NEVER_STARTED in e.message:
            # A query to a run that ended before a worker completed its first task.
            raise TarryError(
                ErrorCode.RUN_ENDED,
                f"run {run_id!r} ended before a worker completed its first workflow task"
                " (stopped while that task kept failing): it holds nothing to read or resume;"
                " start a new run",
            ) from e
        if e.status is not RPCStatusCode.NOT_FOUND:
            raise
        # An update to an ended run ("workflow execution already completed"), or one
        # the run ended under ("workflow update was aborted by closing workflow").
        if "completed" in e.message or "closing workflow" in e.message:
            raise TarryError(ErrorCode.RUN_ENDED, f"run {run_id!r} has ended") from e
        raise TarryError(
            ErrorCode.RUN_NOT_FOUND,
            f"no run {run_id!r}; `tarry list` shows the runs there are",
        ) from e
    except WorkflowUpdateFailedError as e:
        cause = e.cause
        if isinstance(cause, ApplicationError) and cause.type in set(ErrorCode):
            raise TarryError(ErrorCode(cause.type), cause.message) from e
        if isinstance(cause, ApplicationError) and cause.type == _UPDATE_OUTLIVED_RUN:
            raise TarryError(ErrorCode.RUN_ENDED, f"run {run_id!r} ended first") from e
        # Every update failure leaves as a Tarry code, also one Tarry does not foresee.
        raise TarryError(
            ErrorCode.UPDATE_FAILED, f"run {run_id!r} refused the update: {cause}"
        ) from e
    except ApplicationError as e:  # raised here by the data converter: `PAYLOAD_NOT_STORED`
        if e.type not in set(ErrorCode):
            raise
        raise TarryError(ErrorCode(e.type), e.message) from e


def unadmitted(e: RPCError | WorkflowUpdateFailedError) -> bool:
    """The server's refusal of an update it did not admit: while the run's workflow task
    is failing (an RPC error; for an update with start, that of its operation in the
    call's `MultiOperationExecutionFailure`), or one a worker left unprocessed (the
    update's outcome)."""
    from temporalio.client import WorkflowUpdateFailedError

    if isinstance(e, WorkflowUpdateFailedError):
        cause = e.cause
        return isinstance(cause, ApplicationError) and cause.type == _UNPROCESSED_UPDATE
    details = list(e.grpc_status.details)
    operations = MultiOperationExecutionFailure()
    if details and details[0].Unpack(operations):
        details = [d for status in operations.statuses for d in status.details]
    return any(d.Is(WorkflowNotReadyFailure.DESCRIPTOR) for d in details)
