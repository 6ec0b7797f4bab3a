"""Previews: a person deciding on a gated call sees what it would do, as the run recorded
it when the call was gated (`tarry.contracts.previews`)."""

from __future__ import annotations

from typing import Any

from activities.tool_calls import tool
from tarry.client import RunHandle
from tarry.client.previews import stale
from tarry.contracts import PendingApproval, Phase
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.gated_writes import OVERWRITE, TOUR_NOTES, gated_write, notes_of


async def pending(run: RunHandle) -> PendingApproval:
    (only,) = (await run.state()).pending_approvals
    return only


async def test_a_gated_write_shows_a_diff_against_the_file_as_it_is(agent: Agent) -> None:
    notes = "# Notes\n\n- Ana drafts the email.\n- Sam renews the domain.\n"
    new = "# Notes\n\n- Sam renews the domain.\n- Pay the invoice.\n"
    run = await gated_write(agent, new, old=notes)

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


async def test_a_preview_stays_as_recorded_and_is_stale_once_the_file_changes(
    agent: Agent,
) -> None:
    run = await gated_write(agent, OVERWRITE)
    shown = (await pending(run)).preview
    assert shown is not None
    assert stale(shown, agent.workspace_root) is False

    notes_of(agent, run.id).write_text(TOUR_NOTES + "- Priya books the venue.\n")
    now = (await pending(run)).preview

    assert now == shown
    assert stale(now, agent.workspace_root) is True


async def test_an_approved_write_leaves_the_file_as_its_preview_showed(agent: Agent) -> None:
    run = await gated_write(agent, TOUR_NOTES + "- Sam renews the domain.\n")
    preview = (await pending(run)).preview
    assert preview is not None
    agent.model.add(say("Added."))

    await run.decide("w1")

    assert notes_of(agent, run.id).read_text() == TOUR_NOTES + "- Sam renews the domain.\n"
    assert preview.summary == "notes.md: 1 line added"
