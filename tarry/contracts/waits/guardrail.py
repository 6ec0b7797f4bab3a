"""A guardrail whose verdict is `ask` flagged a text: the run waits for one of its
approvers to allow it, edit it or block it (`RunState.pending_approvals` holds it, with
`guardrail` set): decided as a tool call is, by the same messages."""

from tarry.contracts.audit import Act
from tarry.contracts.names import Need, NotifyEvent, WaitingFor
from tarry.contracts.waits.kind import Ending, WaitKind

__all__ = ["KIND"]

KIND = WaitKind(
    kind=WaitingFor.GUARDRAIL,
    label="guardrail",
    waits_for="a decision on a text a guardrail flagged",
    hint=(
        "a guardrail holds a text for a decision: `tarry approve {run} CALL_ID` allows it,"
        ' `--args \'{{"text": "..."}}\'` edits it, `--reject` blocks it'
    ),
    ends=(
        Ending(message="decide", who=Need.DECIDE, act=Act.DECISION),
        Ending(message="approve", signal=True, who=Need.DECIDE, act=Act.DECISION),
    ),
    notify=NotifyEvent.WAITING_FOR_APPROVAL,
)
