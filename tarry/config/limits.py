"""The config file's `[limits]` table: what each person may use and spend
(`tarry.core.limits` says what each setting means, and which entry wins).

    [limits]
    time_zone = "Europe/Berlin"          # where a day of the daily caps begins
    at_max_concurrent_runs = "queue"     # or "refuse"

    [limits.default]
    models = ["cheap-*", "local"]
    max_cost_usd_per_day = 5.0
    max_run_budget = { max_cost_usd = 1.0 }

    [limits.user.alice]
    models = ["*"]

    [limits.group.ops]
    max_cost_usd_per_day = 50.0

Each entry refuses keys it does not know (`extra="forbid"`), as every table does.
"""

from __future__ import annotations

import zoneinfo
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tarry.contracts import Budget
from tarry.contracts.run import principal_problem
from tarry.core.identities import GROUP_PREFIX, member_problem
from tarry.core.limits import ConcurrencyPolicy, Limits, resolved

__all__ = ["LimitEntry", "LimitsTable"]


class LimitEntry(BaseModel):
    """`[limits.default]`, `[limits.user.NAME]` or `[limits.group.NAME]`: a key left out
    is left to the other entries that match a person (`tarry.core.limits.resolved`)."""

    model_config = ConfigDict(extra="forbid")

    models: list[Annotated[str, Field(min_length=1)]] | None = None
    """Globs of the model profiles a person may use (`["cheap-*", "local"]`; `["*"]`:
    any). A run that names no profile uses `default`, which must match too."""
    max_cost_usd_per_day: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """What a person's runs may spend in a day, estimated from the profiles' `prices`."""
    max_tokens_per_day: int | None = Field(default=None, gt=0)
    """The tokens a person's runs may spend in a day."""
    max_concurrent_runs: int | None = Field(default=None, ge=1)
    """Runs of a person open at once; a start past them meets `[limits]
    at_max_concurrent_runs`."""
    max_run_budget: Budget | None = None
    """The largest budget a run of a person's may have (`{ max_total_tokens = N,
    max_cost_usd = X }`), and the budget of a run that names none."""

    def limits(self) -> Limits:
        budget = self.max_run_budget or Budget()
        return Limits(
            models=None if self.models is None else tuple(self.models),
            max_cost_usd_per_day=self.max_cost_usd_per_day,
            max_tokens_per_day=self.max_tokens_per_day,
            max_concurrent_runs=self.max_concurrent_runs,
            max_run_tokens=budget.max_total_tokens,
            max_run_cost_usd=budget.max_cost_usd,
        )


class LimitsTable(BaseModel):
    """`[limits]`: the entries, and the settings that hold for all of them."""

    model_config = ConfigDict(extra="forbid")

    time_zone: str = "UTC"
    """The IANA time zone (`Europe/Berlin`) whose midnight begins a day of the daily caps."""
    at_max_concurrent_runs: ConcurrencyPolicy = ConcurrencyPolicy.QUEUE
    """What a start past a person's `max_concurrent_runs` meets: `queue` (it starts
    when one of their runs ends) or `refuse`."""
    default: LimitEntry | None = None
    """`[limits.default]`: everyone's, for what neither their user entry nor their
    groups' say."""
    user: dict[str, LimitEntry] = {}
    """`[limits.user.NAME]`: one person's (as the runs record them: `alice`,
    `cli:alice`, `oidc:SUB`)."""
    group: dict[str, LimitEntry] = {}
    """`[limits.group.NAME]`: the members' of a group of `[api.groups]` or of the
    identity provider's groups claim."""

    @field_validator("time_zone")
    @classmethod
    def _a_time_zone(cls, name: str) -> str:
        try:
            zoneinfo.ZoneInfo(name)
        except (ValueError, zoneinfo.ZoneInfoNotFoundError):
            raise ValueError(
                f"{name!r} is no time zone of the IANA database; write one such as"
                ' "UTC" or "Europe/Berlin"'
            ) from None
        return name

    @field_validator("user")
    @classmethod
    def _user_names(cls, users: dict[str, LimitEntry]) -> dict[str, LimitEntry]:
        for name in users:
            if problem := member_problem(name):
                raise ValueError(problem)
        return users

    @field_validator("group")
    @classmethod
    def _group_names(cls, groups: dict[str, LimitEntry]) -> dict[str, LimitEntry]:
        for name in groups:
            if problem := principal_problem(f"{GROUP_PREFIX}{name}"):
                raise ValueError(problem)
        return groups

    def of(self, user: str, groups: tuple[str, ...]) -> Limits:
        """The limits of `user` in `groups` (`tarry.core.limits.resolved`)."""
        mine = self.user.get(user)
        theirs = [self.group[group].limits() for group in groups if group in self.group]
        table = Limits(time_zone=self.time_zone, at_max_concurrent_runs=self.at_max_concurrent_runs)
        return resolved(
            None if mine is None else mine.limits(),
            theirs,
            None if self.default is None else self.default.limits(),
            table,
        )
