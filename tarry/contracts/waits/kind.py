"""What a kind of wait is, for every door that shows one or ends one: `WaitKind`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from tarry.contracts.audit import Act
from tarry.contracts.names import Need, NotifyEvent, WaitingFor

__all__ = ["Ending", "WaitKind"]


class Ending(BaseModel):
    """A message to the run that ends its wait, who may send it, and how the audit
    trail records it."""

    model_config = ConfigDict(frozen=True)

    message: str
    """The workflow update (or signal) that ends it: `send`, `decide`, `raise_budget`..."""
    signal: bool = False
    """A signal, answered by nothing: the older way some doors still send."""
    who: Need
    """Who may send it, as `tarry.api.rights` checks: the run's writers (`write`), or
    also the approvers a call names (`decide`)."""
    act: Act
    """The act its audit record names (`tarry audit RUN`)."""


class WaitKind(BaseModel):
    """A kind of wait for a person (`RunState.waiting_for`), as the CLI, the API, the
    MCP server, the inbox, notifications, the timeline, the trace and the audit show it.
    Each kind is one module of `tarry.contracts.waits`, registered there once."""

    model_config = ConfigDict(frozen=True)

    kind: WaitingFor
    label: str
    """One word, for a list's tag and a badge: `reply`, `approval`, `budget`..."""
    waits_for: str
    """What the run waits for, to follow "waiting for": in filters' options and help."""
    hint: str
    """The sentence the CLI prints at the stop point: what to do next, with the command.
    It may name `{run}` (the run's id, or `RUN`), `{waiting_on}`, `{paused_by}` and
    `{error}` (`CODE: message`), which the CLI fills in from the run's state."""
    quiet: bool = False
    """The CLI leaves the hint unsaid at a stop point unless asked (`tarry budget` asks):
    a wait that a reply ends and the person there expects, whose prompt says it."""
    ends: tuple[Ending, ...]
    """What, sent to this run, ends the wait; empty for a wait that is another run's."""
    delegated: bool = False
    """The wait is another run's (`RunState.waiting_on` names it): what ends that run's
    wait, sent to it, ends this one's."""
    notify: NotifyEvent | None
    """The `[[notify]]` event of its stop point; None: no receiver hears of it."""

    @property
    def span(self) -> str:
        """The name of the wait's span in the run's trace (`wait approval`); the run's
        timeline names its wait span by the kind alone, its `kind` being `wait`."""
        return f"wait {self.kind}"
