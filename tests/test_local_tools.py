"""Quick tools as local activities: a read-only tool that answers in
milliseconds (`@tool(quick=True)`: `read_file`, `list_files`; an MCP tool its server marks
read-only and idempotent) runs inside the run's workflow task, without an activity task's
server round trip. A gated call still waits for its decision and runs as an activity.

Killed mid-call: `test_worker_crash.py::
test_a_quick_tool_cut_off_by_a_killed_worker_runs_again_and_is_recorded_once`."""

from __future__ import annotations

import pytest
from mcp.types import Tool as McpTool
from mcp.types import ToolAnnotations

from activities.mcp_tools import tool_definition
from tarry.config.settings import McpServer
from tarry.contracts import Phase, WaitingFor
from tarry.core.tools import tool
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent, tool_result
from tests.deadline import TIMEOUT
from tests.faults import activity_attempts, local_activities

WAITING = {Phase.WAITING_USER}


async def test_a_quick_tool_runs_as_a_local_activity_with_the_same_result(agent: Agent) -> None:
    agent.model.add(call("write_file", {"path": "a.md", "content": "alpha"}))
    agent.model.add(call("read_file", {"path": "a.md"}), say("It says alpha."))
    run = await agent.start("write and read")
    await run.wait_for(WAITING, TIMEOUT)

    transcript = await run.transcript()

    assert tool_result(transcript[-2]) == {"ok": True, "data": "alpha"}
    assert await local_activities(agent.tarry.client, run.id) == ["read_file"]
    activities = [a.activity for a in await activity_attempts(agent.tarry.client, run.id)]
    assert "write_file" in activities
    assert "read_file" not in activities


async def test_a_gated_quick_tool_waits_for_its_decision_and_runs_as_an_activity(
    agent: Agent,
) -> None:
    agent.model.add(call("read_file", {"path": "secret.md"}, id="r1"), say("Nothing there."))
    run = await agent.start("peek", require_approval=["read_file"])

    waiting = await run.wait_for(WAITING, TIMEOUT)
    assert waiting.waiting_for is WaitingFor.APPROVAL
    assert [p.tool for p in waiting.pending_approvals] == ["read_file"]
    assert await local_activities(agent.tarry.client, run.id) == []

    await run.decide("r1", approved=True)
    await run.wait_for(WAITING, TIMEOUT)
    activities = [a.activity for a in await activity_attempts(agent.tarry.client, run.id)]
    assert "read_file" in activities
    assert await local_activities(agent.tarry.client, run.id) == []


def test_a_quick_tool_must_be_idempotent() -> None:
    def send_mail(to: str) -> str:
        return to

    with pytest.raises(TypeError, match="quick tool must be idempotent"):
        tool(name="send_mail", quick=True, idempotent=False)(send_mail)


@pytest.mark.parametrize(
    ("annotations", "local"),
    [
        (ToolAnnotations(read_only_hint=True, idempotent_hint=True), True),
        (ToolAnnotations(read_only_hint=True), False),
        (ToolAnnotations(read_only_hint=False, idempotent_hint=True), False),
        (None, False),
    ],
)
def test_an_mcp_tool_is_local_only_when_its_server_marks_it_read_only_and_idempotent(
    annotations: ToolAnnotations | None, local: bool
) -> None:
    listed = McpTool(name="lookup", inputSchema={"type": "object"}, annotations=annotations)

    definition = tool_definition("kv", McpServer(command="true"), listed)

    assert definition.local is local
