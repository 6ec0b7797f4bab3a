"""Starting a run: its workflow started, and its bare `WorkflowHandle` answered.

Three starts: a new run (`start_run`, which a fork is too), a run started by its first
message in the same call (`start_with_message`, the start-on-first-message door), and an
ended run going on under its id (`start_resumption`). Each answers Temporal's handle;
the caller wraps it (`Tarry.start` and `RunHandle.fork`/`resume` in a `RunHandle`), so
this room needs neither of theirs.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any

from temporalio.client import (
    ActivityFailureError,
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionDescription,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.common import (
    RetryPolicy,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from tarry.client.checked_starts import checked_starts
from tarry.client.delivery import NOT_READY_PATIENCE, Delivery, await_poller
from tarry.client.temporal_errors import translated_errors
from tarry.contracts import (
    CATALOGUE_CHECK_ACTIVITY,
    CATALOGUE_CHECK_WORKFLOW,
    CHECKED_CATALOGUE_ACTIVITY,
    RESUMED_SIGNAL,
    START_KEY_ATTRIBUTE,
    SUMMARY_MEMO,
    WORKFLOW_TYPE,
    Acting,
    Catalogue,
    CatalogueRequest,
    CheckedCatalogue,
    ErrorCode,
    ErrorInfo,
    Fork,
    RunInput,
    RunResult,
    RunState,
    UserInput,
    reserved_id_problem,
    run_id_problem,
)
from tarry.contracts.memories import MemoryAccess
from tarry.contracts.slots import RunCap, SlotRelease, SlotRequest
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.core.ownership import access_attributes, carried
from tarry.core.text import summary_of
from tarry.temporal.slots import acquire_slot, release_slot

__all__ = [
    "ID_REUSE",
    "LIMITS_CARRIED",
    "RunWorkflow",
    "admitted",
    "asked_the_workers",
    "checked_id",
    "refuse_unknown_names",
    "start_resumption",
    "start_run",
    "start_with_message",
    "started_by",
]

_log = logging.getLogger(__name__)

RunWorkflow = WorkflowHandle[Any, RunResult]
"""A run's workflow, as Temporal's handle gives it."""

ID_REUSE = WorkflowIDReusePolicy.REJECT_DUPLICATE
"""An ended run's id is taken too: a new conversation under it would hide the old one and
inherit its workspace. `resume` goes on with that run."""


async def start_run(
    client: Client,
    task_queue: str,
    caller: Caller,
    input: RunInput,
    *,
    run_id: str | None,
    memo: Mapping[str, Any] | None = None,
    fork: Fork | None = None,
    start_key: str | None = None,
) -> RunWorkflow:
    """Starts run `run_id` (`run-<short uuid>` by default) of `input` on `task_queue`,
    owned by `caller`, a fork of another run with `fork`, and checks the tools and the
    model profile it names with the workers first (see `Tarry.start`). `start_key` is
    kept as `TarryStartKey`: the digest of the request's idempotency key."""
    run_id = checked_id(f"run-{uuid.uuid4().hex[:8]}" if run_id is None else run_id)
    if problem := reserved_id_problem(run_id):
        raise TarryError(ErrorCode.RUN_ID_INVALID, problem)
    input = admitted(caller, input)
    named_profile = input.model != RunInput.model_fields["model"].default
    asks = input.tools is not None or input.require_approval or input.agents or named_profile
    catalogue: Catalogue | None = None
    if asks or input.memory_access is not MemoryAccess.OFF:  # a store the workers may lack
        catalogue = await refuse_unknown_names(client, task_queue, input, run_id, caller)
    # The workflow's own input: a fork's origin and first messages, and the catalogue the
    # workers answered, are not `RunInput`'s.
    payload = workflow_input(caller, input)
    if fork is not None:
        payload = {**as_dict(payload), "fork": fork.model_dump(mode="json")}
    if catalogue is not None:
        payload = {**as_dict(payload), "catalogue": catalogue.model_dump(mode="json")}
    summary = summary_of(input.prompt)
    async with slot_at_the_door(client, task_queue, run_cap(caller), run_id):
        try:
            return await client.start_workflow(
                WORKFLOW_TYPE,
                payload,
                id=run_id,
                task_queue=task_queue,
                result_type=RunResult,
                id_reuse_policy=ID_REUSE,
                # The UI's run list shows this, so runs can be told apart at a glance.
                static_summary=summary,
                # `tarry list` reads it here: list results carry a memo, not the summary.
                memo={**(memo or {}), SUMMARY_MEMO: summary},
                search_attributes=with_start_key(access_attributes(caller.user, input), start_key),
            )
        except WorkflowAlreadyStartedError:
            raise TarryError(
                ErrorCode.RUN_EXISTS,
                f"a run with id {run_id!r} exists already; choose another id, or go on with"
                " that run (`tarry resume` when it has ended)",
            ) from None


