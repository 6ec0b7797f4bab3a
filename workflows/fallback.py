"""A turn's fallback: the profiles a run asks, in order, while its own profile's
provider is down (`ModelProfile.fallback`).

Which providers are down is each worker's state (`activities.circuits`), which workflow
code must not read: the run learns it only from the model activity's outcome, a
`LLM_PROVIDER_DOWN` failure whose details name the fallback, and history records that.
The turn then asks each fallback in turn, each call summarised as `turn 3 · local
(fallback of default)`; once none is left, its own profile again, retried as a profile
without a fallback is (an outage then ends in `waiting_for: model`, as without one). The
next turn begins with its own profile: the worker sends it to the fallback at once while
the circuit is open, and back to its own profile after the cool-down.

A fallback outside the run owner's allowed profiles (`WorkflowInput.models`, their
`[limits] models`) is passed over, as one the worker lacks is. A fallback's call is made
inside the turn's reservation on the owner's spend ledger (`workflows.spend` wraps the
whole turn's call) and settled with what it used.

A run whose profile names no fallback never meets `LLM_PROVIDER_DOWN`, so it gives the
commands it gave before fallbacks.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.exceptions import ActivityError, ApplicationError

from tarry.contracts import ErrorCode
from tarry.core.limits import allows


@dataclass
class TurnFallback:
    """Where one turn's model call stands: its own profile, or a fallback of it."""

    left: list[str] | None = None
    """The fallback profiles not asked yet; None: the own profile is not down."""
    asking: str | None = None
    """The fallback being asked; None: the run's own profile."""
    allowed: list[str] | None = None
    """The globs of the profiles the run's owner may use; None: any."""

    @property
    def exhausted(self) -> bool:
        """Every fallback was down too: the own profile is asked, without its circuit."""
        return self.left is not None and self.asking is None

    def profile(self, own: str) -> str:
        return self.asking or own

    def fallback_of(self, own: str) -> str | None:
        return own if self.asking is not None else None

    def down(self, failure: ActivityError) -> None:
        """The profile asked is down: the next of the fallback the worker named, or,
        with none left, the own profile again. The one place that picks a fallback, so
        the one where a rule on which profiles a run may use belongs."""
        if self.left is None:
            self.left = [p for p in _fallback_named(failure) if allows(self.allowed, p)]
        self.asking = self.left.pop(0) if self.left else None


def is_down(failure: ActivityError) -> bool:
    cause = failure.cause
    return isinstance(cause, ApplicationError) and cause.type == ErrorCode.LLM_PROVIDER_DOWN


def _fallback_named(failure: ActivityError) -> list[str]:
    """The fallback in the details of the worker's `LLM_PROVIDER_DOWN`."""
    cause = failure.cause
    details = cause.details if isinstance(cause, ApplicationError) else ()
    named = details[0] if details else []
    return [str(name) for name in named] if isinstance(named, list) else []
