"""The run's updates, signals and queries that live with what they change: each module's
`install(run)` registers its own as the run is made (`AgentRunWorkflow.__init__`, before
its first activation's messages are delivered). A new one is its module and a line here,
not a method of the workflow class, which keeps the handlers of the run's own loop:
replies, decisions, pause, stop, the model, and the queries every door reads."""

from __future__ import annotations

from collections.abc import Callable

from workflows import a2a_configs, auth_waits, budgets, pins, remote_agents, slots, spend
from workflows.stage import RunScope

INSTALLS: tuple[Callable[[RunScope], None], ...] = (
    pins.install,  # pin, unpin
    auth_waits.install,  # connected
    budgets.install,  # parent_budget
    spend.install,  # the ledger's spend-room signal
    slots.install,  # the slots' slot-free signal
    remote_agents.install,  # a2a_push
    a2a_configs.install,  # set_push_config, delete_push_config, push_configs
)


def install(run: RunScope) -> None:
    """Registers every module's handlers on the run being made."""
    for each in INSTALLS:
        each(run)
