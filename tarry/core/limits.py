"""What a person may use and spend: their limits, as the config's `[limits]` gives them.

`[limits.default]`, `[limits.user.NAME]` and `[limits.group.NAME]` each say some of:
the model profiles a person may use (`models`, globs of profile names), what they may
spend in a day (`max_cost_usd_per_day`, `max_tokens_per_day`, the day in `[limits]
time_zone`), how many runs they may have open (`max_concurrent_runs`) and the largest
budget a run of theirs may have (`max_run_budget`, also the budget of a run that names
none). A person matches their user entry, the entries of their groups and the default;
`resolved` picks one value per setting (the rule, and why, is its docstring's).

The door that names the caller (`tarry.config.settings.TarrySettings.caller`) resolves
their limits with their groups, and they travel with the `Caller`, as groups do: the
client refuses a start, a schedule, a fork or an eval outside them before anything
starts (`model_problem`, `admitted_budget`), and a `set_model` carries the caller's
globs to the run, whose update validator refuses the switch (`workflows.waits.model`),
so a run already going is checked where the switch happens. A caller with no limits (no
`[limits]` in the config, a program with its own `Caller`, Temporal itself) is refused
nothing. Pure: a workflow refuses a switch with `Limits.model_problem`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any

from tarry.contracts import Budget, ErrorCode, RunInput
from tarry.contracts.ledger import DailyCaps
from tarry.contracts.slots import RunCap
from tarry.core.errors import TarryError

__all__ = [
    "TABLE_SETTINGS",
    "ConcurrencyPolicy",
    "Limits",
    "allows",
    "resolved",
]


class ConcurrencyPolicy(StrEnum):
    """`[limits] at_max_concurrent_runs`: what a start past `max_concurrent_runs` meets."""

    QUEUE = "queue"
    """It waits until one of the person's runs ends, then starts."""
    REFUSE = "refuse"
    """It is refused; the person starts it again later."""


def allows(globs: Iterable[str] | None, profile: str) -> bool:
    """Whether `profile` matches one of `globs` (`*`, `?`, `[...]`, case-sensitive, as
    profile names are); None: every profile."""
    return globs is None or any(fnmatchcase(profile, glob) for glob in globs)


