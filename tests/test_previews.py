"""Previews: a person deciding on a gated call sees what it would do, as the run recorded
it when the call was gated (`tarry.contracts.previews`)."""

from __future__ import annotations

import uuid
from typing import Any

from activities.tool_calls import tool
from tarry.client import RunHandle
from tarry.contracts import PendingApproval, Phase
from tarry.testing.scripted_model import call
from tests.conftest import Agent
from tests.deadline import TIMEOUT

NOTES = "# Notes\n\n- Ana drafts the email.\n- Sam renews the domain.\n"
"""notes.md, as a gated write finds it."""


async def gated_write(agent: Agent, content: str, *, old: str | None = NOTES) -> RunHandle:
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


async def pending(run: RunHandle) -> PendingApproval:
    (only,) = (await run.state()).pending_approvals
    return only


async def test_a_gated_write_shows_a_diff_against_the_file_as_it_is(agent: Agent) -> None:
    run = await gated_write(agent, "# Notes\n\n- Sam renews the domain.\n- Pay the invoice.\n")

    preview = (await pending(run)).preview

    assert preview is not None
    assert preview.summary == "notes.md: 1 line removed, 1 added"
    (diff,) = preview.blocks
    assert diff.kind == "diff"
    assert "\n-- Ana drafts the email.\n" in diff.text
    assert "\n+- Pay the invoice." in diff.text


async def test_a_gated_write_of_a_new_file_shows_its_lines(agent: Agent) -> None:
    run = await gated_write(agent, "one\ntwo\nthree\n", old=None)

    preview = (await pending(run)).preview

    assert preview is not None
    assert preview.summary == "notes.md: new file, 3 lines"
    assert [(b.kind, b.text) for b in preview.blocks] == [("text", "one\ntwo\nthree\n")]


@tool(approval=True)
def send_mail(to: str, body: str) -> str:
    """Send a mail (a tool that declares no preview)."""
    return f"sent to {to}"


async def test_a_gated_call_of_a_tool_without_a_preview_shows_its_arguments_whole(
    agent_factory: Any,
) -> None:
    agent = await agent_factory(tools=[send_mail])
    body = "Hello Ana,\n\nthe domain is renewed until 2028; the invoice is in the shared folder."
    agent.model.add(call("send_mail", {"to": "ana@example.com", "body": body}, id="m1"))
    run = await agent.start("tell Ana")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    preview = (await pending(run)).preview

    assert preview is not None
    assert [(b.kind, b.label, b.text) for b in preview.blocks] == [
        ("value", "to", '"ana@example.com"'),
        ("text", "body", body),
    ]
    assert preview.summary == 'to="ana@example.com", body: 3 lines'
