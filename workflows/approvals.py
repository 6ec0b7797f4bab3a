"""The rules of approval gates: which decisions a run takes, and how they are recorded.

Shared by the `approve` signal (a bad decision is ignored: a signal cannot answer) and
the `decide` update (its validator rejects the same decisions with the same codes,
before anything enters history). Pure functions of the run's memory: deterministic.

Who may decide is checked here, in the run, so no door (HTTP, MCP, the CLI, a script
with the client) can get round it. Each gated call carries its approvers, resolved from
`RunInput.approvers` when it was gated; the decision carries its author and the groups
the door found them in. Groups travel with the decision, not in the run's input: the
workflow cannot read the configuration, and membership changed there applies at once to
runs already waiting, as a person removed from `ops` expects. The run cannot check the
claim, but neither could it check anything else a caller with Temporal access sends.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import jsonschema
from temporalio.exceptions import ApplicationError

from tarry.contracts import (
    TEMPORAL_UI,
    Decision,
    DecisionRecord,
    ErrorCode,
    PendingApproval,
    may_decide,
)
from tarry.contracts.guardrails import TEXT_SCHEMA
from workflows import approval_rules, audit
from workflows.memory import RunMemory
from workflows.memory_groups import Approvals


def decision_problem(memory: RunMemory, decision: Decision) -> ApplicationError | None:
    """Why the run cannot take `decision`, or None when it can."""
    approvals = memory.approvals
    if decision.call_id is not None and (
        decision.call_id in approvals.decisions or _decided_earlier(memory, decision.call_id)
    ):
        return ApplicationError(
            f"call {decision.call_id!r} has been decided already",
            type=ErrorCode.APPROVAL_ALREADY_DECIDED,
        )
    undecided = approvals.undecided()
    if not undecided:
        return ApplicationError(
            "no tool call waits for a decision", type=ErrorCode.APPROVAL_NOTHING_PENDING
        )
    blanket = approvals.blanket()
    target = _target(approvals, decision)
    if decision.call_id is not None and target is None:
        waiting = ", ".join(p.call_id for p in undecided)
        return ApplicationError(
            f"no pending call {decision.call_id!r}; pending: {waiting}",
            type=ErrorCode.APPROVAL_UNKNOWN_CALL,
        )
    if refused := _not_allowed(blanket if target is None else [target], decision):
        return refused
    if decision.arguments is None or not decision.approved:
        return None
    if decision.remember is not None:
        return ApplicationError(
            "edited arguments belong to one call: a decision with them cannot be remembered",
            type=ErrorCode.APPROVAL_INVALID_ARGUMENTS,
        )
    if target is None:
        return ApplicationError(
            "edited arguments belong to one call: give its call_id",
            type=ErrorCode.APPROVAL_INVALID_ARGUMENTS,
        )
    schema = TEXT_SCHEMA if target.guardrail is not None else approvals.schemas[target.tool]
    try:
        jsonschema.validate(decision.arguments, schema)
    except jsonschema.ValidationError as e:
        return ApplicationError(
            f"the edited arguments do not fit {target.tool}: {e.message}",
            type=ErrorCode.APPROVAL_INVALID_ARGUMENTS,
        )
    return None


def _not_allowed(calls: list[PendingApproval], decision: Decision) -> ApplicationError | None:
    """`APPROVAL_NOT_ALLOWED` when the decision's author may not decide one of `calls`
    (all of them are refused: a decision on every call is one decision)."""
    for call in calls:
        if not may_decide(call.approvers, decision.by, decision.groups):
            approvers = ", ".join(call.approvers or [])
            what = f"guardrail {call.tool}'s" if call.guardrail else f"{call.tool} call"
            return ApplicationError(
                f"{decision.by} may not decide {what} {call.call_id!r}; its"
                f" approvers are {approvers}",
                type=ErrorCode.APPROVAL_NOT_ALLOWED,
            )
    return None


def _decided_earlier(memory: RunMemory, call_id: str) -> bool:
    """A call of an earlier answer, decided and run: its tool message keeps the decision,
    and once that message has moved into a page, `Approvals.decided` keeps its id."""
    if any(
        m.tool_call_id == call_id and m.decision is not None for m in memory.conversation.transcript
    ):
        return True
    # Never in the way of a pending call of the same id (a model may repeat its ids): runs
    # on earlier code took those decisions, and must replay taking them.
    pending = any(p.call_id == call_id for p in memory.approvals.undecided())
    return call_id in memory.approvals.decided and not pending


def _target(approvals: Approvals, decision: Decision) -> PendingApproval | None:
    """The one call a decision is about: the one it names, or the only one pending."""
    undecided = approvals.undecided()
    if decision.call_id is None:
        return undecided[0] if len(undecided) == 1 else None
    return next((p for p in undecided if p.call_id == decision.call_id), None)


def record(
    memory: RunMemory,
    decision: Decision,
    by: Literal["signal", "update"],
    at: datetime,
) -> None:
    """Records `decision` for its call, or for every undecided call when it names none,
    and remembers it for the like calls after them when it says `remember`. A call
    already decided keeps its first decision."""
    approvals = memory.approvals
    if decision.call_id is None:
        decided = approvals.blanket()
    else:
        decided = [p for p in approvals.undecided() if p.call_id == decision.call_id]
    audit.decided(memory, decision, decided)
    for pending in decided:
        approvals.decisions[pending.call_id] = DecisionRecord(
            approved=decision.approved,
            reason=decision.reason,
            arguments=decision.arguments if decision.approved else None,
            by=by,
            at=at,
            source=decision.source,
            user=decision.by or TEMPORAL_UI,
            remember=decision.remember,
        )
    if decision.remember is not None:
        for pending in decided:
            approval_rules.remember(memory, pending, approvals.decisions[pending.call_id])
