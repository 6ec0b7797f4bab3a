"""Runs that start on their own: Temporal Schedules whose action starts an `AgentRun`.

A schedule named NAME starts runs with the ids `NAME-<time>`: Temporal appends the
scheduled time (RFC 3339, UTC, `NAME-2026-11-26T09:00:00Z`) to the action's workflow id,
so two starts never share an id and each stays a valid run id (`RUN_ID_PATTERN`). Each
run carries the schedule's name in `TemporalScheduledById`, the search attribute Temporal
itself sets on what a schedule starts: `tarry list --schedule NAME` filters on it.

What a schedule does while its last run still waits for a person is its overlap policy;
the default, `skip`, is Temporal's `SKIP`, which starts nothing while the workflow it
started last is open, and a run waiting for a reply or a decision is open.

This module holds what a schedule is (its name rule, when it fires, the views of it);
`front_door.py` and `schedule_handle.py` talk to Temporal about it. The Temporal client's
schedule types are imported by the few functions that build or read a Temporal schedule,
so what a schedule is loads without the client: `tarry --help` shows the overlap policies.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, field_serializer, model_validator
from pydantic_core import PydanticCustomError, to_jsonable_python
from temporalio.common import SearchAttributeKey, TypedSearchAttributes

from tarry.contracts import MAX_RUN_ID_LENGTH, RUN_ID_PATTERN, WORKFLOW_TYPE, RunInput

if TYPE_CHECKING:
    from temporalio.client import (
        Schedule,
        ScheduleActionResult,
        ScheduleDescription,
        ScheduleListDescription,
        ScheduleOverlapPolicy,
        ScheduleSpec,
    )

__all__ = [
    "EVERY_PATTERN",
    "MAX_SCHEDULE_NAME_LENGTH",
    "SCHEDULED_BY_ATTRIBUTE",
    "SCHEDULE_MEMO",
    "Overlap",
    "ScheduleSummary",
    "ScheduleView",
    "Timing",
    "every_problem",
    "is_tarrys",
    "schedule_name_problem",
    "temporal_schedule",
]

SCHEDULED_BY_ATTRIBUTE = SearchAttributeKey.for_keyword("TemporalScheduledById")
"""The schedule that started a workflow, set by Temporal itself: nothing to register."""
SCHEDULE_MEMO = "tarry_schedule"
"""The schedule memo's key of its `Timing` as it was given: the server keeps a cron
expression only as the calendar it translates it into, which no person wrote."""

_TIME_SUFFIX = len("-2026-11-26T09:00:00Z")
"""What Temporal appends to a scheduled run's id."""
MAX_SCHEDULE_NAME_LENGTH = MAX_RUN_ID_LENGTH - _TIME_SUFFIX
"""The longest name whose runs' ids still fit the run id rule."""
_NAME = re.compile(RUN_ID_PATTERN)

_N = "[0-9]{1,6}"
EVERY_PATTERN = (
    f"^(?:{_N}d(?:{_N}h)?(?:{_N}m)?(?:{_N}s)?|{_N}h(?:{_N}m)?(?:{_N}s)?|{_N}m(?:{_N}s)?|{_N}s)$"
)
"""An interval as people write it: `90s`, `15m`, `1h`, `1d`, `1h30m`, largest unit first
(the JSON Schema's regex dialect has no look-ahead, hence the spelled-out cases)."""
_EVERY = re.compile(f"^(?:({_N})d)?(?:({_N})h)?(?:({_N})m)?(?:({_N})s)?$")


def schedule_name_problem(name: str) -> str | None:
    """Why `name` cannot name a schedule, or None when it can: the run id rule (its runs'
    ids start with it), with room for the time Temporal appends."""
    if _NAME.fullmatch(name) and len(name) <= MAX_SCHEDULE_NAME_LENGTH:
        return None
    if len(name) > MAX_SCHEDULE_NAME_LENGTH:
        return (
            f"a schedule name has at most {MAX_SCHEDULE_NAME_LENGTH} characters (its runs'"
            f" ids add {_TIME_SUFFIX}), not {len(name)}"
        )
    return f"a schedule name follows the run id rule: {_name_rule(name)}"


def _name_rule(name: str) -> str:
    if not name:
        return "it cannot be empty"
    if name.startswith("."):
        return f"it cannot start with a dot: {name!r}"
    bad = next(c for c in name if not re.fullmatch(r"[A-Za-z0-9_.:@-]", c))
    return f"only letters, digits and - _ . : @, not {bad!r}: {name!r}"


