"""Tarry: durable, human-in-the-loop LLM agent runs on Temporal.

The ground floor: what a library user imports to start and talk to runs (`Tarry`,
`RunHandle`) and to schedule them (`ScheduleHandle`, `Overlap`), what runs take and give
(`RunInput`, `Phase`, `RunState`, `ReplyPolicy`, ...), who acts on them (`Caller`), what
`RunHandle.events` yields (`RunEvent`), the errors a caller can meet (`TarryError` with
its `ErrorCode`, `EncryptionKeyError` from `Tarry.connect`) and how a tool is declared
(`tool`, `ToolContext`, `ToolError`), what `Tarry.audit` answers (`AuditTrail` of
`AuditRecord`s, their `Act` and `Door`, and `UnreadRun`s), and what `RunHandle.timeline`
answers (`RunTimeline`, its `TimelineSpan`s, `SpanKind`, `SpanStatus`). The package is
typed (`py.typed`): `mypy --strict` checks a user's script against it. Workers live in
`workers/` (`workers.plugin.TarryPlugin`); the command line in `tarry.cli`.
"""

from tarry.client import RunHandle, ScheduleHandle, Tarry, TarryError, connect_temporal
from tarry.codec import EncryptionKeyError
from tarry.contracts import (
    Act,
    AuditRecord,
    AuditTrail,
    Door,
    ErrorCode,
    ForkOrigin,
    Mode,
    Phase,
    ReplyPolicy,
    RunInput,
    RunResult,
    RunState,
    RunTimeline,
    Sampling,
    SpanKind,
    SpanStatus,
    TimelineSpan,
    UnreadRun,
    WaitingFor,
)
from tarry.events import EventKind, RunEvent
from tarry.identities import Caller
from tarry.rules import ApprovalRule
from tarry.schedules import Overlap, ScheduleSummary, ScheduleView
from tarry.settings import ModelProfile, TarrySettings
from tarry.tools import Tool, ToolContext, ToolError, tool

__all__ = [
    "Act",
    "ApprovalRule",
    "AuditRecord",
    "AuditTrail",
    "Caller",
    "Door",
    "EncryptionKeyError",
    "ErrorCode",
    "EventKind",
    "ForkOrigin",
    "Mode",
    "ModelProfile",
    "Overlap",
    "Phase",
    "ReplyPolicy",
    "RunEvent",
    "RunHandle",
    "RunInput",
    "RunResult",
    "RunState",
    "RunTimeline",
    "Sampling",
    "ScheduleHandle",
    "ScheduleSummary",
    "ScheduleView",
    "SpanKind",
    "SpanStatus",
    "Tarry",
    "TarryError",
    "TarrySettings",
    "TimelineSpan",
    "Tool",
    "ToolContext",
    "ToolError",
    "UnreadRun",
    "WaitingFor",
    "connect_temporal",
    "tool",
]
