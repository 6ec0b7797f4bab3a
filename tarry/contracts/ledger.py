"""The spend ledger's contracts: a person's daily caps as a run carries them, and the
messages between a run, its activities and the ledger of its owner's day
(`workflows.ledger`, `activities.ledger`).

One ledger per owner per day (`ledger_id`): the day is in the id, so a reservation
lands on its day's ledger without anything rolling totals over at midnight, a past
day's totals stay what they were, and a day's ledger ends once the day is over and
nothing it granted is still open.
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, date, datetime, time, timedelta

from pydantic import BaseModel, Field

__all__ = [
    "LEDGER_ID_PREFIX",
    "LEDGER_WORKFLOW",
    "RAISE_UPDATE",
    "RESERVE_ACTIVITY",
    "RESERVE_UPDATE",
    "SETTLE_ACTIVITY",
    "SETTLE_UPDATE",
    "SPEND_ROOM_SIGNAL",
    "CapRaise",
    "DailyCaps",
    "LedgerState",
    "Reservation",
    "ReserveAnswer",
    "ReserveRequest",
    "Settlement",
    "Spend",
    "day_of",
    "ledger_id",
]

LEDGER_WORKFLOW = "SpendLedger"
RESERVE_UPDATE = "reserve"
SETTLE_UPDATE = "settle"
RAISE_UPDATE = "raise_cap"
RESERVE_ACTIVITY = "reserve_spend"
SETTLE_ACTIVITY = "settle_spend"
SPEND_ROOM_SIGNAL = "spend_room"
"""The ledger tells a run it refused that there is room now (a raise, a settlement
below its reservation, a reservation expired): the run asks again."""
LEDGER_ID_PREFIX = "tarry-ledger-"


def day_of(time_zone: str, now: datetime) -> tuple[date, datetime]:
    """The day `now` falls on in `time_zone`, and when it ends (in UTC)."""
    zone = zoneinfo.ZoneInfo(time_zone)
    day = now.astimezone(zone).date()
    ends = datetime.combine(day + timedelta(days=1), time(), tzinfo=zone)
    return day, ends.astimezone(UTC)


def ledger_id(owner: str, day: date) -> str:
    """The workflow id of `owner`'s ledger of `day` (`tarry-ledger-alice-2026-12-07`)."""
    return f"{LEDGER_ID_PREFIX}{owner}-{day.isoformat()}"


class Spend(BaseModel):
    """Tokens and estimated US dollars: spent, reserved, or a cap's room."""

    tokens: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: Spend) -> Spend:
        return Spend(tokens=self.tokens + other.tokens, cost_usd=self.cost_usd + other.cost_usd)


class DailyCaps(BaseModel):
    """What a run's owner may spend in a day (`[limits] max_cost_usd_per_day`,
    `max_tokens_per_day`, the day in `time_zone`): set by the door that starts the run,
    from its caller's limits, and carried in its input (the workflow reads no config),
    by its hand-overs, resumptions and sub-agents."""

    owner: str
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    time_zone: str = "UTC"

    def fits(self, spend: Spend) -> bool:
        """Whether `spend` stays within both caps."""
        tokens_ok = self.max_tokens is None or spend.tokens <= self.max_tokens
        cost_ok = self.max_cost_usd is None or spend.cost_usd <= self.max_cost_usd + 1e-12
        return tokens_ok and cost_ok

    def raised(self, by: CapRaise | None) -> DailyCaps:
        """These caps with what an admin raised today in their place."""
        if by is None:
            return self
        return self.model_copy(
            update={
                "max_cost_usd": by.max_cost_usd or self.max_cost_usd,
                "max_tokens": by.max_tokens or self.max_tokens,
            }
        )

    def describe(self) -> str:
        caps = [f"${self.max_cost_usd:g}" if self.max_cost_usd is not None else ""]
        caps.append(f"{self.max_tokens} tokens" if self.max_tokens is not None else "")
        return " and ".join(c for c in caps if c)


class ReserveRequest(BaseModel):
    """A run's reservation for its next model call, as it asks its activity for it: the
    activity prices it from the worker's profile and finds the day's ledger."""

    caps: DailyCaps
    run_id: str
    call: int
    """The run's count of its reservations: with `run_id`, the call's key, the same
    however often the activity or the update is tried, and on replay."""
    asking: int = 1
    """How often the run has asked for this call's reservation: a refused one is asked
    again under a new update id, which Temporal would otherwise answer as it did."""
    profile: str
    max_tokens: int | None = None
    """The call's `max_tokens` (the run's sampling); None: the profile's, else a default."""
    prompt_tokens: int = 0
    """An estimate of the call's input: what the run's previous call read and wrote."""
    lease: timedelta
    """How long the reservation holds unless settled: the call's retry window and more."""


class Reservation(BaseModel):
    """One model call's reservation on the ledger: at most what the call may spend."""

    run_id: str
    call: int
    caps: DailyCaps
    amount: Spend
    expires: datetime

    @property
    def key(self) -> str:
        return f"{self.run_id}/{self.call}"


class ReserveAnswer(BaseModel):
    granted: bool
    ledger: str
    """The ledger's workflow id, for the settlement: a call across midnight settles on
    the day it reserved on."""
    day_ends: datetime
    """When the day ends in the caps' time zone: a refused run asks again then."""
    committed: Spend = Spend()
    """Spent and reserved on the ledger, with this reservation when granted."""
    refusal: str | None = None
    """Why not, naming whose cap: for the run's `SPEND_CAP_REACHED`."""


class Settlement(BaseModel):
    """A call's actual usage, replacing its reservation (zero for a call that failed or
    was cut short)."""

    ledger: str
    run_id: str
    call: int
    used: Spend


class CapRaise(BaseModel):
    """An admin's raise of a person's caps for the rest of the day (`tarry limits
    raise`, `POST /v1/limits/{user}/raise`)."""

    max_cost_usd: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    by: str | None = None


class LedgerState(BaseModel):
    """A ledger's state: its query's answer, and what it hands over (continue-as-new)."""

    owner: str
    day: date
    day_ends: datetime
    spent: Spend = Spend()
    """Settled: the calls' actual usage."""
    open: dict[str, Reservation] = {}
    """Reservations not yet settled, by key."""
    last_settled: dict[str, int] = {}
    """Each run's last settled call: a settlement or reservation at or below it is a
    repeat (a run's calls are one after another), counted once."""
    waiters: dict[str, Reservation] = {}
    """Runs refused, by id, with what they asked: told when it fits."""
    raised: CapRaise | None = None

    def committed(self) -> Spend:
        total = self.spent
        for r in self.open.values():
            total = total + r.amount
        return total
