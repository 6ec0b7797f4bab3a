"""The push configs of a run's A2A task (`RunMemory.push_configs`): which the `set` and
`delete` updates keep, and how many. The pushes themselves go out at the run's stop
points with its notifications (`workflows.notifications`)."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from tarry.contracts import ErrorCode
from tarry.contracts.a2a_configs import MAX_PUSH_CONFIGS, PushConfig
from workflows.memory import RunMemory


def without(memory: RunMemory, id: str, owner: str) -> list[PushConfig]:
    """The run's configs but `owner`'s config `id`."""
    return [c for c in memory.push_configs if (c.id, c.owner) != (id, owner)]


def set_problem(memory: RunMemory, config: PushConfig) -> ApplicationError | None:
    """`INPUT_INVALID` for a new config past `MAX_PUSH_CONFIGS`; None otherwise."""
    if len(without(memory, config.id, config.owner)) < MAX_PUSH_CONFIGS:
        return None
    return ApplicationError(
        f"the task has {MAX_PUSH_CONFIGS} push configs, the most it keeps: delete one first",
        type=ErrorCode.INPUT_INVALID,
    )
