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

from __future__ import annotations

from typing import TYPE_CHECKING

from tarry._lazy import lazy_face

if TYPE_CHECKING:
    from tarry.client.front_door import Tarry
    from tarry.client.run_handle import RunHandle
    from tarry.client.schedule_handle import ScheduleHandle
    from tarry.client.schedules import Overlap, ScheduleSummary, ScheduleView
    from tarry.config.settings import ModelProfile, TarrySettings
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
    from tarry.contracts.approval_rules import ApprovalRule
    from tarry.contracts.events import EventKind, RunEvent
    from tarry.core.errors import TarryError
    from tarry.core.identities import Caller
    from tarry.core.tools import OAuth, Tool, ToolContext, ToolError, tool
    from tarry.temporal.codec import EncryptionKeyError
    from tarry.temporal.connection import connect_temporal

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
    "OAuth",
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

_HOMES = {
    "tarry.client.front_door": ("Tarry",),
    "tarry.temporal.codec": ("EncryptionKeyError",),
    "tarry.temporal.connection": ("connect_temporal",),
    "tarry.contracts": (
        "Act",
        "AuditRecord",
        "AuditTrail",
        "Door",
        "ErrorCode",
        "ForkOrigin",
        "Mode",
        "Phase",
        "ReplyPolicy",
        "RunInput",
        "RunResult",
        "RunState",
        "RunTimeline",
        "Sampling",
        "SpanKind",
        "SpanStatus",
        "TimelineSpan",
        "UnreadRun",
        "WaitingFor",
    ),
    "tarry.core.errors": ("TarryError",),
    "tarry.contracts.events": ("EventKind", "RunEvent"),
    "tarry.core.identities": ("Caller",),
    "tarry.contracts.approval_rules": ("ApprovalRule",),
    "tarry.client.run_handle": ("RunHandle",),
    "tarry.client.schedule_handle": ("ScheduleHandle",),
    "tarry.client.schedules": ("Overlap", "ScheduleSummary", "ScheduleView"),
    "tarry.config.settings": ("ModelProfile", "TarrySettings"),
    "tarry.core.tools": ("OAuth", "Tool", "ToolContext", "ToolError", "tool"),
}

if not TYPE_CHECKING:  # mypy reads the imports above, so a misspelt name stays an error
    # Each name's module is imported on the name's first use: `import tarry` loads
    # nothing, so a worker never loads the client, and the command line pays only for
    # what its command uses.
    __getattr__ = lazy_face(__name__, _HOMES)
