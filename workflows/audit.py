"""The run's audit trail: one record for every act that changes it (`tarry.contracts.audit`).

Handlers record intent, and one more thing: the act itself, as it reached the run (who,
through which door, at workflow time), so the trail is in the run's history and no
second store can lose it. The run's own decisions (approval rules, remembered
decisions, a deadline's default) are recorded where the loop makes them.

Memory stays bounded: the run keeps the records of its current segment only. A
hand-over passes them in the next run's input beside the memory (`WorkflowInput.audit`),
so the event that closes the segment holds them, and the next run starts with none; the
last segment's are in the run's result. A segment that has gathered `RECORDS_PER_SEGMENT`
hands over at its next safe point, however few turns it took: a run paused for weeks
while people come and go keeps a short list. Pure functions of the run's memory: deterministic.
"""

from __future__ import annotations

from typing import Protocol

from temporalio import workflow

from tarry.contracts import (
    RESUMED_SIGNAL,
    TEMPORAL_UI,
    Act,
    Acting,
    AuditRecord,
    BudgetRaise,
    Decision,
    DecisionRecord,
    Door,
    ModelSwitch,
    PauseRequest,
    PendingApproval,
    ReplyPolicy,
    ReplyPolicyChange,
    StopRequest,
    UserInput,
)
from tarry.contracts.compatibility import AUDIT_HAND_OVER
from tarry.contracts.guardrails import GuardrailHit, GuardVerdict
from workflows.memory import RunMemory, WorkflowInput

# The older clients' shapes are the compatibility ledger's `old-client-arguments`.
ModelArg = ModelSwitch | str
"""What `set_model` takes: the profile and who asks, or (from older clients) its name."""
PolicyArg = ReplyPolicyChange | ReplyPolicy
"""What `set_reply_policy` takes: the policy and who asks, or (older clients) the policy."""

RECORDS_PER_SEGMENT = 200
"""A segment with this many records hands over at its next safe point."""


class Actor(Protocol):
    """What names who acts and how: `Acting`, and the payloads with `by` and `door`."""

    @property
    def by(self) -> str | None: ...
    @property
    def door(self) -> Door | None: ...


def record(memory: RunMemory, act: Act, actor: Actor, what: str) -> None:
    """Records `act` by `actor`'s author and door; without them, from outside Tarry's
    doors: `temporal-ui`."""
    door = actor.door or Door.TEMPORAL_UI
    by = actor.by or TEMPORAL_UI
    memory.audit.append(AuditRecord(act=act, by=by, door=door, at=workflow.now(), what=what))
    # Asks the patch here, when the segment fills, not first in the wait condition that
    # reads it (the answer is kept: the condition reads the same).
    hand_over_due(memory)


def decided(memory: RunMemory, decision: Decision, calls: list[PendingApproval]) -> None:
    """A person's decision on `calls` (one act, however many calls it decides)."""
    if not calls:
        return
    verdict = "approved" if decision.approved else "rejected"
    named = ", ".join(f"{c.tool} call {c.call_id}" for c in calls)
    what = f"{verdict} {named}"
    if decision.arguments is not None and decision.approved:
        what += " with edited arguments"
    if decision.remember is not None:
        what += " and remembered it for the run"
    if decision.reason:
        what += f": {decision.reason}"
    # A link's decision names its door as `source`, from before doors.
    door = decision.door or (Door.LINK if decision.source == Door.LINK else None)
    record(memory, Act.DECISION, Acting(by=decision.by, door=door), what)


def made(memory: RunMemory, tool: str, call_id: str, decision: DecisionRecord) -> None:
    """A decision the run made itself: by a rule, as remembered, or a deadline's default."""
    verdict = "approved" if decision.approved else "rejected"
    how = decision.user or decision.by
    what = f"{verdict} {tool} call {call_id}" + (f": {decision.reason}" if decision.reason else "")
    record(memory, Act.DECISION, Acting(by=how, door=Door.RULE), what)


_GUARDED = {GuardVerdict.REDACT: "redacted", GuardVerdict.ASK: "held"}
"""What a guardrail's verdict did to a text, as its audit record says it (else `blocked`)."""