async def start_with_message(
    client: Client,
    task_queue: str,
    caller: Caller,
    input: RunInput,
    *,
    run_id: str,
    update: str,
    message: UserInput,
) -> RunState | None:
    """Starts run `run_id` of `input`, owned by `caller`, with the update `update` of
    `message` in one call, and answers the update's state; None, having delivered
    nothing, when a run has the id (open or ended) or only its schedule or lead may
    start it.

    The start is conditional (`WorkflowIDConflictPolicy.FAIL`): a message enters a run in
    the same call only when that call starts the run, as `caller`'s. Any other delivery
    goes to the run there is, once its right is checked: an id names one run for good
    (never reused, `ID_REUSE`), so the right to it that the check found cannot change
    before the delivery. The call goes through `Delivery`, asked again while the server
    refuses it without admitting the message, as every other reply is."""
    if reserved_id_problem(checked_id(run_id)):
        return None
    input = admitted(caller, input.model_copy(update=started_by(caller)))
    await await_poller(client, task_queue, run_id)
    summary = summary_of(input.prompt)

    def operation() -> WithStartWorkflowOperation[Any, RunResult]:
        return WithStartWorkflowOperation(
            WORKFLOW_TYPE,
            workflow_input(caller, input),
            id=run_id,
            task_queue=task_queue,
            result_type=RunResult,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            id_reuse_policy=ID_REUSE,
            static_summary=summary,
            memo={SUMMARY_MEMO: summary},
            search_attributes=access_attributes(caller.user, input),
        )

    delivery = Delivery(client, client.get_workflow_handle(run_id, result_type=RunResult))
    update_id = f"{update}-{message.id}" if message.id else None
    async with slot_at_the_door(client, task_queue, run_cap(caller), run_id) as slot:
        state = await delivery.update_with_start(update, message, operation, id=update_id)
        slot.started = state is not None
    return state


async def start_resumption(
    client: Client,
    ended: RunWorkflow,
    description: WorkflowExecutionDescription,
    acting: Acting,
) -> RunWorkflow:
    """Starts the run that goes on from the run `ended` (which `description` describes)
    under its id, on its task queue, `acting` named as who resumed it."""
    async with translated_errors(ended.id):
        # The workflow's own input, opaque here: the run builds it from its memory.
        resumption: dict[str, Any] = await ended.query("resumption", result_type=dict[str, Any])
        memo = await description.memo()
        summary = memo.get(SUMMARY_MEMO, "")
        # The owner's cap as the run carries it: a resumption past it is refused, as a start.
        cap = RunCap.model_validate(resumption["slots"]) if resumption.get("slots") else None
        async with slot_at_the_door(client, description.task_queue, cap, ended.id):
            return await client.start_workflow(
                WORKFLOW_TYPE,
                resumption,
                id=ended.id,
                task_queue=description.task_queue,
                result_type=RunResult,
                static_summary=summary or None,
                # All of it: what the request that started the run left there too.
                memo={**memo, SUMMARY_MEMO: summary},
                # Its owner and share stay; a resumption by an admin does not take it.
                search_attributes=carried(description.typed_search_attributes),
                # Who resumes it, for its trail, in the same request as the start.
                start_signal=RESUMED_SIGNAL,
                start_signal_args=[acting],
            )


def with_start_key(
    attributes: TypedSearchAttributes, start_key: str | None
) -> TypedSearchAttributes:
    if start_key is None:
        return attributes
    return attributes.updated(SearchAttributePair(START_KEY_ATTRIBUTE, start_key))


CHECK_ID_PREFIX = "tarry-internal-catalogue-check-"
"""The id of a client's catalogue check begins so: the Temporal UI lists it (among
standalone activities, or as a `CatalogueCheck` workflow beside the runs), and its id
says at a glance that it is no run."""
CHECK_SUMMARY = "Tarry's internal check, not a run: may {run_id!r} start?"
"""The check's summary in the Temporal UI."""
CHECK_DETAILS = (
    "Tarry asks a worker, before it starts run {run_id!r}, whether the worker has every"
    " tool, agent and model profile the run names, so that a typo refuses the start rather"
    " than failing a run. This workflow is that check, not a run: `tarry list`, the API and"
    " the inbox list runs only. To list runs alone here, query `WorkflowType = 'AgentRun'`."
)
"""The `CatalogueCheck` workflow's details in the Temporal UI (its User Metadata)."""


