"""The approval rules' stage: before an answer's calls run, each is judged once, by the
run's approval rules and what it remembers (`workflows.rules`). A decision made without
asking is recorded; the calls a person must decide on become the run's pending calls,
with their approvers and deadline, and the run waits for them at a stop point (their
wait is `workflows.approval_gate`'s)."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio import workflow

from tarry.contracts import PendingApproval, ToolCall, ToolDefinition, approvers_of
from workflows import audit, rules
from workflows.stage import RunScope, Stage


class ApprovalRules(Stage):
    def before_tools(
        self, run: RunScope, calls: Sequence[ToolCall], tools: dict[str, ToolDefinition]
    ) -> bool:
        memory, input = run.memory, run.input
        asking: list[tuple[ToolCall, int | None]] = []
        for c in calls:
            if (tool := tools.get(c.function.name)) is None:
                continue  # not the run's: refused when it would run
            verdict = rules.judge(memory, input.approval_rules, c, tool)
            if isinstance(verdict, rules.Asking):
                asking.append((c, verdict.rule))
            elif verdict is not None:
                memory.approvals.decisions[c.id] = verdict
                audit.made(memory, c.function.name, c.id, verdict)
        if not asking:
            return False
        deadline = workflow.now() + input.approval_timeout if input.approval_timeout else None
        memory.approvals.schemas = {
            c.function.name: tools[c.function.name].parameters for c, _ in asking
        }
        memory.approvals.pending = [
            PendingApproval(
                call_id=c.id,
                tool=c.function.name,
                arguments=c.function.arguments,
                deadline=deadline,
                approvers=approvers_of(input.approvers, c.function.name),
                rule=rule,
            )
            for c, rule in asking
        ]
        return True


RULES = ApprovalRules()
