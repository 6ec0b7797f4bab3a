"""Tarry: durable, human-in-the-loop LLM agent runs on Temporal.

The ground floor: what a library user imports to start and talk to runs (`Tarry`,
`RunHandle`), what runs take and give (`RunInput`, `Phase`, `RunState`, ...) and how a
tool is declared (`tool`, `ToolContext`, `ToolError`). Workers live in `workers/`
(`workers.plugin.TarryPlugin`); the command line in `tarry.cli`.
"""

from tarry.client import RunHandle, Tarry, TarryError, connect_temporal
from tarry.contracts import (
    ErrorCode,
    ForkOrigin,
    Mode,
    Phase,
    RunInput,
    RunResult,
    RunState,
    Sampling,
    WaitingFor,
)
from tarry.settings import ModelProfile, TarrySettings
from tarry.tools import Tool, ToolContext, ToolError, tool

__all__ = [
    "ErrorCode",
    "ForkOrigin",
    "Mode",
    "ModelProfile",
    "Phase",
    "RunHandle",
    "RunInput",
    "RunResult",
    "RunState",
    "Sampling",
    "Tarry",
    "TarryError",
    "TarrySettings",
    "Tool",
    "ToolContext",
    "ToolError",
    "WaitingFor",
    "connect_temporal",
    "tool",
]
