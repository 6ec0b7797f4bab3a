"""Whether the caller may use the run a request names, by the rules every door shares
(`tarry.client.rights`).

One dependency of the whole runs router (`run_guard`), not a check in each route: a
route that names a run (`{run_id}`) is guarded by being one, and what it needs follows
from its method (a read for GET, a change otherwise), so a new route cannot be left open.
A run the caller may not read is 404 `RUN_NOT_FOUND`; one they may read but not change
is 403 `NOT_ALLOWED`.
"""

from __future__ import annotations

from fastapi import Depends, Request

from tarry.api.access import JSON_ONLY
from tarry.api.auth import caller_of
from tarry.api.parts import parts_of
from tarry.client.rights import check_run
from tarry.contracts import WORKFLOW_TYPE, ErrorCode, Need
from tarry.core.errors import TarryError

__all__ = [
    "STARTING",
    "Need",
    "asks_to_start",
    "may_write",
    "run_guard",
    "schedule_guard",
    "start_quota",
]


_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
"""What a boolean query parameter is true for (pydantic's words)."""
_DECISIONS = "/approvals"
"""The one changing route an approver without `write` may use."""


async def run_guard(request: Request) -> None:
    """The runs router's dependency: checks the caller's right to the run its path names
    (none: the route names no run; an eval's id names none either), and keeps whether
    they may change it (`may_write`)."""
    run_id = request.path_params.get("run_id")
    if run_id is None:
        return
    parts = parts_of(request)
    if request.method in ("GET", "HEAD"):
        need = Need.READ
    else:
        need = Need.DECIDE if request.url.path.endswith(_DECISIONS) else Need.WRITE
    # `?start=true` on an id no run has starts the caller's own run under it.
    starting = asks_to_start(request)
    request.state.may_write = await check_run(
        parts.tarry,
        parts.policy,
        caller_of(request),
        run_id,
        need,
        absent=starting,
        workflow=WORKFLOW_TYPE,
    )


def asks_to_start(request: Request) -> bool:
    """Whether a message's request asks for a run under its id (`?start=true`)."""
    return request.query_params.get("start", "").lower() in _TRUE


async def start_quota(request: Request) -> None:
    """The dependency of the routes that may start a run: counts the request against its
    user's `[api.limits] starts_per_minute` (`tarry.api.quotas`); a message only when it
    `asks_to_start`."""
    if request.url.path.endswith("/messages") and not asks_to_start(request):
        return
    parts_of(request).quotas.admit_start(caller_of(request).user)


STARTING = [*JSON_ONLY, Depends(start_quota)]
"""Of a route that may start a run: counted against `[api.limits] starts_per_minute`."""


async def schedule_guard(request: Request) -> None:
    """The schedules router's dependency, as `run_guard` for the schedule its path names:
    a schedule is its runs' owner's, shared as they are. One the caller may not read is
    404 `SCHEDULE_NOT_FOUND`; pausing, unpausing, triggering or deleting one they may
    read only is 403 `NOT_ALLOWED`."""
    name = request.path_params.get("name")
    parts = parts_of(request)
    caller = caller_of(request)
    if name is None or parts.policy.sees_all(caller):
        return
    schedule = parts.tarry.schedule(name)
    access = await schedule.access()
    if not parts.policy.may_read(caller, access):
        raise TarryError(
            ErrorCode.SCHEDULE_NOT_FOUND,
            f"no schedule {name!r}; `tarry schedule list` shows the schedules there are",
        )
    if request.method not in ("GET", "HEAD") and not parts.policy.may_write(caller, access):
        raise TarryError(
            ErrorCode.NOT_ALLOWED,
            f"{caller.user} may read schedule {name!r} but not change it: that needs"
            " `write` (its owner, an admin, or a `write` share)",
        )


def may_write(request: Request) -> bool:
    """Whether the caller may change the run the request names (`run_guard` found out)."""
    writes: bool = getattr(request.state, "may_write", True)
    return writes
