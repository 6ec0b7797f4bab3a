"""`tarry chat` on a run whose tool calls wait for a person: the installed entry point in
a pseudo-terminal, typed at, read from the screen, against the test server and the
test's worker."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from activities.tool_calls import tool
from tarry.client import RunHandle
from tarry.contracts import ChatMessage, Phase, WaitingFor
from tarry.testing.scripted_model import ScriptedToolCall, call, calls, say
from tests.conftest import Agent, tool_result
from tests.deadline import TIMEOUT
from tests.test_chat import PROMPT, Chat
from tests.test_chat import open_chat as open_chat  # the fixture

WAITING = {Phase.WAITING_USER}
APPROVE = "approve? [y]es / [n]o / [e]dit> "
WRITE_LINE = 'write_file(path="a.md", content="x")'


async def gated_run(agent: Agent) -> RunHandle:
    """A run whose first answer calls `write_file`, gated, and now waits for a decision."""
    agent.model.add(
        call("write_file", {"path": "a.md", "content": "x"}, id="call_write"), say("done")
    )
    run = await agent.start("write a.md", require_approval=["write_file"])
    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.waiting_for is WaitingFor.APPROVAL
    return run


async def tool_message(run: RunHandle) -> ChatMessage:
    return next(m for m in await run.transcript() if m.role == "tool")


async def asked_about_the_call(open_chat: Callable[..., Chat], run: RunHandle) -> Chat:
    chat = open_chat(run.id)
    await chat.see(f"waiting for approval: {WRITE_LINE} [call_write]")
    await chat.see(APPROVE)
    return chat


async def test_chat_shows_a_call_waiting_for_approval_with_its_arguments_and_asks(
    agent: Agent, open_chat: Callable[..., Chat]
) -> None:
    run = await gated_run(agent)
    chat = open_chat(run.id)

    await chat.see(f"→ {WRITE_LINE}")
    await chat.see(f"waiting for approval: {WRITE_LINE} [call_write]")
    await chat.see('arguments: {"path": "a.md", "content": "x"}')
    await chat.see(APPROVE)
    chat.type("/quit")
    await chat.see(f"left {run.id} waiting for approval")

    assert await chat.exit_code() == 0
    assert (await run.state()).waiting_for is WaitingFor.APPROVAL


async def test_yes_runs_the_tool_and_the_answer_appears(
    agent: Agent, open_chat: Callable[..., Chat]
) -> None:
    run = await gated_run(agent)
    chat = await asked_about_the_call(open_chat, run)

    chat.type("y")
    await chat.see("✓ approved in the CLI/API")
    await chat.see('← {"path": "a.md", "bytes": 1}')
    await chat.see("agent: done")
    await chat.see(PROMPT)

    assert (agent.workspace_root / run.id / "a.md").read_text() == "x"
    decision = (await tool_message(run)).decision
    assert decision is not None
    assert (decision.approved, decision.by) == (True, "update")
    chat.type("/quit")
    assert await chat.exit_code() == 0


async def test_no_with_a_reason_rejects_the_call_and_tells_the_agent_why(
    agent: Agent, open_chat: Callable[..., Chat]
) -> None:
    run = await gated_run(agent)
    chat = await asked_about_the_call(open_chat, run)

    chat.type("n")
    await chat.see("why not?")
    chat.type("too risky")
    await chat.see("✗ rejected in the CLI/API")
    await chat.see("← TOOL_REJECTED: too risky")
    await chat.see("agent: done")
    await chat.see(PROMPT)

    assert tool_result(await tool_message(run))["error"] == {
        "code": "TOOL_REJECTED",
        "message": "too risky",
    }
    assert not (agent.workspace_root / run.id / "a.md").exists()
    chat.type("/quit")
    assert await chat.exit_code() == 0


async def test_edit_runs_the_tool_with_the_edited_arguments(
    agent: Agent, open_chat: Callable[..., Chat]
) -> None:
    run = await gated_run(agent)
    chat = await asked_about_the_call(open_chat, run)
    edited = {"path": "b.md", "content": "edited"}

    chat.type("e")
    await chat.see("arguments as JSON")
    chat.type(json.dumps(edited))
    await chat.see('ran with edited arguments: path="b.md", content="edited"')
    await chat.see("agent: done")
    await chat.see(PROMPT)

    assert (agent.workspace_root / run.id / "b.md").read_text() == "edited"
    assert not (agent.workspace_root / run.id / "a.md").exists()
    decision = (await tool_message(run)).decision
    assert decision is not None
    assert decision.arguments == edited
    chat.type("/quit")
    assert await chat.exit_code() == 0


async def test_edited_arguments_the_tool_refuses_are_asked_for_again(
    agent: Agent, open_chat: Callable[..., Chat]
) -> None:
    run = await gated_run(agent)
    chat = await asked_about_the_call(open_chat, run)

    chat.type("e")
    await chat.see("arguments as JSON")
    chat.type('{"path": 1}')
    await chat.see("error: APPROVAL_INVALID_ARGUMENTS: ")
    await chat.see("arguments as JSON")
    chat.type('{"path": "c.md", "content": "third time"}')
    await chat.see("agent: done")

    assert (agent.workspace_root / run.id / "c.md").read_text() == "third time"
    assert not any("UPDATE_REJECTED" in t for t in await agent.event_types(run))
    chat.type("/quit")
    assert await chat.exit_code() == 0


async def test_edited_arguments_that_are_not_json_are_asked_for_again(
    agent: Agent, open_chat: Callable[..., Chat]
) -> None:
    run = await gated_run(agent)
    chat = await asked_about_the_call(open_chat, run)

    chat.type("e")
    await chat.see("arguments as JSON")
    chat.type("{path: c.md}")
    await chat.see("not JSON: ")
    await chat.see("arguments as JSON")
    chat.type('{"path": "c.md", "content": "y"}')
    await chat.see("agent: done")

    assert (agent.workspace_root / run.id / "c.md").read_text() == "y"
    chat.type("/quit")
    assert await chat.exit_code() == 0


async def test_two_pending_calls_are_asked_about_in_turn(
    agent: Agent, open_chat: Callable[..., Chat]
) -> None:
    agent.model.add(
        calls(
            ScriptedToolCall(name="write_file", arguments={"path": "a.md", "content": "x"}),
            ScriptedToolCall(name="write_file", arguments={"path": "b.md", "content": "y"}),
        ),
        say("one of two"),
    )
    run = await agent.start("write two files", require_approval=["write_file"])
    await run.wait_for(WAITING, TIMEOUT)
    chat = open_chat(run.id)

    await chat.see('waiting for approval: write_file(path="a.md", content="x")')
    await chat.see(APPROVE)
    chat.type("n")
    await chat.see("why not?")
    chat.type("")
    await chat.see('waiting for approval: write_file(path="b.md", content="y")')
    await chat.see(APPROVE)
    chat.type("y")
    await chat.see("agent: one of two")
    await chat.see(PROMPT)

    assert sorted(p.name for p in (agent.workspace_root / run.id).iterdir()) == ["b.md"]
    results = [tool_result(m) for m in await run.transcript() if m.role == "tool"]
    assert results[0]["error"]["code"] == "TOOL_REJECTED"
    assert results[1]["ok"] is True
    chat.type("/quit")
    assert await chat.exit_code() == 0


async def test_a_new_chat_asks_about_a_call_to_a_tool_that_always_needs_approval(
    agent_factory: Callable[..., Awaitable[Agent]], open_chat: Callable[..., Chat]
) -> None:
    sent: list[str] = []

    @tool(approval=True)
    def send_mail(to: str) -> str:
        """Sends a mail."""
        sent.append(to)
        return f"sent to {to}"

    agent = await agent_factory(tools=[send_mail])
    agent.model.add(call("send_mail", {"to": "ada@example.com"}), say("Mail sent."))
    chat = open_chat(on=agent)
    await chat.see(PROMPT)

    chat.type("mail Ada")
    run_id = (await chat.see_match(r"run (run-[0-9a-f]+)")).group(1)
    agent.runs.append(agent.tarry.get(run_id))
    await chat.see('waiting for approval: send_mail(to="ada@example.com")')
    await chat.see(APPROVE)
    chat.type("yes")
    await chat.see("← sent to ada@example.com")
    await chat.see("agent: Mail sent.")
    await chat.see(PROMPT)

    assert sent == ["ada@example.com"]
    chat.type("/quit")
    assert await chat.exit_code() == 0
