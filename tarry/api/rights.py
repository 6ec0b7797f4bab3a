"""Whether the caller may use the run a request names (`tarry.core.ownership` says who may).

One dependency of the whole runs router (`run_guard`), not a check in each route: a
route that names a run (`{run_id}`) is guarded by being one, and what it needs follows
from its method (a read for GET, a change otherwise), so a new route cannot be left open.
A run the caller may not read is 404 `RUN_NOT_FOUND`, worded as for a run that does not
exist, so that its existence does not leak; one they may read but not change is 403
`NOT_ALLOWED`, naming what they lack.
"""

from __future__ import annotations

from fastapi import Depends, Request

from tarry.api.access import JSON_ONLY
from tarry.api.auth import caller_of
from tarry.api.parts import parts_of
from tarry.client import Tarry
from tarry.contracts import WORKFLOW_TYPE, ErrorCode, Need, RunState, may_decide
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.core.ownership import Policy, RunAccess

__all__ = [
    "STARTING",
    "Need",
    "asks_to_start",
    "check_decision",
    "check_run",
    "may_decide_in",
    "may_write",
    "require_approver",
    "run_guard",
    "schedule_guard",
    "start_quota",
    "unknown_run",
]


_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
"""What a boolean query parameter is true for (pydantic's words)."""
_DECISIONS = "/approvals"
"""The one changing route an approver without `write` may use."""


def unknown_run(run_id: str) -> TarryError:
    """What a run the caller may not read answers: the words of a run there is not."""
    return TarryError(
        ErrorCode.RUN_NOT_FOUND, f"no run {run_id!r}; `tarry list` shows the runs there are"
    )


def may_decide_in(state: RunState, caller: Caller, call_id: str | None = None) -> bool:
    """Whether `caller` is named an approver of call `call_id` (None: of any call) that
    `state` waits on: a call open to anyone is not theirs to decide by that alone."""
    return any(
        p.approvers and may_decide(p.approvers, caller.user, caller.groups)
        for p in state.pending_approvals
        if call_id is None or p.call_id == call_id
    )


def require_approver(state: RunState, caller: Caller, run_id: str, call_id: str | None) -> None:
    """Refuses (`NOT_ALLOWED`) a decision on call `call_id` (None: every call `state`
    waits on) by `caller`, who may not change the run, unless each such call names them
    among its approvers: being one call's approver decides no other."""
    calls = [p.call_id for p in state.pending_approvals if call_id in (None, p.call_id)]
    if not calls or not all(may_decide_in(state, caller, call) for call in calls):
        raise TarryError(
            ErrorCode.NOT_ALLOWED,
            f"{caller.user} may not decide {f'call {call_id!r}' if call_id else 'every call'}"
            f" of run {run_id!r}: that needs `write` on the run, or being named among the"
            " call's approvers",
        )


async def check_decision(
    tarry: Tarry, caller: Caller, run_id: str, call_id: str | None, *, writes: bool
) -> None:
    """The one rule for deciding calls, at every door (HTTP, MCP, action links): a caller
    who may change the run (`writes`, from `check_run` with `Need.DECIDE`) decides any of
    its calls; anyone else only the calls that name them among their approvers. The run
    itself checks a call's named approvers, but not a call that names none: without this
    check, the approver of one call could decide another that is open to its writers."""
    if not writes:
        require_approver(await tarry.get(run_id).state(), caller, run_id, call_id)


async def check_run(
    tarry: Tarry,
    policy: Policy,
    caller: Caller,
    run_id: str,
    need: Need,
    *,
    absent: bool = False,
    workflow: str | None = None,
) -> bool:
    """Whether `caller` may also change run `run_id`, once they may do what `need` says;
    raises `RUN_NOT_FOUND` when they may not read it (or there is none, unless `absent`
    allows that: True then), `NOT_ALLOWED` when they may read it but not do that.
    `workflow`: the workflow type the id must name (else `RUN_NOT_FOUND`), checked for
    every caller, so that a route made for runs never asks an eval a run's queries."""
    if policy.sees_all(caller) and workflow is None:
        return True
    run = tarry.get(run_id)
    try:
        description = await run.describe()
    except TarryError as e:
        if absent and e.code is ErrorCode.RUN_NOT_FOUND:
            return True
        raise
    if workflow is not None and description.workflow_type != workflow:
        raise unknown_run(run_id)
    if policy.sees_all(caller):
        return True
    access = RunAccess.of(description.typed_search_attributes)
    if not policy.may_read(caller, access):
        raise unknown_run(run_id)
    writes = policy.may_write(caller, access)
    if need is Need.READ or writes:
        return writes
    if need is Need.DECIDE and may_decide_in(await run.state(), caller):
        return False
    what = "decide its calls" if need is Need.DECIDE else "change it"
    raise TarryError(
        ErrorCode.NOT_ALLOWED,
        f"{caller.user} may read run {run_id!r} but not {what}: that needs `write` (its"
        " owner, an admin, or a `write` share)"
        + (", or being an approver of a waiting call" if need is Need.DECIDE else ""),
    )


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