async def refuse_unknown_names(
    client: Client, task_queue: str, input: RunInput, run_id: str, caller: Caller
) -> Catalogue | None:
    """Raises `TOOL_NOT_FOUND` or `LLM_UNKNOWN_PROFILE` when the workers have no tool,
    agent or model profile of a name `input` gives, `MODEL_NOT_ALLOWED` when one of
    its agents runs on a profile outside `caller`'s limits, and `SEARCH_UNAVAILABLE` when
    it has memory tools and they keep no memory store, before anything starts: their own
    answer (`asked_the_workers`), so a refused start leaves no run and no workflow behind.
    Answers the catalogue the run would resolve, when the workers gave it, to start the
    run with. With no worker polling for `WORKER_GRACE`, or one that does not answer in
    `NOT_READY_PATIENCE` (older than this client), says so in a warning: the run
    refuses them itself once a worker takes it."""
    request = CatalogueRequest.of(input)
    if caller.limits is not None and caller.limits.models is not None:
        request.models = list(caller.limits.models)
    try:
        answer = await asked_the_workers(client, task_queue, request, run_id)
    except TarryError as e:
        _log.warning("%s; the run checks its tools when a worker takes it", e.message)
        return None
    except (ActivityFailureError, WorkflowFailureError) as e:
        _log.warning(
            "no worker of task queue %r checked the names of run %r (%s); the run checks"
            " its tools when a worker takes it",
            task_queue,
            run_id,
            e.cause,
        )
        return None
    if answer.refusal is not None:
        raise TarryError(answer.refusal.code, answer.refusal.message)
    return answer.catalogue


async def asked_the_workers(
    client: Client, task_queue: str, request: CatalogueRequest, run_id: str
) -> CheckedCatalogue:
    """Why a worker of `task_queue` would refuse a run asking for `request`, or the
    catalogue the run would resolve.

    Only a worker knows its configuration, so its `checked_catalogue` activity answers. The
    client runs it as a standalone activity (no workflow: one task, half the cost of a
    workflow running it, and nothing in the list of workflows). A worker older than this
    client has no `checked_catalogue`: its `catalogue_check` answers, with no catalogue. A
    server that runs no standalone activities (an older one, or one with
    `activity.enableStandalone` off) answers UNIMPLEMENTED; `catalogue_check` then runs in
    a short `CatalogueCheck` workflow. Raises `RUN_NOT_SERVED` when no worker polls the
    queue (`await_poller`). An answer that lets the run start is kept, and the same
    workers are not asked the same again for a while (`tarry.client.checked_starts`)."""
    workers = await await_poller(client, task_queue, run_id)
    kept = checked_starts(client)
    if (answer := kept.get(task_queue, request, workers)) is None:
        answer = await _asked(client, task_queue, request, run_id)
        kept.keep(task_queue, request, workers, answer)
    return answer


async def _asked(
    client: Client, task_queue: str, request: CatalogueRequest, run_id: str
) -> CheckedCatalogue:
    """A worker's `checked_catalogue`, or the `catalogue_check` of a worker or a server
    that cannot run it (`asked_the_workers`)."""
    summary = CHECK_SUMMARY.format(run_id=run_id)
    refusal: ErrorInfo | None
    try:
        answer: CheckedCatalogue = await client.execute_activity(
            CHECKED_CATALOGUE_ACTIVITY,
            request,
            id=f"{CHECK_ID_PREFIX}{uuid.uuid4().hex}",
            task_queue=task_queue,
            result_type=CheckedCatalogue,
            schedule_to_close_timeout=timedelta(seconds=NOT_READY_PATIENCE),  # a busy worker
            # Not retried on a worker that lacks it: `catalogue_check` is asked at once.
            retry_policy=RetryPolicy(non_retryable_error_types=[NOT_REGISTERED]),
            summary=summary,
        )
        return answer
    except RPCError as e:
        if e.status is not RPCStatusCode.UNIMPLEMENTED:
            raise
        refusal = await _checked_in_a_workflow(client, task_queue, request, run_id)
    except ActivityFailureError as e:
        if not _not_registered(e):
            raise
        refusal = await client.execute_activity(
            CATALOGUE_CHECK_ACTIVITY,
            request,
            id=f"{CHECK_ID_PREFIX}{uuid.uuid4().hex}",
            task_queue=task_queue,
            result_type=ErrorInfo | None,  # type: ignore[arg-type]
            # A busy worker, or one that fails it (older than the check: it has none).
            schedule_to_close_timeout=timedelta(seconds=NOT_READY_PATIENCE),
            summary=summary,
        )
    return CheckedCatalogue(refusal=refusal)