@dataclass(frozen=True)
class Limits:
    """One person's limits; a field None is not limited. As an entry of the config
    (`[limits.user.alice]`), None is a setting the entry leaves to the others."""

    models: tuple[str, ...] | None = None
    """Globs of the model profiles they may use; None: any."""
    max_cost_usd_per_day: float | None = None
    max_tokens_per_day: int | None = None
    max_concurrent_runs: int | None = None
    max_run_tokens: int | None = None
    """`max_run_budget.max_total_tokens`: the most a run of theirs may have, and the
    tokens of a run that names no budget."""
    max_run_cost_usd: float | None = None
    """`max_run_budget.max_cost_usd`, as `max_run_tokens`."""
    time_zone: str = "UTC"
    """Where their day begins and ends (`[limits] time_zone`), for the daily caps."""
    at_max_concurrent_runs: ConcurrencyPolicy = ConcurrencyPolicy.QUEUE
    """What a start past `max_concurrent_runs` meets (`[limits] at_max_concurrent_runs`)."""

    def daily_caps(self, owner: str) -> DailyCaps | None:
        """The caps `owner`'s runs carry to their ledger (`tarry.contracts.ledger`); None
        when neither daily cap is set: such runs touch no ledger."""
        if self.max_cost_usd_per_day is None and self.max_tokens_per_day is None:
            return None
        return DailyCaps(
            owner=owner,
            max_cost_usd=self.max_cost_usd_per_day,
            max_tokens=self.max_tokens_per_day,
            time_zone=self.time_zone,
        )

    def run_cap(self, owner: str) -> RunCap | None:
        """The `max_concurrent_runs` `owner`'s runs carry to their slots
        (`tarry.contracts.slots`); None when it is not set: such runs hold no slot."""
        if self.max_concurrent_runs is None:
            return None
        return RunCap(
            owner=owner,
            max_runs=self.max_concurrent_runs,
            queue=self.at_max_concurrent_runs is ConcurrencyPolicy.QUEUE,
        )

    def model_problem(self, profile: str, what: str = "the run") -> TarryError | None:
        """403 `MODEL_NOT_ALLOWED` when `profile` (which `what` names) is outside `models`."""
        if allows(self.models, profile):
            return None
        globs = ", ".join(self.models or ()) or "none"
        return TarryError(
            ErrorCode.MODEL_NOT_ALLOWED,
            f"{what} names the model profile {profile!r}, which your limits do not allow"
            f" (models: {globs}); name one of those, or ask an admin to add it to your"
            " [limits] entry",
        )

    def admitted(self, input: RunInput) -> RunInput:
        """`input` as these limits let a run of it start: its model profile checked (the
        `default` one when it names none) and its budget within `max_run_budget`, which
        fills in what it leaves out. Raises `MODEL_NOT_ALLOWED` or `BUDGET_NOT_ALLOWED`."""
        if problem := self.model_problem(input.model):
            raise problem
        budget = self.admitted_budget(input.budget)
        return input if budget == input.budget else input.model_copy(update={"budget": budget})

    def admitted_budget(self, asked: Budget | None, what: str = "the run") -> Budget | None:
        """The budget of a run (or of what `what` names: an eval) that asks for `asked`:
        each limit it leaves out is `max_run_budget`'s; 403 `BUDGET_NOT_ALLOWED` for one
        above it."""
        given = asked or Budget()
        if problem := self.budget_problem(given, f"{what} asks for a budget"):
            raise problem
        filled = Budget(
            max_total_tokens=given.max_total_tokens or self.max_run_tokens,
            max_cost_usd=given.max_cost_usd or self.max_run_cost_usd,
        )
        return None if filled == Budget() else filled

    def budget_problem(self, asked: Budget, what: str) -> TarryError | None:
        """403 `BUDGET_NOT_ALLOWED` when a limit of `asked` (which `what` names: a start's
        budget, a raise) is above `max_run_budget`'s."""
        over = [
            f"{name} {value:g} (at most {most:g})"
            for name, value, most in (
                ("max_total_tokens", asked.max_total_tokens, self.max_run_tokens),
                ("max_cost_usd", asked.max_cost_usd, self.max_run_cost_usd),
            )
            if value is not None and most is not None and value > most
        ]
        if not over:
            return None
        return TarryError(
            ErrorCode.BUDGET_NOT_ALLOWED,
            f"{what} over your max_run_budget: {', '.join(over)}; ask for at most that, or"
            " ask an admin to raise your [limits] entry",
        )


TABLE_SETTINGS = ("time_zone", "at_max_concurrent_runs")
"""The settings of the `[limits]` table itself, one for everyone."""


def resolved(
    user: Limits | None, groups: Sequence[Limits], default: Limits | None, table: Limits
) -> Limits:
    """The limits of a person whose user entry is `user`, whose groups' entries are
    `groups` and under the `default` entry (`table` holds the `TABLE_SETTINGS`),
    setting by setting:

    1. their user entry's, when it sets it: a person singled out is singled out whole;
    2. else the most generous of their groups' entries that set it (the union of their
       `models`, the largest of each cap), as Unix groups, Vault policies and IAM allow
       statements add up: being put in one more group never takes away what another
       gives, and a group named by the identity provider for another purpose cannot
       shrink a person's limits;
    3. else the default entry's;
    4. else none: not limited.
    """
    picked: dict[str, Any] = {}
    for setting in (f.name for f in fields(Limits) if f.name not in TABLE_SETTINGS):
        mine = None if user is None else getattr(user, setting)
        theirs = [value for g in groups if (value := getattr(g, setting)) is not None]
        fallback = None if default is None else getattr(default, setting)
        generous = _generous(theirs)
        picked[setting] = next((v for v in (mine, generous, fallback) if v is not None), None)
    return replace(table, **picked)


def _generous(values: list[Any]) -> Any:
    """The most generous of some entries' values of one setting: the union of globs, or
    the largest number; None for no values."""
    if not values:
        return None
    if isinstance(values[0], tuple):
        return tuple(dict.fromkeys(glob for globs in values for glob in globs))
    return max(values)
