"""Decisions the run makes itself: by its approval rules (`RunInput.approval_rules`,
matched by `tarry.contracts.approval_rules`), and as a person asked it to remember
(`Decision.remember`).

Every call of an answer is judged once, when the answer's calls are gated: the first
rule that matches decides (`reject`; `approve` where someone would have been asked;
`ask` gates even a tool outside `require_approval`); a call no rule matches is gated
as `require_approval` says. A call someone would be asked about is first looked up in
what the run remembers: a person who decided with `remember: "run"` decided the same
for the later calls of the same tool that would be asked about for the same reason.
"The same reason" is the rule that asks (`rule 2`, whatever the arguments it matched),
or, for a call no rule asked about, the very same arguments (canonical JSON): a gated
tool with no rule has no pattern to generalise from, so only an identical call is one
the person has seen.

A decision made here is recorded like a person's (`DecisionRecord`, `by="rule"`, `user`
`rule N` or `remembered`) and kept on the call's tool message; the call's activity
summary says it too (`write_file notes/a.md · approved by rule 1`), so history shows
it without decoding a payload. Pure functions of the run's memory and input:
deterministic.

The rules' stage (`ApprovalRules`): before an answer's calls run, each is judged once; a
decision made without asking is recorded, and the calls a person must decide on become
the run's pending calls, with their approvers and deadline, and the run waits for them at
a stop point (their wait is `workflows.approval_gate`'s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from temporalio import workflow

from tarry.contracts import (
    FINISH_TOOL,
    DecisionRecord,
    PendingApproval,
    ToolCall,
    ToolDefinition,
    approvers_of,
)
from tarry.contracts.approval_rules import (
    LEGACY_REGEX_TEXT_LIMIT,
    REGEX_TEXT_LIMIT,
    ApprovalRule,
    RuleDecision,
    first_match,
)
from tarry.contracts.compatibility import RE2_RULES, RULES_TEXT_LIMIT
from workflows import audit
from workflows.memory import RunMemory, fingerprint
from workflows.stage import RunScope, Stage

REMEMBERED = "remembered"
"""The `user` of a decision the run made as a person asked it to remember."""


@dataclass(frozen=True)
class Asking:
    """A call that waits for a person: asked about by approval rule `rule` (from 1), or,
    with `rule` None, because its tool is in `require_approval`."""

    rule: int | None


def judge(
    memory: RunMemory, rules: list[ApprovalRule], call: ToolCall, tool: ToolDefinition
) -> DecisionRecord | Asking | None:
    """What becomes of `call` before it runs: decided here (a `DecisionRecord`), asked
    about (`Asking`), or run as it is (None)."""
    name, arguments = call.function.name, call.function.arguments
    if name == FINISH_TOOL:  # the workflow's own way to end a run, never gated
        return None
    linear = _linear(rules)
    number = first_match(rules, name, arguments, linear=linear, text_limit=_text_limit(linear))
    rule = rules[number - 1] if number is not None else None
    if rule is not None and rule.decision is RuleDecision.REJECT:
        return _made(False, rule.reason, f"rule {number}")
    if rule is not None and rule.decision is RuleDecision.APPROVE:
        # A tool nobody is asked about needs no approval: nothing to record.
        return _made(True, rule.reason, f"rule {number}") if tool.needs_approval else None
    if rule is None and not tool.needs_approval:
        return None
    known = memory.approvals.remembered.get(remembered_key(name, number, arguments))
    if known is not None:
        return _made(known.approved, known.reason, REMEMBERED)
    return Asking(number)


def _linear(rules: list[ApprovalRule]) -> bool:
    """Whether the run matches its rules' regular expressions with RE2
    (`tarry.contracts.approval_rules`): every run from now on; a run that judged calls
    with Python's `re` before keeps it for those calls on replay, as RE2's `\\w` and `\\d`
    are ASCII and Python's are not."""
    return any(r.has_regex for r in rules) and workflow.patched(RE2_RULES.id)


def _text_limit(linear: bool) -> int:
    """The longest value the run's regular expressions search: `REGEX_TEXT_LIMIT` from
    now on; a run that judged calls under the old limit keeps it for those calls on
    replay, since a value between the two was searched then and counts against the call
    now."""
    if linear and workflow.patched(RULES_TEXT_LIMIT.id):
        return REGEX_TEXT_LIMIT
    return LEGACY_REGEX_TEXT_LIMIT


def remember(memory: RunMemory, pending: PendingApproval, decision: DecisionRecord) -> None:
    """Keeps a person's `decision` on `pending` for the like calls after it, and decides
    the like calls of the same answer that still wait."""
    key = key_of(pending)
    memory.approvals.remembered[key] = decision
    approvals = memory.approvals
    for waiting in approvals.undecided():
        if key_of(waiting) == key:
            made = _made(decision.approved, decision.reason, REMEMBERED)
            approvals.decisions[waiting.call_id] = made
            audit.made(memory, waiting.tool, waiting.call_id, made)


def key_of(pending: PendingApproval) -> str:
    """What a later decision must share with `pending` to be decided as it was: a text
    a guardrail asks about, only its guardrail (the guardrail is its rule; the person
    decided what it flags, not one text); a call, `remembered_key`."""
    if pending.guardrail is not None:
        return guardrail_key(pending.tool)
    return remembered_key(pending.tool, pending.rule, pending.arguments)


def guardrail_key(guardrail: str) -> str:
    """The remembered decision on what guardrail `guardrail` asks about."""
    return f"guardrail · {guardrail}"


def remembered_key(tool: str, rule: int | None, arguments: str) -> str:
    """What a later call must share with a remembered one: its tool and the rule that
    asks about it, or its tool and arguments when no rule does."""
    return f"rule {rule} · {tool}" if rule is not None else fingerprint(tool, arguments)


def summary_of(summary: str, decision: DecisionRecord | None) -> str:
    """A tool activity's summary, saying so when the run decided the call itself."""
    if decision is None or decision.by != "rule":
        return summary
    verdict = "approved" if decision.approved else "rejected"
    how = "as remembered" if decision.user == REMEMBERED else f"by {decision.user}"
    return f"{summary} · {verdict} {how}"


def _made(approved: bool, reason: str | None, user: str) -> DecisionRecord:
    return DecisionRecord(approved=approved, reason=reason, by="rule", at=workflow.now(), user=user)


class ApprovalRules(Stage):
    def before_tools(
        self, run: RunScope, calls: Sequence[ToolCall], tools: dict[str, ToolDefinition]
    ) -> bool:
        memory, input = run.memory, run.input
        asking: list[tuple[ToolCall, int | None]] = []
        for c in calls:
            if (tool := tools.get(c.function.name)) is None:
                continue  # not the run's: refused when it would run
            verdict = judge(memory, input.approval_rules, c, tool)
            if isinstance(verdict, Asking):
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
