"""Approval gates: a person decides before a gated tool call runs, however long it takes."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from activities.tool_calls import tool
from tarry.client import RunHandle, Tarry, TarryError
from tarry.contracts import WAITING_FOR_ATTRIBUTE, ErrorCode, Phase, RunInput, WaitingFor
from tarry.core.identities import Caller
from tarry.testing.scripted_model import ScriptedModel, ScriptedToolCall, call, calls, say
from tests.conftest import FAST_TIMEOUTS, Agent, tool_result, worker_process
from tests.deadline import TIMEOUT, deadline
from tests.faults import local_activities

WAITING = {Phase.WAITING_USER}
WRITE = {"path": "plan.md", "content": "ship it"}


async def gated_run(agent: Agent, *script: Any, **input: Any) -> RunHandle:
    """A run whose first answer asks for a gated `write_file`, waiting for a decision."""
    agent.model.add(call("write_file", WRITE, id="w1"), *script)
    input.setdefault("require_approval", ["write_file"])
    run = await agent.start("write the plan", **input)
    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.waiting_for is WaitingFor.APPROVAL
    return run


async def scheduled(agent: Agent, run: RunHandle, activity: str) -> int:
    """How many times history scheduled `activity` for this run, or recorded it as a
    local activity (a quick tool's ungated call)."""
    client = agent.tarry.client
    history = await client.get_workflow_handle(run.id).fetch_history()
    tasks = sum(
        e.activity_task_scheduled_event_attributes.activity_type.name == activity
        for e in history.events
    )
    return tasks + (await local_activities(client, run.id)).count(activity)


async def test_a_gated_call_waits_for_a_decision_without_running(agent: Agent) -> None:
    run = await gated_run(agent)

    state = await run.state()

    assert [(p.call_id, p.tool) for p in state.pending_approvals] == [("w1", "write_file")]
    assert state.pending_approvals[0].deadline is None
    assert await scheduled(agent, run, "write_file") == 0
    assert not (agent.workspace_root / run.id / "plan.md").exists()


async def test_an_operator_sees_what_a_run_waits_for(agent: Agent) -> None:
    run = await gated_run(agent)
    handle = agent.tarry.client.get_workflow_handle(run.id)

    attributes = (await handle.describe()).typed_search_attributes
    metadata = await handle.query("__temporal_workflow_metadata")

    assert attributes.get(WAITING_FOR_ATTRIBUTE) == "approval"
    assert "**Waiting for approval:** `write_file plan.md ship it` (call `w1`)" in (
        metadata.current_details
    )


async def test_an_operator_sees_who_may_decide_a_call_and_who_stopped_the_run(
    agent: Agent,
) -> None:
    run = await gated_run(agent, approvers={"write_file": ["ops", "alice"]})
    handle = agent.tarry.client.get_workflow_handle(run.id)
    waiting = (await handle.query("__temporal_workflow_metadata")).current_details

    await agent.tarry.get(run.id, Caller("bob")).stop("not today")
    await run.result()
    ended = (await handle.query("__temporal_workflow_metadata")).current_details

    assert "(call `w1`, approvers: ops, alice)" in waiting
    assert "**Stopped by:** bob: not today" in ended


async def test_an_approve_signal_by_someone_outside_the_approvers_decides_nothing(
    agent: Agent,
) -> None:
    run = await gated_run(agent, say("Written."), approvers={"write_file": ["bob"]})

    await agent.tarry.get(run.id, Caller("mallory")).approve("w1")
    # Signals are taken in order: the update after it sees whatever the signal did.
    await agent.tarry.get(run.id, Caller("bob")).decide("w1", approved=False)

    decision = next(m for m in await run.transcript() if m.role == "tool").decision
    assert decision is not None
    assert (decision.approved, decision.user) == (False, "bob")


async def test_approving_runs_the_call(agent: Agent) -> None:
    run = await gated_run(agent, say("Written."))

    state = await run.decide("w1")

    assert state.last_assistant_text == "Written."
    assert state.waiting_for is WaitingFor.INPUT
    assert (agent.workspace_root / run.id / "plan.md").read_text() == "ship it"
    tool_message = (await run.transcript())[2]
    assert tool_result(tool_message)["ok"] is True
    assert tool_message.decision is not None
    assert (tool_message.decision.approved, tool_message.decision.by) == (True, "update")


async def test_rejecting_with_a_reason_tells_the_model_and_writes_nothing(agent: Agent) -> None:
    run = await gated_run(agent, say("Understood, I won't."))

    await run.decide("w1", approved=False, reason="not before Monday")

    error = tool_result((await run.transcript())[2])["error"]
    assert error == {"code": ErrorCode.TOOL_REJECTED, "message": "not before Monday"}
    assert not (agent.workspace_root / run.id / "plan.md").exists()
    assert await scheduled(agent, run, "write_file") == 0


async def test_edited_arguments_are_used(agent: Agent) -> None:
    run = await gated_run(agent, say("Written as you said."))

    await run.decide("w1", arguments={"path": "plan.md", "content": "ship it on Monday"})

    assert (agent.workspace_root / run.id / "plan.md").read_text() == "ship it on Monday"
    decision = (await run.transcript())[2].decision
    assert decision is not None
    assert decision.arguments == {"path": "plan.md", "content": "ship it on Monday"}


async def test_a_reply_while_a_call_waits_is_queued_until_after_its_tool_message(
    agent: Agent,
) -> None:
    run = await gated_run(agent, say("Written; and noted."))

    await run.reply("also add a date")
    state = await run.state()
    assert state.waiting_for is WaitingFor.APPROVAL
    assert state.pending_inputs == 1
    await run.decide("w1")

    await run.wait_for(WAITING, TIMEOUT)
    transcript = await run.transcript()
    assert [m.role for m in transcript] == ["user", "assistant", "tool", "user", "assistant"]
    assert [m.content for m in transcript if m.role == "user"].count("also add a date") == 1


async def test_ten_identical_approvals_at_once_run_the_tool_once(agent: Agent) -> None:
    run = await gated_run(agent, say("Written."))

    await asyncio.gather(*(run.approve("w1") for _ in range(10)))

    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.last_assistant_text == "Written."
    assert await scheduled(agent, run, "write_file") == 1
    assert (await run.transcript())[2].decision is not None


async def test_stop_while_a_call_waits_rejects_it_and_completes_the_run(agent: Agent) -> None:
    run = await gated_run(agent)

    await run.stop()

    result = await run.result()
    assert result.phase is Phase.COMPLETED
    tool_message = (await run.transcript())[2]
    assert tool_result(tool_message)["error"]["code"] == ErrorCode.TOOL_REJECTED
    assert tool_message.decision is not None
    assert tool_message.decision.by == "stop"


async def test_pause_while_a_call_waits_changes_nothing(agent: Agent) -> None:
    run = await gated_run(agent, say("Written."))

    await run.pause()
    state = await run.decide("w1")

    assert state.last_assistant_text == "Written."


async def test_a_gated_and_a_free_call_in_one_answer_keep_their_order(agent: Agent) -> None:
    agent.model.add(
        calls(
            ScriptedToolCall(name="write_file", arguments=WRITE, id="w1"),
            ScriptedToolCall(name="list_files", arguments={}, id="l2"),
        ),
        say("Both done."),
    )
    run = await agent.start("write and look", require_approval=["write_file"])
    await run.wait_for(WAITING, TIMEOUT)
    # The free call ran at once, while the gated one waits.
    async with asyncio.timeout(deadline(10)):
        while await scheduled(agent, run, "list_files") == 0:
            await asyncio.sleep(0.05)

    await run.decide("w1")

    tool_messages = [m for m in await run.transcript() if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["w1", "l2"]


@tool(approval=True)
def send_invoice(amount: int) -> str:
    """Sends an invoice."""
    return f"sent {amount}"


async def test_a_tool_that_declares_approval_is_gated_in_every_run(agent_factory: Any) -> None:
    agent: Agent = await agent_factory(tools=[send_invoice])
    agent.model.add(call("send_invoice", {"amount": 5}, id="i1"), say("Sent."))
    run = await agent.start("bill them")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert [p.tool for p in state.pending_approvals] == ["send_invoice"]


@pytest.mark.parametrize(
    ("decision", "code"),
    [
        ({"call_id": "nope"}, ErrorCode.APPROVAL_UNKNOWN_CALL),
        ({"call_id": "w1", "arguments": {"path": 3}}, ErrorCode.APPROVAL_INVALID_ARGUMENTS),
        ({"arguments": {"path": 3}}, ErrorCode.APPROVAL_INVALID_ARGUMENTS),
    ],
    ids=["unknown call", "arguments that fail the schema", "the only call's bad arguments"],
)
async def test_decide_rejects_a_bad_decision_and_leaves_no_trace(
    agent: Agent, decision: dict[str, Any], code: ErrorCode
) -> None:
    run = await gated_run(agent)

    with pytest.raises(TarryError) as error:
        await run.decide(**decision)

    assert error.value.code is code
    assert "decide" not in await agent.updates(run)
    assert (await run.state()).waiting_for is WaitingFor.APPROVAL


async def test_decide_rejects_a_call_decided_already(agent: Agent) -> None:
    agent.model.add(
        calls(
            ScriptedToolCall(name="write_file", arguments=WRITE, id="w1"),
            ScriptedToolCall(name="write_file", arguments=WRITE | {"path": "b.md"}, id="w2"),
        ),
        say("Both written."),
    )
    run = await agent.start("write two plans", require_approval=["write_file"])
    await run.wait_for(WAITING, TIMEOUT)
    await run.approve("w1")
    async with asyncio.timeout(deadline(10)):
        while [p.call_id for p in (await run.state()).pending_approvals] != ["w2"]:
            await asyncio.sleep(0.05)

    with pytest.raises(TarryError) as error:
        await run.decide("w1", approved=False)

    assert error.value.code is ErrorCode.APPROVAL_ALREADY_DECIDED
    assert "decide" not in await agent.updates(run)
    assert (await run.decide("w2")).last_assistant_text == "Both written."
    assert (agent.workspace_root / run.id / "plan.md").exists()


async def test_deciding_one_of_two_calls_answers_while_the_other_waits(agent: Agent) -> None:
    agent.model.add(
        calls(
            ScriptedToolCall(name="write_file", arguments=WRITE, id="w1"),
            ScriptedToolCall(name="write_file", arguments=WRITE | {"path": "b.md"}, id="w2"),
        ),
        say("Both written."),
    )
    run = await agent.start("write two plans", require_approval=["write_file"])
    await run.wait_for(WAITING, TIMEOUT)

    state = await run.decide("w1")

    assert state.waiting_for is WaitingFor.APPROVAL
    assert [p.call_id for p in state.pending_approvals] == ["w2"]


async def test_edited_arguments_need_no_call_id_when_one_call_waits(agent: Agent) -> None:
    run = await gated_run(agent, say("Written."))

    await run.decide(arguments={"path": "plan.md", "content": "edited"})

    assert (agent.workspace_root / run.id / "plan.md").read_text() == "edited"


async def test_deciding_a_call_that_already_ran_is_already_decided(agent: Agent) -> None:
    run = await gated_run(agent, say("Written."))
    await run.decide("w1")

    with pytest.raises(TarryError) as error:
        await run.decide("w1", approved=False)

    assert error.value.code is ErrorCode.APPROVAL_ALREADY_DECIDED
    assert await agent.updates(run) == ["decide"]


async def test_decide_rejects_a_run_with_nothing_pending(agent: Agent) -> None:
    agent.model.add(say("Hello!"))
    run = await agent.start("hi", require_approval=["write_file"])
    await run.wait_for(WAITING, TIMEOUT)

    with pytest.raises(TarryError) as error:
        await run.decide()

    assert error.value.code is ErrorCode.APPROVAL_NOTHING_PENDING
    assert "decide" not in await agent.updates(run)


async def test_a_malformed_approve_signal_changes_nothing(agent: Agent) -> None:
    run = await gated_run(agent, say("Written."))

    await run.approve("w1", arguments={"path": ["not", "a", "string"]})
    await run.approve("nope")
    state = await run.state()

    assert state.waiting_for is WaitingFor.APPROVAL
    assert "WORKFLOW_TASK_FAILED" not in await agent.event_types(run)
    assert (await run.decide("w1")).last_assistant_text == "Written."


@pytest.mark.parametrize(
    ("default", "code"),
    [("reject", ErrorCode.TOOL_APPROVAL_EXPIRED), ("approve", None)],
)
async def test_a_week_long_deadline_passes_and_its_default_applies(
    agent_factory: Any, time_skipping: Client, default: str, code: ErrorCode | None
) -> None:
    agent: Agent = await agent_factory(client=time_skipping)
    agent.model.add(call("write_file", WRITE, id="w1"), say("Moving on."))
    run = await agent.start(
        "write the plan",
        mode="task",
        require_approval=["write_file"],
        approval_timeout=timedelta(days=7),
        approval_default=default,
    )

    result = await run.result()  # the test server skips the week

    assert result.phase is Phase.COMPLETED
    tool_message = (await run.transcript())[2]
    assert tool_message.decision is not None
    assert tool_message.decision.by == "deadline"
    if code is None:
        assert tool_result(tool_message)["ok"] is True
    else:
        assert tool_result(tool_message)["error"]["code"] == code
    history = await agent.history_json(run)
    assert "approval deadline for write_file" in _decoded_summaries(history)


def _decoded_summaries(history_json: str) -> str:
    """Every user-metadata summary of a history, decoded, joined."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            summary = node.get("userMetadata", {}).get("summary")
            if summary:
                found.append(base64.b64decode(summary["data"]).decode())
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(history_json))
    return "\n".join(found)


async def test_an_approval_survives_a_killed_worker_and_runs_the_tool_once(
    temporal: Client, tmp_path: Path, payload_store: Path
) -> None:
    task_queue = f"test-{uuid.uuid4().hex[:8]}"
    async with ScriptedModel([call("write_file", WRITE, id="w1"), say("Written.")]) as model:
        first = await worker_process(temporal, task_queue, model, tmp_path, payload_store)
        run = await Tarry(temporal, task_queue).start(
            RunInput(
                prompt="write the plan", require_approval=["write_file"], timeouts=FAST_TIMEOUTS
            )
        )
        await run.wait_for(WAITING, TIMEOUT)
        first.send_signal(signal.SIGKILL)
        await first.wait()

        second = await worker_process(temporal, task_queue, model, tmp_path, payload_store)
        try:
            state = await run.decide("w1")
        finally:
            second.send_signal(signal.SIGTERM)
            await second.wait()

    assert state.last_assistant_text == "Written."
    assert (tmp_path / run.id / "plan.md").read_text() == "ship it"
    history = await temporal.get_workflow_handle(run.id).fetch_history()
    writes = [
        e
        for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == "write_file"
    ]
    assert len(writes) == 1