def guarded(memory: RunMemory, hit: GuardrailHit, text: str) -> None:
    """A guardrail's hit on `text` (`a reply`, `an answer`, `the result of ...`): an act
    the run made itself, as a rule's decision is."""
    done = _GUARDED.get(hit.verdict, "blocked")
    kinds = sorted({m.kind for m in hit.matches})
    what = f"{done} {text}" + (f" ({', '.join(kinds)})" if kinds else "")
    what += f": {hit.reason}" if hit.reason else ""
    if (decision := hit.decision) is not None:  # held for a person: what they made of it
        how = "edited" if decision.edited else "allowed" if decision.allowed else "blocked"
        what += f"; {how} by {decision.by}"
    record(memory, Act.GUARDRAIL, Acting(by=f"guardrail {hit.guardrail}", door=Door.RULE), what)


def budget(memory: RunMemory, raised: BudgetRaise) -> None:
    limits = ", ".join(f"{k}={v}" for k, v in raised.limits().items())
    record(memory, Act.BUDGET, raised, f"budget set to {limits}")


def started(memory: RunMemory, input: WorkflowInput) -> None:
    """The run's first record: its start, or a fork's."""
    starter = Acting(by=input.started_by, door=input.door)
    if (fork := input.fork) is None:
        return record(memory, Act.START, starter, f"started with model profile {input.model!r}")
    record(memory, Act.FORK, starter, f"forked from run {fork.run_id!r} at message {fork.at}")


def carried_on(memory: RunMemory) -> RunMemory:
    """The memory a run goes on with (handed over, or resumed), listening for who resumed
    it: a resumption's start carries `RESUMED_SIGNAL`, taken in the run's first task, so
    its record is the new run's first. Registered here, not as a handler of the run's
    class: a hand-over never receives it, and no recorded history holds it."""

    def on_resumed(request: Acting) -> None:
        record(memory, Act.RESUME, request, "resumed the ended run: it waits for a reply")

    workflow.set_signal_handler(RESUMED_SIGNAL, on_resumed)
    return memory


def replied(memory: RunMemory, input: UserInput, seq: int) -> None:
    """A reply the inbox queued as `seq` (not a retry of one it has); the one that
    answers a remote agent's question names its call, the remote sub-agent's trace in
    the lead's trail."""
    what = f"reply {seq} ({len(input.text)} characters)"
    if (asking := memory.agents.asking()) is not None:
        call = memory.agents.remote[asking]
        answer = memory.inbox.first_after(call.asked_at)
        if answer is not None and answer.seq == seq:
            what += f": the answer to remote agent {call.agent}'s question ({asking})"
    record(memory, Act.REPLY, input, what)


def paused(memory: RunMemory, request: PauseRequest | None) -> None:
    record(memory, Act.PAUSE, request or Acting(), "asked to pause")


def retried(memory: RunMemory, request: Acting | None) -> None:
    record(memory, Act.RETRY, request or Acting(), "asked the model again")


def stopped(memory: RunMemory, request: StopRequest | None) -> None:
    reason = f": {request.reason}" if request and request.reason else ""
    record(memory, Act.STOP, request or Acting(), f"stopped{reason}")


def profile_of(switch: ModelArg) -> str:
    """The profile `set_model` switches to: older clients send its name alone."""
    return switch.profile if isinstance(switch, ModelSwitch) else switch


def switched(memory: RunMemory, switch: ModelArg) -> str:
    """Records a model switch; returns the profile."""
    name = profile_of(switch)
    actor = switch if isinstance(switch, ModelSwitch) else Acting()
    record(memory, Act.MODEL, actor, f"switched the model profile to {name!r}")
    return name


def policy_changed(memory: RunMemory, change: PolicyArg) -> ReplyPolicy:
    """Records a change of the reply policy (older clients send the policy alone);
    returns the policy."""
    actor = change if isinstance(change, ReplyPolicyChange) else Acting()
    policy = change.policy if isinstance(change, ReplyPolicyChange) else change
    record(memory, Act.REPLY_POLICY, actor, f"replies while running: {policy}")
    return policy


def hand_over_due(memory: RunMemory) -> bool:
    """Whether the segment holds enough records to hand over (runs from before the
    trail: never for this reason)."""
    return len(memory.audit) >= RECORDS_PER_SEGMENT and workflow.patched(AUDIT_HAND_OVER.id)
