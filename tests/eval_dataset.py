"""The labelled decision points the eval tests share: two approved calls, one rejected and
one edited, written as `tarry dataset export` writes a dataset (one `DecisionPoint` JSON
a line), and the scripted candidate that agrees on three of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tarry.contracts import (
    ChatMessage,
    DecisionPoint,
    FunctionCall,
    Label,
    ToolCall,
    ToolDefinition,
    Usage,
    Verdict,
)
from tarry.testing.scripted_model import ScriptedModel, call, say

_STRING: dict[str, Any] = {"type": "string"}
_PATH: dict[str, Any] = {"type": "object", "properties": {"path": _STRING}}
TOOLS = [
    ToolDefinition(name="list_files", description="List the workspace's files."),
    ToolDefinition(name="read_file", description="Read a file.", parameters=_PATH),
    ToolDefinition(
        name="write_file",
        description="Write a file.",
        parameters={"type": "object", "properties": {"path": _STRING, "content": _STRING}},
        needs_approval=True,
    ),
]

# prompt, tool, arguments proposed, label
POINTS: list[tuple[str, str, dict[str, Any], Label]] = [
    (
        "Write a note saying hi.",
        "write_file",
        {"path": "a.md", "content": "hi"},
        Label(verdict=Verdict.APPROVED, by="ana"),
    ),
    ("What files are there?", "list_files", {}, Label(verdict=Verdict.APPROVED, by="ana")),
    (
        "Read the secret.",
        "read_file",
        {"path": "secret.txt"},
        Label(verdict=Verdict.REJECTED, by="bo", reason="private"),
    ),
    (
        "Save the draft.",
        "write_file",
        {"path": "b.md", "content": "draft"},
        Label(verdict=Verdict.EDITED, by="bo", arguments={"path": "b.md", "content": "final"}),
    ),
]
DISAGREED = "run-4/1/call-4"
"""The edited point: the candidate writes the draft as first proposed."""


def points() -> list[DecisionPoint]:
    return [
        DecisionPoint(
            id=f"run-{n}/1/call-{n}",
            run_id=f"run-{n}",
            owner="ana",
            model="default",
            system="You are a careful assistant.",
            messages=[ChatMessage(role="user", content=prompt)],
            tools=TOOLS,
            proposal=ToolCall(
                id=f"call-{n}", function=FunctionCall(name=tool, arguments=json.dumps(arguments))
            ),
            label=label,
            usage=Usage(prompt_tokens=100, completion_tokens=20, total_tokens=120),
            latency_ms=800.0,
        )
        for n, (prompt, tool, arguments, label) in enumerate(POINTS, start=1)
    ]


def write_dataset(path: Path) -> Path:
    """The four points as a dataset file."""
    path.write_text("".join(p.model_dump_json() + "\n" for p in points()), encoding="utf-8")
    return path


def agree_on_three(model: ScriptedModel, **step: Any) -> None:
    """Scripts `model` to agree on every point but the edited one (`DISAGREED`): it writes
    the draft as first proposed. `step` sets other fields of every answer (a `delay`)."""
    _script(model, "draft", **step)


def agree_on_all(model: ScriptedModel) -> None:
    """Scripts `model` to agree on all four points: it writes the edited content."""
    _script(model, "final")


def _script(model: ScriptedModel, saved: str, **step: Any) -> None:
    model.add_conversation(
        POINTS[0][0], call("write_file", {"path": "a.md", "content": "hi"}, **step)
    )
    model.add_conversation(POINTS[1][0], call("list_files", {}, **step))
    model.add_conversation(POINTS[2][0], say("I should not read that file.", **step))
    model.add_conversation(
        POINTS[3][0], call("write_file", {"path": "b.md", "content": saved}, **step)
    )
