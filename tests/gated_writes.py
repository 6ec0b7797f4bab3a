"""A run held at a gated `write_file` over a file its workspace already holds: what the
preview tests decide on, from every door."""

from __future__ import annotations

import uuid
from pathlib import Path

from tarry.cli import tour
from tarry.client import RunHandle
from tarry.contracts import Phase
from tarry.testing.scripted_model import call
from tests.conftest import Agent
from tests.deadline import TIMEOUT

TOUR_NOTES = (tour.WORKSPACE / "notes.md").read_text()
"""The tour's meeting notes, 232 bytes, as a run's workspace starts with them."""
OVERWRITE = "# Planning meeting, Tuesday\n\n- Sam renews the domain.\n"
"""What the approvers tour wrote over them until it appended: 54 bytes."""


async def gated_write(agent: Agent, content: str, *, old: str | None = TOUR_NOTES) -> RunHandle:
    """A run waiting for a decision on writing `content` to notes.md, whose workspace
    holds `old` as notes.md (None: no such file)."""
    run_id = f"preview-{uuid.uuid4().hex[:8]}"
    workspace = agent.workspace_root / run_id
    workspace.mkdir(parents=True)
    if old is not None:
        (workspace / "notes.md").write_text(old)
    agent.model.add(call("write_file", {"path": "notes.md", "content": content}, id="w1"))
    run = await agent.start("update the notes", run_id=run_id, require_approval=["write_file"])
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    return run


def notes_of(agent: Agent, run: RunHandle) -> Path:
    return agent.workspace_root / run.id / "notes.md"
