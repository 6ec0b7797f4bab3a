"""Waiting for a person after the model kept failing past `Timeouts.llm_ask_after`:
`retry`, or a reply (the model is asked again with it), lets the run go on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio.exceptions import ApplicationError

from tarry.contracts import ErrorCode, ModelSwitch, WaitingFor
from tarry.core.limits import Limits
from workflows.audit import ModelArg, profile_of
from workflows.waits.wait import Wait

if TYPE_CHECKING:
    from workflows.memory import RunMemory


class Model(Wait):
    kind = WaitingFor.MODEL

    def holds(self, memory: RunMemory) -> bool:
        return memory.model_failure is not None

    def ends(self, memory: RunMemory) -> bool:
        return memory.requests.retry or bool(memory.inbox.queued)


WAIT = Model()


def retry_problem(waiting_for: WaitingFor | None) -> ApplicationError | None:
    """Why `retry` has nothing to do (`RETRY_NOT_WAITING`), or None: only a run waiting
    for its model is asked again by it."""
    if waiting_for is WaitingFor.MODEL:
        return None
    return ApplicationError(
        "the run is not waiting for its model: reply to it instead",
        type=ErrorCode.RETRY_NOT_WAITING,
    )


def switch_problem(memory: RunMemory, switch: ModelArg) -> ApplicationError | None:
    """Why `set_model` cannot switch the run to `switch`'s profile, or None: a blank name
    (`INPUT_INVALID`), or one the worker lacks (`LLM_UNKNOWN_PROFILE`), refused now rather
    than failing the run's next model call, or one outside the globs the switch carries
    (`MODEL_NOT_ALLOWED`: its author's limits; a switch without them, from the Temporal
    UI or an older client, is an operator's, refused no profile)."""
    name = profile_of(switch)
    if not name.strip():
        return ApplicationError("name a model profile", type=ErrorCode.INPUT_INVALID)
    if (profiles := memory.catalogue.profiles) and name not in profiles:
        return ApplicationError(
            f"no model profile {name!r} on this worker; configured: {', '.join(profiles)}",
            type=ErrorCode.LLM_UNKNOWN_PROFILE,
        )
    if isinstance(switch, ModelSwitch):
        models = None if switch.models is None else tuple(switch.models)
        if refused := Limits(models=models).model_problem(name, "the switch"):
            return ApplicationError(refused.message, type=refused.code)
    return None
