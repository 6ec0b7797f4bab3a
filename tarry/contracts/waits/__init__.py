"""What a run can wait for a person for, each kind registered once: what every door
(the CLI, the API, the MCP server, the inbox, notifications, the timeline, the trace,
the audit) shows of it, and what ends it and who may send that (`WaitKind`).

A new kind is a `WaitingFor` member, a module here with its `KIND`, and its name in
`MODULES`; the doors take it from `wait_kind` and `WAIT_KINDS`. When a run waits for it
is the workflow's to say (`workflows`)."""

from __future__ import annotations

from tarry.contracts.names import WaitingFor
from tarry.contracts.waits import (
    agent,
    approval,
    auth,
    budget,
    guardrail,
    input,
    model,
    paused,
    remote,
    slot,
)
from tarry.contracts.waits.kind import Ending, WaitKind

__all__ = ["KINDS", "MODULES", "WAIT_KINDS", "Ending", "WaitKind", "wait_kind"]

MODULES = (input, approval, guardrail, budget, model, agent, paused, slot, auth, remote)
"""Each kind's module, whose docstring says what the wait is and whose `KIND` is its
record, in the order the doors list them."""
KINDS: tuple[WaitKind, ...] = tuple(module.KIND for module in MODULES)
WAIT_KINDS: dict[WaitingFor, WaitKind] = {kind.kind: kind for kind in KINDS}
"""Every kind, by its `WaitingFor`, in the order the doors list them."""


def wait_kind(waiting_for: WaitingFor) -> WaitKind:
    """The registered kind of `waiting_for`."""
    return WAIT_KINDS[waiting_for]
