"""Texts a guardrail asks a person about (`GuardVerdict.ASK`): the run waits, at a stop
point (`WaitingFor.GUARDRAIL`), for one of the guardrail's approvers to allow the text,
edit it or block it.

The wait is a pending decision in the run's approvals (`PendingApproval.guardrail`), so
every door that decides a tool call (the CLI, the inbox, action links, MCP, the API, the
`approve` signal) decides it, by the same `decide` update, with the same checks of who
may (`workflows.approvals`), the same deadline and default, and the same "remember"
(`approval_rules.key_of`: what one guardrail flags, for the rest of the run). Only runs
with a hit that asks give a command here.
"""

from __future__ import annotations

import json

from temporalio import workflow

from tarry.contracts import TEMPORAL_UI, DecisionRecord, PendingApproval, Phase
from tarry.contracts.guardrails import GuardDecision, GuardPoint, Guardrail, GuardrailHit
from workflows import approval_gate
from workflows.approval_rules import REMEMBERED, guardrail_key
from workflows.stage import RunScope


async def decided(
    run: RunScope, text: str, hit: GuardrailHit, rail: Guardrail, on: GuardPoint
) -> tuple[str, GuardrailHit]:
    """The text as decided (allowed: `text`; edited: the person's), and `hit` with the
    decision (`GuardrailHit.blocks` when blocked: by a person, the deadline's default or
    a stop). Decided at once when a person asked the run to remember their decision on
    what `rail` flags."""
    m = run.memory
    known = m.approvals.remembered.get(guardrail_key(rail.name))
    if known is not None:
        remembered = GuardDecision(allowed=known.approved, by=REMEMBERED, reason=known.reason)
        return text, _with(hit, on, remembered)
    call_id = next_id(run)
    m.guards.asks += 1
    timeout = rail.timeout or run.input.approval_timeout
    m.approvals.pending = [
        *m.approvals.pending,
        PendingApproval(
            call_id=call_id,
            tool=rail.name,
            arguments=json.dumps({"text": text}, ensure_ascii=False),
            deadline=workflow.now() + timeout if timeout else None,
            approvers=rail.approvers,
            guardrail=hit.model_copy(update={"on": on}),
        ),
    ]
    run.phases.wait()
    record = await approval_gate.decision_on(run, call_id, f"guardrail {rail.name}", timeout)
    m.approvals.settle(call_id)
    m.approvals.pending = [p for p in m.approvals.pending if p.call_id != call_id]
    if m.phase is Phase.WAITING_USER and m.undecided():
        run.phases.enter(Phase.WAITING_USER)  # what it waits for now: the calls still pending
    edit: str = record.arguments["text"] if record.approved and record.arguments else text
    decision = GuardDecision(
        allowed=record.approved,
        edited=edit != text,
        by=_who(record),
        reason=record.reason,
        asked_as=call_id,
    )
    return edit, _with(hit, on, decision)


def next_id(run: RunScope) -> str:
    """The id of the next text a guardrail asks about (`guardrail-N`)."""
    return f"guardrail-{run.memory.guards.asks + 1}"


def stopped(hits: list[GuardrailHit]) -> bool:
    """Whether a stop ended a wait of these hits (the run ends: nothing more to ask)."""
    return any(h.decision is not None and h.decision.by == "stop" for h in hits)


def _who(record: DecisionRecord) -> str:
    if record.by in ("deadline", "stop"):
        return record.by
    return record.user or TEMPORAL_UI


def _with(hit: GuardrailHit, on: GuardPoint, decision: GuardDecision) -> GuardrailHit:
    return hit.model_copy(update={"on": on, "decision": decision})
