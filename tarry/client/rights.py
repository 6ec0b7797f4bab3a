"""Who may do what to a run, the same at every door (the HTTP API, `tarry mcp`, action
links, A2A): `check_run` for reading or changing it, `check_decision` for deciding its
calls (`tarry.core.ownership` says who owns and shares what). A run the caller may not
read is `RUN_NOT_FOUND`, worded as for a run that does not exist, so that its existence
does not leak; one they may read but not change is `NOT_ALLOWED`, naming what they lack.

Here, not in the API, so that a door without a web server (`tarry mcp` on standard
input) checks the same rules without loading one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tarry.contracts import ErrorCode, Need, RunState, may_decide
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.core.ownership import Policy, RunAccess

if TYPE_CHECKING:
    from tarry.client.front_door import Tarry

__all__ = ["check_decision", "check_run", "may_decide_in", "require_approver", "unknown_run"]


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