async def _checked_in_a_workflow(
    client: Client, task_queue: str, request: CatalogueRequest, run_id: str
) -> ErrorInfo | None:
    refusal: ErrorInfo | None = await client.execute_workflow(
        CATALOGUE_CHECK_WORKFLOW,
        request,
        id=f"{CHECK_ID_PREFIX}{uuid.uuid4().hex}",
        task_queue=task_queue,
        result_type=ErrorInfo | None,  # type: ignore[arg-type]
        execution_timeout=timedelta(seconds=NOT_READY_PATIENCE),
        static_summary=CHECK_SUMMARY.format(run_id=run_id),
        static_details=CHECK_DETAILS.format(run_id=run_id),
    )
    return refusal


NOT_REGISTERED = "NotFoundError"
"""The error type of an activity task whose activity the worker does not register (the
SDK's): a worker older than the activity."""


def _not_registered(error: ActivityFailureError) -> bool:
    cause = error.cause
    return isinstance(cause, ApplicationError) and cause.type == NOT_REGISTERED


def admitted(caller: Caller, input: RunInput) -> RunInput:
    """`input` as `caller`'s limits let it start (`Limits.admitted`: its profile allowed,
    its budget within theirs, the most they may have when it names none); as it is for a
    caller without limits. Raises `MODEL_NOT_ALLOWED` or `BUDGET_NOT_ALLOWED`."""
    return input if caller.limits is None else caller.limits.admitted(input)


def workflow_input(caller: Caller, input: RunInput) -> RunInput | dict[str, Any]:
    """The workflow's argument for `input` started by `caller`: with what the run
    carries of the caller's limits when they have any (`WorkflowInput.spend`: their
    daily caps, so the run reserves each model call on their ledger; `slots`: their
    `max_concurrent_runs`; `models`: the profiles its fallbacks may use); `input`
    itself otherwise, as before limits."""
    limits = caller.limits
    if limits is None:
        return input
    carried: dict[str, Any] = {}
    if (caps := limits.daily_caps(caller.user)) is not None:
        carried["spend"] = caps.model_dump(mode="json")
    if (cap := limits.run_cap(caller.user)) is not None:
        carried["slots"] = cap.model_dump(mode="json")
    if limits.models is not None:
        carried["models"] = list(limits.models)
    return {**input.model_dump(mode="json"), **carried} if carried else input


LIMITS_CARRIED = ("spend", "slots", "models")
"""The fields `workflow_input` adds to a run's input from its starter's limits."""


class DoorSlot:
    """A slot its door took for a run (`slot_at_the_door`); `started` False once the
    start turns out to have started nothing (the id was taken)."""

    def __init__(self, cap: RunCap | None, taken: bool) -> None:
        self.cap, self.taken, self.started = cap, taken, True


def run_cap(caller: Caller) -> RunCap | None:
    """The `max_concurrent_runs` a run `caller` starts carries; None: not capped."""
    return None if caller.limits is None else caller.limits.run_cap(caller.user)


@contextlib.asynccontextmanager
async def slot_at_the_door(
    client: Client, task_queue: str, cap: RunCap | None, run_id: str
) -> AsyncIterator[DoorSlot]:
    """Under `at_max_concurrent_runs = "refuse"` (`cap.queue` False): run `run_id`'s
    slot, taken before it starts (or is resumed), so a start past its owner's
    `max_concurrent_runs` is refused (`TOO_MANY_RUNS`) and nothing starts; the run's own
    ask is then a repeat. Freed again when the start fails or starts nothing. Under
    `queue` (or without the cap) nothing is taken here: the run asks itself, and waits
    (`workflows.slots`)."""
    if cap is None or cap.queue:
        yield DoorSlot(None, taken=False)
        return
    answer = await acquire_slot(client, SlotRequest(cap=cap, run_id=run_id), task_queue)
    if not answer.granted:
        raise TarryError(ErrorCode.TOO_MANY_RUNS, cap.refusal(answer.open))
    slot = DoorSlot(cap, taken=not answer.held_before)
    try:
        yield slot
    except BaseException:
        slot.started = False
        raise
    finally:
        if slot.taken and not slot.started:
            await release_slot(client, SlotRelease(owner=cap.owner, run_id=run_id))


def as_dict(payload: RunInput | dict[str, Any]) -> dict[str, Any]:
    return payload if isinstance(payload, dict) else payload.model_dump(mode="json")


def started_by(caller: Caller) -> dict[str, Any]:
    """The fields of a run's input that say who started it, and through which door."""
    return {"started_by": caller.user, "door": caller.door}


def checked_id(run_id: str) -> str:
    if problem := run_id_problem(run_id):
        raise TarryError(ErrorCode.RUN_ID_INVALID, problem)
    return run_id
