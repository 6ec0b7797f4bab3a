"""The Python client: start agent runs and talk to them.

    tarry = await Tarry.connect()
    run = await tarry.start("Summarise notes.md")
    state = await run.wait_for({Phase.WAITING_USER})
    state = await run.send("Thanks, now write it to summary.md")
    async for event in run.events(): ...   # the model's words as it writes them

Errors a caller can act on raise `TarryError` with an `ErrorCode`, never a raw RPC error.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import logging
import os
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, timedelta
from typing import Any, Literal, TypeVar

from pydantic import ValidationError
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.errordetails.v1 import WorkflowNotReadyFailure
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    GetWorkflowExecutionHistoryReverseRequest,
)
from temporalio.client import (
    Client,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    WithStartWorkflowOperation,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from tarry.codec import data_converter
from tarry.contracts import (
    CATALOGUE_CHECK_WORKFLOW,
    DEFAULT_TASK_QUEUE,
    LLM_ACTIVITY,
    SUMMARY_MEMO,
    WORKFLOW_TYPE,
    BudgetRaise,
    CatalogueRequest,
    ChatMessage,
    Decision,
    ErrorCode,
    ErrorInfo,
    Fork,
    PauseRequest,
    Phase,
    ReplyPolicy,
    Retrying,
    RunInput,
    RunResult,
    RunState,
    StopRequest,
    TranscriptAnswer,
    TranscriptPage,
    TranscriptQuery,
    UserInput,
    reply_problem,
    run_id_problem,
)
from tarry.events import EVENTS_TOPIC, EventKind, RunEvent
from tarry.identities import Caller, local_user
from tarry.pages import PageMissing, PageStore
from tarry.schedules import (
    SCHEDULE_MEMO,
    Overlap,
    ScheduleSummary,
    ScheduleView,
    Timing,
    is_tarrys,
    schedule_name_problem,
    temporal_schedule,
)
from tarry.settings import TarrySettings
from tarry.storage import storage_driver
from tarry.text import summary_of

__all__ = [
    "QUERY_PATIENCE",
    "SUMMARY_MEMO",
    "RunHandle",
    "ScheduleHandle",
    "Tarry",
    "TarryError",
    "connect_temporal",
]

_log = logging.getLogger(__name__)

Q = TypeVar("Q")
"""What a query answers."""

# sdk-python #300: the SDK's service client and its services refer to each other (a
# reference cycle), so the Rust connection under a client is freed only by the cycle
# collector. Left to interpreter finalisation, freeing it can abort the process (exit
# 134 or 139, `PyGILState_Release`) after all its work is done: 5 of 20 runs of a plain
# `asyncio.run(main())` script did. Collecting at exit, while the interpreter is still
# whole, frees it safely, so a script that uses this client needs nothing special.
atexit.register(gc.collect)


QUERY_PATIENCE = timedelta(seconds=5)
"""How long a `state` query may go unanswered before the client asks whether any worker
serves the run at all: without one, Temporal holds a query for 30 s, then answers with a
bare RPC error."""
_TASK_FAILING = "Workflow Task in failed state"
"""What Temporal answers a query to a run whose workflow task keeps failing."""
_UNANSWERED = {
    RPCStatusCode.CANCELLED,  # "Timeout expired": the server's own deadline
    RPCStatusCode.DEADLINE_EXCEEDED,  # ours, `QUERY_PATIENCE`
    RPCStatusCode.FAILED_PRECONDITION,  # "no poller seen for task queue recently"
}


WORKER_GRACE = 5.0
"""Seconds the client looks for a worker polling a run's task queue before it says there
is none (`RUN_NOT_SERVED`): a worker that has just started polls within this."""
SERVED_FOR = 30.0
"""Seconds a handle trusts that a worker serves its run once it saw one poll: a chat's
replies come seconds apart, and each check costs two RPCs before the reply travels."""
NOT_READY_PATIENCE = 60.0
"""Seconds an update is asked again while the server refuses it because the run's
workflow task is failing or timing out (a worker too busy to finish it, or restarting)."""


_CODES = frozenset(ErrorCode)
_UNPROCESSED_UPDATE = "UnprocessedUpdate"
"""The server's failure type for an update a worker completed a task without taking in
(Temporal's `unprocessedUpdateFailure`): rejected, never entered, safe to send again."""
_UPDATE_OUTLIVED_RUN = "AcceptedUpdateCompletedWorkflow"
"""The server's failure type for an accepted update whose run ended before it did."""


_ID_REUSE = WorkflowIDReusePolicy.REJECT_DUPLICATE
"""An ended run's id is taken too: a new conversation under it would hide the old one and
inherit its workspace. `resume` goes on with that run."""


_DEFAULT_LIMIT: int = TranscriptQuery.model_fields["limit"].default


class TarryError(Exception):
    """An error with a structured code, e.g. `RUN_NOT_FOUND` or `INPUT_EMPTY`."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


async def connect_temporal(
    settings: TarrySettings | None = None, *, runtime: Runtime | None = None
) -> Client:
    """A Temporal client with the data converter every Tarry process uses: pydantic,
    encrypting payloads when `TARRY_ENCRYPTION_KEY` is set, and large payloads kept
    outside history (see `tarry.codec`). `runtime`: the SDK runtime for a worker's
    client that serves metrics (`workers.telemetry`); the default one otherwise."""
    settings = settings or TarrySettings()
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=data_converter(settings),
        runtime=runtime,
    )


class Tarry:
    """Starts runs and finds them again by id. What its handles do, the runs record as
    done by `caller` (by default `TARRY_USER`, else `cli:$USER`)."""

    def __init__(
        self,
        client: Client,
        task_queue: str = DEFAULT_TASK_QUEUE,
        caller: Caller | None = None,
        *,
        pages: PageStore | None = None,
    ) -> None:
        """`pages`: where the workers store the pages of long transcripts; by default the
        store of the client's large payloads (its data converter's external storage)."""
        self.client = client
        self.task_queue = task_queue
        self.caller = caller or Caller(local_user(os.environ.get("TARRY_USER")))
        self._pages = pages if pages is not None else PageStore.of(client.data_converter)

    @classmethod
    async def connect(cls, settings: TarrySettings | None = None) -> Tarry:
        """Connects to the Temporal server `settings` name (the environment's, by default)
        with the data converter every Tarry process shares (`connect_temporal`), acting as
        `settings`' local user, with their groups."""
        settings = settings or TarrySettings()
        client = await connect_temporal(settings)
        pages = PageStore.of(client.data_converter, storage_driver(settings))
        return cls(client, settings.tarry_task_queue, settings.local_caller(), pages=pages)

    async def start(
        self,
        input: RunInput | str,
        *,
        run_id: str | None = None,
        memo: Mapping[str, Any] | None = None,
    ) -> RunHandle:
        """Starts a run; `run_id` defaults to `run-<short uuid>`. A run that names tools
        (`tools`, `require_approval`, `agents`) is refused with `TOOL_NOT_FOUND` when the
        worker has no tool or agent of one of those names, and one that names a model
        profile with `LLM_UNKNOWN_PROFILE` when the worker has no such profile, before
        anything starts; with no worker to ask, the run refuses them itself once one
        takes it. `memo` adds to the run's memo (which `resume` keeps): what a caller
        needs to know of the request that started it."""
        if isinstance(input, str):
            input = RunInput(prompt=input)
        input = input.model_copy(update={"started_by": self.caller.user})
        return await self._start(input, run_id=run_id, memo=memo)

    async def _start(
        self,
        input: RunInput,
        *,
        run_id: str | None,
        memo: Mapping[str, Any] | None = None,
        fork: Fork | None = None,
    ) -> RunHandle:
        run_id = _checked_id(f"run-{uuid.uuid4().hex[:8]}" if run_id is None else run_id)
        named_profile = input.model != RunInput.model_fields["model"].default
        if input.tools is not None or input.require_approval or input.agents or named_profile:
            await self._refuse_unknown_names(input, run_id)
        summary = summary_of(input.prompt)
        # The workflow's own input: a fork's origin and first messages are not `RunInput`'s.
        payload: RunInput | dict[str, Any] = input
        if fork is not None:
            payload = {**input.model_dump(mode="json"), "fork": fork.model_dump(mode="json")}
        try:
            handle = await self.client.start_workflow(
                WORKFLOW_TYPE,
                payload,
                id=run_id,
                task_queue=self.task_queue,
                result_type=RunResult,
                id_reuse_policy=_ID_REUSE,
                # The UI's run list shows this, so runs can be told apart at a glance.
                static_summary=summary,
                # `tarry list` reads it here: list results carry a memo, not the summary.
                memo={**(memo or {}), SUMMARY_MEMO: summary},
            )
        except WorkflowAlreadyStartedError:
            raise TarryError(
                ErrorCode.RUN_EXISTS,
                f"a run with id {run_id!r} exists already; choose another id, or go on with"
                " that run (`tarry resume` when it has ended)",
            ) from None
        return RunHandle(self.client, handle, self.caller, self._pages)

    async def _refuse_unknown_names(self, input: RunInput, run_id: str) -> None:
        """Raises `TOOL_NOT_FOUND` or `LLM_UNKNOWN_PROFILE` when the workers have no tool,
        agent or model profile of a name `input` gives, before anything starts: their own
        answer, through a short `CatalogueCheck` workflow (not a run, so a refused start
        leaves no failed run in `tarry list` or the inbox), waited for as long as a worker
        polls. With none for `WORKER_GRACE`, or one that does not answer in
        `NOT_READY_PATIENCE` (older than this client), says so in a warning: the run
        refuses them itself once a worker takes it."""
        request = CatalogueRequest(
            tools=input.tools,
            require_approval=input.require_approval,
            profile=input.model,
            agents=input.agents,
        )
        try:
            await _await_poller(self.client, self.task_queue, run_id)
            refusal: ErrorInfo | None = await self.client.execute_workflow(
                CATALOGUE_CHECK_WORKFLOW,
                request,
                id=f"catalogue-check-{uuid.uuid4().hex}",
                task_queue=self.task_queue,
                result_type=ErrorInfo | None,  # type: ignore[arg-type]
                execution_timeout=timedelta(seconds=NOT_READY_PATIENCE),
                static_summary=f"may run {run_id!r} start?",
            )
        except TarryError as e:
            _log.warning("%s; the run checks its tools when a worker takes it", e.message)
            return
        except WorkflowFailureError as e:
            _log.warning(
                "no worker of task queue %r checked the names of run %r (%s); the run checks"
                " its tools when a worker takes it",
                self.task_queue,
                run_id,
                e.cause,
            )
            return
        if refusal is not None:
            raise TarryError(refusal.code, refusal.message)

    async def create_schedule(
        self,
        name: str,
        input: RunInput | str,
        *,
        cron: str | None = None,
        every: str | None = None,
        time_zone: str | None = None,
        overlap: Overlap = Overlap.SKIP,
    ) -> ScheduleHandle:
        """Creates the schedule `name`, which starts `input` as run `name-<time>` at the
        times of `cron` (`"0 9 * * 1-5"`, in `time_zone`, UTC if none) or `every` (`"1h"`),
        one of the two. While its last run is open (waiting for a person, say), `overlap`
        says what it does: by default it starts nothing (`Overlap.SKIP`).
        `SCHEDULE_INVALID` for a name outside the run id rule or a timing Temporal cannot
        read, `SCHEDULE_EXISTS` for the name of a schedule there is. The tools and model
        profile `input` names are checked by each run when it starts (`TOOL_NOT_FOUND`,
        `LLM_UNKNOWN_PROFILE` end it), since no worker is asked now."""
        if isinstance(input, str):
            input = RunInput(prompt=input)
        # Its runs' prompt is the words of whoever created the schedule.
        input = input.model_copy(update={"started_by": self.caller.user})
        schedule = ScheduleHandle(self.client, _checked_name(name))
        try:
            timing = Timing(cron=cron, every=every, time_zone=time_zone)
        except ValidationError as e:
            raise TarryError(ErrorCode.SCHEDULE_INVALID, e.errors()[0]["msg"]) from None
        summary = summary_of(input.prompt)
        action = temporal_schedule(
            name,
            input,
            timing,
            overlap,
            task_queue=self.task_queue,
            memo={SUMMARY_MEMO: summary},
            summary=summary,
        )
        memo = {SCHEDULE_MEMO: timing.model_dump(exclude_none=True), SUMMARY_MEMO: summary}
        async with schedule._errors():
            try:
                await self.client.create_schedule(name, action, memo=memo)
            except ScheduleAlreadyRunningError:
                raise TarryError(
                    ErrorCode.SCHEDULE_EXISTS,
                    f"a schedule named {name!r} exists already; delete it or choose another name",
                ) from None
        return schedule

    async def list_schedules(self) -> list[ScheduleSummary]:
        """The schedules that start Tarry's runs, as Temporal's visibility records them:
        a schedule just created or deleted may take a moment to show."""
        listed = await self.client.list_schedules()
        return [await ScheduleSummary.of(s, SUMMARY_MEMO) async for s in listed if is_tarrys(s)]

    def schedule(self, name: str) -> ScheduleHandle:
        """A handle to the schedule `name`, checked on first use (`SCHEDULE_INVALID` at
        once for what can never name one)."""
        return ScheduleHandle(self.client, _checked_name(name))

    def acting_as(self, caller: Caller) -> Tarry:
        """This client, its handles acting as `caller`: a server's, for one request."""
        return Tarry(self.client, self.task_queue, caller, pages=self._pages)

    async def send(
        self, run_id: str, text: str, *, id: str | None = None, start: RunInput | None = None
    ) -> RunState:
        """`RunHandle.send` to run `run_id`; with `start`, the run is first started with
        that input if no run has the id (see `reply`)."""
        if start is None:
            return await self.get(run_id).send(text, id=id)
        return await self._deliver_starting(
            "send", run_id, _user_input(text, id, self.caller.user), start
        )

    async def reply(
        self, run_id: str, text: str, *, id: str | None = None, start: RunInput | None = None
    ) -> None:
        """`RunHandle.reply` to run `run_id`; with `start`, the run is first started with
        that input if no run has the id. One atomic call (Temporal's update-with-start,
        the open run's id winning), so a chat integration can map its thread id to a run:
        two first messages at once start one run and both enter it, once each. An ended
        run under the id is `RUN_ENDED`; a worker must serve this client's task queue
        (`RUN_NOT_SERVED`), since the run itself takes or refuses the reply."""
        if start is None:
            await self.get(run_id).reply(text, id=id)
        else:
            await self._deliver_starting(
                "reply", run_id, _user_input(text, id, self.caller.user), start
            )

    async def _deliver_starting(
        self, update: str, run_id: str, message: UserInput, input: RunInput
    ) -> RunState:
        """The reply update `update` with `message`, to run `run_id`, started with
        `input` if it is not open."""
        run_id = _checked_id(run_id)
        input = input.model_copy(update={"started_by": self.caller.user})
        await _await_poller(self.client, self.task_queue, run_id)
        summary = summary_of(input.prompt)
        start: WithStartWorkflowOperation[Any, RunResult] = WithStartWorkflowOperation(
            WORKFLOW_TYPE,
            input,
            id=run_id,
            task_queue=self.task_queue,
            result_type=RunResult,
            # The one way a first message may race another: both enter the open run.
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=_ID_REUSE,
            static_summary=summary,
            memo={SUMMARY_MEMO: summary},
        )
        update_id = f"{update}-{message.id}" if message.id else None
        async with _translated_errors(run_id):
            try:
                state: RunState = await self.client.execute_update_with_start_workflow(
                    update,
                    message,
                    start_workflow_operation=start,
                    id=update_id,
                    result_type=RunState,
                )
            except Exception as e:
                # A failed start leaves its error in the operation as well: read there,
                # or asyncio reports it as never retrieved.
                with contextlib.suppress(Exception):
                    await start.workflow_handle()
                if isinstance(e, WorkflowAlreadyStartedError):  # closed, and ids are not reused
                    raise TarryError(
                        ErrorCode.RUN_ENDED,
                        f"run {run_id!r} has ended; `tarry resume` goes on with it",
                    ) from None
                raise
        return state

    def get(self, run_id: str, caller: Caller | None = None) -> RunHandle:
        """A handle to an existing run, acting as `caller` (None: this client's); it is
        checked on first use (`RUN_ID_INVALID` at once for what can never be a run id)."""
        return RunHandle(
            self.client,
            self.client.get_workflow_handle(_checked_id(run_id), result_type=RunResult),
            caller or self.caller,
            self._pages,
        )


class RunHandle:
    """One agent run, by workflow id (it follows the run across its whole chain); what
    it sends, the run records as done by `caller`."""

    def __init__(
        self,
        client: Client,
        handle: WorkflowHandle[object, RunResult],
        caller: Caller,
        pages: PageStore | None = None,
    ) -> None:
        """`pages`: where the run's older messages are stored (see `Tarry`)."""
        self._client = client
        self._handle = handle
        self.caller = caller
        self._pages = pages if pages is not None else PageStore.of(client.data_converter)
        self._served_until = 0.0  # `loop.time()` until which a worker is trusted to serve

    @property
    def id(self) -> str:
        return self._handle.id

    async def reply(self, text: str, *, id: str | None = None) -> None:
        """Queues a reply, delivered at the next turn boundary (or at once, cutting the
        model call short, for a run that is `interrupt`ed by replies); `RUN_BUSY` from a
        working run that refuses them. It travels as the `reply` update, so the run can
        refuse it; while no worker serves the run nothing works on it, and it waits as
        the `user_input` signal until one does. Retrying with the same `id` never
        delivers it twice."""
        message = _user_input(text, id, self.caller.user)
        try:
            await self._update("reply", message, id=f"reply-{id}" if id else None)
        except TarryError as e:
            if e.code is not ErrorCode.RUN_NOT_SERVED:
                raise
            async with self._errors():
                await self._handle.signal("user_input", message)

    async def send(self, text: str, *, id: str | None = None) -> RunState:
        """Delivers a reply and waits for the run's next stop point (the `send` update)."""
        message = _user_input(text, id, self.caller.user)
        # The same message id is the same update: the server answers a retry with the
        # first call's outcome instead of running it again.
        return await self._update("send", message, id=f"send-{id}" if id else None)

    async def approve(
        self,
        call_id: str | None = None,
        *,
        approved: bool = True,
        reason: str | None = None,
        arguments: dict[str, Any] | None = None,
        remember: Literal["run"] | None = None,
    ) -> None:
        """Decides on a gated tool call (all pending calls when `call_id` is None) with the
        `approve` signal. Sent twice, the first decision stands. `remember="run"`: the
        like calls after it are decided the same way without asking (`Decision.remember`)."""
        decision = self._decision(call_id, approved, reason, arguments, remember)
        async with self._errors():
            await self._handle.signal("approve", decision)

    async def decide(
        self,
        call_id: str | None = None,
        *,
        approved: bool = True,
        reason: str | None = None,
        arguments: dict[str, Any] | None = None,
        source: str | None = None,
        remember: Literal["run"] | None = None,
    ) -> RunState:
        """Like `approve`, but checked first (`APPROVAL_*` codes) and answered with the
        state at the run's next stop point (the `decide` update). `source` names the door
        the decision came through (`Decision.source`), kept with it."""
        decision = self._decision(call_id, approved, reason, arguments, remember)
        return await self._update("decide", decision.model_copy(update={"source": source}))

    def _decision(
        self,
        call_id: str | None,
        approved: bool,
        reason: str | None,
        arguments: dict[str, Any] | None,
        remember: Literal["run"] | None,
    ) -> Decision:
        """A decision by this handle's caller, with their groups for the run's approvers."""
        return Decision(
            call_id=call_id,
            approved=approved,
            reason=reason,
            arguments=arguments,
            remember=remember,
            by=self.caller.user,
            groups=list(self.caller.groups),
        )

    async def raise_budget(
        self, *, max_total_tokens: int | None = None, max_cost_usd: float | None = None
    ) -> RunState:
        """Replaces the budget limits given (the `raise_budget` update). A run paused on
        its budget goes on, and the answer is the state at its next stop point; otherwise
        the state at once. `BUDGET_INVALID` when none is given or one is not above what
        the run has spent."""
        try:
            raised = BudgetRaise(
                max_total_tokens=max_total_tokens, max_cost_usd=max_cost_usd, by=self.caller.user
            )
        except ValidationError as e:
            reason = str(e.errors()[0]["msg"])
            raise TarryError(ErrorCode.BUDGET_INVALID, f"a budget limit {reason}") from None
        return await self._update("raise_budget", raised)

    async def retry(self) -> RunState:
        """Asks the model again, for a run waiting because it kept failing (`waiting_for:
        "model"`); the state at the run's next stop point. `RETRY_NOT_WAITING` for a run
        that waits for something else."""
        return await self._update("retry")

    async def set_model(self, profile: str) -> RunState:
        """Switches the run's next model calls to the worker's profile `profile` (the
        `set_model` update); the state at once. A run waiting for a failing model goes
        on with `retry` or a reply."""
        return await self._update("set_model", profile)

    async def set_reply_policy(self, policy: ReplyPolicy) -> RunState:
        """What a reply does from now on that arrives while the agent works (the
        `set_reply_policy` update); the state at once."""
        return await self._update("set_reply_policy", policy)

    async def _update(self, name: str, *args: object, id: str | None = None) -> RunState:
        """The update `name`, answered with the state at the run's next stop point.
        The server may refuse an update without admitting it: while the run's workflow
        task is failing (`WorkflowNotReadyFailure`), or when a worker finished a task
        without taking it in (`UnprocessedUpdate`, as after a server restart). Either
        way nothing entered the run, so it is asked again, with the same update id: an
        attempt that did enter is answered with its first outcome, never run twice."""
        await self._require_worker()
        id = id or f"{name}-{uuid.uuid4()}"
        loop = asyncio.get_running_loop()
        give_up, delay = loop.time() + NOT_READY_PATIENCE, 0.1
        async with self._errors():
            while True:
                try:
                    state: RunState = await self._handle.execute_update(
                        name, args=args, id=id, result_type=RunState
                    )
                    return state
                except (RPCError, WorkflowUpdateFailedError) as e:
                    if not _unadmitted(e):
                        raise
                    if loop.time() + delay > give_up:
                        raise TarryError(
                            ErrorCode.RUN_NOT_SERVED,
                            f"run {self.id!r} did not take the {name!r} update in "
                            f"{NOT_READY_PATIENCE:g}s (its worker is failing or restarting); "
                            "nothing was delivered, sending it again is safe",
                        ) from e
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def pause(self) -> None:
        """Asks the run to wait for a person at its next turn boundary (the `pause`
        signal); a reply then goes on as usual."""
        async with self._errors():
            await self._handle.signal("pause", PauseRequest(by=self.caller.user))

    async def stop(self, reason: str | None = None) -> None:
        """Ends the run (the `stop` signal): a waiting run completes, a working one is
        aborted; `reason` is kept in its state and result. `resume` goes on with it."""
        async with self._errors():
            await self._handle.signal("stop", StopRequest(reason=reason, by=self.caller.user))

    async def state(self) -> RunState:
        """The run's `state` query, with the call being retried when it is `Running`
        (`retrying`, from Temporal). Raises `RUN_NOT_SERVED` within `QUERY_PATIENCE`
        when no worker polls the run's task queue, since only a worker can answer a query."""
        state = await self._state()
        if state.phase is Phase.RUNNING:
            state.retrying = await self.retrying()
        return state

    async def retrying(self) -> Retrying | None:
        """The model or tool call that failed and waits for its next attempt, if any:
        Temporal's pending activity, which the run itself cannot see."""
        description = await self.describe()
        for pending in description.raw_description.pending_activities:
            if pending.attempt < 2 or not pending.HasField("last_failure"):
                continue
            model = pending.activity_type.name == LLM_ACTIVITY
            failure = pending.last_failure
            code = failure.application_failure_info.type
            default = ErrorCode.LLM_HTTP_ERROR if model else ErrorCode.TOOL_FAILED
            scheduled = pending.HasField("next_attempt_schedule_time")
            return Retrying(
                call="model" if model else pending.activity_type.name,
                attempt=pending.attempt,
                last_error=ErrorInfo(
                    code=ErrorCode(code) if code in _CODES else default, message=failure.message
                ),
                next_attempt_at=pending.next_attempt_schedule_time.ToDatetime(UTC)
                if scheduled
                else None,
            )
        return None

    async def _state(self) -> RunState:
        """The `state` query alone: what polling needs."""
        return await self._query("state", RunState)

    async def _query(self, name: str, result_type: type[Q], *args: object) -> Q:
        """The query `name`. Raises `RUN_NOT_SERVED` within `QUERY_PATIENCE` when no
        worker polls the run's task queue: only a worker answers a query, and without one
        Temporal holds it for 30 s, then answers with a bare RPC error."""
        async with self._errors():
            answer: Q
            try:
                answer = await self._handle.query(
                    name, args=args, result_type=result_type, rpc_timeout=QUERY_PATIENCE
                )
                return answer
            except RPCError as e:
                if failing := await self._task_failing():
                    raise failing from e
                if e.status not in _UNANSWERED:
                    raise
                await self._require_worker(even_ended=True)
            # A worker polls, so it is slow rather than gone: wait for it as long as it takes.
            try:
                answer = await self._handle.query(name, args=args, result_type=result_type)
                return answer
            except RPCError as e:
                if failing := await self._task_failing():
                    raise failing from e
                raise

    async def _task_failing(self) -> TarryError | None:
        """`RUN_TASK_FAILING`, with the failure Temporal recorded last, for a run whose
        workflow task is past its first attempt; else None. Such a run answers no query
        until a worker completes its task, which a retry of the query does not bring."""
        pending = (await self.describe()).raw_description.pending_workflow_task
        if pending.attempt < 2:
            return None
        request = GetWorkflowExecutionHistoryReverseRequest(
            namespace=self._client.namespace,
            execution=WorkflowExecution(workflow_id=self.id),
            maximum_page_size=100,
        )
        history = await self._client.workflow_service.get_workflow_execution_history_reverse(
            request
        )
        failures = (
            e.workflow_task_failed_event_attributes.failure.message
            for e in history.history.events
            if e.HasField("workflow_task_failed_event_attributes")
        )
        reason = next(failures, "timed out")
        return TarryError(
            ErrorCode.RUN_TASK_FAILING,
            f"run {self.id!r} is stuck: its workflow task has not completed in "
            f"{pending.attempt} attempts (last failure: {reason}); it answers and goes on "
            "once a worker can complete it. See the workers' log: a missing "
            "TARRY_ENCRYPTION_KEY or payload store, or code that cannot replay the run",
        )

    async def describe(self) -> WorkflowExecutionDescription:
        """What Temporal itself records of the run (status, task queue, search attributes
        such as `TarryPhase`): known without a worker, unlike `state`."""
        async with self._errors():
            return await self._handle.describe()

    async def _require_worker(self, *, even_ended: bool = False) -> None:
        """Raises `RUN_NOT_SERVED` when no worker polls the run's task queue: a query
        or an update would wait for one until the server gives up. Ended runs pass
        unless `even_ended`: Temporal refuses an update to one by itself (`RUN_ENDED`),
        but only a worker answers a query."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._served_until:
            return
        description = await self.describe()
        if description.status is not WorkflowExecutionStatus.RUNNING and not even_ended:
            return
        queue = description.raw_description.execution_config.task_queue.name
        await _await_poller(self._client, queue, self.id)
        self._served_until = loop.time() + SERVED_FOR

    async def transcript(self, start: int = 0) -> list[ChatMessage]:
        """The transcript from `start`, read page by page (each page a `transcript`
        query small enough for the `temporal` CLI and the Web UI to show as text, or
        the references of the older messages a long run keeps in the payload store)."""
        messages: list[ChatMessage] = []
        next_start: int | None = start
        while next_start is not None:
            answer = await self._transcript(next_start, _DEFAULT_LIMIT)
            messages += await self._messages_of(answer)
            next_start = answer.next_start
        return messages

    async def transcript_page(self, start: int = 0, limit: int = _DEFAULT_LIMIT) -> TranscriptPage:
        """One page of the transcript: up to `limit` messages from `start`, fewer when
        they pass `TRANSCRIPT_PAGE_BYTES` (the `transcript` query; messages a long run
        moved into the payload store are read from there)."""
        answer = await self._transcript(start, limit)
        messages = await self._messages_of(answer, enough=limit)
        return TranscriptPage.of(messages, start, answer.total, limit)

    async def _transcript(self, start: int, limit: int) -> TranscriptAnswer:
        query = TranscriptQuery(start=start, limit=limit)
        return await self._query("transcript", TranscriptAnswer, query)

    async def _messages_of(
        self, answer: TranscriptAnswer, enough: int | None = None
    ) -> list[ChatMessage]:
        """The answer's messages from its `start`: in it, or in the pages it names (no
        more of those than hold `enough` messages)."""
        if not answer.stored:
            return answer.messages
        if self._pages is None:
            raise TarryError(
                ErrorCode.PAYLOAD_MISSING,
                f"run {self.id!r} keeps its older messages in the payload store, and this "
                "client has none: connect with `Tarry.connect(settings)`, or pass `pages`",
            )
        messages: list[ChatMessage] = []
        for ref in answer.stored:
            try:
                page = await self._pages.read(ref)
            except PageMissing as e:
                raise TarryError(ErrorCode.PAYLOAD_MISSING, str(e)) from e
            messages += page[max(0, answer.start - ref.start) :]
            if enough is not None and len(messages) >= enough:
                break
        return messages

    async def wait_for(
        self,
        phases: Collection[Phase],
        timeout: float | timedelta = 60.0,  # noqa: ASYNC109 - the public contract names it
    ) -> RunState:
        """Polls `state` until the run is in one of `phases`; raises TimeoutError. A
        run no worker serves for a while (`RUN_NOT_SERVED`) is waited for as well: a
        worker being restarted is back within the timeout."""
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        async with asyncio.timeout(seconds):
            # A query is the only view of a phase; polling it costs no history.
            while True:
                state = await self.served_state(retrying=False)
                if state is not None and state.phase in phases:
                    return state
                await asyncio.sleep(0.05)

    async def served_state(self, *, retrying: bool = True) -> RunState | None:
        """The run's state (without `retrying` unless asked); None while no worker
        serves it (one may come later)."""
        try:
            return await (self.state() if retrying else self._state())
        except TarryError as e:
            if e.code is not ErrorCode.RUN_NOT_SERVED:
                raise
            return None

    async def events(self, from_offset: int = 0) -> AsyncGenerator[RunEvent]:
        """The run's live events (see `tarry.events`): the model's words as it writes
        them, each transcript message, each stop point. From `from_offset` in the run's
        stream (a `RunState.events` continues from that state; 0 starts at the oldest
        event the run still holds: those since its last continue-as-new, which hands on
        the last turn's). Ends once the run has ended and its last events are read;
        follows continue-as-new.

        Each wait for new events is an update, which the run's history records; the
        iterator asks again at most every 100 ms. Messages come in order, none missing:
        where a hand-over dropped events this observer had not read yet, the missing
        messages are read from the transcript (the words of their turn are not)."""
        stream = WorkflowStreamClient.create(self._client, self.id)
        next_message: int | None = None
        async with self._errors():
            async for item in stream.subscribe(EVENTS_TOPIC, from_offset, result_type=RunEvent):
                event = item.data.model_copy(update={"offset": item.offset})
                if event.kind is EventKind.MESSAGE and event.index is not None:
                    if next_message is not None and event.index > next_message:
                        for missed in await self._messages(next_message, event.index):
                            yield missed
                    next_message = max(next_message or 0, event.index + 1)
                yield event

    async def _messages(self, start: int, end: int) -> list[RunEvent]:
        """Transcript messages `start` to `end` (exclusive) as `message` events."""
        messages = (await self.transcript(start))[: end - start]
        return [
            RunEvent(kind=EventKind.MESSAGE, index=index, message=message)
            for index, message in enumerate(messages, start=start)
        ]

    async def result(self) -> RunResult:
        """Waits for the run to end and returns how it ended, following continue-as-new."""
        async with self._errors():
            return await self._handle.result()

    async def fork(
        self, at: int, text: str | None = None, *, run_id: str | None = None
    ) -> RunHandle:
        """Starts a new run that branches off this one at message `at` (a user message,
        counted from 0 as in `transcript()`): this run's input, its conversation before
        that message, and then the message again, or `text` in its place. This run is
        untouched and goes on; open and ended runs both fork. `run_id` defaults to
        `<this id>-fork-<short uuid>`. Raises `FORK_POINT_INVALID` when message `at` is
        not a user message."""
        if text is not None:
            text = _user_input(text, None, self.caller.user).text
        transcript = await self.transcript()
        if not 0 <= at < len(transcript) or transcript[at].role != "user":
            users = [i for i, message in enumerate(transcript) if message.role == "user"]
            raise TarryError(
                ErrorCode.FORK_POINT_INVALID,
                f"message {at} of run {self.id!r} is not a user message; a fork starts at"
                f" one of its user messages: {', '.join(map(str, users)) or 'none yet'}",
            )
        input = await self._query("run_input", RunInput)
        prompt = text if text is not None else transcript[at].content or ""
        fork = Fork(run_id=self.id, at=at, transcript=transcript[:at])
        queue = (await self.describe()).task_queue
        tarry = Tarry(self._client, queue, self.caller, pages=self._pages)
        fork_id = run_id or f"{self.id[:180]}-fork-{uuid.uuid4().hex[:6]}"
        input = input.model_copy(update={"prompt": prompt, "started_by": self.caller.user})
        return await tarry._start(input, run_id=fork_id, fork=fork)

    async def resume(self) -> RunHandle:
        """Goes on with an ended run (failed by a model error once its retries were
        spent, or stopped): starts a run under the same id with its whole memory,
        waiting for a reply, with the error that ended it as its `warning` and `error`
        until then. Raises `RUN_NOT_ENDED` for a run that is still going."""
        description = await self.describe()
        if description.status is WorkflowExecutionStatus.RUNNING:
            raise TarryError(
                ErrorCode.RUN_NOT_ENDED, f"run {self.id!r} has not ended: reply to it instead"
            )
        await self._require_worker(even_ended=True)
        async with self._errors():
            # The workflow's own input, opaque here: the run builds it from its memory.
            resumption: dict[str, Any] = await self._handle.query(
                "resumption", result_type=dict[str, Any]
            )
            memo = await description.memo()
            summary = memo.get(SUMMARY_MEMO, "")
            handle = await self._client.start_workflow(
                WORKFLOW_TYPE,
                resumption,
                id=self.id,
                task_queue=description.task_queue,
                result_type=RunResult,
                static_summary=summary or None,
                # All of it: what the request that started the run left there too.
                memo={**memo, SUMMARY_MEMO: summary},
            )
        return RunHandle(self._client, handle, self.caller, self._pages)

    def _errors(self) -> AbstractAsyncContextManager[None]:
        return _translated_errors(self.id)


class ScheduleHandle:
    """One schedule of Tarry's runs, by name (`Tarry.create_schedule`)."""

    def __init__(self, client: Client, name: str) -> None:
        self._client = client
        self._handle = client.get_schedule_handle(name)

    @property
    def name(self) -> str:
        """The schedule's name, which its runs' ids start with."""
        return self._handle.id

    async def describe(self) -> ScheduleView:
        """What it starts, when it starts it next, whether it is paused and why, and its
        runs: the recent ones and those still open. `SCHEDULE_NOT_FOUND` for a name no
        schedule of Tarry's runs has."""
        description, action = await self._described()
        # The action's input as the schedule keeps it: payloads, encoded as a run's are.
        [input] = await self._client.data_converter.decode(action.args, [RunInput])
        return await ScheduleView.of_description(description, input, SUMMARY_MEMO)

    async def pause(self, note: str | None = None) -> None:
        """Stops it starting runs until `unpause`; `note` says why (shown by `describe`).
        The runs it started go on."""
        await self._described()
        async with self._errors():
            await self._handle.pause(note=note or "paused with tarry")

    async def unpause(self, note: str | None = None) -> None:
        """Lets it start runs again, from its next time on (the times missed while it was
        paused are not caught up)."""
        await self._described()
        async with self._errors():
            await self._handle.unpause(note=note or "unpaused with tarry")

    async def trigger(self) -> None:
        """Starts a run now, as its time had come: under its overlap policy, so by default
        nothing starts while its last run is open."""
        await self._described()
        async with self._errors():
            await self._handle.trigger()

    async def delete(self) -> None:
        """Deletes it: it starts no more runs; the runs it started go on."""
        await self._described()
        async with self._errors():
            await self._handle.delete()

    async def _described(self) -> tuple[ScheduleDescription, ScheduleActionStartWorkflow]:
        """Temporal's description of the schedule and its action; `SCHEDULE_NOT_FOUND` for
        one that starts no `AgentRun`: a namespace may hold other schedules, which a
        mistyped name must never pause or delete."""
        async with self._errors():
            description = await self._handle.describe()
        action = description.schedule.action
        if not isinstance(action, ScheduleActionStartWorkflow) or action.workflow != WORKFLOW_TYPE:
            raise self._not_found()
        return description, action

    def _not_found(self) -> TarryError:
        return TarryError(
            ErrorCode.SCHEDULE_NOT_FOUND,
            f"no schedule {self.name!r}; `tarry schedule list` shows the schedules there are",
        )

    @asynccontextmanager
    async def _errors(self) -> AsyncIterator[None]:
        try:
            yield
        except RPCError as e:
            if e.status is RPCStatusCode.NOT_FOUND:
                raise self._not_found() from e
            if e.status is RPCStatusCode.INVALID_ARGUMENT:  # "Invalid schedule spec: ..."
                raise TarryError(ErrorCode.SCHEDULE_INVALID, e.message) from e
            raise


@asynccontextmanager
async def _translated_errors(run_id: str) -> AsyncIterator[None]:
    """Turns the RPC and update errors a caller can act on into `TarryError`s."""
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


async def _await_poller(client: Client, queue: str, run_id: str) -> None:
    """Raises `RUN_NOT_SERVED` when no worker polls task queue `queue`. A worker that has
    just started (or a busy one) may not have polled yet: it is looked for again for
    `WORKER_GRACE` before saying there is none."""
    loop = asyncio.get_running_loop()
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    give_up = loop.time() + WORKER_GRACE
    while True:
        try:
            pollers = await client.workflow_service.describe_task_queue(request)
        except RPCError as e:
            if e.status is not RPCStatusCode.UNIMPLEMENTED:
                raise
            return  # a server that cannot tell (the time-skipping test server): ask the run
        if pollers.pollers:
            return
        if loop.time() > give_up:
            raise TarryError(
                ErrorCode.RUN_NOT_SERVED,
                f"no worker polls task queue {queue!r}, so run {run_id!r} cannot answer;"
                f" start one with `tarry worker` (TARRY_TASK_QUEUE={queue}) or `tarry dev`",
            )
        await asyncio.sleep(0.25)


def _unadmitted(e: RPCError | WorkflowUpdateFailedError) -> bool:
    """The server's refusal of an update it did not admit: while the run's workflow task
    is failing (an RPC error), or one a worker left unprocessed (the update's outcome)."""
    if isinstance(e, WorkflowUpdateFailedError):
        cause = e.cause
        return isinstance(cause, ApplicationError) and cause.type == _UNPROCESSED_UPDATE
    status = e.grpc_status
    return any(d.Is(WorkflowNotReadyFailure.DESCRIPTOR) for d in status.details)


def _checked_id(run_id: str) -> str:
    if problem := run_id_problem(run_id):
        raise TarryError(ErrorCode.RUN_ID_INVALID, problem)
    return run_id


def _checked_name(name: str) -> str:
    if problem := schedule_name_problem(name):
        raise TarryError(ErrorCode.SCHEDULE_INVALID, problem)
    return name


def _user_input(text: str, id: str | None, by: str) -> UserInput:
    """The reply as it travels; refused here, before it travels, when it is not UTF-8,
    empty or over `MAX_INPUT_BYTES` (`reply_problem`, the check the run makes too)."""
    try:
        message = UserInput(text=text, id=id, by=by)
    except ValidationError as e:
        reason = str(e.errors()[0]["msg"]).removeprefix("Value error, ")
        raise TarryError(ErrorCode.INPUT_INVALID, reason) from None
    if problem := reply_problem(text):
        raise TarryError(*problem)
    return message
