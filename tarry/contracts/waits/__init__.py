"""What a run can wait for a person for, each kind registered once: what every door
(the CLI, the API, the MCP server, the inbox, notifications, the timeline, the trace,
the audit) shows of it, and what ends it and who may send that (`WaitKind`).

A new kind is a `WaitingFor` member, a module here with its `KIND`, and its line in
`KINDS`; the doors take it from `wait_kind` and `WAIT_KINDS`. When a run waits for it
is the workflow's to say (`workflows`)."""

from __future__ import annotations

from tarry.contracts.names import WaitingFor
from tarry.contracts.waits import agent, approval, budget, input, model, paused
from tarry.contracts.waits.kind import Ending, WaitKind

__all__ = ["KINDS", "WAIT_KINDS", "Ending", "WaitKind", "wait_kind"]

KINDS = (input.KIND, approval.KIND, budget.KIND, model.KIND, agent.KIND, paused.KIND)
WAIT_KINDS: dict[WaitingFor, WaitKind] = {kind.kind: kind for kind in KINDS}
"""Every kind, by its `WaitingFor`, in the order the doors list them."""


def wait_kind(waiting_for: WaitingFor) -> WaitKind:
    """The registered kind of `waiting_for`."""
    return WAIT_KINDS[waiting_for]