def every_problem(every: str) -> str | None:
    """Why `every` is no interval (`EVERY_PATTERN`, at least a second), or None."""
    if _interval(every) is None:
        return f"every {every!r} is not an interval of a second or more: 90s, 15m, 1h, 1d, 1h30m"
    return None


def _interval(every: str) -> timedelta | None:
    match = _EVERY.fullmatch(every)
    if match is None:
        return None
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    interval = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    return interval if interval >= timedelta(seconds=1) else None


class Overlap(StrEnum):
    """What a schedule does when its time comes while the run it started last is open
    (working, or waiting for a person)."""

    SKIP = "skip"
    """Start nothing this time (Temporal's `SKIP`): a run that waits for a person's
    sign-off is not followed by another that would wait beside it."""
    BUFFER_ONE = "buffer-one"
    """Start one run as soon as the open one ends, however many times came meanwhile."""
    BUFFER_ALL = "buffer-all"
    """Start a run for every time that came, one after another, once the open one ends."""
    ALLOW_ALL = "allow-all"
    """Start a run every time, beside the open ones."""

    @property
    def policy(self) -> ScheduleOverlapPolicy:
        """Temporal's policy of the same name."""
        from temporalio.client import ScheduleOverlapPolicy

        return ScheduleOverlapPolicy[self.name]


class Timing(BaseModel):
    """When a schedule starts runs: a cron expression or an interval, not both."""

    cron: str | None = Field(default=None, min_length=1)
    """A cron expression (`0 9 * * 1-5`: 9:00 on weekdays), in `time_zone`; Temporal
    reads it, and refuses one it cannot (`SCHEDULE_INVALID`)."""
    # Checked by `_one_of_them`, whose message a person reads better than the regex.
    every: str | None = Field(default=None, json_schema_extra={"pattern": EVERY_PATTERN})
    """An interval: `90s`, `15m`, `1h`, `1d`, `1h30m`; at least a second."""
    time_zone: str | None = Field(default=None, min_length=1)
    """The IANA time zone the cron expression reads in (`Europe/Berlin`); UTC if none."""

    @model_validator(mode="after")
    def _one_of_them(self) -> Timing:
        # Its type is the error code the API answers with (`tarry.api.errors`).
        if (self.cron is None) == (self.every is None):
            raise PydanticCustomError(
                "SCHEDULE_INVALID", "give a cron expression or an interval (every), not both"
            )
        if self.every is not None and (problem := every_problem(self.every)):
            raise PydanticCustomError("SCHEDULE_INVALID", "{problem}", {"problem": problem})
        return self

    def spec(self) -> ScheduleSpec:
        from temporalio.client import ScheduleIntervalSpec, ScheduleSpec

        if self.every is not None:
            interval = _interval(self.every)
            assert interval is not None  # checked by the validator
            return ScheduleSpec(
                intervals=[ScheduleIntervalSpec(every=interval)], time_zone_name=self.time_zone
            )
        assert self.cron is not None
        return ScheduleSpec(cron_expressions=[self.cron], time_zone_name=self.time_zone)


def temporal_schedule(
    name: str,
    input: RunInput | dict[str, Any],
    timing: Timing,
    overlap: Overlap,
    *,
    task_queue: str,
    memo: dict[str, Any],
    summary: str,
    search_attributes: TypedSearchAttributes = TypedSearchAttributes.empty,
) -> Schedule:
    """The Temporal schedule whose action starts `input` as `name-<time>` on `task_queue`;
    `memo` goes onto each run, `summary` is what the UI's run list shows of each, and
    `search_attributes` (its owner and share, `tarry.core.ownership`) start each run."""
    from temporalio.client import Schedule, ScheduleActionStartWorkflow, SchedulePolicy

    return Schedule(
        action=ScheduleActionStartWorkflow(
            WORKFLOW_TYPE,
            input,
            id=name,
            task_queue=task_queue,
            memo=memo,
            static_summary=summary,
            typed_search_attributes=search_attributes,
        ),
        spec=timing.spec(),
        policy=SchedulePolicy(overlap=overlap.policy),
    )


def is_tarrys(listed: ScheduleListDescription) -> bool:
    """Whether a schedule of the namespace starts Tarry's runs (another may share it)."""
    action = listed.schedule.action if listed.schedule else None
    return getattr(action, "workflow", None) == WORKFLOW_TYPE


