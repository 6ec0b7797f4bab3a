"""`/v1/schedules`: runs that start on their own (`tarry.client.schedules`), each route a thin
layer over the client's schedule handle, with the runs routes' guards and errors."""

from __future__ import annotations

from http import HTTPStatus

from fastapi import APIRouter, Depends, Response

from tarry.api.access import BODY_REQUIRED, JSON_ONLY
from tarry.api.auth import CallerOf
from tarry.api.errors import AUTH, READ, WRITE, error_answers
from tarry.api.models import (
    Accepted,
    EmptyRequest,
    ScheduleList,
    ScheduleName,
    ScheduleNote,
    ScheduleRequest,
)
from tarry.api.parts import PolicyOf, TarryOf
from tarry.api.rights import schedule_guard
from tarry.client.schedules import ScheduleView
from tarry.search.memory_store import refuse_foreign_scope

__all__ = ["schedules_router"]


def schedules_router() -> APIRouter:
    # Every route that names a schedule checks the caller's right to it.
    router = APIRouter(
        prefix="/v1/schedules", tags=["schedules"], dependencies=[Depends(schedule_guard)]
    )

    @router.get("", responses=error_answers(*AUTH))
    async def list_schedules(caller: CallerOf, tarry: TarryOf, policy: PolicyOf) -> ScheduleList:
        """The schedules of Tarry's runs, as Temporal's visibility records them: one just
        created or deleted may take a moment to show. Only those the caller may read
        (`[api] visibility`): a schedule is its runs' owner's, shared as they are."""
        readable = policy.readable_clause(caller)
        return ScheduleList(schedules=await tarry.list_schedules(readable))

    @router.post(
        "",
        status_code=HTTPStatus.CREATED,
        dependencies=JSON_ONLY,
        responses=error_answers(*WRITE),
    )
    async def create_schedule(
        body: ScheduleRequest, caller: CallerOf, tarry: TarryOf, policy: PolicyOf
    ) -> ScheduleView:
        """Create a schedule that starts `input` as run `NAME-<time>` at the times of
        `cron` or `every`; while its last run is open (waiting for a person, say), it
        starts none unless `overlap` says otherwise. 409 `SCHEDULE_EXISTS` for a name
        taken; 422 `SCHEDULE_INVALID` for a cron expression or time zone Temporal cannot
        read. The runs check their tools and model profile as they start; their prompt
        is the caller's, and so is their memory scope (403 `NOT_ALLOWED` for another's)."""
        refuse_foreign_scope(policy, caller, body.input)
        schedule = await tarry.acting_as(caller).create_schedule(
            body.name,
            body.input,
            cron=body.cron,
            every=body.every,
            time_zone=body.time_zone,
            overlap=body.overlap,
        )
        return await schedule.describe()

    @router.get("/{name}", responses=error_answers(*READ))
    async def get_schedule(name: ScheduleName, tarry: TarryOf) -> ScheduleView:
        """The schedule: when it starts runs, what with, whether it is paused and why,
        its next times and its runs (the recent ones, and those still open)."""
        return await tarry.schedule(name).describe()

    @router.post(
        "/{name}/pause",
        dependencies=JSON_ONLY,
        openapi_extra=BODY_REQUIRED,
        responses=error_answers(*WRITE),
    )
    async def pause(
        name: ScheduleName, tarry: TarryOf, caller: CallerOf, body: ScheduleNote | None = None
    ) -> ScheduleView:
        """Stop it starting runs until it is unpaused; `note` says why. Its runs go on."""
        schedule = tarry.acting_as(caller).schedule(name)
        await schedule.pause(body.note if body else None)
        return await schedule.describe()

    @router.post(
        "/{name}/unpause",
        dependencies=JSON_ONLY,
        openapi_extra=BODY_REQUIRED,
        responses=error_answers(*WRITE),
    )
    async def unpause(
        name: ScheduleName, tarry: TarryOf, caller: CallerOf, body: ScheduleNote | None = None
    ) -> ScheduleView:
        """Let it start runs again, from its next time on."""
        schedule = tarry.acting_as(caller).schedule(name)
        await schedule.unpause(body.note if body else None)
        return await schedule.describe()

    @router.post(
        "/{name}/trigger",
        status_code=HTTPStatus.ACCEPTED,
        dependencies=JSON_ONLY,
        openapi_extra=BODY_REQUIRED,
        responses=error_answers(*WRITE),
    )
    async def trigger(
        name: ScheduleName, tarry: TarryOf, caller: CallerOf, _: EmptyRequest | None = None
    ) -> Accepted:
        """Start a run now, as if its time had come, by its overlap policy (with `skip`,
        none while its last run is open). The run shows in its `running` once started."""
        await tarry.acting_as(caller).schedule(name).trigger()
        return Accepted()

    @router.delete(
        "/{name}",
        status_code=HTTPStatus.NO_CONTENT,
        responses=error_answers(*READ, HTTPStatus.FORBIDDEN),
    )
    async def delete(name: ScheduleName, tarry: TarryOf, caller: CallerOf) -> Response:
        """Delete it: it starts no more runs; the runs it started go on."""
        await tarry.acting_as(caller).schedule(name).delete()
        return Response(status_code=HTTPStatus.NO_CONTENT)

    return router
