"""Per-worker circuits: which model profiles' providers are down, so that a run whose
profile names a `fallback` asks that instead of waiting the outage out.

The rule, the cheapest safe one: each profile has a circuit on each worker. It opens
when `fallback_after` calls in a row fail the way an outage does (5xx, a connection
error, 429, the profile's `request_timeout`); while it is open, calls of runs that may
fall back are refused at once (`LLM_PROVIDER_DOWN`) and the run asks its fallback.
After `fallback_cooldown` seconds the next call goes through again: an answer closes the
circuit, a failure opens it again at once. Calls made while it is open with nowhere to
fall back to (`LlmRequest.circuit` false) go through as ever, and close it too.

A circuit is the worker's state, never the run's: the workflow only learns of it from
the model activity's outcome, which history records.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from temporalio.exceptions import ApplicationError

from tarry.config.tables import ModelProfile
from tarry.contracts import ErrorCode

OUTAGES = frozenset({ErrorCode.LLM_HTTP_ERROR, ErrorCode.LLM_RATE_LIMITED, ErrorCode.LLM_TIMEOUT})
"""The failures that count towards opening a circuit; others say nothing of the provider."""


@dataclass
class _Circuit:
    failures: int = 0
    """Outage failures in a row."""
    open_until: float | None = None
    """`time.monotonic()` at which calls go through again; None: closed."""


class Circuits:
    """The circuit of each profile on this worker."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._circuits: dict[str, _Circuit] = {}

    def is_open(self, name: str) -> bool:
        """Whether calls to profile `name` are refused now (its cool-down not over)."""
        circuit = self._circuits.get(name)
        return circuit is not None and (circuit.open_until or 0) > self._clock()

    def answered(self, name: str) -> None:
        self._circuits.pop(name, None)

    def failed(self, name: str, profile: ModelProfile, failure: BaseException) -> bool:
        """Counts `failure` of profile `name`; True when it opened the circuit (an
        outage's `fallback_after`-th failure in a row, or the first after a cool-down)."""
        if not (isinstance(failure, ApplicationError) and failure.type in OUTAGES):
            return False
        circuit = self._circuits.setdefault(name, _Circuit())
        circuit.failures += 1
        if circuit.failures < profile.fallback_after and circuit.open_until is None:
            return False
        circuit.open_until = self._clock() + profile.fallback_cooldown
        return True


def provider_down(
    name: str, fallback: list[str], failure: BaseException | None = None
) -> ApplicationError:
    """The failure that sends the run to its fallback, not retried; its details are
    the profile's `fallback`, for the workflow to ask in order."""
    cause = f": {failure}" if failure is not None else " (its circuit is open)"
    return ApplicationError(
        f"model {name!r} is down on this worker{cause}",
        fallback,
        type=ErrorCode.LLM_PROVIDER_DOWN,
        non_retryable=True,
    )
