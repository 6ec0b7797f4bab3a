"""The approval gate's stage: a call that waits for a person's decision (made pending by
`workflows.approval_rules`) runs only once it has one, with the arguments the person
left it; a rejected call does not run, and the model reads why.

The wait is durable and may last weeks: a decision (`decide`, the `approve` signal), a
stop, or the deadline's default ends it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from datetime import timedelta

from temporalio import workflow

from tarry.contracts import ApprovalDefault, DecisionRecord, ErrorCode, Phase, ToolResult
from workflows import audit
from workflows.stage import RunScope, RunTool, Stage, ToolStep


class ApprovalGate(Stage):
    async def around_tool(self, step: ToolStep, run_tool: RunTool) -> ToolResult:
        memory, call = step.run.memory, step.call
        gated = any(p.call_id == call.id for p in memory.approvals.pending)
        decision = memory.approvals.decisions.get(call.id)  # one a rule made (`approval_rules`)
        if gated:
            decision = await decision_on(step.run, call.id, call.function.name)
        if decision is None:
            return await run_tool(step)
        if not decision.approved:
            return _rejection(decision)
        arguments = step.arguments
        if decision.arguments is not None:
            arguments = json.dumps(decision.arguments)
        return await run_tool(dataclasses.replace(step, arguments=arguments, decision=decision))


GATE = ApprovalGate()


async def decision_on(
    run: RunScope, call_id: str, name: str, wait: timedelta | None = None
) -> DecisionRecord:
    """Waits for a person's decision on pending `call_id` (of tool, or guardrail, `name`):
    ended by a decision, a stop, or the deadline's default. `wait`: the run's
    `approval_timeout` unless given (a guardrail's own)."""
    m, input = run.memory, run.input
    decisions = m.approvals.decisions
    with contextlib.suppress(TimeoutError):  # the deadline passed: its default applies
        await workflow.wait_condition(
            lambda: call_id in decisions or m.requests.stop,
            timeout=wait or input.approval_timeout,
            timeout_summary=f"approval deadline for {name}",
        )
    if call_id not in decisions:
        by = "stop" if m.requests.stop else "deadline"
        approve = by == "deadline" and input.approval_default is ApprovalDefault.APPROVE
        user = m.requests.stopped_by if by == "stop" else None
        decisions[call_id] = DecisionRecord(approved=approve, by=by, at=workflow.now(), user=user)
        if by == "deadline":  # a stop's rejection is the stop's record
            audit.made(m, name, call_id, decisions[call_id])
    # Resumed here, between the last decision and its call's activity, as recorded
    # histories have it: moved, the phase's search attribute update would change places
    # with the activity in the commands of runs in flight.
    if m.phase is Phase.WAITING_USER and not m.undecided() and not m.requests.stop:
        run.phases.follow()
    return decisions[call_id]


def _rejection(decision: DecisionRecord) -> ToolResult:
    """The tool result the model sees for a call that did not run."""
    if decision.by == "deadline":
        return ToolResult.failure(
            ErrorCode.TOOL_APPROVAL_EXPIRED, "nobody decided on this call before its deadline"
        )
    if decision.by == "stop":
        return ToolResult.failure(ErrorCode.TOOL_REJECTED, "the run was stopped before a decision")
    # A rule's reason, or the reason of the person whose decision was remembered.
    return ToolResult.failure(ErrorCode.TOOL_REJECTED, decision.reason or "rejected by the user")