class ScheduleSummary(BaseModel):
    """A schedule as a list shows it."""

    name: str
    cron: str | None
    every: str | None
    time_zone: str | None
    paused: bool
    note: str | None
    """Why it was paused (or unpaused), as the person said; Temporal may write its own."""
    next_runs: list[datetime]
    """When it starts its next runs (a paused schedule starts none of them)."""
    recent_runs: list[str]
    """The ids of the runs it started last, oldest first."""
    summary: str | None
    """The first line of its runs' prompt."""

    @classmethod
    async def of(cls, listed: ScheduleListDescription, summary_memo: str) -> ScheduleSummary:
        """A schedule as `list_schedules` gives it; `summary_memo`: its memo's summary key."""
        memo = await listed.memo()
        state, info = listed.schedule.state if listed.schedule else None, listed.info
        return cls(
            name=listed.id,
            **_timing(memo).model_dump(),
            paused=bool(state and state.paused),
            note=state.note if state else None,
            next_runs=list(info.next_action_times) if info else [],
            recent_runs=_run_ids(info.recent_actions if info else []),
            summary=memo.get(summary_memo),
        )


class ScheduleView(ScheduleSummary):
    """A schedule as `show` gives it: also what its runs start with and how it fared."""

    overlap: str
    """An `Overlap` (Temporal's other policies, `cancel-other` and `terminate-other`,
    for a schedule changed outside Tarry)."""
    input: RunInput
    """What each run starts with."""
    running: list[str]
    """The ids of its runs that are open (working, or waiting for a person)."""
    runs_started: int
    runs_skipped: int
    """Times that came while a run was open and started nothing (`overlap: skip`)."""
    created_at: datetime

    @field_serializer("input", when_used="json")
    def _input_as_json(self, input: RunInput) -> dict[str, Any]:
        """The input with its durations in days, never years: pydantic writes a year and
        more as `P1Y35D`, which the RFC 3339 grammar of JSON Schema's `duration` (and so a
        strict client) refuses, and a schedule's input comes back as its creator sent it."""
        data: dict[str, Any] = to_jsonable_python(_in_days(input.model_dump()))
        return data

    @classmethod
    async def of_description(
        cls, description: ScheduleDescription, input: RunInput, summary_memo: str
    ) -> ScheduleView:
        """A schedule as Temporal describes it, with its runs' `input` (decoded by the
        caller, whose data converter it needs); `summary_memo`: its memo's summary key."""
        from temporalio.client import ScheduleActionExecutionStartWorkflow

        schedule, info = description.schedule, description.info
        memo = await description.memo()
        return cls(
            name=description.id,
            **_timing(memo).model_dump(),
            paused=schedule.state.paused,
            note=schedule.state.note,
            next_runs=list(info.next_action_times),
            recent_runs=_run_ids(info.recent_actions),
            summary=memo.get(summary_memo),
            overlap=schedule.policy.overlap.name.lower().replace("_", "-"),
            input=input,
            running=[
                r.workflow_id
                for r in info.running_actions
                if isinstance(r, ScheduleActionExecutionStartWorkflow)
            ],
            runs_started=info.num_actions,
            runs_skipped=info.num_actions_skipped_overlap,
            created_at=info.created_at,
        )


def _run_ids(actions: Sequence[ScheduleActionResult]) -> list[str]:
    from temporalio.client import ScheduleActionExecutionStartWorkflow

    return [
        a.action.workflow_id
        for a in actions
        if isinstance(a.action, ScheduleActionExecutionStartWorkflow)
    ]


def _timing(memo: Mapping[str, Any]) -> Timing:
    """The timing a schedule was created with, from its memo (`SCHEDULE_MEMO`); empty for
    a schedule made without Tarry."""
    return Timing.model_construct(**(memo.get(SCHEDULE_MEMO) or {}))


def _in_days(value: Any) -> Any:
    """`value` with every `timedelta` in it as an ISO 8601 duration of days and seconds."""
    if isinstance(value, timedelta):
        seconds = f"{value.seconds}.{value.microseconds:06d}".rstrip("0").rstrip(".")
        days = f"{value.days}D" if value.days else ""
        time = f"T{seconds}S" if seconds != "0" or not days else ""
        return f"P{days}{time}"
    if isinstance(value, dict):
        return {key: _in_days(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_in_days(item) for item in value]
    return value
