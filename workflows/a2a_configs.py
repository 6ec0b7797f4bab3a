"""The push configs of a run's A2A task (`RunMemory.push_configs`): which the `set` and
`delete` updates keep, how many, and their audit records. The pushes themselves go out
at the run's stop points with its notifications (`workflows.notifications`)."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from tarry.contracts import Act, Acting, ErrorCode
from tarry.contracts.a2a_configs import MAX_PUSH_CONFIGS, PushConfig, PushConfigRef
from workflows import audit
from workflows.memory import RunMemory


def put(memory: RunMemory, config: PushConfig, acting: Acting) -> None:
    """Keeps `config`, in place of its owner's config of the same id; audited."""
    memory.push_configs = [*without(memory, config.id, config.owner), config]
    audit.record(memory, Act.PUSH_CONFIG, acting, f"push config {config.id!r} set")


def delete(memory: RunMemory, ref: PushConfigRef, acting: Acting) -> None:
    """Drops its owner's config `ref.id`; audited when there was one."""
    kept = without(memory, ref.id, ref.owner)
    if len(kept) < len(memory.push_configs):
        audit.record(memory, Act.PUSH_CONFIG_DELETE, acting, f"push config {ref.id!r} deleted")
    memory.push_configs = kept


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
