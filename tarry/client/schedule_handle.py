"""One schedule of Tarry's runs, by name: what it starts and when, pausing and deleting it.

Each act that changes it (created, paused, unpaused, triggered, deleted) is recorded in
the audit trail as its caller's (`tarry.client.audit.record_act`), once Temporal has taken it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from temporalio.client import Client, ScheduleActionStartWorkflow, ScheduleDescription
from temporalio.common import TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from tarry.client.audit import record_act
from tarry.client.schedules import ScheduleView, schedule_name_problem
from tarry.client.starting import LIMITS_CARRIED
from tarry.contracts import SUMMARY_MEMO, WORKFLOW_TYPE, Act, ErrorCode, OtherAct, RunInput
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.core.ownership import RunAccess

__all__ = ["ScheduleHandle", "checked_name"]


class ScheduleHandle:
    """One schedule of Tarry's runs, by name (`Tarry.create_schedule`), acted on as
    `caller`."""

    def __init__(self, client: Client, name: str, caller: Caller) -> None:
        self._client = client
        self._handle = client.get_schedule_handle(name)
        self.caller = caller

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
        [args] = await self._client.data_converter.decode(action.args, [dict[str, Any]])
        # Without what the runs carry of their creator's limits (`workflow_input`).
        input = RunInput.model_validate({k: v for k, v in args.items() if k not in LIMITS_CARRIED})
        return await ScheduleView.of_description(description, input, SUMMARY_MEMO)

    async def access(self) -> RunAccess:
        """Whose its runs are and who they are shared with (`tarry.core.ownership`), as it
        starts them; `SCHEDULE_NOT_FOUND` as `describe`."""
        _, action = await self._described()
        return RunAccess.of(action.typed_search_attributes)

    async def pause(self, note: str | None = None) -> None:
        """Stops it starting runs until `unpause`; `note` says why (shown by `describe`).
        The runs it started go on."""
        _, action = await self._described()
        async with self._errors():
            await self._handle.pause(note=note or "paused with tarry")
        await self._record(action, Act.SCHEDULE_PAUSE, "paused" + _saying(note))

    async def unpause(self, note: str | None = None) -> None:
        """Lets it start runs again, from its next time on (the times missed while it was
        paused are not caught up)."""
        _, action = await self._described()
        async with self._errors():
            await self._handle.unpause(note=note or "unpaused with tarry")
        await self._record(action, Act.SCHEDULE_UNPAUSE, "unpaused" + _saying(note))

    async def trigger(self) -> None:
        """Starts a run now, as its time had come: under its overlap policy, so by default
        nothing starts while its last run is open. The run's own start is the
        schedule's; the trigger is recorded as the caller's."""
        _, action = await self._described()
        async with self._errors():
            await self._handle.trigger()
        await self._record(action, Act.SCHEDULE_TRIGGER, "triggered a run now")

    async def delete(self) -> None:
        """Deletes it: it starts no more runs; the runs it started go on."""
        _, action = await self._described()
        async with self._errors():
            await self._handle.delete()
        await self._record(action, Act.SCHEDULE_DELETE, "deleted")

    async def _record(self, action: ScheduleActionStartWorkflow, act: Act, what: str) -> None:
        """Records `act` on this schedule, with what its `action` starts runs with."""
        await self.recorded(act, what, action.task_queue, action.typed_search_attributes)

    async def recorded(
        self, act: Act, what: str, task_queue: str, access: TypedSearchAttributes
    ) -> None:
        """Records `act` on this schedule as its caller's, for a worker on `task_queue`
        (its runs'), readable by whoever may read the schedule (`access`: its owner and
        share, as it starts its runs)."""
        acting = OtherAct(
            act=act,
            by=self.caller.user,
            door=self.caller.door,
            what=f"schedule {self.name!r} {what}",
            schedule=self.name,
        )
        await record_act(self._client, acting, task_queue, access)

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


def _saying(note: str | None) -> str:
    return f": {note}" if note else ""


def checked_name(name: str) -> str:
    if problem := schedule_name_problem(name):
        raise TarryError(ErrorCode.SCHEDULE_INVALID, problem)
    return name
