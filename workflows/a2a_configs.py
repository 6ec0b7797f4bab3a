"""The push configs of a run's A2A task (`RunMemory.push_configs`): the updates that set
and delete them and the query that reads them, which the run registers as it is made
(`install`), how many it keeps, and their audit records. The pushes themselves go out at
the run's stop points with its notifications (`workflows.notifications`)."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from tarry.contracts import Act, Acting, ErrorCode, RunState
from tarry.contracts.a2a_configs import (
    DELETE_PUSH_CONFIG_UPDATE,
    MAX_PUSH_CONFIGS,
    PUSH_CONFIGS_QUERY,
    SET_PUSH_CONFIG_UPDATE,
    PushConfig,
    PushConfigRef,
)
from workflows import audit
from workflows.memory import RunMemory
from workflows.stage import RunScope


def install(run: RunScope) -> None:
    """Registers the run's push-config updates, each answering the run's state, and its
    query."""
    memory = run.memory

    def state() -> RunState:
        return run.stream.state_of(memory)

    def set_config(config: PushConfig, acting: Acting) -> RunState:
        """Pushes the run's A2A task's news to `config.url` from its next stop point on;
        replaces its owner's config of the same id."""
        put(memory, config, acting)
        return state()

    def refused(config: PushConfig, acting: Acting) -> None:
        if problem := memory.ended_problem() or set_problem(memory, config):
            raise problem

    def delete_config(ref: PushConfigRef, acting: Acting) -> RunState:
        """Pushes no more to its owner's config `ref.id` (none such: nothing changes)."""
        delete(memory, ref, acting)
        return state()

    def configs() -> list[PushConfig]:
        return memory.push_configs

    workflow.set_update_handler(SET_PUSH_CONFIG_UPDATE, set_config, validator=refused)
    workflow.set_update_handler(DELETE_PUSH_CONFIG_UPDATE, delete_config)
    workflow.set_query_handler(PUSH_CONFIGS_QUERY, configs)


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
