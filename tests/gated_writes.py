"""A run held at a gated `write_file` over a file its workspace already holds: what the
preview tests decide on, from every door."""

from __future__ import annotations

import uuid
from pathlib import Path

from tarry.cli import tour
from tarry.client import RunHandle
from tarry.contracts import Phase
from tarry.testing.scripted_model import ScriptStep, call
from tests.conftest import Agent
from tests.deadline import TIMEOUT

TOUR_NOTES = (tour.WORKSPACE / "notes.md").read_text()
"""The tour's meeting notes, 232 bytes, as a run's workspace starts with them."""
OVERWRITE = "# Planning meeting, Tuesday\n\n- Sam renews the domain.\n"
"""What the approvers tour wrote over them until it appended: 54 bytes."""


def seeded(agent: Agent, old: str | None = TOUR_NOTES) -> str:
    """A new run id whose workspace holds `old` as notes.md (None: no such file)."""
    run_id = f"preview-{uuid.uuid4().hex[:8]}"
    workspace = agent.workspace_root / run_id
    workspace.mkdir(parents=True)
    if old is not None:
        (workspace / "notes.md").write_text(old)
    return run_id


def writing(content: str) -> ScriptStep:
    """The model's answer that writes `content` to notes.md, as call `w1`."""
    return call("write_file", {"path": "notes.md", "content": content}, id="w1")


async def gated_write(agent: Agent, content: str, *, old: str | None = TOUR_NOTES) -> RunHandle:
    """A run waiting for a decision on writing `content` to notes.md, whose workspace
    holds `old` as notes.md (None: no such file)."""
    agent.model.add(writing(content))
    run = await agent.start(
        "update the notes", run_id=seeded(agent, old), require_approval=["write_file"]
    )
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    return run


def notes_of(agent: Agent, run_id: str) -> Path:
    return agent.workspace_root / run_id / "notes.md"
