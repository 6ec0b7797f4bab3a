"""The Python client: start agent runs and talk to them.

    tarry = await Tarry.connect()
    run = await tarry.start("Summarise notes.md")
    state = await run.wait_for({Phase.WAITING_USER})
    state = await run.send("Thanks, now write it to summary.md")
    async for event in run.events(): ...   # the model's words as it writes them

Errors a caller can act on raise `TarryError` with an `ErrorCode`, never a raw RPC error.
A run is a `RunHandle` (`tarry.client.run_handle`), a schedule a `ScheduleHandle`
(`tarry.client.schedule_handle`); how they reach Temporal is `tarry.temporal.connection`
and `tarry.client.delivery`, their errors `tarry.core.errors`.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client, ScheduleAlreadyRunningError
from temporalio.contrib.pydantic import PydanticPayloadConverter

from tarry.client.audit import AUDIT_LIMIT, find_audit
from tarry.client.datasets import Datasets, DatasetStore
from tarry.client.run_handle import RunHandle, user_input
from tarry.client.schedule_handle import ScheduleHandle, checked_name
from tarry.client.schedules import (
    SCHEDULE_MEMO,
    Overlap,
    ScheduleSummary,
    Timing,
    is_tarrys,
    temporal_schedule,
)
from tarry.client.starting import (
    admitted,
    checked_id,
    start_run,
    start_with_message,
    started_by,
    workflow_input,
)
from tarry.config.settings import TarrySettings
from tarry.contracts import (
    DEFAULT_TASK_QUEUE,
    SUMMARY_MEMO,
    Act,
    AuditTrail,
    Door,
    ErrorCode,
    RunInput,
    RunResult,
    RunState,
)
from tarry.core.errors import TarryError
from tarry.core.identities import Caller, local_user
from tarry.core.ownership import access_attributes
from tarry.core.text import summary_of
from tarry.temporal.connection import connect_temporal
from tarry.temporal.pages import PageStore
from tarry.temporal.storage import storage_driver

__all__ = ["Admission", "Tarry"]

Admission = Callable[[], Awaitable[object]]
"""A check a delivery to a run that already has its id passes first (`Tarry.reply`'s
`admit`): it raises to refuse the delivery."""


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
        datasets: DatasetStore | None = None,
    ) -> None:
        """`pages`: where the workers store the pages of long transcripts; by default the
        store of the client's large payloads (its data converter's external storage).
        `datasets`: where evaluation datasets are kept; by default `.tarry/datasets`.

        `client` must carry Tarry's data converter (`TypeError` otherwise): runs take and
        give pydantic models, which the SDK's default converter turns into plain dicts,
        and it would read none of the payloads the workers encrypt or store outside
        history."""
        if not issubclass(client.data_converter.payload_converter_class, PydanticPayloadConverter):
            raise TypeError(
                "Tarry needs a Temporal client with Tarry's data converter, and this one has"
                " the SDK's default: connect with `await Tarry.connect()` (or"
                " `tarry.connect_temporal()`), or pass"
                " `data_converter=tarry.temporal.codec.data_converter(settings)` to"
                " `Client.connect`"
            )
        self.client = client
        self.task_queue = task_queue
        self.caller = caller or Caller(local_user(os.environ.get("TARRY_USER")))
        self._pages = pages if pages is not None else PageStore.of(client.data_converter)
        self._datasets = datasets or DatasetStore(
            TarrySettings.model_fields["tarry_datasets_dir"].default
        )

    @classmethod
    async def connect(cls, settings: TarrySettings | None = None) -> Tarry:
        """Connects to the Temporal server `settings` name (the environment's, by default)
        with the data converter every Tarry process shares (`connect_temporal`), acting as
        `settings`' local user, with their groups."""
        settings = settings or TarrySettings()
        client = await connect_temporal(settings)
        pages = PageStore.of(client.data_converter, storage_driver(settings))
        datasets = DatasetStore.of(settings)
        return cls(
            client,
            settings.tarry_task_queue,
            settings.local_caller(),
            pages=pages,
            datasets=datasets,
        )

    async def start(
        self,
        input: RunInput | str,
        *,
        run_id: str | None = None,
        memo: Mapping[str, Any] | None = None,
        start_key: str | None = None,
    ) -> RunHandle:
        """Starts a run; `run_id` defaults to `run-<short uuid>`. A run that names tools
        (`tools`, `require_approval`) is refused with `TOOL_NOT_FOUND` when the worker
        has no tool of one of those names, and one that names a model profile with
        `LLM_UNKNOWN_PROFILE` when the worker has no such profile; with no worker to ask,
        the run refuses them itself once one takes it. A caller with limits (`[limits]`) is
        refused a profile outside them (`MODEL_NOT_ALLOWED`, the `default` one when the
        input names none) and a budget over theirs (`BUDGET_NOT_ALLOWED`), and a run that
        names no budget gets the most they may have. `memo` adds to the run's memo (which
        `resume` keeps): what a caller needs to know of the request that started it.
        `start_key` is a digest of the request's idempotency key, kept as the search
        attribute `TarryStartKey` so that any process finds the run a key started."""
        if isinstance(input, str):
            input = RunInput(prompt=input)
        input = input.model_copy(update=started_by(self.caller))
        handle = await start_run(
            self.client,
            self.task_queue,
            self.caller,
            input,
            run_id=run_id,
            memo=memo,
            start_key=start_key,
        )
        return RunHandle(self.client, handle, self.caller, self._pages)

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
        `LLM_UNKNOWN_PROFILE` end it), since no worker is asked now; the profile and budget
        against the caller's limits now (`MODEL_NOT_ALLOWED`, `BUDGET_NOT_ALLOWED`)."""
        if isinstance(input, str):
            input = RunInput(prompt=input)
        # Its runs are started by the schedule, through its door: the person who created
        # it owns them, and its creation is their act in the trail.
        input = input.model_copy(update={"started_by": f"schedule {name}", "door": Door.SCHEDULE})
        # Checked now, against its creator's limits: each run it starts is theirs.
        input = admitted(self.caller, input)
        schedule = ScheduleHandle(self.client, checked_name(name), self.caller)
        try:
            timing = Timing(cron=cron, every=every, time_zone=time_zone)
        except ValidationError as e:
            raise TarryError(ErrorCode.SCHEDULE_INVALID, e.errors()[0]["msg"]) from None
        summary = summary_of(input.prompt)
        access = access_attributes(self.caller.user, input)
        action = temporal_schedule(
            name,
            workflow_input(self.caller, input),  # its runs carry their creator's caps
            timing,
            overlap,
            task_queue=self.task_queue,
            memo={SUMMARY_MEMO: summary},
            summary=summary,
            search_attributes=access,
        )
        memo = {SCHEDULE_MEMO: timing.model_dump(exclude_none=True), SUMMARY_MEMO: summary}
        async with schedule._errors():
            try:
                # Its own too, so that a list of the schedules one may see is a query.
                await self.client.create_schedule(name, action, memo=memo, search_attributes=access)
            except ScheduleAlreadyRunningError:
                raise TarryError(
                    ErrorCode.SCHEDULE_EXISTS,
                    f"a schedule named {name!r} exists already; delete it or choose another name",
                ) from None
        when = ", ".join(f"{k} {v!r}" for k, v in timing.model_dump(exclude_none=True).items())
        await schedule.recorded(Act.SCHEDULE_CREATE, f"created ({when})", self.task_queue, access)
        return schedule

    async def list_schedules(self, readable: str | None = None) -> list[ScheduleSummary]:
        """The schedules that start Tarry's runs, as Temporal's visibility records them:
        a schedule just created or deleted may take a moment to show. `readable`: only
        those a caller may read (`Policy.readable_clause`)."""
        listed = await self.client.list_schedules(readable)
        return [await ScheduleSummary.of(s, SUMMARY_MEMO) async for s in listed if is_tarrys(s)]

    def schedule(self, name: str) -> ScheduleHandle:
        """A handle to the schedule `name`, checked on first use (`SCHEDULE_INVALID` at
        once for what can never name one)."""
        return ScheduleHandle(self.client, checked_name(name), self.caller)

    async def audit(
        self,
        *,
        run: str | None = None,
        user: str | None = None,
        since: datetime | None = None,
        limit: int = AUDIT_LIMIT,
        readable: str | None = None,
    ) -> AuditTrail:
        """The audit trail (`tarry.client.audit`): the first `limit` records, oldest first, of
        the acts that changed run `run` (None: any run), done by `user` (None: anyone),
        at or after `since`, among the runs on this client's task queue (the runs its
        workers serve, as datasets select). Read from the runs' histories: an ended
        segment needs no worker, an open one is asked; one that cannot answer (no
        worker, stuck) is left out and its run named in `unread`. `readable`: of the
        runs a caller may read only (`Policy.readable_clause`)."""
        return await find_audit(
            self.client,
            run=run,
            user=user,
            since=since,
            limit=limit,
            readable=readable,
            task_queue=self.task_queue,
        )

    def acting_as(self, caller: Caller) -> Tarry:
        """This client, its handles acting as `caller`: a server's, for one request."""
        return Tarry(
            self.client, self.task_queue, caller, pages=self._pages, datasets=self._datasets
        )

    @property
    def datasets(self) -> Datasets:
        """Evaluation datasets built from the decision points of this client's runs
        (`tarry.client.datasets`), created as this client's caller."""
        return Datasets(self.client, self.task_queue, self.caller, self._pages, self._datasets)

    async def send(
        self,
        run_id: str,
        text: str,
        *,
        id: str | None = None,
        start: RunInput | None = None,
        admit: Admission | None = None,
    ) -> RunState:
        """`RunHandle.send` to run `run_id`; with `start`, the run is first started with
        that input if no run has the id (see `reply`)."""
        if state := await self._started("send", run_id, text, id, start, admit):
            return state
        return await self.get(run_id).send(text, id=id)

    async def reply(
        self,
        run_id: str,
        text: str,
        *,
        id: str | None = None,
        start: RunInput | None = None,
        admit: Admission | None = None,
    ) -> None:
        """`RunHandle.reply` to run `run_id`; with `start`, the run is first started with
        that input if no run has the id, so a chat integration can map its thread id to a
        run: two first messages at once start one run and both enter it, once each. An
        ended run under the id is `RUN_ENDED`; a worker must serve this client's task
        queue (`RUN_NOT_SERVED`), since the run itself takes or refuses the reply.

        With `start`, `admit` is called when a run already has the id, before the reply
        goes to it, and refuses it by raising: a server checks there that its caller may
        change the run there is. A right checked before the start could be raced, as
        another person's run may take the id between that check and the delivery.

        A schedule's run (`SCHEDULED_ID`) is only ever started by its schedule, and a
        sub-agent (`SUB_AGENT_ID`) by its lead: under such an id the reply goes to the run
        there is, `RUN_NOT_FOUND` if none yet."""
        if not await self._started("reply", run_id, text, id, start, admit):
            await self.get(run_id).reply(text, id=id)

    async def _started(
        self,
        update: str,
        run_id: str,
        text: str,
        id: str | None,
        start: RunInput | None,
        admit: Admission | None,
    ) -> RunState | None:
        """The update's state when `start` started run `run_id` with it
        (`tarry.client.starting.start_with_message`); None when the delivery is to go to the run
        there is, `admit` having let it."""
        if start is None:
            return None
        message = user_input(text, id, self.caller)
        if state := await start_with_message(
            self.client,
            self.task_queue,
            self.caller,
            start,
            run_id=run_id,
            update=update,
            message=message,
        ):
            return state
        if admit is not None:
            await admit()
        return None

    def get(self, run_id: str, caller: Caller | None = None) -> RunHandle:
        """A handle to an existing run, acting as `caller` (None: this client's); it is
        checked on first use (`RUN_ID_INVALID` at once for what can never be a run id)."""
        return RunHandle(
            self.client,
            self.client.get_workflow_handle(checked_id(run_id), result_type=RunResult),
            caller or self.caller,
            self._pages,
        )
