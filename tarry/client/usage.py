"""What the runs spent, per person, model profile or day (`tarry usage`, `GET /v1/usage`,
the inbox's usage page), read from visibility: each run's search attributes.

Why visibility: it holds something for every run, caps or none. The spend ledgers
(`workflows.ledger`) hold a day's spend only for people with daily caps; a run's own usage
(its transcript, a query) costs a worker's answer, or a replay of a closed run, per run.
Every run upserts `TarryOwner`, `TarryModel`, `TarryCostUsd` and `TarryTurns` as it moves
(`workflows.details.search_attributes`), so one list call a thousand runs a page answers
for all of them. What that costs in detail, the cost guide writes down:

- a run counts on the day its latest segment started (in `[limits] time_zone`), and under
  the profile it started with (`TarryModel`: its calls after a `set_model`, and a
  fallback's, count there too);
- its cost is as of its latest phase change;
- a sub-agent's spend is in its parent's (the tree's one budget), so only runs of their
  own are counted;
- tokens are not among the attributes: the workers' `tarry_user_tokens_total` counts them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from tarry.contracts import (
    COST_ATTRIBUTE,
    MODEL_ATTRIBUTE,
    OWNER_ATTRIBUTE,
    TURNS_ATTRIBUTE,
    WORKFLOW_TYPE,
    ErrorCode,
)
from tarry.contracts.run import principal_problem
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.core.ownership import Policy

if TYPE_CHECKING:  # `tarry usage --help` loads no Temporal client
    from temporalio.client import Client, WorkflowExecution

__all__ = [
    "UNOWNED",
    "UsageBy",
    "UsageReport",
    "UsageRow",
    "usage_query",
    "usage_report",
    "whose_usage",
]

PAGE = 1000
"""Runs visibility answers per call: a thousand runs cost one round trip."""
UNOWNED = "(none)"
"""The person of runs started before runs had owners."""
DEFAULT_SINCE = timedelta(days=7)
"""What `tarry usage` and `GET /v1/usage` count without `since`: the last week."""


class UsageBy(StrEnum):
    """What the rows of a report are: one per person, model profile or day."""

    USER = "user"
    MODEL = "model"
    DAY = "day"


class UsageRow(BaseModel):
    key: str
    """The person, the model profile or the day (`2026-12-07`) of the row."""
    runs: int
    turns: int
    cost_usd: float
    """Estimated from the profiles' prices, as a run's budget counts it."""


class UsageReport(BaseModel):
    by: UsageBy
    since: datetime
    time_zone: str
    """Where the days of `by=day` begin: the caps' (`[limits] time_zone`)."""
    users: list[str] | None
    """Whose runs count; None: everyone's."""
    rows: list[UsageRow]
    """Most expensive first (`by=day`: oldest day first)."""
    total: UsageRow
    """Every row's sum, keyed `total`."""


def whose_usage(
    caller: Caller,
    policy: Policy,
    groups: Mapping[str, Sequence[str]],
    user: str | None = None,
    group: str | None = None,
) -> frozenset[str] | None:
    """The people whose usage `caller` asked for: `user`, the members of `group` (of
    `[api.groups]`, `groups`: a group only an identity provider names has no members
    here, so it finds no runs), both, or (None) everyone. A person sees only their own
    usage, and is answered theirs when they name no one; an admin sees everyone's.
    `NOT_ALLOWED` for someone else's."""
    named = {*([user] if user else []), *(groups.get(group, ()) if group is not None else ())}
    asked = frozenset(named) if user is not None or group is not None else None
    if policy.is_admin(caller):
        return asked
    if asked is None:
        return frozenset({caller.user})
    if asked - {caller.user}:
        raise TarryError(
            ErrorCode.NOT_ALLOWED,
            f"{caller.user} is no admin: only an admin ([api] admins) sees another person's"
            " usage; leave out --user and --group to see your own",
        )
    return asked


def usage_query(task_queue: str, since: datetime, users: frozenset[str] | None) -> str:
    """The visibility query for the latest segments of the runs on `task_queue` started
    since `since` and owned by one of `users` (None: anyone). A name that could not be
    quoted safely is left out, and finds nothing: nothing a person types changes the query."""
    from tarry.client.audit import visibility_time
    from tarry.client.run_list import LATEST_SEGMENT

    query = f"WorkflowType = '{WORKFLOW_TYPE}' AND TaskQueue = '{task_queue}' AND {LATEST_SEGMENT}"
    if (at := visibility_time(since)) is not None:  # else since before any run
        query += f" AND StartTime >= '{at}'"
    if users is not None:
        safe = sorted(user for user in users if principal_problem(user) is None)
        listed = ", ".join(f"'{user}'" for user in safe) or "''"
        query += f" AND {OWNER_ATTRIBUTE.name} IN ({listed})"
    return query


async def usage_report(
    client: Client,
    task_queue: str,
    *,
    by: UsageBy,
    since: datetime,
    time_zone: str,
    users: frozenset[str] | None = None,
) -> UsageReport:
    """What the runs of `users` (None: everyone) started since `since` spent, a row per
    `by`."""
    rows: dict[str, UsageRow] = defaultdict(lambda: UsageRow(key="", runs=0, turns=0, cost_usd=0))
    zone = ZoneInfo(time_zone)
    query = usage_query(task_queue, since, users)
    async for execution in client.list_workflows(query, page_size=PAGE):
        if execution.parent_id is not None:
            continue  # its spend is in its parent's
        row = rows[_key(execution, by, zone)]
        _add(row, execution)
    for key, row in rows.items():
        row.key = key
    ordered = sorted(rows.values(), key=lambda r: r.key if by is UsageBy.DAY else -r.cost_usd)
    total = UsageRow(
        key="total",
        runs=sum(r.runs for r in ordered),
        turns=sum(r.turns for r in ordered),
        cost_usd=sum(r.cost_usd for r in ordered),
    )
    listed = None if users is None else sorted(users)
    return UsageReport(
        by=by, since=since, time_zone=time_zone, users=listed, rows=ordered, total=total
    )


def _key(execution: WorkflowExecution, by: UsageBy, zone: ZoneInfo) -> str:
    attributes = execution.typed_search_attributes
    if by is UsageBy.USER:
        return attributes.get(OWNER_ATTRIBUTE) or UNOWNED
    if by is UsageBy.MODEL:
        return attributes.get(MODEL_ATTRIBUTE) or "default"
    day: date = execution.start_time.astimezone(zone).date()
    return day.isoformat()


def _add(row: UsageRow, execution: WorkflowExecution) -> None:
    attributes = execution.typed_search_attributes
    row.runs += 1
    row.turns += attributes.get(TURNS_ATTRIBUTE) or 0
    row.cost_usd += attributes.get(COST_ATTRIBUTE) or 0.0
